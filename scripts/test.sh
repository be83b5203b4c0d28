#!/usr/bin/env bash
# Builds Colony and runs every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
scripts/build.sh
scripts/check-format.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
