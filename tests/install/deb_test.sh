#!/usr/bin/env bash
# Builds the Debian packages with CPack and checks them as Debian would have
# them: trainbench (runtime libraries only) and trainbench-dev (headers and
# the CMake package), their dependencies and contents, the maintainer scripts,
# the service unit's hardening (systemd-analyze security, 3.0 or better);
# then unpacks them (dpkg-deb -x, so the test machine's / is left alone) and
# runs `trainbench plugins` and a short experiment from the unpacked copy.
#   deb_test.sh SOURCE_DIR BUILD_DIR DATA_DIR
set -euo pipefail
SRC=$1; BUILD=$2; DATA=$3
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
fail() { echo "deb_test: $*"; exit 1; }
(cd "$BUILD" && cpack -G DEB -B "$TMP/pkg" > "$TMP/cpack.log" 2>&1) || { cat "$TMP/cpack.log"; exit 1; }
DEB=$(ls "$TMP"/pkg/trainbench_*.deb)
DEV=$(ls "$TMP"/pkg/trainbench-dev_*.deb)

# Dependencies: the runtime package needs no development package.
depends=$(dpkg-deb -f "$DEB" Depends)
for dep in libtorch libyaml-cpp libprometheus-cpp-pull libspdlog adduser; do
  grep -q "$dep" <<<"$depends" || fail "trainbench Depends lacks $dep: $depends"
done
if grep -Eq -- '-dev\b' <<<"$depends"; then fail "trainbench depends on a -dev package: $depends"; fi
dev_depends=$(dpkg-deb -f "$DEV" Depends)
for dep in "trainbench (= " libtorch-dev nlohmann-json3-dev libboost-dev; do
  grep -qF "$dep" <<<"$dev_depends" || fail "trainbench-dev Depends lacks $dep: $dev_depends"
done

# Contents: each file in its package.
dpkg-deb -x "$DEB" "$TMP/root"
dpkg-deb -x "$DEV" "$TMP/devroot"
for f in usr/bin/trainbench usr/bin/trainbench-worker usr/share/trainbench/configs/paper.yaml \
         usr/share/trainbench/example.yaml usr/share/trainbench/dashboards/grafana/trainbench.json \
         usr/lib/systemd/system/trainbench@.service usr/share/doc/trainbench/embedding.md \
         usr/share/doc/trainbench/slurm.md usr/share/doc/trainbench/config-reference.md \
         usr/lib/tmpfiles.d/trainbench.conf; do
  [ -e "$TMP/root/$f" ] || { dpkg-deb -c "$DEB" | head -60; fail "trainbench lacks /$f"; }
done
[ -z "$(find "$TMP/root" -name '*.h' -o -name '*.cmake')" ] || fail "trainbench holds headers or CMake files"
for f in usr/include/trainbench/sdk/plugin.h usr/include/trainbench/engine.h; do
  [ -e "$TMP/devroot/$f" ] || fail "trainbench-dev lacks /$f"
done
[ -n "$(find "$TMP/devroot" -name trainbenchConfig.cmake)" ] || fail "trainbench-dev lacks the CMake package"
[ -n "$(find "$TMP/root/usr/lib" -path '*/trainbench/plugins/libtrainbench_resnet50.so')" ] \
  || { dpkg-deb -c "$DEB" | grep plugins; fail "trainbench lacks the plugins"; }

# Maintainer scripts: the service's user and state folder.
dpkg-deb -e "$DEB" "$TMP/control"
grep -q "adduser --system" "$TMP/control/postinst" || fail "postinst creates no system user"
grep -q "/var/lib/trainbench" "$TMP/control/postinst" || fail "postinst creates no /var/lib/trainbench"
sh -n "$TMP/control/postinst" && sh -n "$TMP/control/postrm"

# The unit, as installed, hardened to 3.0 or better (exposure levels are
# tenths for --threshold).
if command -v systemd-analyze >/dev/null; then
  unit="$TMP/root/usr/lib/systemd/system/trainbench@.service"
  systemd-analyze security --offline=yes --threshold=30 "$unit" > "$TMP/security.txt" 2>&1 \
    || { cat "$TMP/security.txt"; fail "trainbench@.service is exposed above 3.0"; }
  echo "unit: $(grep -o 'Overall exposure level.*' "$TMP/security.txt")"
else
  echo "deb_test: systemd-analyze not installed: the unit's score is not checked"
fi

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
"$TMP/root/usr/bin/trainbench" run "$TMP/exp.yaml" --concurrent --out "$TMP/out" > "$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; exit 1; }
grep -q '"status": "ok"' "$TMP/out/results.json" || { cat "$TMP/out/results.json"; exit 1; }
echo "packages ok: $(basename "$DEB") $(du -h "$DEB" | cut -f1), $(basename "$DEV") $(du -h "$DEV" | cut -f1)"
