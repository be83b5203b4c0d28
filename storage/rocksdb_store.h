// Row stores over a RocksTable (storage/rocks_table.h): every row on disk (RocksRowStore), or
// hot rows in memory within a byte budget over the rows on disk (TieredRowStore).
//
// Both follow RowStore's batch protocol (storage/row_store.h): load(keys) reads the missing
// rows in one MultiGet, find/find_or_insert hand out pointers valid until commit(). The rows a
// batch uses, and the tiered store's cached rows, are in fp32 whatever parts the table keeps rows
// in on disk (RocksTableOptions::parts): a row is rounded to them as it is written to the table.
//
// RocksRowStore writes every row handed out by find_or_insert at commit(), in one WriteBatch
// through the write-ahead log: an acknowledged update survives a crash of the process.
//
// TieredRowStore keeps up to `cache_bytes` of rows in memory and writes a row to disk only when it
// is evicted, when enough updates call for a write-back of every dirty row
// (TieredOptions::write_back_ratio), on write_back() or on flush(): commit() does the first two,
// evicting down to the budget. Without a push log a crash loses the updates of rows still dirty in
// memory since the last write_back(); with one (attach_log, storage/push_log.h) commit() first
// appends the rows it hands back and the staged clocks to the log, so a crash of the process loses
// nothing committed: reopening replays the log. write_back() empties the log once its rows are in
// the table. Eviction samples a few cached rows and drops the one the policy values least: `lru`
// (least recently used) or `lfu` (least frequently used). `lfu` counts the batches that used each
// key, cached or not, in a FrequencySketch (storage/frequency_sketch.h) whose counts are halved as
// they age, so that a returning hot row keeps its history and yesterday's hot rows can leave; and
// it admits (W-TinyLFU): new rows wait in a window of a tenth of the cache, so that a row pulled is
// still there for its push; past the window, a row stays only if its key was used at least as often
// as the victim sampled among the others, which is evicted in its place. docs/benchmarks.md
// ("Admission by frequency") has the measurements that chose the default.
//
// Thread-safety: none; one shard owns a store.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "storage/frequency_sketch.h"
#include "storage/key_index.h"
#include "storage/push_log.h"
#include "storage/rocks_table.h"
#include "storage/row_store.h"

namespace colony {

// Rows held for the current batch, in fixed chunks so that pointers stay put while it grows.
class RowArena {
 public:
  explicit RowArena(size_t row_floats) : row_floats_(row_floats) {}
  // Row `id`, allocating chunks up to it.
  float* row(uint32_t id) {
    if ((id >> chunk_log2) >= chunks_.size()) [[unlikely]]
      grow(id);
    return chunks_[id >> chunk_log2].get() + (id & ((1u << chunk_log2) - 1)) * row_floats_;
  }
  size_t bytes() const {
    return chunks_.size() * (size_t{1} << chunk_log2) * row_floats_ * sizeof(float);
  }

 private:
  static constexpr uint32_t chunk_log2 = 10;
  // Allocates chunks up to row `id`'s: out of line, so that row(), called for every key a
  // tiered store looks up, is inlined there.
  void grow(uint32_t id);
  size_t row_floats_;
  std::vector<std::unique_ptr<float[]>> chunks_;
};

class RocksRowStore final : public RowStore {
 public:
  explicit RocksRowStore(std::unique_ptr<RocksTable> table);

