"""Plain PyTorch on the CPU for bench/cpu_vs_pytorch.sh: the models of
bench/pytorch_reference.py (the identical SimpleCNN, torchvision's ResNets),
SGD momentum 0.9 with PyTorch's defaults, one synthetic batch, fp32 in NCHW and
in channels_last, as many intra-op threads as trainbench's cpu device uses.
Prints and writes samples/s per configuration (the median of --repeats runs):
the CPU baseline that every GPU-over-CPU speedup divides by, done the plain way."""
import argparse, json, os, statistics
import torch
from pytorch_reference import MODELS, setup, timed

def bench(name, bs, cl, steps, warm):
    m, opt, x, y, lossf = setup(name, bs, cl, device="cpu")
    def step():
        opt.zero_grad(set_to_none=True)
        lossf(m(x), y).backward()
        opt.step()
    for _ in range(warm): step()
    return timed(step, steps, bs, sync=lambda: None)

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, nargs="+", default=[128])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--steps", type=int, default=10, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1, help="runs per configuration; the median is kept")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--out", default="pytorch.json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    res = {}
    for bs in a.batches:
        for name in a.models:
            for label, cl in (("fp32", False), ("fp32-cl", True)):
                r = statistics.median(bench(name, bs, cl, a.steps, a.warmup) for _ in range(a.repeats))
                res[f"{name}/{label}/b{bs}"] = r
                print(f"pytorch {name:11s} {label:8s} b{bs:<5d} {r:10.1f} samples/s ({a.threads} threads)", flush=True)
    json.dump(res, open(a.out, "w"), indent=1)
