"""Where a training step spends its GPU time, kernel by kernel.

Plain PyTorch: profiles the same step as bench/pytorch_reference.py
(synthetic CIFAR-shaped data on the GPU, SGD momentum 0.9, forward + backward
+ optimizer) with torch.profiler, eager or under torch.compile.
trainbench: sums a Chrome trace a cell wrote with `trainbench run --kernel-trace`
(host/worker/kernel_trace.h), graph replays included. Either way it prints
the GPU time per step by kind of work (convolutions and matrix products,
batch norm, element-wise, ...) and kernel by kernel, with the step's total;
for a trace, also its timeline: how much of the step the GPU was busy, ran
kernels side by side or sat idle, and how long each kind of work ran alone.

  python3 bench/kernel_profile.py --model resnet50 --batch 1024 --mode eager --channels-last
  python3 bench/kernel_profile.py --model resnet50 --batch 1024 --mode compile --channels-last
  python3 bench/kernel_profile.py --trace trace-1234.json --steps 10 --batch 1024 --json after.json
  python3 bench/kernel_profile.py --compare before.json after.json --names before after

`--mode compile` compiles forward and backward (bf16 autocast) but without
CUDA graphs, so that the profiler sees every kernel; the kernels' GPU time is
what reduce-overhead mode replays.
"""
import argparse, collections, json, os, re

# Kinds of work, first match wins; the patterns cover cuDNN's, cuBLAS's,
# LibTorch's, Inductor's (Triton) and trainbench's own kernels.
CATEGORIES = [
    # Autocast's weight casts: trainbench's one kernel each way, Inductor's cast-only kernels
    # (both under another kind before: batch norm and element-wise).
    ("weight casts", r"resnet::kernels::.*CastKernel|^triton_poi_fused__to_copy_\d+$"),
    # trainbench's other kernels in resnet::kernels (listed before the batch
    # norm's patterns, which would take them): the fused SGD update, the stem's
    # space-to-depth rearrangements, the classifier (fc layer).
    ("optimizer", r"resnet::kernels::.*::SgdKernel"),
    ("copy / layout", r"nchwToNhwc|nhwcToNchw|[Tt]ranspose|convert.*[Ll]ayout|copy_kernel|CatArrayBatched|"
                      r"resnet::kernels::.*::(Blocks|PixelBlocks|PackBlocks|Weight|WeightGrad)Kernel<"),
    ("convolution / matmul", r"resnet::kernels::.*::(Forward|Backward|SumChunks)Kernel\b"),
    ("pooling", r"resnet::kernels::.*MaxPool"),  # trainbench's stem max pool, before its batch norm
    ("batch norm", r"batch_norm|batchnorm|BatchNorm|\bbn_|_bn|welford|resnet::kernels::.*::(Reduce|Elementwise|OnePass)N"),
    ("convolution / matmul", r"conv|Conv|cudnn|xmma|implicit_gemm|gemm|Gemm|GEMM|cutlass|wgrad|dgrad|fprop|"
                             r"sm\d+_|nvjet|ampere|hopper|cublas|splitK"),
    ("optimizer", r"multi_tensor_apply|[Ff]used.*[Ss]gd|sgd|foreach|momentum"),
    ("pooling", r"pool|Pool"),
    ("loss / softmax", r"softmax|nll_loss|cross_entropy|log_softmax"),
    ("reduction", r"reduce_kernel|triton_red|triton_per|[Rr]educe"),
    ("element-wise", r"elementwise|vectorized|triton_poi|unrolled|Elementwise|fill|relu|add"),
    ("memcpy / memset", r"^Memcpy|^Memset|memcpy|memset"),
]


def category(name):
    for label, pattern in CATEGORIES:
        if re.search(pattern, name):
            return label
    return "other"