  float* find(uint64_t key) override;
  std::pair<float*, bool> find_or_insert(uint64_t key) override;
  void prefetch(uint64_t) const override {}
  bool stable_rows() const override { return false; }
  size_t size() const override { return table_->rows() + created_; }
  size_t row_floats() const override { return table_->row_floats(); }
  size_t row_bytes() const override { return table_->row_bytes(); }  // on disk
  // The rows handed out for the current batch, and the most RocksDB's buffers take
  // (RocksTable::buffer_bytes): 192 MiB a shard with the default block cache.
  size_t memory_bytes() const override { return arena_.bytes() + table_->buffer_bytes(); }
  // Committed rows only.
  Status for_each(const std::function<void(uint64_t, const float*)>& f) const override;
  Status erase(std::span<const uint64_t> keys) override;
  Status load(std::span<const uint64_t> keys) override;
  Status commit() override;
  void stage_clock(uint64_t sender, uint32_t clock) override {
    staged_clocks_.emplace_back(sender, clock);
  }
  std::map<uint64_t, uint32_t> committed_clocks() const override { return table_->sender_clocks(); }
  Status clear_clocks() override { return table_->clear_clocks(); }
  Status flush() override { return table_->flush(); }
  // RocksDB's Checkpoint of the table (its own identity; `identity` is not used).
  Status checkpoint(const std::string& dir, const StoreIdentity&) override {
    return table_->checkpoint(dir);
  }
  Status for_each_in_range(uint64_t begin, uint64_t end,
                           const std::function<void(uint64_t, const float*)>& f) const override {
    return table_->for_each_in_range(begin, end, f);
  }
  StoreStats stats() const override;
  RocksTable& table() { return *table_; }

 private:
  struct Staged {
    uint64_t key;
    bool on_disk;  // the row exists in the table (otherwise it is absent or new)
    bool dirty;    // handed out by find_or_insert: written at commit
    bool exists;   // on disk or created in this batch
  };
  // The staged entry of `key`, reading it from the table when it is not staged yet.
  Staged* stage(uint64_t key, uint32_t& id);

  std::unique_ptr<RocksTable> table_;
  RowArena arena_;
  std::unordered_map<uint64_t, uint32_t> index_;  // key -> staged id
  std::vector<Staged> staged_;
  uint64_t created_ = 0;  // rows created in this batch
  Status error_;
  std::vector<std::pair<uint64_t, uint32_t>> staged_clocks_;
  StoreStats stats_;
  std::vector<uint64_t> keys_buf_;
  std::vector<float> rows_buf_;
  std::vector<uint8_t> found_buf_;
};

// How many load()s a hint of TieredRowStore::read_ahead keeps its keys awaited (spared by
// eviction) when no load() of them comes: far more than the batches a reader hints ahead.
inline constexpr uint64_t awaited_expiry_batches = 256;

enum class EvictionPolicy { lru, lfu };
Expected<EvictionPolicy> parse_eviction_policy(const std::string& text);
const char* to_string(EvictionPolicy policy);

struct TieredOptions {
  size_t cache_bytes = size_t{256}
                       << 20;  // rows kept in memory, counting row bytes and per-row overhead
  EvictionPolicy policy = EvictionPolicy::lfu;
  uint64_t seed = 1;  // for sampling eviction candidates
  // When commit() writes every dirty row back on its own (and empties the push log, if any):
  // once the rows updated since the last write-back, counted as the bytes their images take in
  // the push log (the log's size; without a log, what it would be), pass `log_bytes_max`, and
  // are at least `write_back_ratio` times the dirty rows a write-back would write. The first
  // bounds what a crash loses without a log, and the log's length and replay time with one;
  // the second keeps each row written back worth that many updates, whatever the cache's
  // size (a write-back of every dirty row every few steps took 29% of a tiered colony train's
  // CPU: docs/benchmarks.md). The log then holds at most about
  // max(log_bytes_max, write_back_ratio x cache_bytes).
  uint64_t log_bytes_max = uint64_t{64} << 20;
  uint32_t write_back_ratio = 8;
  // read_ahead() reads ahead (--read-ahead of colony train and colony ps); false: it is ignored.
  // Off by default: on the machine measured it gained no end-to-end throughput
  // (docs/benchmarks.md).
  bool read_ahead = false;
};

class TieredRowStore final : public RowStore {
 public:
  TieredRowStore(std::unique_ptr<RocksTable> table, const TieredOptions& options);
  // Stops the read-ahead thread (waiting for the read it is doing) before the table closes.
  ~TieredRowStore() override;

