#!/usr/bin/env python3
"""Refreshes the stored fair reference (bench/reference/h200-pytorch-2.11-fair.json)
from the Python side of bench/gpu_vs_pytorch.sh runs: per key (model/config/bBATCH),
the highest figure of the reference and of the given pytorch.json files, with
the file it came from and its date. A lower figure never replaces a higher one
(the reference is PyTorch at its best), so the files can be given in any order
and again.

  python3 bench/refresh_reference.py [--reference FILE] [--date YYYY-MM-DD] PYTORCH_JSON [...]

Prints each key it raises or adds; --dry-run prints and writes nothing.
"""
import argparse
import datetime
import json
import math
import os
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
KEY = re.compile(r"^[a-z0-9_]+/[a-z0-9-]+/b[1-9][0-9]*$")


def fail(message):
    sys.exit(f"refresh_reference.py: {message}")


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: cannot read {what} ({e}); give a pytorch.json written by bench/pytorch_reference.py")


def figures(path):
    """The {key: samples/s} of one pytorch.json, every entry checked."""
    doc = load(path, "a pytorch.json")
    if not isinstance(doc, dict) or not doc:
        fail(f"{path}: not a pytorch.json (an object of 'model/config/bBATCH': samples/s)")
    out = {}
    for key, value in doc.items():
        if not KEY.match(key):
            fail(f"{path}: key {key!r} is not 'model/config/bBATCH'")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            fail(f"{path}: {key}: {value!r} is not a positive samples/s figure")
        out[key] = float(value)
    return out


def source_name(path):
    """The file as the reference names it: relative to the repository when inside it."""
    resolved = pathlib.Path(path).resolve()
    try:
        return str(resolved.relative_to(HERE.parent))
    except ValueError:
        return str(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", metavar="PYTORCH_JSON")
    parser.add_argument("--reference", default=str(HERE / "reference" / "h200-pytorch-2.11-fair.json"))
    parser.add_argument("--date", default=datetime.date.today().isoformat(),
                        help="the date the runs were measured (default: today)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", args.date):
        fail(f"--date {args.date!r}: give YYYY-MM-DD")
    reference = load(args.reference, "the reference")
    results = reference.get("results") if isinstance(reference, dict) else None
    if not isinstance(results, dict):
        fail(f"{args.reference}: no 'results' object; is this the fair reference?")
    changed = 0
    for path in args.files:
        source = source_name(path)
        for key, value in sorted(figures(path).items()):
            entry = results.get(key)
            old = entry.get("samples_per_second", 0) if isinstance(entry, dict) else 0
            if round(value) <= old:
                continue
            print(f"{key}: {old:.0f} -> {value:.0f} ({source})" if old else f"{key}: new, {value:.0f} ({source})")
            results[key] = {"samples_per_second": round(value), "source": source, "date": args.date}
            changed += 1
    print(f"{changed} figure(s) raised or added" + (" (dry run: nothing written)" if args.dry_run else ""))
    if changed and not args.dry_run:
        reference["results"] = dict(sorted(results.items()))
        tmp = args.reference + ".tmp"
        with open(tmp, "w") as f:
            json.dump(reference, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.reference)


if __name__ == "__main__":
    main()