def report(per_kernel, steps, batch, title, top, json_path=None, extra=None):
    """per_kernel: name -> [GPU microseconds, calls] over `steps` steps;
    `extra`: more keys for the --json file."""
    total = sum(v[0] for v in per_kernel.values()) / steps
    calls = sum(v[1] for v in per_kernel.values()) / steps
    print(f"# {title}: {total:.1f} us of GPU time per step "
          f"({batch / total * 1e6:,.0f} samples/s if nothing else ran), {calls:.0f} kernels per step")
    by_kind = collections.defaultdict(lambda: [0.0, 0])
    for name, (us, n) in per_kernel.items():
        k = by_kind[category(name)]
        k[0] += us
        k[1] += n
    print("\n| kind | us/step | share | kernels/step |\n|---|---|---|---|")
    for kind, (us, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"| {kind} | {us / steps:.1f} | {us / steps / total:.1%} | {n / steps:g} |")
    rows = sorted(per_kernel.items(), key=lambda kv: -kv[1][0])
    print("\n| us/step | calls/step | kind | kernel |\n|---|---|---|---|")
    for name, (us, n) in rows[:top]:
        print(f"| {us / steps:.1f} | {n / steps:g} | {category(name)} | {name[:150]} |")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"total_us": total, "kinds": {k: v[0] / steps for k, v in by_kind.items()},
                       "kernels": {n: [u / steps, c / steps] for n, (u, c) in rows}, **(extra or {})}, f, indent=1)
    return total


