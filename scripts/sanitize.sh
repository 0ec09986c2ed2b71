#!/usr/bin/env bash
# Hardening checks, built with clang:
#  1. the whole build under AddressSanitizer + UndefinedBehaviorSanitizer,
#     with the optional Prometheus exporter left out
#     (-DTRAINBENCH_WITH_PROMETHEUS=OFF: the build that proves the option),
#     and the test suite run on it: the supervisor's unit tests with leak
#     detection, then every other test (the worker and plugins are
#     instrumented; Debian's LibTorch under them is not);
#  2. the libFuzzer targets for the config loader and the CIFAR-10 decoder,
#     each for FUZZ_SECONDS (default 60) from the corpora in tests/fuzz/corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
TORCH_SKIP=(-DTRAINBENCH_WITH_PROMETHEUS=OFF -DTRAINBENCH_GPU_COMPILE_CHECK=OFF)

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DTRAINBENCH_SANITIZE=address,undefined "${TORCH_SKIP[@]}" > build-asan.log 2>&1 || { cat build-asan.log; exit 1; }
cmake --build build-asan -j "$(nproc)"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 build-asan/bin/supervisor_tests --gtest_brief=1
# Leak checking off for the rest: LibTorch's static registries are never
# freed. handle_segv=0: the fault tests need a real SIGSEGV to reach the host.
# Left out: the install tests (they build examples with g++ against the
# instrumented libraries) and the dashboard schema (no C++ in it).
ASAN_OPTIONS=detect_leaks=0:handle_segv=0 ctest --test-dir build-asan --output-on-failure -j "$(nproc)" \
  -E "Install|Dashboards"

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
