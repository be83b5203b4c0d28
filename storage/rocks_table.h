// One shard's rows on disk: a RocksDB database in its own folder, the rows in a column family
// of their own, keyed by the row key as 8 big-endian bytes (so key ranges iterate in key
// order), each value the row's floats (parameters and optimizer state together): in fp32, or
// encoded part by part in fewer bytes (RocksTableOptions::parts, storage/row_codec.h; a job's
// --row-format and --state-format), rounded stochastically as each row is written.
//
// The default column family holds the store's identity (which cluster wrote it, which shard
// of how many, the row size, the row parts when not fp32) and its row count. Opening a store
// written by another cluster, for another shard, with another row size or in other row parts is
// refused, naming the path: training must never silently continue on someone else's rows, nor
// silently start from scratch.
//
// Tuned for point lookups of small rows: a bloom filter (10 bits a key) and a hash index in
// every data block, a block cache of `block_cache_bytes`, memtables of `write_buffer_bytes`, no
// compression (floats barely compress). Writes go through the write-ahead log (a crash of the
// process loses nothing acknowledged; `sync_writes` also survives a crash of the machine) unless
// `write_ahead_log` is off (`--durability none`: what the memtables hold is lost in a crash). A
// bulk write of many rows (write(), from 65,536 rows on) goes in as table files instead, synced and
// ingested atomically with its row count and clocks: it survives any crash once write() returns.
//
// Errors: RocksDB's statuses become ours (io_error; invalid_input for a refused identity or a
// malformed row), each naming the path and, where there is one, the key.
//
// Thread-safety: one shard (one store over it) owns a table. multi_get alone may also run on
// another thread, concurrently with any call but the destructor (the tiered store's read-ahead).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "storage/row_codec.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Slice;
}  // namespace rocksdb

namespace colony {

// Who owns a store: checked on every open.
struct StoreIdentity {
  std::string cluster_id;  // a cluster id or a job fingerprint; not empty
  uint32_t shard_index = 0;
  uint32_t shards = 1;
  size_t row_floats = 0;  // > 0
};

// RocksDB's own default memtable size, and the block cache a table gets unless told otherwise.
inline constexpr size_t rocksdb_default_buffer_bytes = size_t{64} << 20;

struct RocksTableOptions {
  std::string path;  // the database folder (created with parents)
  size_t block_cache_bytes = rocksdb_default_buffer_bytes;
  // The size at which a memtable is flushed to a table file. RocksDB holds up to two per column
  // family: one filling, one being flushed.
  size_t write_buffer_bytes = rocksdb_default_buffer_bytes;
  bool create_if_missing = true;  // false: a missing database is not_found
  bool sync_writes = false;
  bool write_ahead_log = true;  // false: writes reach the disk only when the memtables flush
  // `--resume`: a store another job wrote, with the same shard, shard count and row size (and the
  // same `optimizer=` in the identity, when both name one), is continued and becomes this job's
  // (its identity is rewritten) instead of being refused.
  bool adopt = false;
  // The parts each row is kept in (their floats adding up to the identity's row_floats); empty:
  // every float in fp32. Opening a store created in other parts is refused, even with adopt.
  std::vector<RowPart> parts{};
  // How RocksDB merges its table files. leveled: reads touch the fewest files (a store read on
  // every pull). universal: each row is rewritten fewer times as files merge, for a store that
  // mostly takes writes (the tiered store's write-backs and evictions); reads may look in more
  // files, each behind its Bloom filter. A store written in one style opens in the other.
  enum class Compaction { leveled, universal };
  Compaction compaction = Compaction::leveled;
};

class RocksTable {
 public:
  // Opens (or creates) the database at options.path for `identity`. Fails with
  // invalid_input when it was written by another cluster, shard, shard count, row size or in
  // other row parts (the message names the path and both identities; with options.adopt only
  // another shard, shard count, row size, row parts or optimizer is refused), or when
  // options.parts do not add up to identity.row_floats; not_found when it is missing and
  // !create_if_missing, io_error when RocksDB cannot open it (corruption, permissions, a
  // lock held by another process).
  static Expected<std::unique_ptr<RocksTable>> open(const RocksTableOptions& options,
                                                    const StoreIdentity& identity);
  // Opens an existing database read-only whatever its identity, in the row parts it records
  // (tools: export, verify; restoring a checkpoint).
  static Expected<std::unique_ptr<RocksTable>> open_read_only(const std::string& path);
  ~RocksTable();

  const std::string& path() const { return options_.path; }
  // The most memory the block cache and the rows' memtables take (two memtables and the cache;
  // filters, index blocks and the nearly empty memtables of the identity's family aside).
  size_t buffer_bytes() const {
    return 2 * options_.write_buffer_bytes + options_.block_cache_bytes;
  }
  const StoreIdentity& identity() const { return identity_; }
  // The cluster id (job) that wrote the store before options.adopt took it over; empty if none.
  const std::string& adopted_from() const { return adopted_from_; }
  size_t row_floats() const { return identity_.row_floats; }
  uint64_t rows() const { return rows_; }
  // The parts rows are kept in; empty: fp32.
  const std::vector<RowPart>& row_parts() const { return parts_; }
  // Bytes a row's value takes.
  size_t row_bytes() const { return value_bytes_; }

