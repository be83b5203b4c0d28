#!/usr/bin/env bash
# Checks that every C++ and CUDA source is formatted as .clang-format says (clang-format 14,
# Debian 12's). Prints the files that are not and exits 1; fix them with `clang-format -i`.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "colony: clang-format is missing (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
bad=()
while IFS= read -r -d '' f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files -z '*.cpp' '*.h' '*.cu')
if [ ${#bad[@]} -gt 0 ]; then
  echo "colony: not formatted (run clang-format -i on them): ${bad[*]}" >&2
  exit 1
fi
echo "format: every source is formatted"
