#!/usr/bin/env python3
"""Sums up the cuDNN path's tuning lines (the ResNets' cudnn_tune_log option) in
cell logs: where a first run's warm-up goes (building plans, timing them, the
rest: heuristics and descriptors), and what cuDNN's runtime-compiled engines
cost and win.

  python3 bench/tuning_log.py RUN/logs/cell-00-*.log [...]
"""
import re
import sys

# Older formats still parse: without the runtime-compiled counts, and with
# "N timed first behind a gate" (written between d175792 and 2469c4a, when
# round 1 ran behind stream gates).
LINE = re.compile(
    r"cuDNN tuning: (\d+) candidates, (\d+) built \(([\d.]+) ms\), timed in ([\d.]+) ms, ([\d.]+) ms in all; "
    r"engine (\d+) at ([\d.inf]+) ms( \(runtime-compiled\))?"
    r"(?:; (\d+) runtime-compiled built in ([\d.]+) ms; best precompiled ([\d.inf]+) ms)?"
    r"(?:; (?:(\d+) timed first behind a gate, )?(\d+) timed again, (\d+) finalists)?"
    r"(?:.*?; heuristics ([\d.]+) ms instant, ([\d.]+) ms fallback \((\d+) candidates only there\), "
    r"describing ([\d.]+) ms)?")


# The workspace line that follows each tuning line (the chosen engine's
# workspace, the tuning's, and the best time within each of five limits).
WORKSPACE = re.compile(
    r"cuDNN tuning workspace: chosen (\d+) B, tuned in (\d+) B, (\d+) over the limit of (\d+) B; "
    r"best within 16 MiB ([\d.inf]+) ms, 64 MiB ([\d.inf]+) ms, 256 MiB ([\d.inf]+) ms, 1 GiB ([\d.inf]+) ms, "
    r"4 GiB ([\d.inf]+) ms")


def workspace_summary(rows, chosen_ms):
    """What each workspace limit would cost: the chosen engines' summed time
    against the best within each limit (each distinct operation once)."""
    if not rows:
        return []
    mib = 2**20
    out = [f"  workspace: the chosen engines need at most {max(int(r.group(1)) for r in rows) / mib:.0f} MiB "
           f"(sum {sum(int(r.group(1)) for r in rows) / mib:.0f} MiB); tuning took at most "
           f"{max(int(r.group(2)) for r in rows) / mib:.0f} MiB; {sum(int(r.group(3)) for r in rows)} candidates "
           f"over the limit ({rows[0].group(4)} B)"]
    for i, name in zip(range(5, 10), ("16 MiB", "64 MiB", "256 MiB", "1 GiB", "4 GiB")):
        within = [float(r.group(i)) for r in rows]
        missing = sum(w == float("inf") for w in within)
        total = sum(w for w in within if w != float("inf"))
        out.append(f"  within {name}: {total:.3f} ms against {chosen_ms:.3f} ms chosen "
                   f"({(total / chosen_ms - 1) * 100 if chosen_ms else 0:+.2f}%), {missing} operations with no engine")
    return out


def summarise(paths):
    rows, spaces = [], []
    for path in paths:
        with open(path, errors="replace") as log:
            for line in log:
                m = LINE.search(line)
                if m: rows.append(m)
                w = WORKSPACE.search(line)
                if w: spaces.append(w)
    if not rows:
        return "  no tuning lines (was the ResNets' cudnn_tune_log option on, and anything tuned?)"
    total = lambda i: sum(float(r.group(i)) for r in rows)
    out = [f"  {len(rows)} operations tuned: {total(1):.0f} candidates, {total(2):.0f} built; building "
           f"{total(3) / 1e3:.2f} s, timing {total(4) / 1e3:.2f} s, other {(total(5) - total(3) - total(4)) / 1e3:.2f} s, "
           f"in all {total(5) / 1e3:.2f} s; the chosen engines take {total(7):.3f} ms (each distinct operation once)"]
    rounds = [r for r in rows if r.group(13) is not None]
    if rounds:
        out.append(f"  rounds: {sum(int(r.group(2)) for r in rounds)} candidates timed once "
                   f"({sum(int(r.group(12) or 0) for r in rounds)} of them behind a gate), "
                   f"{sum(int(r.group(13)) for r in rounds)} timed again behind a gate, "
                   f"{sum(int(r.group(14)) for r in rounds)} finalists timed 3 times more; "
                   f"{sum('a gate let go' in r.string for r in rounds)} operations where a gate let go before it was opened")
    split = [r for r in rows if r.group(15) is not None]
    if split:
        out.append(f"  gathering candidates: cuDNN's instant heuristics {sum(float(r.group(15)) for r in split) / 1e3:.2f} s, "
                   f"its fallback list {sum(float(r.group(16)) for r in split) / 1e3:.2f} s "
                   f"({sum(int(r.group(17)) for r in split)} candidates only there), "
                   f"describing them {sum(float(r.group(18)) for r in split) / 1e3:.2f} s")
    new = [r for r in rows if r.group(9) is not None]
    if new:
        chosen = [r for r in new if r.group(8)]
        gain = sum(float(r.group(11)) - float(r.group(7)) for r in chosen if r.group(11) != "inf")
        out.append(f"  runtime-compiled: {sum(int(r.group(9)) for r in new)} built in "
                   f"{sum(float(r.group(10)) for r in new) / 1e3:.2f} s; chosen for {len(chosen)} of {len(new)} "
                   f"operations, {gain:.4f} ms faster there than the best precompiled engines")
    out += workspace_summary(spaces, total(7))
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: tuning_log.py CELL_LOG [...]")
    print(summarise(sys.argv[1:]))
