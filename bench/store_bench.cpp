#include "bench/store_bench.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include "common/hash.h"
#include "data/zipf.h"
#include "storage/belady.h"
#include "storage/rocksdb_store.h"

namespace colony {

namespace {

using Clock = std::chrono::steady_clock;

// Batches of unique keys, Zipf-skewed over the rows, prepared before timing; `rank_of` gets each
// key's Zipf rank from 0 (the most probable).
std::vector<std::vector<uint64_t>> make_batches(const StoreBenchOptions& o, size_t count,
                                                std::unordered_map<uint64_t, uint64_t>& rank_of) {
  ZipfSampler zipf(o.rows, o.zipf_exponent);
  SplitMix64 rng(o.seed);
  std::vector<std::vector<uint64_t>> batches(count);
  for (auto& keys : batches) {
    std::unordered_set<uint64_t> seen;
    while (keys.size() < o.batch_keys) {
      const uint64_t rank = zipf(rng) - 1;
      const uint64_t key = mix64(rank);  // rank r's row is stored under mix64(r)
      if (seen.insert(key).second) keys.push_back(key);
      rank_of.emplace(key, rank);
    }
  }
  return batches;
}

// Runs `batch(keys)` over the prepared batches for about `seconds` (warm-up of as long
// first); returns rows per second.
template <class F>
Expected<double> timed(const std::vector<std::vector<uint64_t>>& batches, double seconds,
                       F&& batch) {
  size_t next = 0;
  for (int phase = 0; phase < 2; ++phase) {
    uint64_t rows = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      for (int i = 0; i < 4; ++i) {
        const auto& keys = batches[next++ % batches.size()];
        if (Status s = batch(keys); !s.ok()) return s;
        rows += keys.size();
      }
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < seconds);
    if (phase == 1) return double(rows) / elapsed;
  }
  return 0.0;
}

// A shard's push: the batch's rows loaded for writing, each updated, committed.
Status get_and_put(RowStore& store, const std::vector<uint64_t>& keys) {
  thread_local std::vector<std::pair<float*, bool>> rows;
  if (Status s = store.load_for_write(keys, rows); !s.ok()) return s;
  const size_t rf = store.row_floats();
  for (const auto& [r, inserted] : rows)
    for (size_t j = 0; j < rf; ++j) r[j] += 1e-3f;
  return store.commit();
}

}  // namespace

