#!/usr/bin/env bash
# The trainbench package as a lab server gets it: builds the .deb files,
# makes a fresh Debian 12 root (debootstrap, minbase: no development
# packages), installs the runtime package there with apt (which pulls only
# run-time libraries), and runs the quickstart as the service user the
# package created. Needs root, debootstrap and Debian's mirror (apt's own
# sources); exits 77 (skipped) without them.
#   fresh_root_test.sh BUILD_DIR DATA_DIR
set -euo pipefail
BUILD=$1; DATA=$2
skip() { echo "fresh_root_test: skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (chroot)"
command -v debootstrap >/dev/null || skip "needs debootstrap (apt-get install debootstrap)"
MIRROR=${TRAINBENCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
TMP=$(mktemp -d)
ROOT="$TMP/root"
cleanup() {
  umount "$ROOT/proc" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

(cd "$BUILD" && cpack -G DEB -B "$TMP/pkg" > "$TMP/cpack.log" 2>&1) || { cat "$TMP/cpack.log"; exit 1; }
DEB=$(ls "$TMP"/pkg/trainbench_*.deb)
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" > "$TMP/debootstrap.log" 2>&1 \
  || { tail -5 "$TMP/debootstrap.log"; skip "debootstrap from $MIRROR failed (no network?)"; }
mount -t proc proc "$ROOT/proc"
cp "$DEB" "$ROOT/tmp/"
in_root() { chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
in_root apt-get update -qq > "$TMP/apt.log" 2>&1 || { cat "$TMP/apt.log"; exit 1; }
in_root apt-get install -y -qq --no-install-recommends "/tmp/$(basename "$DEB")" >> "$TMP/apt.log" 2>&1 \
  || { tail -30 "$TMP/apt.log"; exit 1; }

# Nothing for building came with it.
dev=$(in_root dpkg-query -W -f '${Package}\n' | grep -E -- '-dev$' || true)
[ -z "$dev" ] || { echo "installing trainbench pulled development packages: $dev"; exit 1; }
# The package made the service's user, its state folder and the example.
in_root id trainbench > /dev/null || { echo "no trainbench user"; exit 1; }
[ "$(in_root stat -c %U /var/lib/trainbench)" = trainbench ] || { echo "/var/lib/trainbench not the service's"; exit 1; }
[ -f "$ROOT/etc/trainbench/example.yaml" ] || { echo "no /etc/trainbench/example.yaml"; exit 1; }

# The quickstart, as the service user, on the mini set.
mkdir -p "$ROOT/var/lib/trainbench/cifar-10-mini"
cp "$DATA"/* "$ROOT/var/lib/trainbench/cifar-10-mini/"
in_root chown -R trainbench:trainbench /var/lib/trainbench/cifar-10-mini
in_root runuser -u trainbench -- env TRAINBENCH_DATA=/var/lib/trainbench/cifar-10-mini HOME=/var/lib/trainbench \
  trainbench run /usr/share/trainbench/configs/quickstart.yaml --out /var/lib/trainbench/quickstart \
  > "$TMP/run.log" 2>&1 || { tail -40 "$TMP/run.log"; exit 1; }
python3 - "$ROOT/var/lib/trainbench/quickstart/results.json" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
cpu = [c for c in cells if c["device"] == "cpu"]
assert len(cpu) == 3 and all(c["status"] == "ok" for c in cpu), [(c["model"], c["status"], c.get("reason")) for c in cpu]
print("fresh root: quickstart ok as the service user:",
      ", ".join(f'{c["model"]} {c["samples_per_second"]:.0f}/s' for c in cpu))
PY
[ "$(in_root stat -c %U /var/lib/trainbench/quickstart/results.json)" = trainbench ]
