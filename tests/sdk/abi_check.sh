#!/usr/bin/env bash
# The plugin ABI against the committed baselines: the first shipped minor's
# headers (tests/fixtures/sdk-1.1) and the current minor's, frozen
# (tests/fixtures/sdk-1.6), so that every slot a shipped minor has keeps its
# place. libabigail's abidiff compares the probe library built against each
# (sdk/abi/abi_probe.cc reaches every type plugins and the host share) with
# the one built against these headers. Changes abi.h's rules allow (fields
# appended to the descriptor; virtual methods appended to Model and Device)
# pass (sdk/abi/abi.suppr and appended_only below); anything else fails.
#   abi_check.sh SOURCE_DIR BUILD_DIR [CURRENT_PROBE CURRENT_HEADERS]
# (the last two: another build of the probe to judge, for the gate's own test)
set -euo pipefail
SRC=$1; BUILD=$2
current=${3:-$BUILD/abi/libtrainbench_sdk_abi_probe.so}
current_headers=${4:-$SRC/sdk/include/trainbench/sdk}
command -v abidiff >/dev/null || { echo "abi_check: abidiff not installed (apt-get install abigail-tools)"; exit 1; }
# abi.h's rules allow virtual methods appended to sdk::Model and sdk::Device
# (the host calls them only on plugins of the minor that added them).
# libabigail reports them where the probe's build emits the vtable (a -O0
# build does) as an incompatible change: let it pass when they are the only
# change, the classes' sizes are the same and each class's inserted methods
# hold its last vtable slots (n insertions at voffsets M-n+1..M of M).
appended_only() {
  local class inserted n max slots expected k counts="" any=0
  for class in Model Device; do
    inserted=$(grep -E "^ *'method virtual .*trainbench::sdk::$class::.*' at .*, virtual at voffset [0-9]+/[0-9]+$" <<<"$report" | \
               sed -E 's|.*virtual at voffset ([0-9]+)/([0-9]+)$|\1 \2|')
    [ -n "$inserted" ] || continue
    any=1
    n=$(wc -l <<<"$inserted")
    counts+="|$n"
    max=$(awk '{print $2}' <<<"$inserted" | sort -u)
    [ "$(wc -l <<<"$max")" = 1 ] || return 1
    slots=$(awk '{print $1}' <<<"$inserted" | sort -n | tr '\n' ' ')
    expected=""; for ((k = max - n + 1; k <= max; k++)); do expected+="$k "; done
    [ "$slots" = "$expected" ] || return 1
  done
  [ "$any" = 1 ] || return 1
  # Nothing else in the report but its frame.
  ! grep -vE "^(Functions changes summary: 0 Removed, 1 Changed, 0 Added functions?|Variables changes summary: 0 Removed, 0 Changed, 0 Added variables?|1 function with some indirect sub-type change:| *\[C\] 'function void trainbench_sdk_abi_probe\(.*' at .* has some indirect sub-type changes:| *parameter [0-9]+ of type 'trainbench::sdk::(Model|Device)\*' has sub-type changes:| *in pointed to type 'class trainbench::sdk::(Model|Device)' at .*:| *type size hasn't changed| *(${counts#|}) member function insertions?:| *'method virtual .*trainbench::sdk::(Model|Device)::.*' at .*, virtual at voffset [0-9]+/[0-9]+| *no member function changes \([0-9]+ filtered\);?)$" <<<"$report" | grep -q .
}
# check VERSION BASELINE_PROBE BASELINE_HEADERS: the current probe against one baseline.
check() {
  local version=$1 base=$2 base_headers=$3 rc
  set +e
  abidiff --no-added-syms --suppressions "$SRC/sdk/abi/abi.suppr" \
    --headers-dir1 "$base_headers" --headers-dir2 "$current_headers" "$base" "$current" > /tmp/abi_check.$$ 2>&1
  rc=$?
  set -e
  report=$(grep -v "SONAME changed" /tmp/abi_check.$$ | sed '/^$/d'); rm -f /tmp/abi_check.$$
  # abidiff's exit code: bit 1 error, 2 usage, 4 ABI change, 8 incompatible change.
  if (( rc & 3 )); then echo "$report"; echo "abi_check: abidiff failed against SDK $version (exit $rc)"; return 1; fi
  if (( rc & 8 )) && appended_only; then
    echo "abi_check: the plugin ABI is compatible with SDK $version (virtual methods appended to sdk::Model and sdk::Device; abidiff exit $rc)"
    return 0
  fi
  if (( rc & 8 )); then
    echo "$report"
    echo "abi_check: an incompatible change to the plugin ABI: plugins built against SDK $version would break"
    return 1
  fi
  if (( rc & 4 )) && grep -q "changed" <<<"$report"; then
    echo "$report"
    echo "abi_check: the plugin ABI changed in a way abi.h's rules do not allow (only fields appended to the descriptor)"
    return 1
  fi
  echo "abi_check: the plugin ABI is compatible with SDK $version (abidiff exit $rc)"
}

status=0
check 1.1 "$BUILD/abi/libtrainbench_sdk_abi_probe_baseline.so" "$SRC/tests/fixtures/sdk-1.1/include/trainbench/sdk" || status=1
check 1.6 "$BUILD/abi/libtrainbench_sdk_abi_probe_frozen.so" "$SRC/tests/fixtures/sdk-1.6/include/trainbench/sdk" || status=1
exit $status