def compare(paths, names):
    """Side by side: the per-kind GPU time of several --json files (us/step)."""
    docs = []
    for path in paths:
        with open(path) as f:
            docs.append(json.load(f))
    kinds = sorted({k for d in docs for k in d["kinds"]}, key=lambda k: -max(d["kinds"].get(k, 0) for d in docs))
    print("| kind, us/step | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for kind in kinds:
        print(f"| {kind} | " + " | ".join(f"{d['kinds'].get(kind, 0):,.1f}" for d in docs) + " |")
    print("| **all** | " + " | ".join(f"**{d['total_us']:,.1f}**" for d in docs) + " |")
    print("| kernels per step | " + " | ".join(f"{sum(c for _, c in d['kernels'].values()):g}" for d in docs) + " |")


def gpu_events(path):
    """The GPU activities of a Chrome trace (Kineto's)."""
    with open(path) as f:
        doc = json.load(f)
    events = [e for e in doc.get("traceEvents", [])
              if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not events:
        raise SystemExit(f"{path}: no GPU kernels in this trace (was it written on a CUDA device?)")
    return events


def kernels_of_trace(events):
    """name -> [us, calls] of GPU activities."""
    per_kernel = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        k = per_kernel[e.get("name", "?")]
        k[0] += float(e.get("dur", 0))
        k[1] += 1
    return per_kernel


def timeline(events, steps, gap_us=0.5, top=12):
    """When the GPU worked, from the activities' start times (None where the
    trace has none): per step, the span from the first start to the last end,
    the time some kernel ran (busy), two or more ran (side by side) and none
    ran (idle; and its gaps longer than `gap_us`), and per kind of work the
    time it ran alone on the GPU (nothing of another kind beside it: what
    making that kind faster can take off the step at most, where the rest
    waits for it) and each stream's busy time."""
    if any("ts" not in e for e in events):
        return None
    edges = []  # (time, +1 start / -1 end, kind, stream)
    for e in events:
        start, dur = float(e["ts"]), float(e.get("dur", 0))
        if dur <= 0:
            continue
        stream = (e.get("args") or {}).get("stream", e.get("tid", "?"))
        kind = category(e.get("name", "?"))
        edges += [(start, 1, kind, stream), (start + dur, -1, kind, stream)]
    if not edges:
        return None
    edges.sort(key=lambda x: (x[0], x[1]))  # ends before starts at the same instant
    running = collections.Counter()
    per_stream_running = collections.Counter()
    alone = collections.defaultdict(float)
    stream_busy = collections.defaultdict(float)
    busy = side_by_side = idle_gaps = 0.0
    gaps = 0
    gap_kinds = collections.defaultdict(lambda: [0.0, 0])  # (kind before, kind after) -> [us, count]
    ended_kind = None  # the kind whose end left the GPU idle
    last = edges[0][0]
    for t, sign, kind, stream in edges:
        dt = t - last
        if dt > 0:
            active = sum(running.values())
            if active > 0:
                busy += dt
                if active > 1:
                    side_by_side += dt
                kinds = [k for k, n in running.items() if n > 0]
                if len(kinds) == 1:
                    alone[kinds[0]] += dt
                for s, n in per_stream_running.items():
                    if n > 0:
                        stream_busy[s] += dt
            elif dt > gap_us:
                idle_gaps += dt
                gaps += 1
                pair = gap_kinds[(ended_kind, kind)]
                pair[0] += dt
                pair[1] += 1
        running[kind] += sign
        per_stream_running[stream] += sign
        if sign < 0 and sum(running.values()) == 0:
            ended_kind = kind
        last = t
    span = edges[-1][0] - edges[0][0]
    return {"span_us": span / steps, "busy_us": busy / steps, "idle_us": (span - busy) / steps,
            "side_by_side_us": side_by_side / steps, "gaps_over_us": gap_us,
            "gaps_per_step": gaps / steps, "gap_time_us": idle_gaps / steps,
            "alone_us": {k: v / steps for k, v in alone.items()},
            "stream_busy_us": {str(s): v / steps for s, v in stream_busy.items()},
            "gaps": [{"before": b, "after": a, "us": us / steps, "gaps": n / steps}
                     for (b, a), (us, n) in sorted(gap_kinds.items(), key=lambda kv: -kv[1][0])[:top]]}


def report_gaps(gaps):
    print("\n| idle gap: kind before | kind after | us/step | gaps/step |\n|---|---|---|---|")
    for g in gaps:
        print(f"| {g['before']} | {g['after']} | {g['us']:.1f} | {g['gaps']:.1f} |")


def report_timeline(t):
    print(f"\n## Timeline, per step: {t['span_us']:.1f} us from the first kernel's start to the last one's end; "
          f"busy {t['busy_us']:.1f} ({t['busy_us'] / t['span_us']:.1%}), two or more side by side "
          f"{t['side_by_side_us']:.1f}, idle {t['idle_us']:.1f} "
          f"({t['gaps_per_step']:g} gaps over {t['gaps_over_us']:g} us: {t['gap_time_us']:.1f} us)")
    print("\n| kind | us/step alone on the GPU |\n|---|---|")
    for kind, us in sorted(t["alone_us"].items(), key=lambda kv: -kv[1]):
        print(f"| {kind} | {us:.1f} |")
    print("\n| stream | busy us/step |\n|---|---|")
    for stream, us in sorted(t["stream_busy_us"].items(), key=lambda kv: -kv[1]):
        print(f"| {stream} | {us:.1f} |")


def profile_pytorch(a):
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pytorch_reference import MODELS, setup

    if a.model not in MODELS:
        raise SystemExit(f"--model {a.model}: not a model of pytorch_reference.py; one of {', '.join(MODELS)}")
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
    return per_kernel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="simple_cnn", help="a model of pytorch_reference.py's MODELS")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--steps", type=int, default=10, help="steps profiled (with --trace: steps in the trace)")
    p.add_argument("--trace", help="sum this Chrome trace (trainbench run --kernel-trace) instead of profiling PyTorch")
    p.add_argument("--title", help="the report's heading (default: what was profiled)")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--json", help="also write the table here")
    p.add_argument("--compare", nargs="+", metavar="JSON",
                   help="print the per-kind GPU time of these --json files side by side, and nothing else")
    p.add_argument("--names", nargs="+", help="with --compare: the columns' headings (default: the file names)")
    a = p.parse_args()
    if a.compare:
        names = a.names or [os.path.basename(x) for x in a.compare]
        if len(names) != len(a.compare):
            p.error("--names needs one name per --compare file")
        compare(a.compare, names)
        return
    if a.trace:
        events = gpu_events(a.trace)
        per_kernel = kernels_of_trace(events)
        title = a.title or f"trainbench trace {a.trace} b{a.batch}"
        t = timeline(events, a.steps)
        report(per_kernel, a.steps, a.batch, title, a.top, a.json, {"timeline": t} if t else None)
        if t:
            report_timeline(t)
            report_gaps(t["gaps"])
        return
    per_kernel = profile_pytorch(a)
    title = a.title or (f"{a.model} b{a.batch} {a.precision} {a.mode}"
                        f"{' channels_last' if a.channels_last else ''}")
    report(per_kernel, a.steps, a.batch, title, a.top, a.json)


if __name__ == "__main__":
    main()
