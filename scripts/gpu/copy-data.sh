#!/usr/bin/env bash
# Copies (here) the CIFAR-10 files that scripts/gpu/run-all.sh reads on a GPU
# machine into .data/ (git-ignored; name it in the device call's carry):
# cifar-10-10k (data_batch_1.bin's 10,000 training images and the first
# 5,000 test images, 46 MB) and cifar-10-mini (9 MB).
#   scripts/gpu/copy-data.sh [DATA]   (default ../shared/data)
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:-../shared/data}
[ -f "$data/cifar-10-batches-bin/data_batch_1.bin" ] || { echo "copy-data: no CIFAR-10 in $data"; exit 1; }
mkdir -p .data/cifar-10-10k .data/cifar-10-mini
cp "$data/cifar-10-batches-bin/data_batch_1.bin" "$data/cifar-10-batches-bin/batches.meta.txt" .data/cifar-10-10k/
head -c $((5000 * 3073)) "$data/cifar-10-batches-bin/test_batch.bin" > .data/cifar-10-10k/test_batch.bin
cp "$data"/cifar-10-mini/* .data/cifar-10-mini/
du -sh .data/*
