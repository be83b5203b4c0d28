#include "storage/store_spec.h"

#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "storage/dense_file.h"

namespace colony {

Expected<StoreSpec> parse_store_spec(const std::string& text, size_t cache_bytes) {
  StoreSpec spec;
  if (text == "memory") {
    if (cache_bytes)
      return Status::invalid_input(
          "--cache-bytes: only with --store rocksdb:DIR (the memory store holds every row)");
    return spec;
  }
  const std::string prefix = "rocksdb:";
  if (text.rfind(prefix, 0) != 0)
    return Status::invalid_input("--store \"" + text + "\": expected memory or rocksdb:DIR");
  spec.dir = text.substr(prefix.size());
  if (spec.dir.empty()) return Status::invalid_input("--store rocksdb:DIR: DIR is empty");
  spec.kind = cache_bytes ? StoreKind::tiered : StoreKind::rocksdb;
  spec.cache_bytes = cache_bytes;
  spec.durability = Durability::log;
  return spec;
}

Expected<Durability> parse_durability(const std::string& text) {
  if (text == "none") return Durability::none;
  if (text == "log") return Durability::log;
  if (text == "fsync") return Durability::fsync;
  if (text.rfind("replicated", 0) == 0)
    return Status::invalid_input("--durability " + text +
                                 ": shard replication needs ps processes of their own (colony "
                                 "coordinator --durability replicated:K) or the simulator (colony "
                                 "sim --ps-store replicated:K); here use log or fsync");
  return Status::invalid_input("--durability \"" + text + "\": expected none, log or fsync");
}

const char* to_string(Durability durability) {
  switch (durability) {
    case Durability::none:
      return "none";
    case Durability::log:
      return "log";
    case Durability::fsync:
      return "fsync";
  }
  return "?";
}

Status set_read_ahead(StoreSpec& spec, bool read_ahead) {
  if (read_ahead && spec.kind != StoreKind::tiered)
    return Status::invalid_input(
        "--read-ahead: only the tiered store (--store rocksdb:DIR --cache-bytes N) reads ahead");
  spec.read_ahead = read_ahead;
  return {};
}

Status set_resume(StoreSpec& spec, bool resume) {
  if (resume && spec.kind == StoreKind::memory)
    return Status::invalid_input(
        "--resume: the memory store holds no earlier rows; it continues a store on disk "
        "(--store rocksdb:DIR)");
  spec.resume = resume;
  return {};
}

Status set_durability(StoreSpec& spec, Durability durability) {
  if (spec.kind == StoreKind::memory && durability != Durability::none)
    return Status::invalid_input(fmt::format(
        "--durability {}: the memory store keeps nothing on disk; use --store rocksdb:DIR "
        "(with --cache-bytes N to keep the rows in memory)",
        to_string(durability)));
  spec.durability = durability;
  return {};
}

std::string to_string(const StoreSpec& spec) {
  switch (spec.kind) {
    case StoreKind::memory:
      if (spec.compact_parts.empty()) return "memory";
      return fmt::format("memory ({} bytes a row)",
                         (encoded_row_bytes(spec.compact_parts) + 3) / 4 * 4);
    case StoreKind::rocksdb:
      if (spec.compact_parts.empty()) return "rocksdb:" + spec.dir;
      return fmt::format("rocksdb:{} ({} bytes a row)", spec.dir,
                         encoded_row_bytes(spec.compact_parts));
    case StoreKind::tiered:
      return fmt::format(
          "tiered ({} bytes in memory, {}{}) over rocksdb:{}{}", spec.cache_bytes,
          to_string(spec.policy), spec.read_ahead ? ", read-ahead" : "", spec.dir,
          spec.compact_parts.empty()
              ? std::string()
              : fmt::format(" ({} bytes a row on disk)", encoded_row_bytes(spec.compact_parts)));
  }
  return "?";
}

size_t tiered_rocksdb_buffer_bytes(size_t cache_bytes) {
  return std::clamp(cache_bytes / 16, size_t{1} << 20, rocksdb_default_buffer_bytes);
}

std::string shard_store_path(const std::string& dir, uint32_t shard_index) {
  return (std::filesystem::path(dir) / fmt::format("shard-{}", shard_index)).string();
}

namespace {

// A new empty memory store: compact when spec.compact_parts says.
Expected<std::unique_ptr<RowStore>> memory_store(const StoreSpec& spec, size_t row_floats) {
  if (spec.compact_parts.empty()) return std::unique_ptr<RowStore>(new MemoryRowStore(row_floats));
  auto store = CompactRowStore::make(spec.compact_parts);
  if (!store) return store.status();
  if ((*store)->row_floats() != row_floats)
    return Status::invalid_input(fmt::format("a compact store's parts hold {} floats; rows have {}",
                                             (*store)->row_floats(), row_floats));
  return std::unique_ptr<RowStore>(std::move(store.value()));
}

}  // namespace

Expected<std::unique_ptr<RowStore>> open_shard_store(const StoreSpec& spec,
                                                     const StoreIdentity& identity) {
  if (spec.kind == StoreKind::memory) return memory_store(spec, identity.row_floats);
  std::error_code ec;
  if (const auto marker = std::filesystem::path(spec.dir) / restore_marker_name;
      std::filesystem::exists(marker, ec))
    return Status::invalid_input(fmt::format(
        "{}: a restore of a checkpoint into this store did not finish: run `colony checkpoint "
        "restore` into it again (the store is not opened)",
        marker.string()));
  RocksTableOptions o;
  o.path = shard_store_path(spec.dir, identity.shard_index);
  o.block_cache_bytes = spec.block_cache_bytes;
  const size_t shard_cache_bytes = spec.cache_bytes / std::max<uint32_t>(identity.shards, 1);
  if (spec.kind == StoreKind::tiered) {
    o.block_cache_bytes = o.write_buffer_bytes = tiered_rocksdb_buffer_bytes(shard_cache_bytes);
    // Its table takes every write-back and eviction; its reads are the cache's misses.
    o.compaction = RocksTableOptions::Compaction::universal;
  }
  o.sync_writes = spec.durability == Durability::fsync;
  o.adopt = spec.resume;
  o.parts = spec.compact_parts;
  // The tiered store's write-backs keep RocksDB's log: they are what its push log relies on.
  o.write_ahead_log = spec.kind == StoreKind::tiered || spec.durability != Durability::none;
  auto table = RocksTable::open(o, identity);
  if (!table) return table.status();
  if (spec.kind == StoreKind::rocksdb)
    return std::unique_ptr<RowStore>(new RocksRowStore(std::move(table.value())));
  TieredOptions t;
  t.cache_bytes = shard_cache_bytes;
  t.policy = spec.policy;
  t.read_ahead = spec.read_ahead;
  t.seed = identity.shard_index + 1;
  auto store = std::make_unique<TieredRowStore>(std::move(table.value()), t);
  const std::string log_path = (std::filesystem::path(o.path) / push_log_file_name).string();
  const bool keep = spec.durability != Durability::none;
  if (keep || std::filesystem::exists(log_path)) {
    auto log = PushLog::open(log_path, identity.row_floats, spec.durability == Durability::fsync);
    if (!log) return log.status();
    if (Status s = store->attach_log(std::move(log.value()), keep); !s.ok()) return s;
  }
  return std::unique_ptr<RowStore>(std::move(store));
}

Expected<std::unique_ptr<RowStore>> restore_shard_store(const StoreSpec& spec,
                                                        const StoreIdentity& identity,
                                                        const std::string& checkpoint_dir) {
  namespace fs = std::filesystem;
  auto copy = RocksTable::open_read_only(checkpoint_dir);
  if (!copy) return copy.status();
  const StoreIdentity& got = (*copy)->identity();
  if (got.cluster_id != identity.cluster_id || got.shard_index != identity.shard_index ||
      got.shards != identity.shards || got.row_floats != identity.row_floats)
    return Status::invalid_input(fmt::format(
        "{}: a checkpoint of cluster \"{}\" shard {} of {} (rows of {} floats), not of this job's "
        "cluster \"{}\" "
        "shard {} of {} (rows of {} floats)",
        checkpoint_dir, got.cluster_id, got.shard_index, got.shards, got.row_floats,
        identity.cluster_id, identity.shard_index, identity.shards, identity.row_floats));
  if (spec.kind != StoreKind::memory && (*copy)->row_parts() != spec.compact_parts)
    return Status::invalid_input(fmt::format(
        "{}: a checkpoint of rows in {}, not in this job's {} (--row-format, --state-format); "
        "the store is as it was",
        checkpoint_dir,
        (*copy)->row_parts().empty() ? std::string("fp32") : to_string((*copy)->row_parts()),
        spec.compact_parts.empty() ? std::string("fp32") : to_string(spec.compact_parts)));
  if (spec.kind == StoreKind::memory) {
    auto store = memory_store(spec, identity.row_floats);
    if (!store) return store.status();
    Status s = (*copy)->for_each_in_range(0, UINT64_MAX, [&](uint64_t key, const float* row) {
      std::copy(row, row + identity.row_floats, (*store)->find_or_insert(key).first);
    });
    if (!s.ok()) return s;
    if (Status c = (*store)->commit(); !c.ok()) return c;
    return store;
  }
  copy.value().reset();
  const std::string target = shard_store_path(spec.dir, identity.shard_index);
  // The copy is made beside the store and swapped in whole: the live store is never removed
  // before its replacement is complete, and a failed copy leaves it as it was.
  // The copy is synced before the exchange: after a crash of the machine `target` is the old
  // store or the whole copy, never a copy missing what its files had not yet written.
  const std::string staged = target + ".restoring";
  std::error_code ec;
  fs::remove_all(staged, ec);  // left by an earlier restore that failed
  if (!ec) fs::create_directories(fs::path(staged).parent_path(), ec);
  // A copy, not hard links: RocksDB appends to some of its files (the MANIFEST) in place.
  Status copied = ec ? Status::io_error(fmt::format("{}: {}", spec.dir, ec.message()))
                     : copy_folder_synced(checkpoint_dir, staged);
  if (!copied.ok()) {
    std::error_code ignored;
    fs::remove_all(staged, ignored);
    return Status::io_error(
        fmt::format("{}: cannot copy the checkpoint {} beside it: {}; the "
                    "store is as it was",
                    target, checkpoint_dir, copied.message()));
  }
  if (fs::exists(target, ec)) {
    // One atomic exchange: `target` is the old store or the whole copy at every moment.
    if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
      return Status::io_error(
          fmt::format("{}: cannot swap in the copy {}: {}", target, staged, std::strerror(errno)));
    fs::remove_all(staged, ec);  // now the old store
  } else {
    fs::create_directories(fs::path(target).parent_path(), ec);
    fs::rename(staged, target, ec);
  }
  if (ec)
    return Status::io_error(
        fmt::format("{}: cannot finish replacing it: {}", target, ec.message()));
  if (Status s = sync_folder(fs::path(target).parent_path().string()); !s.ok()) return s;
  return open_shard_store(spec, identity);
}

}  // namespace colony
