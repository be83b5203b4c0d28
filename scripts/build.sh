#!/usr/bin/env bash
# Installs what the build needs, then configures and builds Colony in build/ (Release).
# Under CI (CI set), warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
werror=OFF
[ -n "${CI:-}" ] && werror=ON
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCOLONY_WERROR="$werror" >/dev/null
cmake --build build -j"$(nproc)"
