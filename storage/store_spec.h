// Choosing and opening a shard's row store from flags: `--store memory|rocksdb:DIR` and
// `--cache-bytes N` (tiered: hot rows in N bytes of memory over RocksDB; rocksdb only).
//
// Layout on disk: shard i of a job keeps its rows in DIR/shard-<i>, a RocksDB database that
// records the identity of the job that wrote it (storage/rocks_table.h). This is the API the
// PS daemon uses to open (or reopen after a crash) its shard's store:
//
//   auto spec = parse_store_spec("rocksdb:/var/lib/colony", cache_bytes);     // flags
//   auto store = open_shard_store(*spec, StoreIdentity{cluster_id, i, shards, row_floats});
//   // or, to go back to the newest complete checkpoint (storage/checkpoint.h):
//   auto step_dir = latest_checkpoint(root);
//   auto store = restore_shard_store(*spec, identity, *step_dir + "/shard-" + i);
//
// and hands the store to ShardCore::make. Reopening the same DIR with the same identity
// continues from the rows committed there; another identity is refused, naming the path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "storage/compact_store.h"
#include "storage/rocks_table.h"
#include "storage/rocksdb_store.h"
#include "storage/row_store.h"

namespace colony {

enum class StoreKind { memory, rocksdb, tiered };

// What a shard's acknowledgement of a push promises (the job's `--durability`):
//   none   memory only: a crash of the ps process loses updates (the memory store all its rows;
//          rocksdb what RocksDB had not flushed to its tables, its write-ahead log being off;
//          tiered the updates to cached rows since its last write-back).
//   log    the push's rows are in a log on disk before the ack (rocksdb: RocksDB's write-ahead
//          log; tiered: its push log, storage/push_log.h): a crash of the process loses nothing
//          acknowledged, and the shard's committed clocks make re-sent pushes exactly once.
//   fsync  as log, and the log is synced to the disk before the ack: a crash of the machine
//          loses nothing acknowledged either.
// Each store's default is the most it gives without a sync: none for memory, log on disk.
enum class Durability { none, log, fsync };

struct StoreSpec {
  StoreKind kind = StoreKind::memory;
  std::string dir;         // rocksdb and tiered: the folder holding shard-<i>/
  size_t cache_bytes = 0;  // tiered: memory budget for rows, across all shards of the process
  EvictionPolicy policy = EvictionPolicy::lfu;
  bool read_ahead = false;                      // tiered: TieredOptions::read_ahead (--read-ahead)
  size_t block_cache_bytes = size_t{64} << 20;  // per shard
  Durability durability = Durability::none;     // parse_store_spec sets the store's default
  bool resume = false;  // `--resume`: continue another job's rows (RocksTableOptions::adopt)
  // The parts a row is kept in (storage/row_codec.h; a job's --row-format and --state-format):
  // memory, a compact store (storage/compact_store.h); rocksdb and tiered, the rows on disk
  // (RocksTableOptions::parts; the tiered store's cached rows stay fp32). Empty: every float in
  // fp32.
  std::vector<RowPart> compact_parts{};
};

// Parses the `--store` text ("memory" or "rocksdb:DIR") with `--cache-bytes` (0 = not given).
// Fails with invalid_input naming the flag: an unknown kind, an empty DIR, --cache-bytes
// with the memory store.
Expected<StoreSpec> parse_store_spec(const std::string& text, size_t cache_bytes);
std::string to_string(const StoreSpec& spec);

// "none", "log" or "fsync". Fails with invalid_input naming --durability otherwise (replicated:K
// is named as the daemons' and the simulator's).
Expected<Durability> parse_durability(const std::string& text);
const char* to_string(Durability durability);
// `--resume`: lets `spec` continue a store another job wrote (StoreSpec::resume). Fails with
// invalid_input naming --resume for the memory store, which holds no earlier rows.
Status set_resume(StoreSpec& spec, bool resume);
// `--read-ahead`: the tiered store reads the rows of waiting pulls ahead (StoreSpec::read_ahead).
// Fails with invalid_input naming --read-ahead for a store that is not tiered.
Status set_read_ahead(StoreSpec& spec, bool read_ahead);
// Gives `spec` the job's durability. Fails with invalid_input naming --durability when the store
// cannot give it (log or fsync of the memory store, which keeps nothing on disk).
Status set_durability(StoreSpec& spec, Durability durability);

// The block cache and the memtable size a tiered store of `cache_bytes` (one shard's budget)
// gives RocksDB: a sixteenth of the budget, from 1 MiB to 64 MiB each. RocksDB's buffers are
// then at most 3/16 of the budget beside it (TieredRowStore::memory_bytes counts them): the
// cache holds the hot rows and the OS page cache the rest; larger buffers only repeated them
// (docs/benchmarks.md, "RocksDB's buffers beside a tiered store's cache").
size_t tiered_rocksdb_buffer_bytes(size_t cache_bytes);

// DIR/shard-<index>.
std::string shard_store_path(const std::string& dir, uint32_t shard_index);
// DIR/RESTORING: the file restore_checkpoint (storage/checkpoint.h) writes into a store folder
// before its first change there and removes after its last. While it is there, a restore did not
// finish, and open_shard_store refuses every shard of that folder.
inline constexpr const char* restore_marker_name = "RESTORING";

// Opens shard `identity.shard_index`'s store as `spec` says (memory: a new empty one; compact, or
// on disk in fewer bytes, when spec.compact_parts says, whose floats must then add up to
// identity.row_floats; a store on disk created in other parts is refused). The
// tiered store gets cache_bytes / identity.shards of the budget, and its RocksDB buffers as
// tiered_rocksdb_buffer_bytes says; under log or fsync durability it
// keeps a push log in its folder, and whatever push log the folder holds is replayed first
// (StoreStats::log_records_replayed). Fails as RocksTable::open does (another job's store, a
// corrupt or locked database), or as the push log's replay does, naming the path; with
// invalid_input naming DIR/RESTORING when a restore into DIR did not finish.
Expected<std::unique_ptr<RowStore>> open_shard_store(const StoreSpec& spec,
                                                     const StoreIdentity& identity);

// Recovery: opens shard `identity.shard_index`'s store with the rows of its checkpoint copy
// in `checkpoint_dir` (a ROOT/step-<S>/shard-<i> folder, storage/checkpoint.h), whose identity
// must be `identity` (and, for rocksdb and tiered, whose row parts must be spec.compact_parts).
// memory: a new store loaded with the rows. rocksdb and tiered: the
// store folder DIR/shard-<i> is replaced by a copy of the checkpoint, made beside it
// (DIR/shard-<i>.restoring) and swapped in with one atomic exchange, so the old store is never
// removed before its replacement is complete; the old store must be closed first (destroyed),
// and whatever it held after the checkpoint is gone. Fails, naming the folder, when the
// checkpoint is missing, corrupt or another job's, or the copy fails (the store then stays as it
// was).
Expected<std::unique_ptr<RowStore>> restore_shard_store(const StoreSpec& spec,
                                                        const StoreIdentity& identity,
                                                        const std::string& checkpoint_dir);

}  // namespace colony
