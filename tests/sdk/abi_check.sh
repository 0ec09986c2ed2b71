#!/usr/bin/env bash
# The plugin ABI against the committed baseline (the previous minor's
# headers, tests/fixtures/sdk-1.1): libabigail's abidiff compares the probe
# library built against each (sdk/abi/abi_probe.cc reaches every type plugins
# and the host share). Changes abi.h's rules allow (fields appended to the
# descriptor) are suppressed (sdk/abi/abi.suppr); anything else fails.
#   abi_check.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1; BUILD=$2
command -v abidiff >/dev/null || { echo "abi_check: abidiff not installed (apt-get install abigail-tools)"; exit 1; }
base="$BUILD/abi/libtrainbench_sdk_abi_probe_baseline.so"
current="$BUILD/abi/libtrainbench_sdk_abi_probe.so"
set +e
abidiff --no-added-syms --suppressions "$SRC/sdk/abi/abi.suppr" \
  --headers-dir1 "$SRC/tests/fixtures/sdk-1.1/include/trainbench/sdk" \
  --headers-dir2 "$SRC/sdk/include/trainbench/sdk" "$base" "$current" > /tmp/abi_check.$$ 2>&1
rc=$?
set -e
report=$(grep -v "SONAME changed" /tmp/abi_check.$$ | sed '/^$/d'); rm -f /tmp/abi_check.$$
# abidiff's exit code: bit 1 error, 2 usage, 4 ABI change, 8 incompatible change.
if (( rc & 3 )); then echo "$report"; echo "abi_check: abidiff failed (exit $rc)"; exit 1; fi
if (( rc & 8 )); then
  echo "$report"
  echo "abi_check: an incompatible change to the plugin ABI: plugins built against SDK 1.1 would break"
  exit 1
fi
if (( rc & 4 )) && grep -q "changed" <<<"$report"; then
  echo "$report"
  echo "abi_check: the plugin ABI changed in a way abi.h's rules do not allow (only fields appended to the descriptor)"
  exit 1
fi
echo "abi_check: the plugin ABI is compatible with SDK 1.1 (abidiff exit $rc)"
