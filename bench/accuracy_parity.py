"""Does trainbench train as well as plain PyTorch? (issue 16, point 3)

Trains torchvision's ResNet18 and ResNet50 in plain PyTorch with the study's
protocol, as configs/paper.yaml has it for trainbench: CIFAR-10 from the binary
files in DATA, 10 epochs, batch 128, SGD lr 0.01 momentum 0.9 weight decay
5e-4, cosine schedule stepped per epoch, random crop (4-pixel black border)
and horizontal flip, per-channel normalisation with trainbench's constants,
in each of bench/configs/accuracy-parity.yaml's two configurations:
bf16-cl-graph (bf16 autocast with channels_last; trainbench also captures its
step in a CUDA graph, which changes no arithmetic) and fp32 (trainbench's
device defaults, which are PyTorch's: fp32 with TF32 convolutions, fp32
matrix products, NCHW). One
run per seed; prints and writes each run's final test accuracy, then, given
trainbench's results.json files, the two sides' means side by side per model
and configuration.
  python3 bench/accuracy_parity.py DATA --seeds 0 1 2 3 --out pytorch-parity.json
  python3 bench/accuracy_parity.py --compare pytorch-parity.json trainbench/seed-*/results.json
"""
import argparse, json, math, os, statistics, sys

MEAN = (125.27, 122.93, 113.86)  # host/worker/dataset.h
STD = (62.53, 61.91, 66.46)


def load(folder, names, limit):
    import numpy as np
    raw = b"".join(open(os.path.join(folder, n), "rb").read() for n in names)
    rec = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3073)[:limit]
    return rec[:, 1:].reshape(-1, 3, 32, 32), rec[:, 0].astype(np.int64)


def train(model_name, config, seed, data, epochs, batch, train_size, test_size):
    import contextlib, torch, torch.nn.functional as F, torchvision
    torch.manual_seed(seed)
    bf16 = config == "bf16-cl-graph"
    layout = torch.channels_last if bf16 else torch.contiguous_format
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    dev = "cuda"
    train_names = sorted(n for n in os.listdir(data) if n.startswith("data_batch_"))
    xtr, ytr = load(data, train_names, train_size)
    xte, yte = load(data, ["test_batch.bin"], test_size)
    mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=dev).view(1, 3, 1, 1)
    xtr = (torch.from_numpy(xtr.copy()).to(dev).float() - mean) / std
    xte = (torch.from_numpy(xte.copy()).to(dev).float() - mean) / std
    ytr, yte = torch.from_numpy(ytr).to(dev), torch.from_numpy(yte).to(dev)
    # trainbench's border is black before normalising: the normalised value of 0.
    border = (0 - mean) / std
    padded = border.expand(xtr.size(0), 3, 40, 40).clone()
    padded[:, :, 4:36, 4:36] = xtr
    m = getattr(torchvision.models, model_name)(num_classes=10).to(dev).to(memory_format=layout)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4, fused=True)
    n = xtr.size(0)
    steps = n // batch
    ar = torch.arange(32, device=dev)
    for epoch in range(epochs):
        for g in opt.param_groups:
            g["lr"] = 0.5 * 0.01 * (1 + math.cos(math.pi * epoch / epochs))
        m.train()
        order = torch.randperm(n, device=dev)
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            oy = torch.randint(0, 9, (batch,), device=dev); ox = torch.randint(0, 9, (batch,), device=dev)
            flip = torch.rand(batch, device=dev) < 0.5
            rows = (oy.view(-1, 1) + ar).view(batch, 1, 32, 1)
            cols = ox.view(-1, 1) + ar
            cols = torch.where(flip.view(-1, 1), cols.flip(1), cols).view(batch, 1, 1, 32)
            x = padded[idx.view(-1, 1, 1, 1), torch.arange(3, device=dev).view(1, 3, 1, 1), rows, cols]
            x = x.contiguous(memory_format=layout)
            with autocast():
                loss = F.cross_entropy(m(x).float(), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    m.eval()
    correct = 0
    with torch.no_grad(), autocast():
        for i in range(0, xte.size(0), 1000):
            xb = xte[i:i + 1000].contiguous(memory_format=layout)
            correct += (m(xb).argmax(1) == yte[i:i + 1000]).sum().item()
    return correct / xte.size(0)


def compare(pytorch_json, results):
    py = json.load(open(pytorch_json))
    ours = {}
    for f in results:
        for c in json.load(open(f))["cells"]:
            if c.get("status") == "ok" and c.get("test_accuracy"):
                ours.setdefault(f"{c['model']} {c['device']}", []).append(c["test_accuracy"][-1])
    print("| model, configuration | trainbench (runs) | mean | PyTorch (runs) | mean | difference (points) |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for model in sorted(set(ours) | set(py)):
        a, b = ours.get(model, []), [r["accuracy"] for r in py.get(model, [])]
        if not a or not b:
            print(f"| {model} | {len(a)} | - | {len(b)} | - | - |")
            continue
        diff = 100 * (statistics.mean(a) - statistics.mean(b))
        worst = max(worst, abs(diff))
        fmt = lambda v: ", ".join(f"{100 * x:.1f}" for x in v)
        print(f"| {model} | {fmt(a)} | {100 * statistics.mean(a):.2f}% | {fmt(b)} | {100 * statistics.mean(b):.2f}% | {diff:+.2f} |")
    print(f"\nlargest difference of the means: {worst:.2f} points ({'within' if worst <= 1 else 'OUTSIDE'} 1 point)")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("data", nargs="?"); p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--models", nargs="+", default=["resnet18", "resnet50"])
    p.add_argument("--configs", nargs="+", default=["bf16-cl-graph", "fp32"], choices=["bf16-cl-graph", "fp32"])
    p.add_argument("--epochs", type=int, default=10); p.add_argument("--batch", type=int, default=128)
    p.add_argument("--train-size", type=int, default=None); p.add_argument("--test-size", type=int, default=None)
    p.add_argument("--out", default="pytorch-parity.json")
    p.add_argument("--compare", nargs="+", metavar=("PYTORCH_JSON", "RESULTS_JSON"))
    a = p.parse_args()
    if a.compare:
        compare(a.compare[0], a.compare[1:]); sys.exit(0)
    res = {}
    for model in a.models:
        for config in a.configs:
            for seed in a.seeds:
                acc = train(model, config, seed, a.data, a.epochs, a.batch, a.train_size, a.test_size)
                res.setdefault(f"{model} {config}", []).append({"seed": seed, "accuracy": acc})
                print(f"pytorch {model} {config} seed {seed}: test accuracy {100 * acc:.2f}%", flush=True)
            json.dump(res, open(a.out, "w"), indent=1)
