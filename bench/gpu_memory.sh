#!/usr/bin/env bash
# Peak GPU memory, trainbench against plain PyTorch at the GPU bench's points,
# side by side in one call: ResNet18 and ResNet50, fp32 eager, fp32 and bf16
# channels_last with the step captured in a CUDA graph, batch 128 and 1024 at
# 32 px; bf16 channels_last graph at 224 px (1000 classes), batch 256.
#   bench/gpu_memory.sh BUILD_DIR OUT_DIR [TAG]
# trainbench keeps a cell's images on the GPU, PyTorch's rows draw random
# ones each step: the cells train on four batches, eight epochs (the 224 px
# point's 1,024 images take 0.15 GiB), so that the data adds little to what
# the step itself needs; each epoch ends with an evaluation (one batch).
# Each trainbench run starts from an empty engine cache, so its peak includes
# cuDNN's autotuning, as PyTorch's rows (cudnn.benchmark, an emptied cache
# before each row) do. MEMORY_MODEL_OPTIONS: extra ResNet options for
# trainbench's cells (e.g. "cudnn_workspace_limit_mb: 0"), MEMORY_DEVICE_OPTIONS
# extra cuda device options (e.g. "memory_limit_gib: 8"); MEMORY_POINTS: a
# subset of "b128 b1024 b256-224"; MEMORY_PYTORCH=0 leaves PyTorch out (a
# second trainbench variant in the same call); MEMORY_CACHE: an engine cache
# folder kept across runs (a second variant with the same folder measures
# the cells without autotuning). Writes OUT_DIR/memory-TAG.md.
set -euo pipefail
BUILD=${1:?build dir}; OUT=${2:?out dir}; TAG=${3:-trainbench}
HERE=$(cd "$(dirname "$0")" && pwd)
POINTS=${MEMORY_POINTS:-b128 b1024 b256-224}
OPTIONS="cudnn_tune_log: true${MEMORY_MODEL_OPTIONS:+, $MEMORY_MODEL_OPTIONS}"
mkdir -p "$OUT"
for point in $POINTS; do
  case $point in
    b128) bs=128 size=32 classes=10 devices="fp32 fp32-cl-graph bf16-cl-graph" ;;
    b1024) bs=1024 size=32 classes=10 devices="fp32 fp32-cl-graph bf16-cl-graph" ;;
    b256-224) bs=256 size=224 classes=1000 devices="bf16-cl-graph" ;;
    *) echo "MEMORY_POINTS: unknown point $point (known: b128 b1024 b256-224)" >&2; exit 2 ;;
  esac
  device_list=""
  for d in $devices; do
    case $d in
      fp32) opts="{amp: none}" ;;
      fp32-cl-graph) opts="{amp: none, channels_last: true, cuda_graph: true}" ;;
      bf16-cl-graph) opts="{amp: bf16, channels_last: true, cuda_graph: true}" ;;
    esac
    [ -n "${MEMORY_DEVICE_OPTIONS:-}" ] && opts="${opts%\}}, $MEMORY_DEVICE_OPTIONS}"
    device_list+="  - {plugin: cuda, label: $d, options: $opts}"$'\n'
  done
  cat > "$OUT/$TAG-$point.yaml" <<YAML
name: memory-$TAG-$point
seed: 0
dataset: {kind: synthetic, train_size: $(( bs * 4 )), test_size: $bs, image_size: $size, num_classes: $classes}
models:
  - {plugin: resnet18, options: {$OPTIONS}}
  - {plugin: resnet50, options: {$OPTIONS}}
devices:
${device_list%$'\n'}
training: {epochs: 8, batch_size: $bs, augment: false, optimizer: {name: sgd, lr: 0.01, momentum: 0.9, weight_decay: 0}}
measurement: {warmup_steps: 10, max_steps: 30, eval_batch_size: $bs, baseline: ${devices%% *}}
YAML
  cache=${MEMORY_CACHE:-$(mktemp -d /tmp/trainbench-cache.XXXXXX)}
  mkdir -p "$cache"
  XDG_CACHE_HOME=$cache \
    "$BUILD/bin/trainbench" run "$OUT/$TAG-$point.yaml" --out "$OUT/$TAG-$point" > "$OUT/$TAG-$point.log" 2>&1 ||
    echo "$TAG $point: trainbench rc=$?"
  if [ "${MEMORY_PYTORCH:-1}" != 0 ]; then
    labels=${devices}
    python3 "$HERE/pytorch_reference.py" --batches $bs --image-size $size --classes $classes --models resnet18 resnet50 \
      --compile --labels $labels --repeats 1 --steps 30 --out "$OUT/pytorch-$point.json" > "$OUT/pytorch-$point.log" 2>&1 ||
      echo "pytorch $point: rc=$?"
  fi
done
python3 - "$OUT" "$TAG" $POINTS > "$OUT/memory-$TAG.md" <<'PY'
import json, pathlib, sys
out, tag, points = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
gib = lambda b: f"{b / 2**30:.2f}" if b else "-"
print(f"| point | model | device | trainbench peak reserved GiB | allocated | PyTorch reserved | allocated | ratio | trainbench samples/s | PyTorch |")
print("|---|---|---|---|---|---|---|---|---|---|")
for point in points:
    f = out / f"{tag}-{point}" / "results.json"
    cells = json.load(open(f))["cells"] if f.exists() else []
    bs = point.split("-")[0][1:]
    pm = out / f"pytorch-{point}-memory.json"
    mem = json.load(open(pm)) if pm.exists() else {}
    ps = out / f"pytorch-{point}.json"
    rate = json.load(open(ps)) if ps.exists() else {}
    for c in cells:
        key = f"{c['model'].split('-')[0]}/{c['device']}/b{bs}"
        r = c.get("peak_memory_bytes") or 0
        a = c.get("peak_allocated_bytes") or 0
        p = mem.get(key, {})
        ratio = f"{r / p['peak_reserved_bytes']:.2f}" if r and p.get("peak_reserved_bytes") else "-"
        state = c.get("status", "")
        sps = f"{c['samples_per_second']:.0f}" if c.get("samples_per_second") else (state + ": " + str(c.get("reason", ""))[:160])
        print(f"| {point} | {c['model']} | {c['device']} | {gib(r)} | {gib(a)} | {gib(p.get('peak_reserved_bytes'))} | "
              f"{gib(p.get('peak_allocated_bytes'))} | {ratio} | {sps} | {rate.get(key, 0):.0f} |")
PY
cat "$OUT/memory-$TAG.md"
for point in $POINTS; do
  [ -d "$OUT/$TAG-$point/logs" ] && { echo "$TAG $point tuning:"; python3 "$HERE/tuning_log.py" "$OUT/$TAG-$point"/logs/*.log || true; }
done
