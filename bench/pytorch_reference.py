"""Plain PyTorch reference for bench/gpu_vs_pytorch.sh, in its best
configuration: the same models (an identical SimpleCNN, torchvision ResNets),
SGD momentum 0.9 with PyTorch's fused CUDA kernel (fused=True), synthetic data
on the GPU, fp32 and bf16 autocast + channels_last, eager and with the whole
step captured in a CUDA graph, torch.compile(mode="reduce-overhead") with
channels_last (the fused SGD step eager after the compiled forward and
backward), and torch.compile's kernels with the whole step (forward,
backward, fused SGD) captured in one CUDA graph by hand (labels
*-compile-graph: no host work per step at all); each figure the best of
--repeats timings. Prints and writes samples/s per configuration, and each
row's peak memory (torch.cuda.max_memory_reserved and max_memory_allocated,
from an emptied cache: cuDNN's autotuning, the warm-up and the capture
included) into OUT-memory.json.
  --image-size 224 --classes 1000: ImageNet-size inputs (ResNets only)."""
import argparse, gc, json, time
import torch, torch.nn as nn, torchvision

def simple_cnn():
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(2048, 192), nn.ReLU(), nn.Linear(192, 10))

MODELS = {"simple_cnn": simple_cnn,
          "resnet18": lambda: torchvision.models.resnet18(num_classes=10),
          "resnet50": lambda: torchvision.models.resnet50(num_classes=10)}

IMAGE_SIZE, CLASSES = 32, 10  # --image-size, --classes

def setup(name, bs, cl, device="cuda"):
    """The model on `device` (channels_last if `cl`), SGD momentum 0.9 (fused
    on CUDA), one synthetic batch resident there, the loss; the same seed
    every time."""
    torch.manual_seed(0)
    m = (MODELS[name]() if CLASSES == 10 else
         getattr(torchvision.models, name)(num_classes=CLASSES)).to(device)
    if cl: m = m.to(memory_format=torch.channels_last)
    # `fused` only on CUDA: the CPU side runs Debian's PyTorch 1.13 too, whose
    # SGD has no such argument.
    fused = {"fused": True} if device == "cuda" else {}
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, **fused)
    x = torch.randn(bs, 3, IMAGE_SIZE, IMAGE_SIZE, device=device)
    y = torch.randint(0, CLASSES, (bs,), device=device)
    if cl: x = x.to(memory_format=torch.channels_last)
    return m, opt, x, y, nn.CrossEntropyLoss()

REPEATS = 3  # --repeats

def timed(run, steps, bs, sync=torch.cuda.synchronize, repeats=None):
    """samples/s of `steps` calls of `run`, the device's work included (`sync`
    waits for it; on the CPU there is nothing to wait for): the best of
    `repeats` timings (default --repeats)."""
    best = 0.0
    for _ in range(repeats or REPEATS):
        sync(); t = time.perf_counter()
        for _ in range(steps): run()
        sync()
        best = max(best, bs * steps / (time.perf_counter() - t))
    return best

