#!/usr/bin/env python3
"""Sums up an interleaved side-by-side of settings (run-all.sh aba, aba-imagenet,
aba-epochs: this tree, "head", against another, "base"; the runs
<what>-b<batch>-<n>-<setting>/results.json in one folder): per kind of run
and batch size, every run's figure per cell (samples/s unless --metric names
another field of a cell, e.g. time_to_train_seconds), then each setting's
mean against the baseline's mean, and whether its runs and the baseline's are
apart (every run of one above every run of the other), since the machines
here are noisy: a change whose runs overlap the baseline's is not shown by
this side-by-side.

  python3 bench/aba.py OUT [--baseline base] [--metric FIELD]
"""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import sys

RUN = re.compile(r"([a-z0-9]+)-b(\d+)-(\d+)-(.+)$")


def runs_of(folder, metric):
    """{(what, batch): [(n, setting, {cell: figure})]}, runs in their order."""
    found = collections.defaultdict(list)
    for path in glob.glob(os.path.join(folder, "*-b*-*-*", "results.json")):
        m = RUN.match(os.path.basename(os.path.dirname(path)))
        if not m:
            continue
        with open(path) as f:
            doc = json.load(f)
        cells = {f"{c['model']} {c['device']}": float(c[metric])
                 for c in doc.get("cells", []) if c.get("status", "ok") == "ok" and c.get(metric)}
        found[(m.group(1), int(m.group(2)))].append((int(m.group(3)), m.group(4), cells))
    for key in found:
        found[key].sort(key=lambda r: r[0])
    return found


def report(found, baseline, metric):
    out = []
    for what, batch in sorted(found, key=lambda k: (k[0], -k[1])):
        runs = found[(what, batch)]
        cells = sorted({c for _, _, cs in runs for c in cs})
        out.append(f"## {what}, batch {batch}: {metric}\n")
        out.append("| run | setting | " + " | ".join(cells) + " |")
        out.append("|---|---|" + "---|" * len(cells))
        for n, setting, cs in runs:
            out.append(f"| {n} | {setting} | " + " | ".join(f"{cs[c]:.1f}" if c in cs else "-" for c in cells) + " |")
        by_setting = collections.defaultdict(lambda: collections.defaultdict(list))
        for _, setting, cs in runs:
            for c, v in cs.items():
                by_setting[setting][c].append(v)
        base = by_setting.get(baseline)
        out.append("")
        if not base:
            out.append(f"(no '{baseline}' runs at batch {batch}: nothing to compare with)\n")
            continue
        spread = [100 * (max(v) / min(v) - 1) for v in base.values() if len(v) > 1]
        if spread:
            out.append(f"The {baseline} runs' spread: {min(spread):.2f}-{max(spread):.2f}%.\n")
        out.append(f"| setting, against {baseline} | " + " | ".join(cells) + " |")
        out.append("|---|" + "---|" * len(cells))
        for setting in sorted(s for s in by_setting if s != baseline):
            row = []
            for c in cells:
                values, ref = by_setting[setting].get(c), base.get(c)
                if not values or not ref:
                    row.append("-")
                    continue
                change = 100 * (statistics.mean(values) / statistics.mean(ref) - 1)
                apart = min(values) > max(ref) or max(values) < min(ref)
                row.append(f"{change:+.2f}%" + ("" if apart else " (overlaps)"))
            out.append(f"| {setting} | " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder")
    p.add_argument("--baseline", default="default")
    p.add_argument("--metric", default="samples_per_second")
    a = p.parse_args()
    found = runs_of(a.folder, a.metric)
    if not found:
        sys.exit(f"aba.py: no <what>-b<batch>-<n>-<setting>/results.json under {a.folder}")
    print(report(found, a.baseline, a.metric))


if __name__ == "__main__":
    main()
