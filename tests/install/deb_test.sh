#!/usr/bin/env bash
# Builds the Debian package with CPack, checks its declared dependencies,
# unpacks it (dpkg-deb -x, so the test machine's / is left alone) and runs
# `trainbench plugins` and a short experiment from the unpacked copy.
#   deb_test.sh BUILD_DIR DATA_DIR
set -euo pipefail
BUILD=$1; DATA=$2
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
(cd "$BUILD" && cpack -G DEB -B "$TMP/pkg" > "$TMP/cpack.log" 2>&1) || { cat "$TMP/cpack.log"; exit 1; }
DEB=$(ls "$TMP"/pkg/trainbench_*.deb)
depends=$(dpkg-deb -f "$DEB" Depends)
for dep in libtorch libyaml-cpp libprometheus-cpp-pull libspdlog; do
  grep -q "$dep" <<<"$depends" || { echo "Depends lacks $dep: $depends"; exit 1; }
done
dpkg-deb -x "$DEB" "$TMP/root"
for f in usr/bin/trainbench usr/bin/trainbench-worker usr/include/trainbench/sdk/plugin.h \
         usr/share/trainbench/configs/paper.yaml usr/share/trainbench/dashboards/grafana/trainbench.json \
         usr/lib/systemd/system/trainbench@.service; do
  [ -e "$TMP/root/$f" ] || { echo "package lacks /$f"; dpkg-deb -c "$DEB" | head -50; exit 1; }
done
[ -n "$(find "$TMP/root/usr/lib" -path '*/trainbench/plugins/libtrainbench_resnet50.so')" ] \
  || { echo "package lacks the plugins"; dpkg-deb -c "$DEB" | grep plugins; exit 1; }
"$TMP/root/usr/bin/trainbench" plugins > "$TMP/plugins.txt"
for p in simple_cnn resnet18 resnet50 cpu; do
  grep -q " $p " "$TMP/plugins.txt" || { cat "$TMP/plugins.txt"; exit 1; }
done
cat > "$TMP/exp.yaml" <<YAML
name: from-deb
dataset: {kind: cifar10, path: $DATA, train_size: 256, test_size: 64}
models: [simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 32}
measurement: {warmup_steps: 1, max_steps: 4}
YAML
"$TMP/root/usr/bin/trainbench" run "$TMP/exp.yaml" --out "$TMP/out" > "$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; exit 1; }
grep -q '"status": "ok"' "$TMP/out/results.json" || { cat "$TMP/out/results.json"; exit 1; }
echo "package ok: $(basename "$DEB"), $(du -h "$DEB" | cut -f1)"
