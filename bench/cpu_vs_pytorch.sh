#!/usr/bin/env bash
# trainbench's cpu device vs plain PyTorch in Python on the same CPU, side by
# side in one go: samples/s per model, fp32 NCHW and channels_last, and their
# ratio. Every speedup trainbench reports divides by a CPU figure like these,
# so they should be as fast as the plain way of doing the same work.
#   bench/cpu_vs_pytorch.sh BUILD_DIR OUT_DIR [batch sizes...]     (default 128)
# Environment: BENCH_MODELS (default all three), BENCH_STEPS timed steps per
# cell (default 10, after 3 warm-up steps), BENCH_REPEATS (default 3, median),
# BENCH_THREADS intra-op threads for both (default: all logical cores),
# BENCH_ROUNDS (default 3): rounds of both sides, one after the other,
# trainbench first in odd rounds and PyTorch first in even ones, each round in
# OUT_DIR/round-N; the summary is each row's median ratio over the rounds (a
# shared machine's speed drifts by 10-15% between minutes, which one round of
# each side would take for a difference between them).
# Both sides: synthetic CIFAR-shaped data, SGD momentum 0.9, the whole step;
# trainbench also augments each epoch's batches (outside the timed steps).
# Both keep freed memory in the process: trainbench's cpu device by its
# keep_freed_memory option (default on), PyTorch's process by the same glibc
# settings through the environment (bench/glibc_malloc.sh;
# PYTORCH_GLIBC_DEFAULTS=1 leaves them out).
# Needs PyTorch and torchvision for Python (Debian: python3-torch
# python3-torchvision, the same 1.13.1 as libtorch-dev).
set -euo pipefail
BUILD=${1:?build dir}; OUT=${2:?out dir}; shift 2
BATCHES=${*:-128}
MODELS=${BENCH_MODELS:-simple_cnn resnet18 resnet50}
STEPS=${BENCH_STEPS:-10}; REPEATS=${BENCH_REPEATS:-3}; THREADS=${BENCH_THREADS:-$(nproc)}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/glibc_malloc.sh"
python3 -c "import torch, torchvision" 2>/dev/null || {
  echo "bench/cpu_vs_pytorch.sh: $(command -v python3) cannot import torch and torchvision; install them" \
       "(Debian: apt-get install python3-torch python3-torchvision) or put a python3 that has them first on PATH" >&2
  exit 2
}
[ -x "$BUILD/bin/trainbench" ] || { echo "bench/cpu_vs_pytorch.sh: no $BUILD/bin/trainbench; build it first (scripts/setup.sh)" >&2; exit 2; }
mkdir -p "$OUT"
ROUNDS=${BENCH_ROUNDS:-3}

trainbench_side() {  # DIR: trainbench's cells at every batch size
  for bs in $BATCHES; do
    cat > "$1/bench-b$bs.yaml" <<YAML
name: cpu-bench-b$bs
seed: 0
dataset: {kind: synthetic, train_size: $(( bs * (STEPS + 4) )), test_size: 100}
models: [${MODELS// /, }]
devices:
  - {plugin: cpu, label: fp32, options: {threads: $THREADS}}
  - {plugin: cpu, label: fp32-cl, options: {threads: $THREADS, channels_last: true}}
training: {epochs: 1, batch_size: $bs, augment: true, optimizer: {name: sgd, lr: 0.01, momentum: 0.9, weight_decay: 0}}
measurement: {warmup_steps: 3, max_steps: $(( STEPS + 3 )), repeats: $REPEATS, baseline: fp32, eval_batch_size: 100}
YAML
    "$BUILD/bin/trainbench" run "$1/bench-b$bs.yaml" --out "$1/trainbench-b$bs" || true
  done
}

python_side() {  # DIR: plain PyTorch's figures
  local malloc=("${KEEP_FREED_MEMORY_ENV[@]}")
  [ "${PYTORCH_GLIBC_DEFAULTS:-0}" = 1 ] && malloc=()
  env "${malloc[@]}" python3 "$HERE/pytorch_cpu_reference.py" --batches $BATCHES --models $MODELS --steps "$STEPS" --warmup 3 \
    --repeats "$REPEATS" --threads "$THREADS" --out "$1/pytorch.json"
}

for round in $(seq 1 "$ROUNDS"); do
  dir="$OUT/round-$round"; mkdir -p "$dir"
  if (( round % 2 )); then trainbench_side "$dir"; python_side "$dir"; else python_side "$dir"; trainbench_side "$dir"; fi
  python3 "$HERE/compare.py" "$dir" $BATCHES --cpu | tee "$dir/comparison.md"
done
python3 "$HERE/compare.py" "$OUT" $BATCHES --cpu | tee "$OUT/comparison.md"
