#!/usr/bin/env python3
"""Checks the results of bench/configs/gpu-faults.yaml: each fault failed its
own cell with a clear reason and the last cell ran. Exit 1 otherwise."""
import json
import sys

cells = {c["model"]: c for c in json.load(open(sys.argv[1]))["cells"]}
expect = {"oom": "out of memory", "device-assert": "device-side assert", "nan": "nan"}
ok = True
for label, words in expect.items():
    c = cells[label]
    good = c["status"] == "failed" and words in c.get("reason", "").lower()
    ok &= good
    print(f"{label}: {c['status']}: {c.get('reason', '')[:300]}{'' if good else '   <-- expected failed with ' + repr(words)}")
last = cells["simple_cnn"]
ok &= last["status"] == "ok"
print(f"simple_cnn after them: {last['status']}, {last.get('samples_per_second', 0):.0f} samples/s {last.get('reason', '')[:300]}")
sys.exit(0 if ok else 1)
