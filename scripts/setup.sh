#!/usr/bin/env bash
# Installs what trainbench needs from Debian/Ubuntu packages (when missing),
# then configures and builds it in ./build. Safe to run again.
#   scripts/setup.sh            # what building and running need; builds the
#                               # trainbench command, the worker and the plugins
#   scripts/setup.sh --tests    # and the test rig; builds everything
#   BUILD_DIR=out scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
TESTS=OFF
[ "${1:-}" = --tests ] && TESTS=ON

# Building and running: the compiler, LibTorch and the libraries the host links
# (libcurl and libarchive for `trainbench data fetch`; ca-certificates for its
# HTTPS download).
PACKAGES=(build-essential cmake ninja-build pkg-config ca-certificates
  libtorch-dev libyaml-cpp-dev libboost-dev libboost-filesystem-dev prometheus-cpp-dev
  libcli11-dev libspdlog-dev nlohmann-json3-dev libssl-dev libcurl4-openssl-dev libarchive-dev libgloo-dev)
# The tests: GoogleTest, a real Prometheus and Pushgateway, Slurm, the sanitizer
# and fuzzing toolchain, formatting, the ABI checker, a fresh Debian root for
# the package (debootstrap; CPack's DEB generator needs file and dpkg-dev),
# PyTorch for the bench scripts, gnuplot for `report --plot`.
TEST_PACKAGES=(git libgtest-dev prometheus prometheus-pushgateway curl python3 openssl clang libclang-rt-14-dev
  gnuplot-nox slurmctld slurmd slurm-client munge debootstrap systemd clang-format abigail-tools file dpkg-dev
  python3-torch python3-torchvision)
[ "$TESTS" = ON ] && PACKAGES+=("${TEST_PACKAGES[@]}")

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm (the dashboard schema check) may come from elsewhere.
[ "$TESTS" = ON ] && { command -v npm >/dev/null 2>&1 || missing+=(nodejs npm); }
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: packages ready; building"

jobs=$(nproc)
if [ "$TESTS" = ON ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINBENCH_BUILD_TESTS=ON \
    -DTRAINBENCH_GPU_COMPILE_CHECK="${TRAINBENCH_GPU_COMPILE_CHECK:-AUTO}" -DTRAINBENCH_UNITY_BUILD=ON
  cmake --build "$BUILD_DIR" -j "$jobs"
else
  # What a run uses: no tests, no GPU compile check (a CUDA LibTorch's build
  # compiles its GPU code anyway).
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINBENCH_BUILD_TESTS=OFF \
    -DTRAINBENCH_GPU_COMPILE_CHECK=OFF -DTRAINBENCH_UNITY_BUILD=ON
  cmake --build "$BUILD_DIR" -j "$jobs" --target trainbench trainbench-worker trainbench_plugins
fi
