#!/usr/bin/env bash
# Puts Prometheus's promtool at build/tools/promtool, taken from Debian's prometheus package
# without installing it (the package would add a daemon and a user): tests check /metrics with
# it (`promtool check metrics`). Quiet when it is there already. Without apt or a network it
# says so and leaves the tests to their own format checker (tests/prom_text.h).
set -euo pipefail
cd "$(dirname "$0")/.."
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
