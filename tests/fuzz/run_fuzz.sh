#!/usr/bin/env bash
# Builds a fuzz target with clang's libFuzzer (ASan + UBSan) and runs it for a bounded time over
# its regression corpus. Exits 77 (ctest: skipped), saying why, where clang or libFuzzer is
# missing.
#   decode_fuzz  the wire decoders (tests/fuzz/corpus); needs BUILD_DIR's generated wire.capnp.c++
#   core_fuzz    the sans-I/O cores fed decoded messages (tests/fuzz/core_corpus); needs no build
# Usage: run_fuzz.sh SOURCE_DIR BUILD_DIR SECONDS [TARGET]   (TARGET defaults to decode_fuzz)
set -euo pipefail
src=$1 build=$2 seconds=$3 target=${4:-decode_fuzz}
case "$target" in
  decode_fuzz) corpus=$src/tests/fuzz/corpus ;;
  core_fuzz) corpus=$src/tests/fuzz/core_corpus ;;
  *) echo "unknown fuzz target $target (decode_fuzz or core_fuzz)"; exit 2 ;;
esac
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then echo "skipped: clang++ not found (apt-get install clang libclang-rt-14-dev)"; exit 77; fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
  echo "skipped: $cxx cannot link libFuzzer (apt-get install libclang-rt-14-dev)"; exit 77
fi
out=$build/fuzz
work=$out/$target-work
mkdir -p "$work"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$src" -I"$build")
case "$target" in
  decode_fuzz)
    "$cxx" "${flags[@]}" \
      "$src/tests/fuzz/decode_fuzz.cpp" "$src/actors/envelope.cpp" "$build/actors/wire.capnp.c++" \
      "$src/common/status.cpp" -lcapnp -lkj -lfmt -o "$out/$target"
    ;;
  core_fuzz)
    # Every store's vtable names RowStore::checkpoint, which writes through RocksDB: the memory
    # store the fuzzer uses links RocksDB without calling it.
    "$cxx" "${flags[@]}" \
      "$src/tests/fuzz/core_fuzz.cpp" "$src"/ps/*.cpp "$src/worker/kv_client.cpp" \
      "$src/storage/row_table.cpp" "$src/storage/row_codec.cpp" "$src/storage/row_store.cpp" \
      "$src/storage/rocks_table.cpp" \
      "$src/common/status.cpp" "$src/common/value_format.cpp" -lrocksdb -lfmt -o "$out/$target"
    ;;
esac
# New inputs go to a scratch corpus; the committed one holds seeds and past crashers.
cp "$corpus"/* "$work/" 2>/dev/null || true
"$out/$target" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=1024 -timeout=10 \
  -artifact_prefix="$out/$target-" "$work"