def bench(name, bs, amp, cl, graph, steps, warm, graph_dump=None, compiled=False, model_cl=True):
    """Eager or captured; with `compiled`, the forward and the loss through
    torch.compile's default mode (Inductor's kernels, no CUDA graphs of its
    own: the capture here takes the whole step), channels_last input and,
    with `model_cl`, model."""
    m, opt, x, y, lossf = setup(name, bs, cl)
    if compiled and not model_cl: m = m.to(memory_format=torch.contiguous_format)
    def forward(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            return lossf(m(x), y)
    if compiled: forward = torch.compile(forward)
    def body():
        forward(x, y).backward(); opt.step()
    def step():
        opt.zero_grad(set_to_none=True); body()
    if graph:
        # As ../shared/baselines/pytorch_python_graph_compile.py: gradients set
        # to None before capture, so the graph has no zeroing kernels.
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        t = time.perf_counter()
        with torch.cuda.stream(s):
            for _ in range(warm): step()
        torch.cuda.current_stream().wait_stream(s)
        if compiled:
            torch.cuda.synchronize()
            print(f"  (compile and warm-up: {time.perf_counter() - t:.0f} s)", flush=True)
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

def fresh_peaks():
    """Starts a row's memory window: what earlier rows left is collected and
    given back, so each row's peak is its own."""
    gc.collect(); torch.cuda.synchronize(); torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()

def peaks():
    return {"peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "peak_allocated_bytes": torch.cuda.max_memory_allocated()}

def bench_compiled(name, bs, steps, warm, amp=True, model_cl=True):
    """torch.compile(mode="reduce-overhead") of forward + backward with bf16
    autocast (or fp32), channels_last input and, with `model_cl`, model (NCHW
    hid Inductor's batch-norm fusions: the stored rows of bench/reference were
    NCHW), the fused SGD step eager after it."""
    m, opt, x, y, lossf = setup(name, bs, cl=True)
    if not model_cl: m = m.to(memory_format=torch.contiguous_format)
    @torch.compile(mode="reduce-overhead")
    def fwd_bwd(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = lossf(m(x), y)
        loss.backward()
        return loss
    def step():
        opt.zero_grad(set_to_none=True); fwd_bwd(x, y); opt.step()
    t = time.perf_counter()
    for _ in range(max(warm, 15)): step()
    torch.cuda.synchronize()
    print(f"  (compile and warm-up: {time.perf_counter() - t:.0f} s)", flush=True)
    return timed(step, steps, bs)

def bench_compiled_best(name, bs, steps, warm, amp=True, graph=False):
    """bench_compiled (or, with `graph`, bench's compiled forward with the
    whole step captured by hand) with a channels_last model; where Inductor
    fails on it (PyTorch 2.11 has asserted on a 3x3 weight gradient's
    channels_last strides), with the input alone channels_last. Returns
    (samples/s, how)."""
    def run(model_cl):
        if graph:
            return bench(name, bs, amp, True, True, steps, max(warm, 15), compiled=True, model_cl=model_cl)
        return bench_compiled(name, bs, steps, warm, amp, model_cl=model_cl)
    try:
        return run(True), "model and input channels_last"
    except Exception as e:  # noqa: BLE001 - Inductor's failures have many types
        print(f"  (channels_last model failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}; "
              "retrying with the input alone channels_last)", flush=True)
        torch._dynamo.reset()
        return run(False), "input channels_last only"

if __name__ == "__main__":
    p = argparse.ArgumentParser(); p.add_argument("--batches", type=int, nargs="+", default=[128, 1024])
    p.add_argument("--out", default="pytorch.json")
    p.add_argument("--models", nargs="+", default=list(MODELS)); p.add_argument("--labels", nargs="+")
    p.add_argument("--compile", nargs="*", default=None, metavar="MODEL",
                   help="time torch.compile(mode='reduce-overhead') for these models (default: every model; "
                        "none: --compile with no model)")
    p.add_argument("--compile-fp32", action="store_true", help="torch.compile rows in fp32 too (fp32-compile, fp32-compile-graph)")
    p.add_argument("--repeats", type=int, default=3, help="each figure is the best of this many timings")
    p.add_argument("--steps", type=int, help="timed steps per figure (default: 200, 60 at batch 1024 or 224 px, 30 "
                   "at 224 px), after 20 warm-up steps")
    p.add_argument("--image-size", type=int, default=32); p.add_argument("--classes", type=int, default=10)
    p.add_argument("--graph-dump", help="write each captured graph as PREFIX-MODEL-PRECISION-bN.dot")
    p.add_argument("--cudnn-benchmark-limit", type=int, default=0,
                   help="cuDNN engines timed per convolution (torch.backends.cudnn.benchmark_limit; PyTorch's "
                        "default is 10): 0, every engine, as trainbench's cuda device times them by default. "
                        "Figures stored before 2026-12-02 were taken with 10")
    a = p.parse_args()
    REPEATS, IMAGE_SIZE, CLASSES = a.repeats, a.image_size, a.classes
    compile_models = a.models if a.compile is None else a.compile
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.benchmark_limit = a.cudnn_benchmark_limit
    res, errors, notes, memory = {}, {}, {}, {}
    memory_out = a.out.replace(".json", "") + "-memory.json"
    for bs in a.batches:
        steps, warm = (60, 20) if bs * IMAGE_SIZE ** 2 >= 1024 * 32 ** 2 else (200, 20)
        if IMAGE_SIZE > 64: steps = 30
        if a.steps: steps = a.steps
        for name in a.models:
            for label, amp, cl, graph in (("fp32", False, False, False), ("fp32-graph", False, False, True),
                                          ("fp32-cl-graph", False, True, True),
                                          ("bf16-cl", True, True, False), ("bf16-cl-graph", True, True, True)):
                if a.labels and label not in a.labels: continue
                fresh_peaks()
                r = bench(name, bs, amp, cl, graph, steps, warm, a.graph_dump)
                res[f"{name}/{label}/b{bs}"] = r
                memory[f"{name}/{label}/b{bs}"] = peaks()
                print(f"pytorch {name:11s} {label:14s} b{bs:<5d} {r:12.0f} samples/s, peak reserved "
                      f"{memory[f'{name}/{label}/b{bs}']['peak_reserved_bytes'] / 2**30:.2f} GiB", flush=True)
                json.dump(res, open(a.out, "w"), indent=1)
                json.dump(memory, open(memory_out, "w"), indent=1)
            if name in compile_models:
                for label, amp, graph in (("bf16-compile", True, False), ("fp32-compile", False, False),
                                          ("bf16-compile-graph", True, True), ("fp32-compile-graph", False, True)):
                    if label.startswith("fp32") and not a.compile_fp32: continue
                    if a.labels and label not in a.labels: continue
                    # A row that fails (Inductor has failed on channels_last
                    # backward strides) is recorded as failed; the others stand.
                    try:
                        fresh_peaks()
                        r, how = bench_compiled_best(name, bs, steps, warm, amp, graph)
                        memory[f"{name}/{label}/b{bs}"] = peaks()
                        json.dump(memory, open(memory_out, "w"), indent=1)
                        if how != "model and input channels_last": notes[f"{name}/{label}/b{bs}"] = how
                    except Exception as e:  # noqa: BLE001 - any failure of that row
                        errors[f"{name}/{label}/b{bs}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                        print(f"pytorch {name:11s} {label:14s} b{bs:<5d} failed: {errors[f'{name}/{label}/b{bs}']}", flush=True)
                        torch._dynamo.reset()
                        continue
                    res[f"{name}/{label}/b{bs}"] = r
                    print(f"pytorch {name:11s} {label:14s} b{bs:<5d} {r:12.0f} samples/s", flush=True)
                    json.dump(res, open(a.out, "w"), indent=1)
    if errors:
        json.dump(errors, open(a.out.replace(".json", "") + "-failed.json", "w"), indent=1)
    if notes:
        json.dump(notes, open(a.out.replace(".json", "") + "-notes.json", "w"), indent=1)
    json.dump(res, open(a.out, "w"), indent=1)
    if errors:
        json.dump(errors, open(a.out.replace(".json", "") + "-failed.json", "w"), indent=1)
    if notes:
        json.dump(notes, open(a.out.replace(".json", "") + "-notes.json", "w"), indent=1)
