#!/usr/bin/env python3
"""Compares data-parallel cells with their one-rank twins in a results.json:
per-epoch training loss and test accuracy, plus throughput and scaling
efficiency. Exit 1 when a pair differs by more than the bounds.

  data_parallel_check.py RESULTS.json [--noise OTHER_SEED.json] [--loss 0.05] [--accuracy 0.015]

With --noise (the same experiment with another seed), the bounds become
twice the seed-to-seed gap of the one-rank cells, when that is larger: a
model with batch normalisation normalises over each rank's half of the
batch, as PyTorch's DistributedDataParallel does without SyncBatchNorm, so
its curves match one GPU's only within run-to-run noise; cells with
sync_batchnorm normalise over the combined batch and are marked "sync".
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--loss", type=float, default=0.05, help="largest per-epoch loss gap")
    ap.add_argument("--accuracy", type=float, default=0.015, help="largest final accuracy gap (0-1)")
    ap.add_argument("--noise", help="results.json of the same experiment with another seed")
    args = ap.parse_args()
    cells = json.load(open(args.results))["cells"]
    other = json.load(open(args.noise))["cells"] if args.noise else []
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
        loss_bound, acc_bound = args.loss, args.accuracy
        seed_twin = next((c for c in other if c.get("device") == twin["device"]
                          and c.get("model") == cell["model"] and c.get("status") == "ok"), None)
        noise = ""
        if seed_twin:
            seed_loss = max(abs(a - b) for a, b in zip(seed_twin["train_loss"], twin["train_loss"]))
            seed_acc = abs(seed_twin["test_accuracy"][-1] - twin["test_accuracy"][-1])
            loss_bound, acc_bound = max(loss_bound, 2 * seed_loss), max(acc_bound, 2 * seed_acc)
            noise = f" (seed-to-seed: {seed_loss:.4f}, {100 * seed_acc:.2f} pt)"
        good = max(gaps) <= loss_bound and acc_gap <= acc_bound
        ok &= good
        print(f"| {cell['model']} | {twin['device']} | {cell['device']} | {cell['ranks']} | "
              f"{twin['samples_per_second']:.0f} -> {cell['samples_per_second']:.0f}"
              f"{' (sync BN)' if cell.get('sync_batchnorm') else ''} | "
              f"{100 * (cell.get('scaling_efficiency') or 0):.0f}% | {max(gaps):.4f}{noise} | "
              f"{100 * twin['test_accuracy'][-1]:.2f}% / {100 * cell['test_accuracy'][-1]:.2f}%"
              f"{'' if good else ' FAIL'} |")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