  float* find(uint64_t key) override;
  std::pair<float*, bool> find_or_insert(uint64_t key) override;
  // Starts loading `key`'s slot of the cache index into the CPU cache.
  void prefetch(uint64_t key) const override;
  bool stable_rows() const override { return false; }
  size_t size() const override { return table_->rows() + cache_only_; }
  size_t row_floats() const override { return table_->row_floats(); }
  size_t row_bytes() const override { return table_->row_bytes(); }  // on disk
  // The cached rows with their overhead, and the most RocksDB's buffers take
  // (RocksTable::buffer_bytes).
  size_t memory_bytes() const override;
  Status for_each(const std::function<void(uint64_t, const float*)>& f) const override;
  Status erase(std::span<const uint64_t> keys) override;
  // Read-ahead: the keys neither cached nor already being read are handed, as one MultiGet, to
  // the store's I/O thread (started by the first call); the next load() installs the rows read
  // so far in the cache, and a load() of a key still being read waits for it rather than reading
  // it again. Until a load() of theirs, and for at most awaited_expiry_batches load()s, the
  // hinted keys' cached rows are spared by eviction (what the window knows of the future; at most
  // half the cache's rows: a hint beyond that is ignored). A failed read ahead is dropped: the load
  // that needs the rows reads them itself and fails there. stats().read_ahead_rows counts the rows
  // installed.
  void read_ahead(std::span<const uint64_t> keys) override;
  Status load(std::span<const uint64_t> keys) override;
  // load() and find_or_insert in one pass over the keys: a cached row is looked up and touched
  // once. A failed read leaves the rows found cached marked dirty (unchanged) and fails the next
  // commit(), as a failed load() does.
  Status load_for_write(std::span<const uint64_t> keys,
                        std::vector<std::pair<float*, bool>>& rows) override;
  // With a push log, appends the rows handed out for writing (find_or_insert, load_for_write)
  // since the last commit and the
  // staged clocks to it; writes back when the updates since the last write-back call for it
  // (TieredOptions::log_bytes_max, write_back_ratio); then evicts down to the budget, writing
  // dirty victims back in one batch. A commit that fails before its batch is committed (a
  // read of the batch or the log's append failed) leaves that batch's rows changed in the
  // cache: from then on the store writes nothing back (write_back, flush and checkpoint fail,
  // naming the first failure), so that its table and push log keep the last committed batch.
  Status commit() override;
  // Writes every dirty cached row to the table (write_back) and flushes it.
  Status flush() override;
  // Writes every dirty cached row and every sender's clock to the table in one batch, then
  // empties the push log.
  Status write_back() override;
  void stage_clock(uint64_t sender, uint32_t clock) override {
    staged_clocks_.emplace_back(sender, clock);
  }
  // With a push log: every committed clock (all of them are in the log or the table). Without:
  // the clocks of the last write_back(), which the rows on disk hold at least (rows evicted
  // since hold later pushes too).
  std::map<uint64_t, uint32_t> committed_clocks() const override {
    return log_ ? clocks_ : table_->sender_clocks();
  }
  // Writes back first (the push log holds clocks too), then forgets them.
  Status clear_clocks() override;
  // Replays `log` (rows as they were after each logged push, erasures, clocks), writes
  // everything back to the table, empties the log and keeps appending to it from now on; or,
  // with `keep` false, deletes it after the replay (a store opened without a log over a folder
  // that has one). Call once, right after construction. Fails with the log's or the table's
  // error; the log is then kept as it was. stats() counts the records replayed and the bytes of
  // a torn tail cut off.
  Status attach_log(std::unique_ptr<PushLog> log, bool keep);
  // flush(), then RocksDB's Checkpoint of the table (`identity` is not used).
  Status checkpoint(const std::string& dir, const StoreIdentity&) override {
    if (Status s = flush(); !s.ok()) return s;
    return table_->checkpoint(dir);
  }
  Status for_each_in_range(uint64_t begin, uint64_t end,
                           const std::function<void(uint64_t, const float*)>& f) const override;
  StoreStats stats() const override;
  // The most rows the budget holds (at least one).
  size_t capacity_rows() const { return capacity_; }
  size_t cached_rows() const { return index_.size(); }
  RocksTable& table() { return *table_; }

