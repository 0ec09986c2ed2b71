#!/usr/bin/env python3
"""Checks a bench/configs/correctness.yaml run: CPU and GPU SimpleCNN reach test
accuracy within 1.5 points with close loss curves; AMP cells within 1 point of
fp32. Prints the numbers; exit code 1 when a bound is broken.
Usage: correctness.py RESULTS_JSON"""
import json, sys
cells = {c["device"]: c for c in json.load(open(sys.argv[1]))["cells"]}
ok = True
def acc(c): return 100 * c["test_accuracy"][-1]
print("| device | status | final test acc | train loss per epoch |")
print("|---|---|---|---|")
for name, c in cells.items():
    loss = " ".join(f"{x:.3f}" for x in c.get("train_loss", []))
    print(f"| {name} | {c['status']} | {acc(c) if c['status'] == 'ok' else float('nan'):.2f}% | {loss} |")
def check(a, b, bound, what):
    global ok
    if cells.get(a, {}).get("status") != "ok" or cells.get(b, {}).get("status") != "ok":
        print(f"SKIP {what}: {a} or {b} did not finish"); ok = False; return
    d = abs(acc(cells[a]) - acc(cells[b]))
    loss_gap = max(abs(x - y) for x, y in zip(cells[a]["train_loss"], cells[b]["train_loss"]))
    verdict = "ok" if d <= bound else "FAIL"
    ok &= d <= bound
    print(f"{verdict}: {what}: |{acc(cells[a]):.2f} - {acc(cells[b]):.2f}| = {d:.2f} points (bound {bound}); "
          f"largest per-epoch train-loss gap {loss_gap:.3f}")
check("cpu", "cuda-fp32", 1.5, "CPU vs GPU fp32")
for amp in ("cuda-bf16", "cuda-fp16", "cuda-bf16-graph"):
    check(amp, "cuda-fp32", 1.0, f"{amp} vs fp32")
sys.exit(0 if ok else 1)
