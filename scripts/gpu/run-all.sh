#!/usr/bin/env bash
# Everything for the GPU machine in one go: build against PyTorch's CUDA
# LibTorch, run the unit tests, then the requested stages. Logs and results
# go to $OUT (default ./gpu-out).
#   scripts/gpu/run-all.sh [stage...]   stages: test bench paper correctness metrics
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export TRAINBENCH_DATA=$PWD/.data/cifar-10-10k
STAGES=${*:-test bench}
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv; nproc; } 2>&1 | tee "$OUT/machine.txt"
t0=$(date +%s)
scripts/gpu/build.sh build-gpu > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
source build-gpu/env.sh
for stage in $STAGES; do
  t0=$(date +%s)
  case $stage in
    test) ctest --test-dir build-gpu --output-on-failure -j 8 > "$OUT/ctest.log" 2>&1; echo "ctest rc=$?"; tail -5 "$OUT/ctest.log"; grep -E "FAILED|Failure" -A5 "$OUT/ctest.log" | head -40 ;;
    bench) bench/gpu_vs_pytorch.sh build-gpu "$OUT/bench" ${BENCH_BATCHES:-128 1024} > "$OUT/bench.log" 2>&1; echo "bench rc=$?"; cat "$OUT/bench/comparison.md" ;;
    plugins) build-gpu/bin/trainbench plugins ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "$stage: $(( $(date +%s) - t0 )) s"
done
