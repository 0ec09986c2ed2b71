"""Plain PyTorch reference for bench/gpu_vs_pytorch.sh: the same models (an
identical SimpleCNN, torchvision ResNets), SGD momentum 0.9, synthetic data on
the GPU, fp32 and bf16 autocast + channels_last, eager and with the whole step
captured in a CUDA graph (fp32 and bf16). Prints and writes samples/s per
configuration."""
import argparse, json, time
import torch, torch.nn as nn, torchvision

def simple_cnn():
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(2048, 192), nn.ReLU(), nn.Linear(192, 10))

MODELS = {"simple_cnn": simple_cnn,
          "resnet18": lambda: torchvision.models.resnet18(num_classes=10),
          "resnet50": lambda: torchvision.models.resnet50(num_classes=10)}

def setup(name, bs, cl, device="cuda"):
    """The model on `device` (channels_last if `cl`), SGD momentum 0.9, one
    synthetic batch resident there, the loss; the same seed every time."""
    torch.manual_seed(0)
    m = MODELS[name]().to(device)
    if cl: m = m.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(bs, 3, 32, 32, device=device); y = torch.randint(0, 10, (bs,), device=device)
    if cl: x = x.to(memory_format=torch.channels_last)
    return m, opt, x, y, nn.CrossEntropyLoss()

def timed(run, steps, bs, sync=torch.cuda.synchronize):
    """samples/s of `steps` calls of `run`, the device's work included (`sync`
    waits for it; on the CPU there is nothing to wait for)."""
    sync(); t = time.perf_counter()
    for _ in range(steps): run()
    sync()
    return bs * steps / (time.perf_counter() - t)

def bench(name, bs, amp, cl, graph, steps, warm, graph_dump=None):
    m, opt, x, y, lossf = setup(name, bs, cl)
    def body():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = lossf(m(x), y)
        loss.backward(); opt.step()
    def step():
        opt.zero_grad(set_to_none=True); body()
    if graph:
        # As ../shared/baselines/pytorch_python_graph_compile.py: gradients set
        # to None before capture, so the graph has no zeroing kernels.
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warm): step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph(keep_graph=True) if graph_dump else torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g): body()
        if graph_dump:
            g.debug_dump(f"{graph_dump}-{name}-{'bf16' if amp else 'fp32'}-b{bs}.dot"); g.instantiate()
        run = g.replay
    else:
        for _ in range(warm): step()
        run = step
    return timed(run, steps, bs)

def bench_compiled(name, bs, steps, warm):
    """torch.compile(mode="reduce-overhead") of forward + backward with bf16
    autocast, NCHW input, the optimizer step eager: as the stored reference
    (../shared/baselines/pytorch_python_graph_compile.py), whose SimpleCNN b1024
    figure is the best Python figure of the issue's table."""
    m, opt, x, y, lossf = setup(name, bs, cl=False)
    @torch.compile(mode="reduce-overhead")
    def fwd_bwd(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lossf(m(x), y)
        loss.backward()
        return loss
    def step():
        opt.zero_grad(set_to_none=True); fwd_bwd(x, y); opt.step()
    for _ in range(max(warm, 15)): step()
    return timed(step, steps, bs)

if __name__ == "__main__":
    p = argparse.ArgumentParser(); p.add_argument("--batches", type=int, nargs="+", default=[128, 1024])
    p.add_argument("--out", default="pytorch.json")
    p.add_argument("--models", nargs="+", default=list(MODELS)); p.add_argument("--labels", nargs="+")
    p.add_argument("--compile", nargs="*", default=[], metavar="MODEL",
                   help="also time torch.compile(mode='reduce-overhead') bf16 for these models")
    p.add_argument("--graph-dump", help="write each captured graph as PREFIX-MODEL-PRECISION-bN.dot")
    a = p.parse_args()
    torch.backends.cudnn.benchmark = True
    res = {}
    for bs in a.batches:
        steps, warm = (60, 20) if bs >= 1024 else (200, 20)
        for name in a.models:
            for label, amp, cl, graph in (("fp32", False, False, False), ("fp32-graph", False, False, True),
                                          ("bf16-cl", True, True, False), ("bf16-cl-graph", True, True, True)):
                if a.labels and label not in a.labels: continue
                r = bench(name, bs, amp, cl, graph, steps, warm, a.graph_dump)
                res[f"{name}/{label}/b{bs}"] = r
                print(f"pytorch {name:11s} {label:14s} b{bs:<5d} {r:12.0f} samples/s", flush=True)
            if name in a.compile:
                r = bench_compiled(name, bs, steps, warm)
                res[f"{name}/bf16-compile/b{bs}"] = r
                print(f"pytorch {name:11s} {'bf16-compile':14s} b{bs:<5d} {r:12.0f} samples/s", flush=True)
    json.dump(res, open(a.out, "w"), indent=1)
