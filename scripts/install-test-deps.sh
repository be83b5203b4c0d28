#!/usr/bin/env bash
# What the tests need beyond the build (scripts/install-deps.sh), idempotent and quiet when
# present:
# - Debian's chromium: metrics_cli_test drives the live dashboard in headless Chromium.
# - Prometheus's promtool at build/tools/promtool, taken from Debian's prometheus package
#   without installing it (the package would add a daemon and a user): tests check /metrics
#   with `promtool check metrics`. Without apt or a network it says so and leaves the tests to
#   their own format checker (tests/prom_text.h).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "colony: the tests need Debian's chromium: run this script as root (or: sudo apt-get install chromium)" >&2
    exit 1
  fi
  echo "colony: installing chromium (the dashboard test)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium >/dev/null
fi

dest=build/tools/promtool
[ -x "$dest" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1) &&
   dpkg-deb -x "$work"/prometheus_*.deb "$work/x"; then
  mkdir -p build/tools
  cp "$work/x/usr/bin/promtool" "$dest"
else
  echo "colony: could not fetch promtool (apt-get download prometheus); /metrics tests use their own checker only" >&2
fi
