#!/usr/bin/env bash
# Hardening checks on the code that reads untrusted input (configs, CIFAR-10
# files, results), built with clang:
#  1. the supervisor's unit tests (config loader, CIFAR-10 reader, results)
#     under AddressSanitizer + UndefinedBehaviorSanitizer;
#  2. the libFuzzer targets for the config loader and the CIFAR-10 decoder,
#     each for FUZZ_SECONDS (default 60) from the corpora in tests/fuzz/corpus.
# Worker-side (LibTorch) code is not instrumented: Debian's LibTorch is not
# built with sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
TORCH_SKIP=(-DTRAINBENCH_WITH_PROMETHEUS=OFF)

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DTRAINBENCH_SANITIZE=address,undefined "${TORCH_SKIP[@]}" > build-asan.log 2>&1 || { cat build-asan.log; exit 1; }
cmake --build build-asan --target supervisor_tests -j "$(nproc)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build-asan/bin/supervisor_tests --gtest_brief=1

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DTRAINBENCH_FUZZ=ON -DTRAINBENCH_BUILD_TESTS=OFF "${TORCH_SKIP[@]}" > build-fuzz.log 2>&1 || { cat build-fuzz.log; exit 1; }
cmake --build build-fuzz --target config_loader_fuzzer cifar10_fuzzer -j "$(nproc)"
for target in config_loader cifar10; do
  corpus=tests/fuzz/corpus/${target%_loader}
  work=$(mktemp -d)
  cp "$corpus"/* "$work/"
  echo "fuzzing $target for ${FUZZ_SECONDS}s"
  build-fuzz/bin/${target}_fuzzer "$work" -max_total_time="$FUZZ_SECONDS" -max_len=65536 \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -4
  rm -rf "$work"
done
