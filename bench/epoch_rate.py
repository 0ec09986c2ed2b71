"""Epoch rate (samples per second of a whole epoch, augmentation included,
evaluation not) against the step rate, per cell of a results.json. The first
epoch includes cuDNN's autotuning and the graph's capture, so the median of
the later epochs is used."""
import json, statistics, sys
cells = json.load(open(sys.argv[1]))["cells"]
print("| model | device | step rate (samples/s) | epoch rate, median of epochs 2.. | ratio | goal (>= 0.90) |")
print("|---|---|---|---|---|---|")
for c in cells:
    if c.get("status") != "ok":
        print(f"| {c['model']} | {c['device']} | {c.get('status')} | | | |"); continue
    per_epoch = c["steps_per_epoch"] * c["config"]["training"]["batch_size"]
    later = c["epoch_seconds"][1:] or c["epoch_seconds"]
    rate = per_epoch / statistics.median(later)
    ratio = rate / c["samples_per_second"]
    print(f"| {c['model']} | {c['device']} | {c['samples_per_second']:.0f} | {rate:.0f} | {ratio:.2f} | {'met' if ratio >= 0.9 else 'not met'} |")