  // Reads the rows of `keys` into out[i * row_floats ...] (decoded) and sets found[i] (out and
  // found are resized). Fails with io_error, or invalid_input for a stored value of the wrong size,
  // naming path and key. A row written concurrently (another thread) is read as it was before
  // the write or after it, whole.
  Status multi_get(std::span<const uint64_t> keys, std::vector<float>& out,
                   std::vector<uint8_t>& found) const;
  // One plain point lookup (DB::Get) into out[0 .. row_floats); false when the key has no
  // row. The baseline `colony bench store` compares the stores with. Fails as multi_get.
  Expected<bool> get(uint64_t key, float* out);
  // How write() takes its rows: `batch`, one WriteBatch through the memtable; `bulk`, many rows
  // at once that are worth table files of their own (a write-back of a whole cache): from
  // bulk_write_rows rows on they go in as files, skipping the memtable. Not for the writes of
  // every batch: ingesting a file flushes the memtables first when their keys overlap.
  enum class Mode { batch, bulk };
  static constexpr size_t bulk_write_rows = 65536;
  // Writes rows[i * row_floats ...] under keys[i] in one atomic step, together with the row
  // count grown by `rows_added` (rows that were not stored before) and each (sender, clock) of
  // `clocks`: the clock of the sender's last push those rows hold. Rows in compact parts are
  // rounded stochastically, by a hash of the key and a count of the table's writes. Fails with
  // io_error, and then writes nothing. The rows go in key order, whatever the order of `keys`:
  // RocksDB's memtable inserts keys in ascending order several times faster than in random order
  // (it keeps the place of the last insert), and table files take keys in order only. A key
  // given twice is written as its last row.
  Status write(std::span<const uint64_t> keys, std::span<const float> rows, uint64_t rows_added,
               std::span<const std::pair<uint64_t, uint32_t>> clocks = {}, Mode mode = Mode::batch);
  // Every sender's clock written with the rows (write's `clocks`), read when the table opened
  // and kept since: the last push of that sender the rows hold.
  const std::map<uint64_t, uint32_t>& sender_clocks() const { return clocks_; }
  // Deletes every sender's clock (a new job starts over the rows: its senders count from 0).
  // Fails with io_error.
  Status clear_clocks();
  // Deletes the rows of `keys`, all of which are stored, in one atomic batch (with the row
  // count). Fails with io_error.
  Status erase(std::span<const uint64_t> keys);
  // Every row with begin <= key < end, in key order; stops at the first error.
  Status for_each_in_range(uint64_t begin, uint64_t end,
                           const std::function<void(uint64_t, const float*)>& f) const;
  // Flushes the memtables to table files (and so, with the WAL, everything written is on disk).
  Status flush();
  // A consistent point-in-time copy in `dir` (hard links where it can): RocksDB's Checkpoint.
  // Fails when `dir` exists or the copy fails, naming both paths.
  Status checkpoint(const std::string& dir);
  // Bytes of table files on disk (RocksDB's estimate).
  uint64_t disk_bytes() const;

  // Tests: every later write fails with this status (a full disk, injected).
  void inject_write_failure(Status s) { injected_write_failure_ = std::move(s); }
  // Tests: every later multi_get fails with this status (a bad sector, injected); an ok status
  // ends it.
  void inject_read_failure(Status s) { injected_read_failure_ = std::move(s); }

 private:
  RocksTable() = default;
  Status error(const char* what, const std::string& status_text) const;
  // write()'s two ways to write rows (stored(i): row i's bytes, in `order`, which is key order) and
  // the meta keys in one atomic step: one WriteBatch through the memtable, or table files built
  // here in key order and ingested (RocksDB's IngestExternalFiles), which skips the memtable's
  // skip list: its inserts of a tiered store's write-backs of every cached row took 10% of a
  // colony train (docs/benchmarks.md).
  Status write_batch(std::span<const uint64_t> keys, std::span<const uint32_t> order,
                     const std::function<rocksdb::Slice(uint32_t)>& stored,
                     const std::map<std::string, std::string>& meta);
  Status write_files(std::span<const uint64_t> keys, std::span<const uint32_t> order,
                     const std::function<rocksdb::Slice(uint32_t)>& stored,
                     const std::map<std::string, std::string>& meta);
  Status read_clocks();
  // Reads the row parts the store records (none: fp32) into parts_, codec_ and value_bytes_.
  Status read_parts();
  // `value` (a row's stored bytes) decoded into `row`; invalid_input naming the key when its size
  // is not a row's.
  Status decode(uint64_t key, std::string_view value, float* row) const;

  RocksTableOptions options_;
  StoreIdentity identity_;
  std::string adopted_from_;
  uint64_t rows_ = 0;
  std::vector<RowPart> parts_;
  std::optional<RowCodec> codec_;  // with parts_
  size_t value_bytes_ = 0;
  uint64_t writes_ = 0;  // rows encoded so far: with the key, the rounding's randomness
  std::map<uint64_t, uint32_t> clocks_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;  // the default family, owned by db_
  rocksdb::ColumnFamilyHandle* rows_cf_ = nullptr;
  Status injected_write_failure_;
  Status injected_read_failure_;
};

// The 8 big-endian bytes of a key, and back.
std::string encode_key(uint64_t key);
uint64_t decode_key(const char* bytes);

}  // namespace colony
