#!/usr/bin/env bash
# A real field-aware (libffm) CTR-like data set from Debian's package index, which every
# Debian machine has after `apt-get update`: does this debtag belong to this package?
#
#   scripts/make-debian-data.sh OUT_DIR [PACKAGES_FILE]
#
# Writes OUT_DIR/{train,valid,test}.libffm (split 80/10/10 by package) and
# OUT_DIR/README-data.txt (fields, source list and its Release Date, row counts, positive
# rates). PACKAGES_FILE defaults to the base suite's main Packages list in
# /var/lib/apt/lists (amd64 preferred; any compression `apt-helper cat-file` reads). The same
# list gives byte-identical files; their sha256 is printed at the end. The work is done by
# scripts/debian_data.py (Python 3).
set -euo pipefail

usage() { echo "usage: $0 OUT_DIR [PACKAGES_FILE]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
out_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
lists=/var/lib/apt/lists
helper=/usr/lib/apt/apt-helper
start=$(date +%s)

is_root() { [[ $(id -u) -eq 0 ]]; }

if [[ ! -x $helper ]]; then
  echo "error: $helper not found; this script needs a Debian (apt) system" >&2
  exit 1
fi

if ! command -v python3 >/dev/null 2>&1; then
  if is_root; then
    echo "python3 is missing; installing it with apt-get"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-minimal
  else
    echo "error: python3 is missing; install it (as root: apt-get install python3-minimal)" >&2
    exit 1
  fi
fi

# Main-component Packages lists of base suites (not -security, -updates, -backports, ...).
find_lists() {
  local arch=$1 f base suite
  shopt -s nullglob
  for f in "$lists"/*_dists_*_main_binary-"$arch"_Packages*; do
    base=${f##*/}
    [[ $base =~ _dists_([^_]+)_main_binary-[^_]+_Packages(\.[a-z0-9]+)?$ ]] || continue
    suite=${BASH_REMATCH[1]}
    [[ $suite == *-* ]] && continue
    echo "$f"
  done
  shopt -u nullglob
}

pick_list() {
  local arch candidates=() f best="" best_tags=-1 n
  for arch in amd64 "$(dpkg --print-architecture 2>/dev/null || echo amd64)"; do
    mapfile -t candidates < <(find_lists "$arch" | LC_ALL=C sort)
    [[ ${#candidates[@]} -gt 0 ]] && break
  done
  [[ ${#candidates[@]} -gt 0 ]] || return 1
  # Several (two mirrors, or stable and testing): the one with the most tagged packages.
  for f in "${candidates[@]}"; do
    n=$("$helper" cat-file "$f" | grep -c '^Tag:' || true)
    echo "  candidate $f: $n packages with Tag:" >&2
    if ((n > best_tags)); then best=$f; best_tags=$n; fi
  done
  echo "$best"
}

if [[ $# -eq 2 ]]; then
  packages=$2
  [[ -r $packages ]] || { echo "error: cannot read $packages" >&2; exit 1; }
else
  if ! packages=$(pick_list); then
    if is_root; then
      echo "no Packages lists in $lists; running apt-get update"
      apt-get update -q
      packages=$(pick_list) || {
        echo "error: still no main Packages list in $lists after apt-get update" >&2
        exit 1
      }
    else
      echo "error: no main Packages list in $lists; run 'apt-get update' as root" \
        "(or pass PACKAGES_FILE)" >&2
      exit 1
    fi
  fi
fi
echo "source: $packages"

mkdir -p "$out_dir"
tmp=$(mktemp "${TMPDIR:-/tmp}/debian-packages.XXXXXX")
trap 'rm -f "$tmp"' EXIT
"$helper" cat-file "$packages" >"$tmp"

python3 "$here/debian_data.py" "$out_dir" "$packages" "$tmp"

echo
echo "sha256:"
(cd "$out_dir" && sha256sum train.libffm valid.libffm test.libffm README-data.txt)
echo "done in $(($(date +%s) - start)) s"
