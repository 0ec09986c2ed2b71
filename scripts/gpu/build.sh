#!/usr/bin/env bash
# Builds trainbench against the LibTorch bundled with PyTorch (CUDA), on a
# machine where the other dependencies cannot be installed from a registry:
# Debian 12 .deb files in .debs/ (scripts/gpu/fetch-debs.sh) are unpacked into
# a private prefix, never into /.
#   scripts/gpu/build.sh [BUILD_DIR]     (default build-gpu)
# Prints the environment to use the build with: source "$BUILD_DIR/env.sh".
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build-gpu}
PREFIX=${TRAINBENCH_DEPS_PREFIX:-/tmp/trainbench-deps}
mkdir -p "$PREFIX"
for deb in .debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
LIB=$PREFIX/usr/lib/x86_64-linux-gnu

TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
# nccl.h for data-parallel cells: from the CUDA toolkit, or the nvidia-nccl
# wheel that PyTorch depends on.
NCCL_INCLUDE=${TRAINBENCH_NCCL_INCLUDE_DIR:-$(python3 - <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
found = [h for r in roots for h in glob.glob(os.path.join(r, "nvidia", "**", "nccl.h"), recursive=True)]
print(os.path.dirname(found[0]) if found else "")
PY
)}
echo "nccl.h: ${NCCL_INCLUDE:-not found}"
# The system's zlib and curl runtime libraries back the Debian headers;
# libarchive: the system's where it has one, else Debian's.
SYS=/usr/lib/x86_64-linux-gnu
ARCHIVE_LIB=$SYS/libarchive.so.13
[ -e "$ARCHIVE_LIB" ] || ARCHIVE_LIB=$LIB/libarchive.so.13
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$PREFIX/usr" \
  -DZLIB_INCLUDE_DIR="$PREFIX/usr/include" -DZLIB_LIBRARY="$SYS/libz.so.1" \
  -DCURL_INCLUDE_DIR="$PREFIX/usr/include/x86_64-linux-gnu" -DCURL_LIBRARY="$SYS/libcurl.so.4" \
  -DLibArchive_INCLUDE_DIR="$PREFIX/usr/include" -DLibArchive_LIBRARY="$ARCHIVE_LIB" \
  -DOPENSSL_INCLUDE_DIR="$PREFIX/usr/include" -DOPENSSL_CRYPTO_LIBRARY="$SYS/libcrypto.so.3" -DOPENSSL_SSL_LIBRARY="$SYS/libssl.so.3" \
  -DCMAKE_CXX_FLAGS="-isystem $PREFIX/usr/include/x86_64-linux-gnu" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DTORCH_CUDA_ARCH_LIST=9.0 \
  -DCMAKE_BUILD_RPATH="$LIB" -DTRAINBENCH_NCCL_INCLUDE_DIR="$NCCL_INCLUDE" \
  -DTRAINBENCH_TEST_DATA="${TRAINBENCH_TEST_DATA:-$PWD/.data}" "${@:2}"
# Test discovery runs the test programs while building: libtrainbench.so
# finds the private prefix's libraries (civetweb) through this.
export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# TRAINBENCH_BUILD_TARGET: these targets only, separated by spaces (a quick
# check of one test program; "trainbench trainbench-worker resnet50 cuda" for
# a stage that runs only ResNet50 cells on the GPU).
read -r -a targets <<< "${TRAINBENCH_BUILD_TARGET:-}"
cmake --build "$BUILD_DIR" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
cat > "$BUILD_DIR/env.sh" <<ENV
export LD_LIBRARY_PATH=$LIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
ENV
