// Where a PS shard keeps its rows: the interface the shard core talks to, so that the core
// never does I/O itself. A row is a fixed number of floats (parameters and optimizer state
// together, so they are always stored, moved and checkpointed as one).
//
// Four stores implement it: MemoryRowStore (here), CompactRowStore (storage/compact_store.h:
// rows in memory in 16 or 8 bits), and RocksRowStore and TieredRowStore
// (storage/rocksdb_store.h); open_shard_store (storage/store_spec.h) picks one from flags.
//
// The batch protocol. A store that does I/O cannot hand out pointers that stay valid for
// ever, so a caller that uses rows works in batches:
//   1. load(keys): the store reads the rows of `keys` it does not hold in memory, in one go;
//   2. find / find_or_insert for those keys (others work too, one read each): pointers stay
//      valid until commit();
//   3. commit(): every row handed out by find_or_insert since the last commit, as the caller
//      left it, is written back in one atomic batch; then the pointers are invalid.
// find() hands out a row for reading: writes through it are not kept unless stable_rows().
// The memory store does nothing in load() and commit() and its pointers stay valid until it
// is destroyed (stable_rows()), so a caller may skip the protocol there and reuse pointers.
//
// Errors: find / find_or_insert cannot return one; a store whose read fails records the
// first failure (error()), hands out a scratch row, and fails the next commit() with it.
//
// Thread-safety: none; one shard owns a store.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "storage/rocks_table.h"
#include "storage/row_table.h"

namespace colony {

// Counters a store keeps about itself (monotonic, since it was opened).
struct StoreStats {
  uint64_t rows = 0;                  // rows stored
  uint64_t memory_bytes = 0;          // bytes of rows (and index) held in memory
  uint64_t reads = 0;                 // rows read from disk
  uint64_t writes = 0;                // rows written to disk
  uint64_t write_batches = 0;         // atomic batches written
  uint64_t cache_hits = 0;            // tiered: rows found in memory
  uint64_t cache_misses = 0;          // tiered: rows read from disk (or created)
  uint64_t evictions = 0;             // tiered: rows dropped from memory
  uint64_t evicted_dirty = 0;         // tiered: of those, rows written back first
  uint64_t log_records_replayed = 0;  // tiered: push log records replayed when it opened
  uint64_t log_bytes_dropped = 0;     // tiered: a torn tail of the push log, cut off then
  uint64_t read_ahead_rows = 0;       // tiered: rows read ahead of their load (read_ahead)
};

class RowStore {
 public:
  virtual ~RowStore() = default;
  // The row stored under `key` (for reading), or nullptr.
  virtual float* find(uint64_t key) = 0;
  // The row under `key`, inserting a zero-filled one when there is none; `.second` says
  // whether it was inserted (the caller initialises it). Written back at commit().
  virtual std::pair<float*, bool> find_or_insert(uint64_t key) = 0;
  // A hint that `key` will be looked up soon.
  virtual void prefetch(uint64_t key) const = 0;
  // True when a row pointer stays valid until the store is destroyed and writes through any
  // pointer are kept (the memory store). Otherwise see the batch protocol above.
  virtual bool stable_rows() const = 0;
  virtual size_t size() const = 0;
  virtual size_t row_floats() const = 0;
  // Bytes a row takes in the store (less than row_floats() floats in a compact store).
  virtual size_t row_bytes() const { return row_floats() * sizeof(float); }
  virtual size_t memory_bytes() const = 0;
  // Calls f(key, row) for every row, in no particular order. Fails (io_error, naming the
  // store) when a store on disk cannot be read; f may have seen some rows by then.
  [[nodiscard]] virtual Status for_each(
      const std::function<void(uint64_t, const float*)>& f) const = 0;

  // Removes the rows of `keys` (keys without a row are skipped); pointers handed out before
  // must not be used after. Outside a batch (between commit and load). Fails with io_error.
  virtual Status erase(std::span<const uint64_t> keys) = 0;

