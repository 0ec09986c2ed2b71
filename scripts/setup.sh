#!/usr/bin/env bash
# Installs what trainbench needs from Debian/Ubuntu packages (when missing),
# then configures and builds it in ./build. Safe to run again.
#   scripts/setup.sh            # install + build
#   BUILD_DIR=out scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

PACKAGES=(build-essential cmake ninja-build git pkg-config
  libtorch-dev libyaml-cpp-dev libboost-dev libboost-filesystem-dev
  prometheus-cpp-dev libgtest-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  prometheus curl python3 libssl-dev clang libclang-rt-14-dev gnuplot-nox
  prometheus-pushgateway libgloo-dev slurmctld slurmd slurm-client munge openssl
  debootstrap systemd clang-format abigail-tools python3-torch python3-torchvision)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm (the dashboard schema check) may come from elsewhere.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "$jobs"
