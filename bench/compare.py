"""Prints the trainbench vs PyTorch table from bench/gpu_vs_pytorch.sh's output."""
import json, sys, pathlib
out = pathlib.Path(sys.argv[1]); batches = [int(b) for b in sys.argv[2:]] or [128, 1024]
py = json.load(open(out / "pytorch.json"))
PEAK_BF16, PEAK_FP32 = 790.0, 67.0  # TFLOP/s: measured bf16 matmul on this H200; fp32 datasheet
print("| model | precision | batch | trainbench samples/s | PyTorch samples/s | ratio | trainbench TFLOP/s | % of peak |")
print("|---|---|---|---|---|---|---|---|")
for bs in batches:
    f = out / f"trainbench-b{bs}" / "results.json"
    cells = json.load(open(f))["cells"] if f.exists() else []
    for c in cells:
        key = f"{c['model']}/{c['device']}/b{bs}"
        ref = py.get(key)
        if c.get("status") != "ok":
            print(f"| {c['model']} | {c['device']} | {bs} | {c.get('status')}: {c.get('reason','')[:60]} | {ref or 0:.0f} | - | - | - |")
            continue
        sps = c["samples_per_second"]; tf = c["achieved_tflops"]
        peak = PEAK_FP32 if c["device"] == "fp32" else PEAK_BF16
        print(f"| {c['model']} | {c['device']} | {bs} | {sps:.0f} | {ref or 0:.0f} | {sps / ref if ref else 0:.2f} | {tf:.1f} | {100 * tf / peak:.1f}% |")