Expected<std::vector<StoreBenchFigure>> run_store_bench(
    const StoreBenchOptions& o, const std::function<void(const std::string&)>& log) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(o.dir) / "bench-db").string();
  std::error_code ec;
  fs::remove_all(path, ec);
  const StoreIdentity id{"colony-bench-store", 0, 1, o.row_floats};
  RocksTableOptions to;
  to.path = path;
  to.block_cache_bytes = o.block_cache_bytes;

  // The data, on disk and in memory.
  log(fmt::format("writing {} rows of {} floats to {}", o.rows, o.row_floats, path));
  MemoryRowStore memory(o.row_floats);
  {
    auto table = RocksTable::open(to, id);
    if (!table) return table.status();
    constexpr size_t chunk = 10000;
    std::vector<uint64_t> keys;
    std::vector<float> rows;
    for (uint64_t first = 0; first < o.rows; first += chunk) {
      keys.clear();
      rows.clear();
      for (uint64_t r = first; r < std::min<uint64_t>(o.rows, first + chunk); ++r) {
        keys.push_back(mix64(r));
        float* m = memory.find_or_insert(mix64(r)).first;
        for (size_t j = 0; j < o.row_floats; ++j)
          rows.push_back(m[j] = float(unit_double(hash_combine(r, j))));
      }
      if (Status s = (*table)->write(keys, rows, keys.size()); !s.ok()) return s;
    }
    if (Status s = (*table)->flush(); !s.ok()) return s;
  }
  // Enough batches that the keys touched are not a small fixed set (4M draws).
  std::unordered_map<uint64_t, uint64_t> rank_of;
  const auto batches = make_batches(o, 4096, rank_of);
  std::vector<StoreBenchFigure> figures;

  log("memory");
  auto mem = timed(batches, o.seconds_per_figure,
                   [&](const auto& keys) { return get_and_put(memory, keys); });
  if (!mem) return mem.status();
  figures.push_back({"memory", *mem, 1.0, 0});

  {
    log("rocksdb: raw point lookups");
    auto table = RocksTable::open(to, id);
    if (!table) return table.status();
    std::vector<float> row(o.row_floats);
    auto raw = timed(batches, o.seconds_per_figure, [&](const auto& keys) -> Status {
      for (uint64_t k : keys) {
        auto found = (*table)->get(k, row.data());
        if (!found) return found.status();
      }
      return {};
    });
    if (!raw) return raw.status();
    figures.push_back({"rocksdb-raw-get", *raw, 0.0, 0});
    log("rocksdb store");
    RocksRowStore store(std::move(table.value()));
    auto r = timed(batches, o.seconds_per_figure,
                   [&](const auto& keys) { return get_and_put(store, keys); });
    if (!r) return r.status();
    figures.push_back({"rocksdb", *r, 0.0, store.stats().writes});
  }
  struct Run {
    EvictionPolicy policy;
    size_t ahead;    // batches read ahead, or 0
    bool every_row;  // the cache holds every row, read in before timing: the hit path alone
  };
  std::vector<Run> runs = {{EvictionPolicy::lru, 0, false}, {EvictionPolicy::lfu, 0, false}};
  if (o.read_ahead_batches > 0)
    for (EvictionPolicy policy : {EvictionPolicy::lru, EvictionPolicy::lfu})
      runs.push_back({policy, o.read_ahead_batches, false});
  runs.push_back({EvictionPolicy::lfu, 0, true});
  for (const Run& run : runs) {
    const EvictionPolicy policy = run.policy;
    const size_t ahead = run.ahead;  // a plain variable: lambdas below capture it
    const std::string name = fmt::format("tiered-{}{}", to_string(policy),
                                         ahead > 0       ? "-ahead"
                                         : run.every_row ? "-all"
                                                         : "");
    log(fmt::format("tiered store, {}{}", to_string(policy),
                    ahead > 0       ? fmt::format(", reading {} batches ahead", ahead)
                    : run.every_row ? ", every row cached"
                                    : ""));
    auto table = RocksTable::open(to, id);
    if (!table) return table.status();
    TieredOptions t;
    t.policy = policy;
    t.seed = o.seed;
    t.read_ahead = ahead > 0;
    // cache_fraction of the rows (or all of them), counting each cached row's overhead as the
    // store does.
    t.cache_bytes = size_t(double(o.rows) * (run.every_row ? 1.0 : o.cache_fraction)) *
                    (o.row_floats * sizeof(float) + 64);
    TieredRowStore store(std::move(table.value()), t);
    if (run.every_row) {
      std::vector<uint64_t> keys;
      for (uint64_t first = 0; first < o.rows; first += o.batch_keys) {
        keys.clear();
        for (uint64_t r = first; r < std::min<uint64_t>(o.rows, first + o.batch_keys); ++r)
          keys.push_back(mix64(r));
        if (Status s = store.load(keys); !s.ok()) return s;
        if (Status s = store.commit(); !s.ok()) return s;
      }
    }
    StoreStats before;
    bool warm = false;
    size_t ran = 0, warm_at = 0;  // batches run; the first one counted
    auto r = timed(batches, o.seconds_per_figure, [&](const auto& keys) {
      if (!warm && store.cached_rows() >= store.capacity_rows()) {
        warm = true;
        warm_at = ran;
        before = store.stats();
      }
      if (ahead > 0) {
        // timed() runs the batches in order from the first: batch `ran` is batches[ran % size].
        if (ran == 0)
          for (size_t b = 0; b < ahead; ++b) store.read_ahead(batches[b % batches.size()]);
        store.read_ahead(batches[(ran + ahead) % batches.size()]);
      }
      ++ran;
      return get_and_put(store, keys);
    });
    if (!r) return r.status();
    const StoreStats after = store.stats();
    const double hits = double(after.cache_hits - before.cache_hits);
    const double misses = double(after.cache_misses - before.cache_misses);
    if (run.every_row) {  // nothing to compare with a cache that cannot miss
      figures.push_back({name, *r, hits / std::max(1.0, hits + misses), after.writes});
      continue;
    }
    // The same accesses (timed() goes through the batches in order from the first) through
    // the best possible cache of as many rows.
    std::vector<uint64_t> trace;
    trace.reserve(ran * o.batch_keys);
    for (size_t b = 0; b < ran; ++b) {
      const auto& keys = batches[b % batches.size()];
      trace.insert(trace.end(), keys.begin(), keys.end());
    }
    const size_t from = warm_at * o.batch_keys;
    StoreBenchFigure f{name, *r, hits / std::max(1.0, hits + misses), after.writes,
                       belady_min(trace, store.capacity_rows(), from).hit_rate()};
    f.a0_hit_rate =
        most_probable_first(
            trace, store.capacity_rows(), [&](uint64_t key) { return rank_of.at(key); }, from)
            .hit_rate();
    f.read_ahead_share =
        double(after.read_ahead_rows - before.read_ahead_rows) / std::max(1.0, hits + misses);
    for (size_t k : o.lookahead_batches)
      f.lookahead_hit_rates.emplace_back(
          k, lookahead_min(trace, store.capacity_rows(), k * o.batch_keys,
                           policy == EvictionPolicy::lru ? Fallback::lru : Fallback::lfu, from)
                 .hit_rate());
    figures.push_back(std::move(f));
  }
  fs::remove_all(path, ec);
  return figures;
}

}  // namespace colony
