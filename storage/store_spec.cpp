#include "storage/store_spec.h"

#include <filesystem>

namespace colony {

Expected<StoreSpec> parse_store_spec(const std::string& text, size_t cache_bytes) {
  StoreSpec spec;
  if (text == "memory") {
    if (cache_bytes)
      return Status::invalid_input("--cache-bytes: only with --store rocksdb:DIR (the memory store holds every row)");
    return spec;
  }
  const std::string prefix = "rocksdb:";
  if (text.rfind(prefix, 0) != 0)
    return Status::invalid_input("--store \"" + text + "\": expected memory or rocksdb:DIR");
  spec.dir = text.substr(prefix.size());
  if (spec.dir.empty()) return Status::invalid_input("--store rocksdb:DIR: DIR is empty");
  spec.kind = cache_bytes ? StoreKind::tiered : StoreKind::rocksdb;
  spec.cache_bytes = cache_bytes;
  return spec;
}

std::string to_string(const StoreSpec& spec) {
  switch (spec.kind) {
    case StoreKind::memory: return "memory";
    case StoreKind::rocksdb: return "rocksdb:" + spec.dir;
    case StoreKind::tiered:
      return fmt::format("tiered ({} bytes in memory, {}) over rocksdb:{}", spec.cache_bytes, to_string(spec.policy),
                         spec.dir);
  }
  return "?";
}

std::string shard_store_path(const std::string& dir, uint32_t shard_index) {
  return (std::filesystem::path(dir) / fmt::format("shard-{}", shard_index)).string();
}

Expected<std::unique_ptr<RowStore>> open_shard_store(const StoreSpec& spec, const StoreIdentity& identity) {
  if (spec.kind == StoreKind::memory) return std::unique_ptr<RowStore>(new MemoryRowStore(identity.row_floats));
  RocksTableOptions o;
  o.path = shard_store_path(spec.dir, identity.shard_index);
  o.block_cache_bytes = spec.block_cache_bytes;
  o.sync_writes = spec.sync_writes;
  auto table = RocksTable::open(o, identity);
  if (!table) return table.status();
  if (spec.kind == StoreKind::rocksdb)
    return std::unique_ptr<RowStore>(new RocksRowStore(std::move(table.value())));
  TieredOptions t;
  t.cache_bytes = spec.cache_bytes / std::max<uint32_t>(identity.shards, 1);
  t.policy = spec.policy;
  t.seed = identity.shard_index + 1;
  return std::unique_ptr<RowStore>(new TieredRowStore(std::move(table.value()), t));
}

}  // namespace colony
