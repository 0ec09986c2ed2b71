#!/usr/bin/env bash
# Installs trainbench into a temporary prefix, builds examples/vgg11_plugin
# against it as a stranger would (find_package(trainbench) only), drops the
# .so into a plugin folder and runs an experiment with it from the installed
# copy, with no rebuild of the host. Checks VGG-11's published parameter count.
# Also builds examples/bf16_cpu_device with clang++ (the host is g++-built):
# the same LibTorch and libstdc++ make it binary compatible, and it loads.
#   out_of_tree_test.sh SOURCE_DIR BUILD_DIR DATA_DIR
DATA=$3
source "$(dirname "$0")/lib.sh" "$1" "$2"
build_against_install "$SRC/examples/vgg11_plugin" "$TMP/example"
mkdir -m 0755 "$TMP/plugins"
cp "$TMP/example/libtrainbench_vgg11.so" "$TMP/plugins/"
CXX_OTHER=g++
command -v clang++ >/dev/null && CXX_OTHER=clang++
build_against_install "$SRC/examples/bf16_cpu_device" "$TMP/device" -DCMAKE_CXX_COMPILER="$CXX_OTHER"
cp "$TMP/device/libtrainbench_bf16_cpu.so" "$TMP/plugins/"
# A plugin project that sets no build type is still built optimised.
build_against_install "$SRC/examples/bf16_cpu_device" "$TMP/device-nobuildtype" -DCMAKE_BUILD_TYPE=
grep -q "no CMAKE_BUILD_TYPE set, building it optimised" "$TMP/device-nobuildtype-configure.log" \
  || { cat "$TMP/device-nobuildtype-configure.log"; echo "no Release default"; exit 1; }
grep -q -- "-O3" "$TMP/device-nobuildtype/CMakeFiles/bf16_cpu.dir/flags.make" \
  || { cat "$TMP/device-nobuildtype/CMakeFiles/bf16_cpu.dir/flags.make"; echo "built without -O3"; exit 1; }
# The installed host finds its own plugins with no flags, and the new one in the folder.
"$TMP/prefix/bin/trainbench" plugins --plugin-dir "$TMP/plugins" > "$TMP/plugins.txt"
grep -q "model   vgg11 " "$TMP/plugins.txt" || { cat "$TMP/plugins.txt"; exit 1; }
grep -q "model   resnet50 " "$TMP/plugins.txt" || { cat "$TMP/plugins.txt"; exit 1; }
grep -q "device  bf16_cpu " "$TMP/plugins.txt" || { cat "$TMP/plugins.txt"; exit 1; }
# Built against the installed SDK: its ABI is this SDK's (abi.h).
abi_minor=$(sed -n 's/^#define TRAINBENCH_SDK_ABI_MINOR \([0-9]*\).*/\1/p' "$SRC/sdk/include/trainbench/sdk/abi.h")
if [ "$CXX_OTHER" = clang++ ]; then grep -q "(ABI 1.$abi_minor, clang/" "$TMP/plugins.txt" || { cat "$TMP/plugins.txt"; exit 1; }; fi
cat > "$TMP/exp.yaml" <<YAML
name: out-of-tree
dataset: {kind: cifar10, path: $DATA, train_size: 64, test_size: 32}
models:
  - {plugin: vgg11, label: vgg11-1000, options: {num_classes: 1000}}
  - simple_cnn
devices: [cpu, bf16_cpu]
training: {epochs: 1, batch_size: 16}
measurement: {warmup_steps: 1, max_steps: 3}
YAML
"$TMP/prefix/bin/trainbench" run "$TMP/exp.yaml" --plugin-dir "$TMP/plugins" --out "$TMP/out" > "$TMP/run.log" 2>&1 \
  || { cat "$TMP/run.log"; exit 1; }
python3 - "$TMP/out/results.json" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
vgg = cells[0]
assert vgg["status"] == "ok", vgg
assert vgg["params"] == 132863336, f"VGG-11 has {vgg['params']} parameters, torchvision says 132,863,336"
for cell in cells:
    assert cell["status"] == "ok", cell
bf16 = [c for c in cells if c["device"] == "bf16_cpu"]
assert bf16 and bf16[0]["hardware"]["amp"] == "bf16", bf16
print("out-of-tree vgg11: ok,", vgg["params"], "parameters,", round(vgg["samples_per_second"], 1), "samples/s")
PY
