#!/usr/bin/env bash
# The quick start: build, then train an FM model on built-in synthetic data.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec build/colony train "$@"
