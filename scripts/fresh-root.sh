#!/usr/bin/env bash
# The two commands as a stranger runs them: a fresh, minimal Debian 12 root
# (debootstrap, variant minbase), the repository alone copied in, only the
# package mirror reachable; each step's time printed at the end.
#   scripts/fresh-root.sh quickstart [DATA_DIR]   scripts/quickstart.sh
#   scripts/fresh-root.sh test DATA_DIR           scripts/test.sh
# quickstart: with no DATA_DIR, CIFAR-10 is downloaded from its authors'
# address; with one (a folder holding cifar-10-batches-bin/), a local server
# beside the root serves an archive of it in the official layout (CIFAR10_URL),
# so the fetch runs in full without the internet.
# test: DATA_DIR is copied beside the repository (../shared/data), as the
# tests expect it.
# Needs root and debootstrap. ROOT_PARENT (default: a new folder in /var/tmp)
# holds the root; it is removed at the end unless KEEP_ROOT=1.
set -euo pipefail
MODE=${1:?quickstart or test}; DATA=${2:-}
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "fresh-root: needs root (debootstrap, chroot)"; exit 1; }
command -v debootstrap > /dev/null || { echo "fresh-root: needs debootstrap (apt-get install debootstrap)"; exit 1; }
[ "$MODE" = quickstart ] || [ -n "$DATA" ] || { echo "fresh-root: test needs DATA_DIR"; exit 1; }
MIRROR=${TRAINBENCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
TMP=$(mktemp -d "${ROOT_PARENT:-/var/tmp}/trainbench-fresh-root.XXXXXX")
ROOT=$TMP/root
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2> /dev/null || true
  for m in dev sys proc; do umount -R -l "$ROOT/$m" 2> /dev/null || true; done
  [ "${KEEP_ROOT:-0}" = 1 ] || rm -rf "$TMP"
}
trap cleanup EXIT
# Every line with the seconds since the start, kept for the summary.
LOG=$TMP/steps.log
START=$SECONDS
stamp() { while IFS= read -r line; do printf '%5d %s\n' $((SECONDS - START)) "$line"; done | tee -a "$LOG"; }

echo "fresh-root: debootstrap --variant=minbase bookworm" | stamp
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" > "$TMP/debootstrap.log" 2>&1 \
  || { tail -5 "$TMP/debootstrap.log"; exit 1; }
echo "fresh-root: root ready" | stamp
# As a machine has them: /sys with its cgroup mount (Slurm's slurmd needs it),
# /dev with its pts.
mount --bind /proc "$ROOT/proc"
for m in sys dev; do mount --rbind "/$m" "$ROOT/$m"; done
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
mkdir -p "$ROOT/work"
# The repository alone: what git tracks (the working tree's versions).
git -C "$SRC" ls-files -z | (cd "$SRC" && tar --null -T - -cf -) | (mkdir -p "$ROOT/work/trainbench" && tar -C "$ROOT/work/trainbench" -xf -)
cp -a "$SRC/.git" "$ROOT/work/trainbench/.git"
ENV=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive)
if [ "$MODE" = quickstart ]; then
  if [ -n "$DATA" ]; then
    # The official layout, served on the loopback (the chroot shares it).
    python3 - "$DATA" "$TMP/cifar-10-binary.tar.gz" <<'PY'
import gzip, os, sys, tarfile
data, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz, \
        tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    for name in sorted(os.listdir(os.path.join(data, "cifar-10-batches-bin"))):
        tar.add(os.path.join(data, "cifar-10-batches-bin", name), arcname=f"cifar-10-batches-bin/{name}")
PY
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$TMP" > "$TMP/server.log" 2>&1 &
    SERVER_PID=$!
    ENV+=(CIFAR10_URL="http://127.0.0.1:$PORT/cifar-10-binary.tar.gz")
  fi
  set +e
  chroot "$ROOT" "${ENV[@]}" bash -c 'cd /work/trainbench && scripts/quickstart.sh' 2>&1 | stamp
  status=${PIPESTATUS[0]}
  set -e
else
  mkdir -p "$ROOT/work/shared"
  cp -a "$DATA" "$ROOT/work/shared/data"
  set +e
  chroot "$ROOT" "${ENV[@]}" bash -c 'cd /work/trainbench && scripts/test.sh' 2>&1 | stamp
  status=${PIPESTATUS[0]}
  set -e
fi
echo "fresh-root: $MODE exited $status" | stamp

# The summary: each step from the marker lines the scripts print.
at() { grep -m1 -- "$1" "$LOG" | awk '{print $1}'; }
total=$(tail -1 "$LOG" | awk '{print $1}')
root=$(at "fresh-root: root ready")
packages=$(at "setup: packages ready")
echo
echo "fresh-root summary ($MODE, $(nproc) cores):"
echo "  debootstrap:                 ${root}s"
echo "  packages (apt):              $((packages - root))s"
if [ "$MODE" = quickstart ]; then
  fetch=$(at "quickstart: fetching CIFAR-10" || true)
  run=$(at "quickstart: running")
  fetched=$(( ${fetch:-$run} == run ? 0 : run - fetch ))
  echo "  build:                       $(( ${fetch:-$run} - packages ))s"
  echo "  CIFAR-10 fetch:              ${fetched}s"
  echo "  quickstart run:              $((total - run))s"
  echo "  after the packages:          $((total - packages))s with the fetch, $((total - packages - fetched))s without"
else
  echo "  after the packages:          $((total - packages))s (build, ctest, sanitizers, fuzzers)"
fi
exit "$status"
