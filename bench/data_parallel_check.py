#!/usr/bin/env python3
"""Compares data-parallel cells with their one-rank twins in a results.json:
per-epoch training loss and test accuracy, plus throughput and scaling
efficiency. Exit 1 when a pair differs by more than the bounds.

  data_parallel_check.py RESULTS.json [--loss 0.05] [--accuracy 0.015]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--loss", type=float, default=0.05, help="largest per-epoch loss gap")
    ap.add_argument("--accuracy", type=float, default=0.015, help="largest final accuracy gap (0-1)")
    args = ap.parse_args()
    cells = json.load(open(args.results))["cells"]
    ok = True
    print("| model | one rank | N ranks | ranks | samples/s (1 -> N) | scaling efficiency | largest loss gap | final accuracy (1 / N) |")
    print("|---|---|---|---|---|---|---|---|")
    for cell in cells:
        if cell.get("ranks", 1) <= 1 or cell.get("status") != "ok":
            continue
        twin = next((c for c in cells if c.get("device") == cell.get("scaling_baseline")
                     and c.get("model") == cell.get("model")), None)
        if twin is None or twin.get("status") != "ok":
            print(f"{cell['model']} on {cell['device']}: no one-rank twin", file=sys.stderr)
            ok = False
            continue
        gaps = [abs(a - b) for a, b in zip(cell["train_loss"], twin["train_loss"])]
        acc_gap = abs(cell["test_accuracy"][-1] - twin["test_accuracy"][-1])
        good = max(gaps) <= args.loss and acc_gap <= args.accuracy
        ok &= good
        print(f"| {cell['model']} | {twin['device']} | {cell['device']} | {cell['ranks']} | "
              f"{twin['samples_per_second']:.0f} -> {cell['samples_per_second']:.0f} | "
              f"{100 * (cell.get('scaling_efficiency') or 0):.0f}% | {max(gaps):.4f} | "
              f"{100 * twin['test_accuracy'][-1]:.2f}% / {100 * cell['test_accuracy'][-1]:.2f}%"
              f"{'' if good else ' FAIL'} |")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
