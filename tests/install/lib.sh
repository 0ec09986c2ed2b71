# Shared by the install tests: `source lib.sh SOURCE_DIR BUILD_DIR` installs
# trainbench into $TMP/prefix (removed on exit); build_against_install
# builds a CMake project against that prefix, as a stranger would.
set -euo pipefail
SRC=$1; BUILD=$2
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" > "$TMP/install.log"

# build_against_install PROJECT_DIR BUILD_DIR [CMAKE_ARGS...]
build_against_install() {
  local name; name=$(basename "$2")
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TMP/prefix" "${@:3}" \
    > "$TMP/$name-configure.log" 2>&1 || { cat "$TMP/$name-configure.log"; exit 1; }
  cmake --build "$2" > "$TMP/$name-build.log" 2>&1 || { cat "$TMP/$name-build.log"; exit 1; }
}
