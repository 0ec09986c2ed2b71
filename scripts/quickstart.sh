#!/usr/bin/env bash
# One command from a fresh machine to the quickstart table: installs what
# building and running need, builds the trainbench command, the worker and
# the plugins, fetches CIFAR-10 when it is not here yet, and runs
# configs/quickstart.yaml (SimpleCNN, ResNet18 and ResNet50 on the CPU, and
# on CUDA where it exists).
# CIFAR-10: TRAINBENCH_DATA when set; else ../shared/data beside the checkout
# where it exists; else the default data folder (~/.local/share/trainbench),
# fetched there once with `trainbench data fetch cifar10` (from CIFAR10_URL
# when set: a mirror; default: the dataset authors' address).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
TB="${BUILD_DIR:-build}"/bin/trainbench
if [ -z "${TRAINBENCH_DATA:-}" ]; then
  for d in ../shared/data/cifar-10-batches-bin ../shared/data/cifar-10-mini; do
    if [ -f "$d/data_batch_1.bin" ]; then
      export TRAINBENCH_DATA=$(realpath "$d")
      break
    fi
  done
fi
if [ -z "${TRAINBENCH_DATA:-}" ] && ! "$TB" data list > /dev/null 2>&1; then
  echo "quickstart: fetching CIFAR-10"
  "$TB" data fetch cifar10 ${CIFAR10_URL:+--url "$CIFAR10_URL"}
fi
echo "quickstart: running configs/quickstart.yaml"
# A folder of its own each time: trainbench never writes over earlier results.
exec "$TB" run configs/quickstart.yaml --out "${OUT:-results/quickstart-$(date +%Y%m%d-%H%M%S)}" "$@"