 private:
  struct Slot {
    uint64_t key = 0;
    uint64_t last_used = 0;  // the number of the last batch that used it; 0 until one does
    uint32_t freq = 0;
    bool used = false;
    bool dirty = false;
    bool on_disk = false;
    bool fresh = false;  // lfu: in the window, not yet weighed for admission
  };
  struct Reader;  // the read-ahead I/O thread (rocksdb_store.cpp)
  float* touch(uint32_t id, bool write);
  // touch(id, true), and counts the row as handed out for writing in this batch.
  float* written(uint64_t key, uint32_t id);
  // load(), and with `write` also find_or_insert's bookkeeping for every key found cached (whose
  // slot ids_buf_ then holds).
  Status load_batch(std::span<const uint64_t> keys, bool write);
  uint32_t insert(uint64_t key, const float* row, bool on_disk);
  // Installs the reads ahead done so far; with `all`, waits for every one handed out first.
  void take_read_ahead(bool all);
  // Forgets the hints older than awaited_expiry_batches (see awaited_).
  void expire_hints();
  bool spared(uint64_t key) const { return !awaited_.empty() && awaited_.count(key) > 0; }
  // The cached row, neither fresh nor awaited, that the policy values least among a few sampled.
  // If sampling finds none: with `scan`, the first such row, else any cached row that is not
  // fresh (every one is awaited); without `scan`, UINT32_MAX.
  uint32_t pick_victim(bool scan);
  // lfu: takes the oldest fresh row out of the window. With `weigh`, returns the row to evict: it,
  // or the victim it is weighed against if its key was used at least as often. UINT32_MAX when
  // the row stays: without `weigh`, awaited by a read-ahead, or if there was no fresh row left.
  uint32_t weigh_oldest_fresh(bool weigh);
  Status evict_to(size_t rows);

  std::unique_ptr<RocksTable> table_;
  TieredOptions options_;
  size_t capacity_;
  RowArena arena_;
  KeyIndex index_;                           // key -> slot
  std::unique_ptr<FrequencySketch> sketch_;  // lfu only: every key's recent uses, cached or not
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  std::deque<std::pair<uint32_t, uint64_t>> window_;  // lfu: fresh (slot, key), oldest first
  size_t fresh_ = 0;                                  // fresh rows cached
  std::unordered_set<uint64_t> absent_;               // loaded in this batch and not on disk
  uint64_t batch_ = 0;
  uint64_t cache_only_ = 0;  // cached rows not on disk yet
  uint64_t dirty_ = 0;       // cached rows changed since they were last written
  uint64_t updated_ = 0;     // rows handed out by find_or_insert since the last write-back
  uint64_t rng_;
  // Sets uncommitted_ (once), from `failed`, which it returns.
  Status refuse_write_backs(const Status& failed);
  Status error_;
  Status uncommitted_;  // set for good by a commit that failed before its batch was committed
  StoreStats stats_;
  std::unique_ptr<PushLog> log_;
  // (key, slot) of the rows handed out for writing in this batch (a key may repeat)
  std::vector<std::pair<uint64_t, uint32_t>> written_;
  std::vector<std::pair<uint64_t, uint32_t>> staged_clocks_;
  std::map<uint64_t, uint32_t> clocks_;  // every sender's last committed clock
  std::vector<uint64_t> keys_buf_;
  std::vector<uint64_t> ids_buf_;  // load_batch(): each key's slot if cached, or KeyIndex::missing
  std::vector<float> rows_buf_;
  std::vector<uint8_t> found_buf_;
  // Read-ahead. A key is in reading_ from its hint until its read is installed (it is then not
  // cached, so nothing writes it to disk meanwhile); in known_absent_ once its read found no row
  // and until a load() takes that; in awaited_ (with the batch of its latest hint) until a load()
  // of it, or until awaited_expiry_batches batches after that hint (a hint no load follows: a
  // node aggregator's pull of keys two replicas hinted, a worker that stopped, or a lie); then it
  // also leaves known_absent_.
  std::unordered_set<uint64_t> reading_;
  std::unordered_set<uint64_t> known_absent_;
  std::unordered_map<uint64_t, uint64_t> awaited_;
  uint64_t next_expiry_ = 0;  // the batch at which awaited_ is next swept
  std::vector<uint64_t> hint_buf_;
  std::unique_ptr<Reader> reader_;  // after table_: destroyed (joined) before it
};

}  // namespace colony
