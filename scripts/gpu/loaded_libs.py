"""Plain PyTorch's process after one autotuned bf16 channels_last convolution
(forward and backward): the cuDNN version and the cuDNN, NVRTC and cuBLAS
libraries it has loaded (scripts/gpu/run-all.sh libs compares them with a
trainbench worker's)."""
import re
import torch

torch.backends.cudnn.benchmark = True
conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda().to(memory_format=torch.channels_last)
x = torch.randn(128, 64, 16, 16, device="cuda").to(memory_format=torch.channels_last)
with torch.autocast("cuda", dtype=torch.bfloat16):
    conv(x).float().sum().backward()
torch.cuda.synchronize()
print("cudnn", torch.backends.cudnn.version())
with open("/proc/self/maps") as maps:
    libs = {line.split()[-1] for line in maps if re.search(r"cudnn|nvrtc|cublas|nvJitLink", line)}
print("\n".join(sorted(libs)))
