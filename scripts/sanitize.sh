#!/usr/bin/env bash
# Hardening checks, built with clang:
#  1. the host's own code under AddressSanitizer + UndefinedBehaviorSanitizer:
#     the supervisor, the engine library, the protocol and the data reading
#     (what reads configs, results, plugin descriptions, worker messages,
#     data files and network clients), with the optional Prometheus exporter
#     left out (-DTRAINBENCH_WITH_PROMETHEUS=OFF: the build that proves the
#     option); its unit tests with leak detection, then the end-to-end tests
#     with this supervisor and the worker and plugins of the full build in
#     $BUILD_DIR (TRAINBENCH_WORKER_BUILD: no LibTorch code is compiled
#     again: LibTorch under the worker is not instrumented either way);
#  2. the libFuzzer targets for the config loader and the CIFAR-10 decoder,
#     each for FUZZ_SECONDS (default 60) from the corpora in tests/fuzz/corpus.
# Run after scripts/setup.sh (the full build in $BUILD_DIR, default build).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
WORKER_BUILD=$PWD/${BUILD_DIR:-build}
HOST_ONLY=(-DTRAINBENCH_WITH_PROMETHEUS=OFF -DTRAINBENCH_WORKER_BUILD="$WORKER_BUILD")
[ -x "$WORKER_BUILD/bin/trainbench-worker" ] || { echo "sanitize: no full build in $WORKER_BUILD (run scripts/setup.sh first)"; exit 1; }

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DTRAINBENCH_SANITIZE=address,undefined "${HOST_ONLY[@]}" > build-asan.log 2>&1 || { cat build-asan.log; exit 1; }
cmake --build build-asan -j "$(nproc)"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 build-asan/bin/supervisor_tests --gtest_brief=1
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 build-asan/bin/protocol_tests --gtest_brief=1
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 build-asan/bin/data_tests --gtest_brief=1
# Leak checking off for the rest: the host's processes end by signals in
# many of them. handle_segv=0: the fault tests need a real SIGSEGV to reach
# the host. Left out: the dashboard schema (no C++ in it), the unit tests
# just run (label host_unit) and the runs whose subject is a measured figure
# (label measurement, tests/CMakeLists.txt: the worker's arithmetic, not
# instrumented here; the host's paths they take, the other tests take).
ASAN_OPTIONS=detect_leaks=0:handle_segv=0 ctest --test-dir build-asan --output-on-failure -j "$(nproc)" \
  -E Dashboards -LE 'host_unit|measurement'

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DTRAINBENCH_FUZZ=ON -DTRAINBENCH_BUILD_TESTS=OFF "${HOST_ONLY[@]}" > build-fuzz.log 2>&1 || { cat build-fuzz.log; exit 1; }
cmake --build build-fuzz --target config_loader_fuzzer cifar10_fuzzer -j "$(nproc)"
# The two fuzzers side by side (one process each), each for FUZZ_SECONDS.
fuzz() {
  local target=$1 work
  work=$(mktemp -d)
  cp "tests/fuzz/corpus/${target%_loader}"/* "$work/"
  local rc=0
  build-fuzz/bin/${target}_fuzzer "$work" -max_total_time="$FUZZ_SECONDS" -max_len=65536 \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 > "build-fuzz/$target.log" 2>&1 || rc=$?
  rm -rf "$work"
  return $rc
}
echo "fuzzing config_loader and cifar10 for ${FUZZ_SECONDS}s each, side by side"
fuzz config_loader & config_loader=$!
fuzz cifar10 & cifar10=$!
failed=0
for target in config_loader cifar10; do
  if wait "${!target}"; then
    echo "$target:"; tail -4 "build-fuzz/$target.log"
  else
    failed=1; echo "$target: FAILED"; tail -60 "build-fuzz/$target.log"
  fi
done
exit $failed
