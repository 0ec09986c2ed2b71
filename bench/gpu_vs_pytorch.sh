#!/usr/bin/env bash
# trainbench vs plain PyTorch (Python) on the same GPU, in one call: samples/s
# per model, batch size and precision, their ratio, and achieved TFLOP/s
# against the H200's ~790 TFLOP/s bf16 peak.
#   bench/gpu_vs_pytorch.sh BUILD_DIR OUT_DIR [batch sizes...]
# BENCH_CONFIG_ONLY=1 writes the experiment files into OUT_DIR and stops (a
# test validates them on machines without a GPU). BENCH_MODELS and
# BENCH_LABELS (below) choose a subset of the rows; BENCH_COMPILE_MODELS the
# models with torch.compile rows.
# Both sides: synthetic CIFAR-shaped data resident on the GPU, SGD momentum
# 0.9, the whole training step (forward, backward, optimizer), warm-up left
# out; trainbench additionally draws each batch through its on-GPU
# augmentation pipeline.
set -euo pipefail
BUILD=${1:?build dir}; OUT=${2:?out dir}; shift 2
BATCHES=${*:-128 1024}
MODELS=${BENCH_MODELS:-simple_cnn resnet18 resnet50}  # a subset for a quicker run
# torch.compile rows on the Python side, for every model by default (the
# fair reference: Python at its best); compiling takes 10-60 s per row.
COMPILE_MODELS=${BENCH_COMPILE_MODELS-$MODELS}
# Each model also without its fused kernels ("stock": LibTorch's composite
# ops), to show what the kernels gain: SimpleCNN's epilogue, the ResNets'
# batch norm (and their convolutions through LibTorch instead of
# trainbench's cuDNN path).
MODEL_LIST=${MODELS// /, }
for model in $MODELS; do
  case $model in
    simple_cnn) MODEL_LIST="$MODEL_LIST, {plugin: simple_cnn, label: simple_cnn-composite, options: {fused_epilogue: false}}" ;;
    resnet18|resnet50) MODEL_LIST="$MODEL_LIST, {plugin: $model, label: $model-composite, options: {fused_batchnorm: false, fused_maxpool: false, fused_classifier: false, cudnn_engine_cache: false}}" ;;
  esac
done
# The devices (precision, layout, graph), the same labels on both sides;
# BENCH_LABELS keeps a subset (and the Python side's torch.compile rows only
# where it names them: bf16-compile and fp32-compile, reduce-overhead mode;
# bf16-compile-graph and fp32-compile-graph, compile's kernels with the whole
# step captured by hand. Python's best fp32 figure may be compile's too).
declare -A DEVICES=(
  [fp32]="{amp: none}"
  [fp32-graph]="{amp: none, cuda_graph: true}"
  [fp32-cl-graph]="{amp: none, channels_last: true, cuda_graph: true}"
  [bf16-cl]="{amp: bf16, channels_last: true}"
  [bf16-cl-graph]="{amp: bf16, channels_last: true, cuda_graph: true}"
)
COMPILE_LABELS="bf16-compile fp32-compile bf16-compile-graph fp32-compile-graph"
LABELS=${BENCH_LABELS:-fp32 fp32-graph fp32-cl-graph bf16-cl bf16-cl-graph $COMPILE_LABELS}
DEVICE_LIST="" BASELINE=""
for label in $LABELS; do
  [[ " $COMPILE_LABELS " == *" $label "* ]] && continue
  [ -n "${DEVICES[$label]:-}" ] || { echo "BENCH_LABELS: unknown label $label (known: ${!DEVICES[*]} $COMPILE_LABELS)" >&2; exit 2; }
  DEVICE_LIST+="  - {plugin: cuda, label: $label, options: ${DEVICES[$label]}}"$'\n'
  BASELINE=${BASELINE:-$label}
done
DEVICE_LIST=${DEVICE_LIST%$'\n'}
[ -n "$BASELINE" ] || { echo "BENCH_LABELS names no trainbench device" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
COMPILE_FP32=$([[ " $LABELS " == *" fp32-compile"[\ -]* ]] && echo --compile-fp32 || true)
mkdir -p "$OUT"
for bs in $BATCHES; do
  steps=$(( bs >= 1024 ? 60 : 200 ))
  cat > "$OUT/bench-b$bs.yaml" <<YAML
name: bench-b$bs
seed: 0
dataset: {kind: synthetic, train_size: $(( bs * (steps + 5) )), test_size: 1000}
models: [$MODEL_LIST]
devices:
$DEVICE_LIST
training: {epochs: 1, batch_size: $bs, augment: true, optimizer: {name: sgd, lr: 0.01, momentum: 0.9, weight_decay: 0}}
measurement: {warmup_steps: 20, max_steps: $steps, baseline: $BASELINE, eval_batch_size: 1000}
YAML
  [ -n "${BENCH_CONFIG_ONLY:-}" ] && continue
  # Both sides and the comparison one batch size at a time: a call cut short
  # by its time limit keeps every batch size it finished, compared.
  "$BUILD/bin/trainbench" run "$OUT/bench-b$bs.yaml" --out "$OUT/trainbench-b$bs" || true
  python3 "$HERE/pytorch_reference.py" --batches $bs --models $MODELS --compile $COMPILE_MODELS --labels $LABELS \
    $COMPILE_FP32 --out "$OUT/pytorch-b$bs.json"
  DONE="${DONE:-}${DONE:+ }$bs"
  python3 -c 'import json, sys; json.dump({k: v for f in sys.argv[2:] for k, v in json.load(open(f)).items()}, open(sys.argv[1], "w"), indent=1)' \
    "$OUT/pytorch.json" $(for b in $DONE; do echo "$OUT/pytorch-b$b.json"; done)
  python3 "$HERE/compare.py" "$OUT" $DONE > "$OUT/comparison.md"
done
[ -n "${BENCH_CONFIG_ONLY:-}" ] && exit 0
cat "$OUT/comparison.md"
