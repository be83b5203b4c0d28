#!/usr/bin/env bash
# Installs the Debian 12 packages Colony's build needs, and nothing else.
# Idempotent: quiet when everything is present. Needs root only when something is missing.
set -euo pipefail

packages=(
  g++ cmake make pkg-config
  libcaf-dev            # CAF 0.17 actors
  libzmq3-dev cppzmq-dev
  librocksdb-dev
  libxxhash-dev         # storage/push_log.cpp: record checksums
  capnproto libcapnp-dev
  libboost-test-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  libcpp-httplib-dev    # monitor/: the /metrics endpoint
  libopenblas-dev       # dense layers of the deep models (models/layers.h)
  libthrust-dev         # gpu/: device code built for the host (Thrust CPP system)
  clang-format          # scripts/check-format.sh (CI)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "colony: these Debian packages are missing: ${missing[*]}" >&2
  echo "colony: run this script as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "colony: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
