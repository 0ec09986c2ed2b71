#!/usr/bin/env bash
# Installs trainbench into a temporary prefix, builds examples/embed_engine
# against it (find_package(trainbench COMPONENTS engine) only), and runs it:
# the engine, embedded in a program without LibTorch, finds the installed
# plugins and worker, runs an experiment built in code and reports events
# and results. Also checks that a bad experiment built in code is a one-line
# error naming the key.
#   embed_test.sh SOURCE_DIR BUILD_DIR DATA_DIR
DATA=$3
source "$(dirname "$0")/lib.sh" "$1" "$2"
build_against_install "$SRC/examples/embed_engine" "$TMP/example"
# ldd's output is kept first: `ldd | grep -q` under pipefail fails at random
# when grep stops reading early and ldd dies of SIGPIPE.
LINKED=$(ldd "$TMP/example/embed_engine")
if grep -q torch <<< "$LINKED"; then
  echo "the embedding program links LibTorch:"; echo "$LINKED"; exit 1
fi
grep -q "$TMP/prefix/lib.*/libtrainbench.so.1" <<< "$LINKED" \
  || { echo "not linked to the installed libtrainbench.so.1:"; echo "$LINKED"; exit 1; }
"$TMP/example/embed_engine" "$DATA" "$TMP/out" > "$TMP/run.log" 2> "$TMP/stderr.log" \
  || { cat "$TMP/run.log" "$TMP/stderr.log"; exit 1; }
cat "$TMP/run.log"
grep -q "^engine 0\.[0-9.]*: 3 model and 1 device plugin(s)" "$TMP/run.log"
grep -q "^plan 'embedded': 2 cell(s)" "$TMP/run.log"
grep -q "^cell 1: resnet18-10 on cpu" "$TMP/run.log"
grep -q "^epoch events: 4; results in $TMP/out/results.json; exit code 0" "$TMP/run.log"
python3 - "$TMP/out/results.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
cells = doc["cells"]
assert [c["status"] for c in cells] == ["ok", "ok"], cells
assert cells[0]["params"] == 488586 and cells[1]["params"] == 11181642, [c["params"] for c in cells]
assert doc["experiment"]["seed"] == 7 and doc["experiment"]["training"]["optimizer"]["lr"] == 0.02
assert all(len(c["epoch_seconds"]) == 2 for c in cells)
PY
grep -q "^result: simple_cnn on cpu: ok, [0-9.]* samples/s, 488586 parameters" "$TMP/run.log"

# A mistake in code gets the same one-line error as one in a file.
cat > "$TMP/bad.cc" <<'CC'
#include <cstdio>
#include <trainbench/engine.h>
int main() {
  trainbench::Engine engine;
  try {
    engine.Build(trainbench::ExperimentBuilder("bad").Synthetic(64, 32).Model("simple_cnn").Device("cpu")
                     .Set("/training/batch_sise", 8));
  } catch (const trainbench::EngineError& e) {
    std::printf("%d %s\n", e.exit_code(), e.what());
    return 0;
  }
  return 1;
}
CC
mkdir "$TMP/bad"
cp "$TMP/bad.cc" "$TMP/bad/main.cc"
cat > "$TMP/bad/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.22)
project(bad LANGUAGES CXX)
find_package(trainbench REQUIRED COMPONENTS engine)
add_executable(bad main.cc)
target_link_libraries(bad PRIVATE trainbench::engine)
CM
build_against_install "$TMP/bad" "$TMP/bad/build"
"$TMP/bad/build/bad" > "$TMP/bad.txt" 2>/dev/null
cat "$TMP/bad.txt"
[ "$(wc -l < "$TMP/bad.txt")" -eq 1 ]
grep -q "^2 <code: bad>:[0-9]*:[0-9]*: .*batch_sise.*did you mean 'batch_size'" "$TMP/bad.txt"
echo "embedded engine: ok"
