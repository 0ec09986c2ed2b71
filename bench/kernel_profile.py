"""Where a plain-PyTorch training step spends its GPU time, kernel by kernel.

Profiles the same step as bench/pytorch_reference.py (synthetic CIFAR-shaped
data on the GPU, SGD momentum 0.9, forward + backward + optimizer) with
torch.profiler, eager or under torch.compile, and prints each kernel's GPU
time per step, grouped by name, with the step's total.

  python3 bench/kernel_profile.py --model simple_cnn --batch 1024 --mode eager
  python3 bench/kernel_profile.py --model simple_cnn --batch 1024 --mode compile

`--mode compile` compiles forward and backward as the stored reference does
(../shared/baselines/pytorch_python_graph_compile.py: bf16 autocast, NCHW
input) but without CUDA graphs, so that the profiler sees every kernel; the
kernels' GPU time is what reduce-overhead mode replays.
"""
import argparse, collections, json
import torch
from torch.profiler import ProfilerActivity, profile

from pytorch_reference import MODELS, setup


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="simple_cnn", choices=list(MODELS))
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--json", help="also write the table here")
    a = p.parse_args()
    torch.backends.cudnn.benchmark = True
    m, opt, x, y, lossf = setup(a.model, a.batch, a.channels_last)
    amp = a.precision == "bf16"

    def fwd_bwd(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = lossf(m(x), y)
        loss.backward()
        return loss

    if a.mode == "compile":
        fwd_bwd = torch.compile(fwd_bwd)

    def step():
        opt.zero_grad(set_to_none=True)
        fwd_bwd(x, y)
        opt.step()

    for _ in range(15):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    per_kernel = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = per_kernel[e.name]
            k[0] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            k[1] += 1
    total = sum(v[0] for v in per_kernel.values()) / a.steps
    rows = sorted(per_kernel.items(), key=lambda kv: -kv[1][0])
    print(f"# {a.model} b{a.batch} {a.precision} {a.mode}{' channels_last' if a.channels_last else ''}: "
          f"{total:.1f} us of GPU time per step ({a.batch / total * 1e6:,.0f} samples/s if nothing else ran), "
          f"{sum(v[1] for v in per_kernel.values()) / a.steps:.0f} kernels per step")
    print("| us/step | calls/step | kernel |\n|---|---|---|")
    for name, (us, n) in rows[:a.top]:
        print(f"| {us / a.steps:.1f} | {n / a.steps:g} | {name[:150]} |")
    if a.json:
        json.dump({"total_us": total, "kernels": {n: [u / a.steps, c / a.steps] for n, (u, c) in rows}},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
