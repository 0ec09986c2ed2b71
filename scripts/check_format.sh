#!/usr/bin/env bash
# Fails when a C++ or CUDA file differs from what clang-format (the project's
# .clang-format) makes of it; lists the files and how to fix them.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format not installed (apt-get install clang-format)"; exit 1; }
drift=()
while IFS= read -r f; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || drift+=("$f")
done < <(git ls-files '*.cc' '*.h' '*.cu' ':!:tests/fixtures/sdk-*')
if ((${#drift[@]})); then
  printf 'check_format: %d file(s) differ from .clang-format:\n' "${#drift[@]}"
  printf '  %s\n' "${drift[@]}"
  echo "fix: git ls-files '*.cc' '*.h' '*.cu' ':!:tests/fixtures/sdk-*' | xargs clang-format -i"
  exit 1
fi
echo "check_format: $(git ls-files '*.cc' '*.h' '*.cu' ':!:tests/fixtures/sdk-*' | wc -l) files match .clang-format ($(clang-format --version))"