  // A hint, outside a batch, that a coming batch will load `keys` (any order, repeats allowed):
  // a store on disk may start reading them now, off the caller's thread, so that its load()
  // finds them in memory. Nothing else changes: rows read ahead are the rows on disk. The
  // stores in memory ignore it.
  virtual void read_ahead(std::span<const uint64_t> keys) { (void)keys; }
  // Step 1 of the batch protocol: reads the rows of `keys` (any order, repeats allowed).
  // Fails with io_error (naming the store's path) when the disk read fails.
  virtual Status load(std::span<const uint64_t> keys) {
    (void)keys;
    return {};
  }
  // Steps 1 and 2 at once for a batch that writes the rows of `keys`: load(keys), then
  // rows[i] = find_or_insert(keys[i]) for each key in order (a repeated key's later entries are
  // not inserted). A store may do it in one pass. Fails as load() does; `rows` is then
  // unspecified, and rows found may already count as handed out for writing (the next commit()
  // fails with the same error all the same).
  virtual Status load_for_write(std::span<const uint64_t> keys,
                                std::vector<std::pair<float*, bool>>& rows) {
    if (Status s = load(keys); !s.ok()) return s;
    constexpr size_t ahead = 8;
    rows.resize(keys.size());
    for (size_t i = 0; i < std::min(keys.size(), ahead); ++i) prefetch(keys[i]);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i + ahead < keys.size()) prefetch(keys[i + ahead]);
      rows[i] = find_or_insert(keys[i]);
    }
    return {};
  }
  // Step 3: writes back the rows handed out by find_or_insert, atomically. Fails with the
  // first read error since the last commit, or with io_error when the write fails (then
  // none of the batch is written).
  virtual Status commit() { return {}; }
  // Exactly-once pushes across a restart (ps/shard_core.h). A store that commits every batch to
  // disk (RocksDB; tiered with a push log) writes `clock` as `sender`'s last push with the next
  // commit's rows, in the same atomic batch or log record, and committed_clocks() gives back what
  // it holds (also after reopening). The memory store keeps nothing: committed_clocks() is empty.
  // A tiered store without a push log gives the clocks of its last write-back, which its rows on
  // disk hold at least.
  virtual void stage_clock(uint64_t sender, uint32_t clock) {
    (void)sender;
    (void)clock;
  }
  virtual std::map<uint64_t, uint32_t> committed_clocks() const { return {}; }
  // Forgets every committed clock: a new job over the rows of an earlier one (its senders start
  // again from clock 0, and an earlier job's clocks would make a restarted shard take their
  // pushes for duplicates). Between batches. Fails with io_error.
  virtual Status clear_clocks() { return {}; }
  // Writes the rows held only in memory (a tiered store's dirty cached rows) to disk, without
  // flush()'s other work; between batches. Fails with io_error when the write fails.
  virtual Status write_back() { return {}; }
  // Makes everything committed durable against a crash of the process (a store with a
  // write-ahead log already is) and flushes rows held only in memory (tiered) to disk.
  virtual Status flush() { return {}; }
  // Calls f(key, row) for every row with begin <= key < end, in increasing key order (for
  // migration and export). Stops at, and returns, the first read error.
  virtual Status for_each_in_range(uint64_t begin, uint64_t end,
                                   const std::function<void(uint64_t, const float*)>& f) const;
  // Writes a consistent copy of every committed row to a new RocksDB store in `dir` (which
  // must not exist yet): RocksDB's Checkpoint (hard links to the table files) for the RocksDB
  // and tiered stores (tiered writes its dirty rows first), a fresh database written under
  // `identity` for the memory store. Fails with io_error naming `dir` (it exists, disk full).
  virtual Status checkpoint(const std::string& dir, const StoreIdentity& identity);
  virtual StoreStats stats() const {
    StoreStats s;
    s.rows = size();
    s.memory_bytes = memory_bytes();
    return s;
  }
};

// Rows in memory: a RowTable (open addressing, rows in a chunked arena, stable pointers).
class MemoryRowStore final : public RowStore {
 public:
  explicit MemoryRowStore(size_t row_floats) : table_(row_floats) {}
  float* find(uint64_t key) override { return table_.find(key); }
  std::pair<float*, bool> find_or_insert(uint64_t key) override {
    return table_.find_or_insert(key);
  }
  void prefetch(uint64_t key) const override { table_.prefetch(key); }
  bool stable_rows() const override { return true; }
  size_t size() const override { return table_.size(); }
  size_t row_floats() const override { return table_.row_floats(); }
  size_t memory_bytes() const override { return table_.memory_bytes(); }
  Status for_each(const std::function<void(uint64_t, const float*)>& f) const override {
    table_.for_each(f);
    return {};
  }
  Status erase(std::span<const uint64_t> keys) override {
    for (uint64_t k : keys) table_.erase(k);
    return {};
  }

 private:
  RowTable table_;
};

}  // namespace colony
