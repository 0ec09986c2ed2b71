#!/usr/bin/env bash
# One command from a fresh machine to the whole test suite: installs what is
# missing, builds, runs every test (ctest), then the sanitizer build and the
# fuzzers (scripts/sanitize.sh, FUZZ_SECONDS each). Tests read CIFAR-10 from
# ../shared/data beside the checkout (or TRAINBENCH_TEST_DATA).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
# The code as .clang-format has it (fails on drift).
scripts/check_format.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
# The input parsers under ASan+UBSan, and their fuzzers for a bounded time.
scripts/sanitize.sh
