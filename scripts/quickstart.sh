#!/usr/bin/env bash
# One command from a fresh machine to the quickstart table: installs what is
# missing, builds, and runs configs/quickstart.yaml (SimpleCNN, ResNet18 and
# ResNet50 on the CPU, and on CUDA where it exists).
# CIFAR-10: set TRAINBENCH_DATA to the folder with data_batch_1.bin ...
# test_batch.bin (default: ../shared/data/cifar-10-mini beside the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -z "${TRAINBENCH_DATA:-}" ]; then
  export TRAINBENCH_DATA=$(realpath -m ../shared/data/cifar-10-mini)
fi
# A folder of its own each time: trainbench never writes over earlier results.
exec "${BUILD_DIR:-build}"/bin/trainbench run configs/quickstart.yaml --out "${OUT:-results/quickstart-$(date +%Y%m%d-%H%M%S)}" "$@"
