#!/usr/bin/env bash
# Compares BLAS libraries on the sgemm shapes of an MLP training step (bench/blas_compare.cpp):
# OpenBLAS (cblas), BLIS (its cblas interface) and Eigen (header-only, -O3 -march=native),
# each at 1 and 2 threads. Prints GFLOP/s, higher is better; the library Colony links
# (models/CMakeLists.txt) is the one fastest on the MLP rows.
#
# Needs (Debian 12): libopenblas-dev libblis-dev libeigen3-dev pkg-config; a library that is
# missing is skipped with a message. Standalone: it builds into a temporary folder and touches
# nothing else. Numbers on a shared machine are noisy: each is the best of several batches.
#
# Usage: scripts/compare-blas.sh [THREADS...]   (default: 1 2)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=("$@")
[ ${#threads[@]} -eq 0 ] && threads=(1 2)

src=bench/blas_compare.cpp
out=$(mktemp -d /tmp/colony-blas.XXXXXX)
trap 'rm -rf "$out"' EXIT
cxx=(g++ -std=c++20 -O3 -march=native -Wall -Wextra)

# True when g++ finds the header (in the default include path or under the given -I).
has_header() {
  local header=$1
  shift
  echo "#include <$header>" | g++ -std=c++20 -fsyntax-only -x c++ "$@" - 2>/dev/null
}

libs=()
if pkg-config --exists openblas 2>/dev/null; then
  "${cxx[@]}" -DCOLONY_BLAS_OPENBLAS $(pkg-config --cflags openblas) "$src" -o "$out/openblas" \
    $(pkg-config --libs openblas)
  libs+=(openblas)
else
  echo "compare-blas: skipping OpenBLAS (apt-get install libopenblas-dev pkg-config)" >&2
fi
if has_header blis.h; then
  "${cxx[@]}" -DCOLONY_BLAS_BLIS "$src" -o "$out/blis" -lblis -fopenmp
  libs+=(blis)
else
  echo "compare-blas: skipping BLIS (apt-get install libblis-dev)" >&2
fi
if has_header Eigen/Core -isystem /usr/include/eigen3; then
  "${cxx[@]}" -DCOLONY_BLAS_EIGEN -isystem /usr/include/eigen3 -fopenmp "$src" -o "$out/eigen"
  libs+=(eigen)
else
  echo "compare-blas: skipping Eigen (apt-get install libeigen3-dev)" >&2
fi
[ ${#libs[@]} -eq 0 ] && { echo "compare-blas: no BLAS library found" >&2; exit 1; }

echo "compare-blas: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for t in "${threads[@]}"; do
  for lib in "${libs[@]}"; do
    echo "compare-blas: $lib, $t thread(s)" >&2
    OPENBLAS_NUM_THREADS=$t BLIS_NUM_THREADS=$t OMP_NUM_THREADS=$t "$out/$lib" "$t" >>"$out/results"
  done
done

# One row per (n, shape, gemm), one column per (threads, library).
awk -v libs="${libs[*]}" -v threads="${threads[*]}" '
  { v[$1 " " $2 " " $3 " " $4 " " $5] = $6
    key = $3 " " $4 " " $5
    if (!(key in seen)) { seen[key] = 1; order[++rows] = key } }
  END {
    nl = split(libs, L, " "); nt = split(threads, T, " ")
    printf "%-6s %-18s %-5s", "n", "shape", "gemm"
    for (t = 1; t <= nt; t++) for (l = 1; l <= nl; l++) printf " %12s", L[l] "/" T[t] "t"
    printf "\n"
    for (r = 1; r <= rows; r++) {
      split(order[r], k, " ")
      printf "%-6s %-18s %-5s", k[1], k[2], k[3]
      for (t = 1; t <= nt; t++) for (l = 1; l <= nl; l++) {
        x = L[l] " " T[t] " " order[r]
        printf " %12s", (x in v) ? v[x] : "-"
      }
      printf "\n"
    }
    print "GFLOP/s, best of 7 batches; step = fwd + dw + dx of one layer (total flops / total time)"
  }' "$out/results"
