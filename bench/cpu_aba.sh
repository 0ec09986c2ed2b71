#!/usr/bin/env bash
# The cpu device's cells of two builds side by side (every speedup divides by
# a CPU figure, so a change must keep them): SimpleCNN, ResNet18 and ResNet50
# at batch 128, fp32 NCHW and channels_last, synthetic CIFAR-shaped data, SGD
# momentum 0.9, the whole step; runs alternating base, head, base, head (a
# shared machine drifts between minutes), then bench/aba.py: each cell's
# mean against the base runs' mean, and whether the runs overlap.
#   bench/cpu_aba.sh BASE_BUILD HEAD_BUILD OUT_DIR
# Environment: BENCH_MODELS (default all three), BENCH_STEPS timed steps per
# cell (default 10, after 3 warm-up steps), BENCH_THREADS (default: all
# logical cores), ABA_STEPS (default "base head base head").
set -euo pipefail
# Both builds' processes keep freed memory (bench/glibc_malloc.sh): a tree
# from before the cpu device's keep_freed_memory otherwise runs faster or
# slower by its process's allocation history, which hides any difference of
# its kernels.
source "$(dirname "$0")/glibc_malloc.sh"
export "${KEEP_FREED_MEMORY_ENV[@]}"
BASE=${1:?base build dir}; HEAD=${2:?head build dir}; OUT=${3:?out dir}
MODELS=${BENCH_MODELS:-simple_cnn resnet18 resnet50}
STEPS=${BENCH_STEPS:-10}; THREADS=${BENCH_THREADS:-$(nproc)}; BS=128
HERE=$(cd "$(dirname "$0")" && pwd)
for build in "$BASE" "$HEAD"; do
  [ -x "$build/bin/trainbench" ] || { echo "bench/cpu_aba.sh: no $build/bin/trainbench; build it first" >&2; exit 2; }
done
mkdir -p "$OUT"
cat > "$OUT/cpu-b$BS.yaml" <<YAML
name: cpu-aba-b$BS
seed: 0
dataset: {kind: synthetic, train_size: $(( BS * (STEPS + 4) )), test_size: 100}
models: [${MODELS// /, }]
devices:
  - {plugin: cpu, label: fp32, options: {threads: $THREADS}}
  - {plugin: cpu, label: fp32-cl, options: {threads: $THREADS, channels_last: true}}
training: {epochs: 1, batch_size: $BS, augment: true, optimizer: {name: sgd, lr: 0.01, momentum: 0.9, weight_decay: 0}}
measurement: {warmup_steps: 3, max_steps: $(( STEPS + 3 )), baseline: fp32, eval_batch_size: 100}
YAML
i=0
for setting in ${ABA_STEPS:-base head base head}; do
  i=$((i + 1))
  build=$([ "$setting" = base ] && echo "$BASE" || echo "$HEAD")
  rc=0
  "$build/bin/trainbench" run "$OUT/cpu-b$BS.yaml" --out "$OUT/cpu-b$BS-$i-$setting" > "$OUT/cpu-b$BS-$i-$setting.log" 2>&1 || rc=$?
  echo "cpu-b$BS-$i-$setting rc=$rc"
done
python3 "$HERE/aba.py" "$OUT" --baseline base | tee "$OUT/aba.md"
