// `colony bench store`: rows/s of get+put through each row store, next to RocksDB's own point
// lookups on the same data, measured in one run.
//
// The data: `rows` rows of `row_floats` floats under scattered keys, written to a fresh
// RocksDB store in `dir` (and into a memory store). The work: batches of `batch_keys` unique
// keys drawn Zipf(`zipf_exponent`) over the rows (a shard's pull then push); each batch loads
// its rows, adds to every float of each row and commits (RowStore's batch protocol). The
// tiered store keeps `cache_fraction` of the rows in memory. The baseline: one DB::Get per key
// of the same batches on the same database, no writes.
//
// Runs each figure for about `seconds_per_figure` (after a warm-up of as long, which for the
// tiered store also fills its cache). The tiered figures put their hit rate next to Belady's
// optimum on the same accesses; the "-ahead" ones hand each batch's keys to the store's
// read-ahead a few batches early; "tiered-lfu-all" has a cache that holds every row, all read in
// before the warm-up, so that it measures the hit path against the memory store's. Fails with
// the store's error (disk full, ...).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace colony {

struct StoreBenchOptions {
  std::string dir;  // the database goes in dir/bench-db (removed first)
  uint64_t rows = 1000000;
  size_t row_floats = 16;
  size_t batch_keys = 1000;
  double zipf_exponent = 1.1;
  double cache_fraction = 0.1;
  size_t block_cache_bytes = size_t{16} << 20;
  double seconds_per_figure = 2.0;
  uint64_t seed = 1;
  std::vector<size_t> lookahead_batches = {1, 4, 16};
  // The "-ahead" tiered figures: before each batch, the keys of the batch this many later go to
  // the store's read-ahead (RowStore::read_ahead), as a reader that knows them would hand them.
  size_t read_ahead_batches = 4;
};

struct StoreBenchFigure {
  // memory, rocksdb, rocksdb-raw-get, tiered-lru, tiered-lfu, tiered-lru-ahead, tiered-lfu-ahead,
  // tiered-lfu-all (the cache holds every row, read in before timing: the hit path alone)
  std::string store;
  double rows_per_sec = 0;  // get+put rows (the raw baseline: gets)
  double hit_rate = 0;      // tiered: rows found in memory, once its cache was full
  uint64_t disk_writes = 0;
  // tiered: the hit rate of Belady's MIN (storage/belady.h), which evicts the row used furthest
  // in the future, replaying the same accesses (every batch the run went through) with as many
  // rows, counted from the same batch.
  double belady_hit_rate = 0;
  // tiered: the same replay by A0, which keeps the rows of the lowest Zipf ranks
  // (most_probable_first, storage/belady.h): the best hit rate a cache that does not know the
  // coming accesses can expect on these keys.
  double a0_hit_rate = 0;
  // tiered: the same replay by a cache that sees the next K batches' keys and otherwise evicts
  // by the figure's policy (lookahead_min), for K in StoreBenchOptions::lookahead_batches: what
  // eviction that knows the reader's window could reach.
  std::vector<std::pair<size_t, double>> lookahead_hit_rates{};
  // tiered-*-ahead: of the rows loaded (after warm-up), those read ahead on the store's thread.
  double read_ahead_share = 0;
};

Expected<std::vector<StoreBenchFigure>> run_store_bench(
    const StoreBenchOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace colony
