#!/usr/bin/env bash
# Builds the wire-decoder fuzz target with clang's libFuzzer (ASan + UBSan) and runs it for a
# bounded time over the regression corpus in tests/fuzz/corpus. Exits 77 (ctest: skipped),
# saying why, where clang or libFuzzer is missing.
# Usage: run_fuzz.sh SOURCE_DIR BUILD_DIR SECONDS
set -euo pipefail
src=$1 build=$2 seconds=$3
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then echo "skipped: clang++ not found (apt-get install clang libclang-rt-14-dev)"; exit 77; fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
  echo "skipped: $cxx cannot link libFuzzer (apt-get install libclang-rt-14-dev)"; exit 77
fi
out=$build/fuzz
mkdir -p "$out/work"
"$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src" -I"$build" \
  "$src/tests/fuzz/decode_fuzz.cpp" "$src/actors/envelope.cpp" "$build/actors/wire.capnp.c++" \
  "$src/common/status.cpp" -lcapnp -lkj -lfmt -o "$out/decode_fuzz"
# New inputs go to a scratch corpus; the committed one holds seeds and past crashers.
cp "$src"/tests/fuzz/corpus/* "$out/work/" 2>/dev/null || true
"$out/decode_fuzz" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=1024 -timeout=10 \
  -artifact_prefix="$out/" "$out/work"
