#include "storage/rocks_table.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include "common/hash.h"

namespace colony {

namespace {

constexpr const char* rows_family = "rows";
constexpr const char* key_cluster = "colony.cluster_id";
constexpr const char* key_shard = "colony.shard_index";
constexpr const char* key_shards = "colony.shards";
constexpr const char* key_row_floats = "colony.row_floats";
constexpr const char* key_rows = "colony.rows";
// The row parts (storage/row_codec.h to_string) when rows are not kept in fp32; absent: fp32.
constexpr const char* key_row_parts = "colony.row_parts";
// colony.clock.<sender>: the clock of that sender's last push the rows hold (exactly-once pushes
// across a restart, ps/shard_core.h).
constexpr const char* clock_key_prefix = "colony.clock.";

// write_files()'s table files, in the database folder until RocksDB moves them in; a crash can
// leave them there, and the next open removes them.
constexpr const char* ingest_files[] = {"colony-ingest-rows.sst", "colony-ingest-meta.sst"};

void remove_ingest_files(const std::string& path) {
  std::error_code ec;
  for (const char* name : ingest_files) std::filesystem::remove(path + "/" + name, ec);
}

std::string describe_parts(const std::vector<RowPart>& parts) {
  return parts.empty() ? std::string("fp32") : to_string(parts);
}

std::string describe(const StoreIdentity& id) {
  return fmt::format("cluster \"{}\", shard {} of {}, rows of {} floats", id.cluster_id,
                     id.shard_index, id.shards, id.row_floats);
}

rocksdb::ColumnFamilyOptions family_options(
    size_t block_cache_bytes, size_t write_buffer_bytes,
    RocksTableOptions::Compaction compaction = RocksTableOptions::Compaction::leveled) {
  rocksdb::ColumnFamilyOptions cf;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = rocksdb::NewLRUCache(std::max<size_t>(block_cache_bytes, size_t{1} << 20));
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
  t.whole_key_filtering = true;
  t.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  t.cache_index_and_filter_blocks = false;  // small rows, many keys: keep filters resident
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  cf.compression = rocksdb::kNoCompression;
  cf.write_buffer_size = write_buffer_bytes;
  // Levels in proportion to the memtables (RocksDB's tuning guide: level 1 about as large as the
  // level-0 files that trigger its compaction), so that small memtables do not rewrite a large
  // level 1 at every compaction. At 64 MiB memtables these are RocksDB's defaults.
  cf.max_bytes_for_level_base = 4 * write_buffer_bytes;
  cf.target_file_size_base = write_buffer_bytes;
  // A Bloom filter over the memtable's keys (5% of it): the tiered store looks up every key it
  // meets for the first time, and most are on no level; without the filter each such lookup
  // searched the memtable's skip list (6% of a tiered colony train, docs/benchmarks.md).
  cf.memtable_prefix_bloom_size_ratio = 0.05;
  cf.memtable_whole_key_filtering = true;
  if (compaction == RocksTableOptions::Compaction::universal)
    cf.compaction_style = rocksdb::kCompactionStyleUniversal;
  return cf;
}

bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + uint64_t(c - '0');
  }
  out = v;
  return true;
}

}  // namespace

std::string encode_key(uint64_t key) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((key >> (56 - 8 * i)) & 0xff);
  return s;
}

uint64_t decode_key(const char* bytes) {
  uint64_t k = 0;
  for (int i = 0; i < 8; ++i) k = (k << 8) | uint8_t(bytes[i]);
  return k;
}

RocksTable::~RocksTable() {
  if (db_) {
    if (rows_cf_) (void)db_->DestroyColumnFamilyHandle(rows_cf_);
    (void)db_->Close();
  }
}

Status RocksTable::error(const char* what, const std::string& status_text) const {
  return Status::io_error(fmt::format("{}: {}: {}", options_.path, what, status_text));
}

Expected<std::unique_ptr<RocksTable>> RocksTable::open(const RocksTableOptions& options,
                                                       const StoreIdentity& identity) {
  COLONY_ASSERT(!identity.cluster_id.empty() && identity.row_floats > 0 &&
                    identity.shard_index < identity.shards,
                "{}", describe(identity));
  if (!options.parts.empty()) {
    auto codec = RowCodec::make(options.parts);
    if (!codec) return Status::invalid_input(options.path + ": " + codec.status().message());
    if (codec->row_floats() != identity.row_floats)
      return Status::invalid_input(fmt::format("{}: row parts {} hold {} floats; rows have {}",
                                               options.path, to_string(options.parts),
                                               codec->row_floats(), identity.row_floats));
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool exists = fs::exists(fs::path(options.path) / "CURRENT", ec);
  if (!exists) {
    if (!options.create_if_missing)
      return Status::not_found(
          fmt::format("{}: no store there (no RocksDB database)", options.path));
    fs::create_directories(options.path, ec);
    if (ec)
      return Status::io_error(
          fmt::format("{}: cannot create the folder: {}", options.path, ec.message()));
  }
  std::unique_ptr<RocksTable> t(new RocksTable());
  t->options_ = options;
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = options.create_if_missing;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 2;
  const rocksdb::ColumnFamilyOptions cf =
      family_options(options.block_cache_bytes, options.write_buffer_bytes, options.compaction);
  std::vector<rocksdb::ColumnFamilyDescriptor> families{{rocksdb::kDefaultColumnFamilyName, cf},
                                                        {rows_family, cf}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.path, families, &handles, &db);
  if (!s.ok()) return t->error("cannot open the RocksDB store", s.ToString());
  t->db_.reset(db);
  remove_ingest_files(options.path);
  t->meta_ = handles[0];
  t->rows_cf_ = handles[1];
  // The default family's handle is owned by the DB; ours is the rows family's.
  (void)t->db_->DestroyColumnFamilyHandle(handles[0]);
  t->meta_ = t->db_->DefaultColumnFamily();

  std::string cluster;
  s = t->db_->Get(rocksdb::ReadOptions(), t->meta_, key_cluster, &cluster);
  if (s.IsNotFound()) {
    // A new store (or one that was never written by Colony): record who owns it.
    rocksdb::WriteBatch b;
    b.Put(t->meta_, key_cluster, identity.cluster_id);
    b.Put(t->meta_, key_shard, std::to_string(identity.shard_index));
    b.Put(t->meta_, key_shards, std::to_string(identity.shards));
    b.Put(t->meta_, key_row_floats, std::to_string(identity.row_floats));
    b.Put(t->meta_, key_rows, "0");
    if (!options.parts.empty()) b.Put(t->meta_, key_row_parts, to_string(options.parts));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    s = t->db_->Write(wo, &b);
    if (!s.ok()) return t->error("cannot write the store's identity", s.ToString());
    t->identity_ = identity;
    if (Status e = t->read_parts(); !e.ok()) return e;
    return t;
  }
  if (!s.ok()) return t->error("cannot read the store's identity", s.ToString());
  StoreIdentity stored;
  stored.cluster_id = cluster;
  std::string v;
  uint64_t n = 0;
  auto read_number = [&](const char* key, uint64_t& out) -> Status {
    rocksdb::Status rs = t->db_->Get(rocksdb::ReadOptions(), t->meta_, key, &v);
    if (!rs.ok()) return t->error(fmt::format("cannot read {}", key).c_str(), rs.ToString());
    if (!parse_u64(v, out))
      return Status::invalid_input(
          fmt::format("{}: corrupt store identity: {} is \"{}\"", options.path, key, v));
    return {};
  };
  if (Status e = read_number(key_shard, n); !e.ok()) return e;
  stored.shard_index = uint32_t(n);
  if (Status e = read_number(key_shards, n); !e.ok()) return e;
  stored.shards = uint32_t(n);
  if (Status e = read_number(key_row_floats, n); !e.ok()) return e;
  stored.row_floats = size_t(n);
  if (Status e = read_number(key_rows, t->rows_); !e.ok()) return e;
  if (Status e = t->read_clocks(); !e.ok()) return e;
  t->identity_.row_floats = stored.row_floats;  // the stored parts are checked against it
  if (Status e = t->read_parts(); !e.ok()) return e;
  // The optimizer named in a job fingerprint (actors/embedded_cluster.h store_fingerprint):
  // rows of the same size may hold another optimizer's state, which --resume must not take.
  auto optimizer_of = [](const std::string& id) {
    const size_t at = id.find("optimizer=");
    return at == std::string::npos ? std::string() : id.substr(at, id.find(' ', at) - at);
  };
  const bool same_layout = stored.shard_index == identity.shard_index &&
                           stored.shards == identity.shards &&
                           stored.row_floats == identity.row_floats &&
                           optimizer_of(stored.cluster_id) == optimizer_of(identity.cluster_id);
  if (same_layout && t->parts_ != options.parts)
    return Status::invalid_input(fmt::format(
        "{}: this store keeps its rows in {}; this job keeps them in {} (--row-format, "
        "--state-format). Refusing to open it: give the formats it was written with, point the "
        "store elsewhere, or remove the folder to start from scratch",
        options.path, describe_parts(t->parts_), describe_parts(options.parts)));
  if (same_layout && stored.cluster_id == identity.cluster_id) {
    t->identity_ = stored;
    return t;
  }
  if (!same_layout || !options.adopt)
    return Status::invalid_input(fmt::format(
        "{}: this store was written by {}; this job is {}. Refusing to train on it: point the "
        "store elsewhere, remove the folder to start from scratch{}",
        options.path, describe(stored), describe(identity),
        !same_layout ? std::string(" (--resume continues another job's rows only with the same "
                                   "shard, shard count, row size and optimizer)")
                     : std::string(", or give --resume to continue its rows in this job")));
  // --resume: the rows become this job's, and so does the store.
  rocksdb::WriteOptions wo;
  wo.sync = true;
  s = t->db_->Put(wo, t->meta_, key_cluster, identity.cluster_id);
  if (!s.ok()) return t->error("cannot write the store's new identity", s.ToString());
  t->adopted_from_ = stored.cluster_id;
  t->identity_ = identity;
  return t;
}

Expected<std::unique_ptr<RocksTable>> RocksTable::open_read_only(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::path(path) / "CURRENT", ec))
    return Status::not_found(fmt::format("{}: no store there (no RocksDB database)", path));
  std::unique_ptr<RocksTable> t(new RocksTable());
  t->options_.path = path;
  const rocksdb::ColumnFamilyOptions cf =
      family_options(size_t{8} << 20, rocksdb_default_buffer_bytes);
  std::vector<rocksdb::ColumnFamilyDescriptor> families{{rocksdb::kDefaultColumnFamilyName, cf},
                                                        {rows_family, cf}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s =
      rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(), path, families, &handles, &db);
  if (!s.ok()) return t->error("cannot open the RocksDB store read-only", s.ToString());
  t->db_.reset(db);
  (void)t->db_->DestroyColumnFamilyHandle(handles[0]);
  t->meta_ = t->db_->DefaultColumnFamily();
  t->rows_cf_ = handles[1];
  std::string v;
  auto get = [&](const char* key, std::string& out) -> Status {
    rocksdb::Status rs = t->db_->Get(rocksdb::ReadOptions(), t->meta_, key, &out);
    if (rs.IsNotFound())
      return Status::invalid_input(fmt::format("{}: not a Colony store ({} missing)", path, key));
    if (!rs.ok()) return t->error(fmt::format("cannot read {}", key).c_str(), rs.ToString());
    return {};
  };
  if (Status e = get(key_cluster, t->identity_.cluster_id); !e.ok()) return e;
  uint64_t n = 0;
  for (auto [key, field] : {std::pair{key_shard, 0}, std::pair{key_shards, 1},
                            std::pair{key_row_floats, 2}, std::pair{key_rows, 3}}) {
    if (Status e = get(key, v); !e.ok()) return e;
    if (!parse_u64(v, n))
      return Status::invalid_input(
          fmt::format("{}: corrupt store identity: {} is \"{}\"", path, key, v));
    if (field == 0) t->identity_.shard_index = uint32_t(n);
    if (field == 1) t->identity_.shards = uint32_t(n);
    if (field == 2) t->identity_.row_floats = size_t(n);
    if (field == 3) t->rows_ = n;
  }
  if (t->identity_.row_floats == 0)
    return Status::invalid_input(fmt::format("{}: corrupt store identity: rows of 0 floats", path));
  if (Status e = t->read_parts(); !e.ok()) return e;
  return t;
}

Status RocksTable::read_parts() {
  std::string text;
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), meta_, key_row_parts, &text);
  parts_.clear();
  codec_.reset();
  value_bytes_ = identity_.row_floats * sizeof(float);
  if (rs.IsNotFound()) return {};
  if (!rs.ok()) return error("cannot read the store's row parts", rs.ToString());
  auto parts = parse_row_parts(text);
  if (!parts)
    return Status::invalid_input(
        fmt::format("{}: corrupt store identity: {}", options_.path, parts.status().message()));
  auto codec = RowCodec::make(*parts);
  if (!codec || codec->row_floats() != identity_.row_floats)
    return Status::invalid_input(
        fmt::format("{}: corrupt store identity: row parts \"{}\" for rows of {} floats",
                    options_.path, text, identity_.row_floats));
  parts_ = std::move(parts.value());
  value_bytes_ = codec->encoded_bytes();
  codec_.emplace(std::move(codec.value()));
  return {};
}

Status RocksTable::decode(uint64_t key, std::string_view value, float* row) const {
  if (value.size() != value_bytes_)
    return Status::invalid_input(
        fmt::format("{}: key {:#x} holds {} bytes, expected a row of {} floats in {} bytes",
                    options_.path, key, value.size(), identity_.row_floats, value_bytes_));
  if (codec_)
    codec_->decode(reinterpret_cast<const unsigned char*>(value.data()), row);
  else
    std::memcpy(row, value.data(), value_bytes_);
  return {};
}

Status RocksTable::multi_get(std::span<const uint64_t> keys, std::vector<float>& out,
                             std::vector<uint8_t>& found) const {
  const size_t n = keys.size(), rf = identity_.row_floats;
  out.resize(n * rf);
  found.assign(n, 0);
  if (n == 0) return {};
  if (!injected_read_failure_.ok()) return injected_read_failure_;
  std::vector<std::string> key_bytes(n);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    key_bytes[i] = encode_key(keys[i]);
    slices[i] = key_bytes[i];
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  db_->MultiGet(rocksdb::ReadOptions(), rows_cf_, n, slices.data(), values.data(), statuses.data());
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok())
      return error(fmt::format("cannot read key {:#x}", keys[i]).c_str(), statuses[i].ToString());
    if (Status e = decode(keys[i], values[i].ToStringView(), &out[i * rf]); !e.ok()) return e;
    found[i] = 1;
  }
  return {};
}

Expected<bool> RocksTable::get(uint64_t key, float* out) {
  const std::string k = encode_key(key);
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), rows_cf_, k, &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return error(fmt::format("cannot read key {:#x}", key).c_str(), s.ToString());
  if (Status e = decode(key, value.ToStringView(), out); !e.ok()) return e;
  return true;
}

Status RocksTable::read_clocks() {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_));
  for (it->Seek(clock_key_prefix); it->Valid() && it->key().starts_with(clock_key_prefix);
       it->Next()) {
    const std::string key = it->key().ToString(), value = it->value().ToString();
    uint64_t sender = 0, clock = 0;
    if (!parse_u64(key.substr(std::strlen(clock_key_prefix)), sender) || !parse_u64(value, clock) ||
        clock > UINT32_MAX)
      return Status::invalid_input(
          fmt::format("{}: corrupt sender clock: {} is \"{}\"", options_.path, key, value));
    clocks_[sender] = uint32_t(clock);
  }
  if (!it->status().ok()) return error("cannot read the senders' clocks", it->status().ToString());
  return {};
}

Status RocksTable::clear_clocks() {
  if (clocks_.empty()) return {};
  if (!injected_write_failure_.ok()) return injected_write_failure_;
  rocksdb::WriteBatch b;
  for (const auto& [sender, clock] : clocks_)
    b.Delete(meta_, clock_key_prefix + std::to_string(sender));
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  wo.disableWAL = !options_.write_ahead_log;
  rocksdb::Status s = db_->Write(wo, &b);
  if (!s.ok()) return error("cannot delete the senders' clocks", s.ToString());
  clocks_.clear();
  return {};
}

Status RocksTable::write(std::span<const uint64_t> keys, std::span<const float> rows,
                         uint64_t rows_added, std::span<const std::pair<uint64_t, uint32_t>> clocks,
                         Mode mode) {
  const size_t rf = identity_.row_floats;
  COLONY_ASSERT(rows.size() == keys.size() * rf, "keys={} floats={} row_floats={}", keys.size(),
                rows.size(), rf);
  if (keys.empty() && rows_added == 0 && clocks.empty()) return {};
  if (!injected_write_failure_.ok()) return injected_write_failure_;
  // Put in key order (encode_key is big-endian, so byte order is key order); stable, so that a
  // repeated key's last row is put last and wins.
  std::vector<uint32_t> order(keys.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  if (!std::is_sorted(keys.begin(), keys.end()))
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
  std::vector<float> row(codec_ ? rf : 0);
  std::string value(codec_ ? value_bytes_ : 0, '\0');
  // Row i's stored bytes: its floats, or encoded into `value`.
  auto stored = [&](uint32_t i) {
    if (!codec_)
      return rocksdb::Slice(reinterpret_cast<const char*>(&rows[i * rf]), rf * sizeof(float));
    std::copy_n(&rows[i * rf], rf, row.data());
    codec_->encode(hash_combine(keys[i], writes_++), row.data(),
                   reinterpret_cast<unsigned char*>(value.data()));
    return rocksdb::Slice(value);
  };
  std::map<std::string, std::string> meta;
  if (rows_added) meta[key_rows] = std::to_string(rows_ + rows_added);
  for (auto [sender, clock] : clocks)
    meta[clock_key_prefix + std::to_string(sender)] = std::to_string(clock);
  Status written = mode == Mode::bulk && keys.size() >= bulk_write_rows
                       ? write_files(keys, order, stored, meta)
                       : write_batch(keys, order, stored, meta);
  if (!written.ok()) return written;
  rows_ += rows_added;
  for (auto [sender, clock] : clocks) clocks_[sender] = clock;
  return {};
}

Status RocksTable::write_batch(std::span<const uint64_t> keys, std::span<const uint32_t> order,
                               const std::function<rocksdb::Slice(uint32_t)>& stored,
                               const std::map<std::string, std::string>& meta) {
  // Reserved whole (a put: its tag, family, lengths, key and value), not grown by copies.
  const size_t value_bytes = codec_ ? value_bytes_ : identity_.row_floats * sizeof(float);
  rocksdb::WriteBatch b(keys.size() * (value_bytes + 24) + 256);
  for (uint32_t i : order) b.Put(rows_cf_, encode_key(keys[i]), stored(i));
  for (const auto& [k, v] : meta) b.Put(meta_, k, v);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  wo.disableWAL = !options_.write_ahead_log;
  rocksdb::Status s = db_->Write(wo, &b);
  if (!s.ok())
    return error(fmt::format("cannot write a batch of {} rows", keys.size()).c_str(), s.ToString());
  return {};
}

Status RocksTable::write_files(std::span<const uint64_t> keys, std::span<const uint32_t> order,
                               const std::function<rocksdb::Slice(uint32_t)>& stored,
                               const std::map<std::string, std::string>& meta) {
  const std::string rows_file = options_.path + "/" + ingest_files[0];
  const std::string meta_file = options_.path + "/" + ingest_files[1];
  const std::string what = fmt::format("cannot write a file of {} rows", keys.size());
  rocksdb::Options file_options(rocksdb::DBOptions(),
                                family_options(size_t{1} << 20, rocksdb_default_buffer_bytes));
  rocksdb::SstFileWriter rows_writer(rocksdb::EnvOptions(), file_options, rows_cf_);
  rocksdb::Status s = rows_writer.Open(rows_file);
  // In key order, each key once: a repeated key's last row (the stable order puts it last).
  for (size_t j = 0; s.ok() && j < order.size(); ++j) {
    const uint32_t i = order[j];
    if (j + 1 < order.size() && keys[order[j + 1]] == keys[i]) continue;
    s = rows_writer.Put(encode_key(keys[i]), stored(i));
  }
  if (s.ok()) s = rows_writer.Finish();
  std::vector<rocksdb::IngestExternalFileArg> args(1);
  args[0].column_family = rows_cf_;
  args[0].external_files = {rows_file};
  if (s.ok() && !meta.empty()) {
    rocksdb::SstFileWriter meta_writer(rocksdb::EnvOptions(), file_options, meta_);
    s = meta_writer.Open(meta_file);
    for (auto it = meta.begin(); s.ok() && it != meta.end(); ++it)
      s = meta_writer.Put(it->first, it->second);  // std::map: in byte order
    if (s.ok()) s = meta_writer.Finish();
    args.emplace_back();
    args[1].column_family = meta_;
    args[1].external_files = {meta_file};
  }
  if (!s.ok()) {
    remove_ingest_files(options_.path);
    return error(what.c_str(), s.ToString());
  }
  for (auto& a : args) {
    a.options.move_files = true;           // hard links: no copy
    a.options.write_global_seqno = false;  // no write into the file after it is synced
  }
  s = db_->IngestExternalFiles(args);  // both families or neither, atomically
  // RocksDB removes the files' names once it has moved them in; a failure leaves them.
  remove_ingest_files(options_.path);
  if (!s.ok()) return error(what.c_str(), s.ToString());
  return {};
}

Status RocksTable::erase(std::span<const uint64_t> keys) {
  if (keys.empty()) return {};
  if (!injected_write_failure_.ok()) return injected_write_failure_;
  COLONY_ASSERT(keys.size() <= rows_, "erasing {} of {} rows", keys.size(), rows_);
  rocksdb::WriteBatch b;
  for (uint64_t k : keys) b.Delete(rows_cf_, encode_key(k));
  b.Put(meta_, key_rows, std::to_string(rows_ - keys.size()));
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  wo.disableWAL = !options_.write_ahead_log;
  rocksdb::Status s = db_->Write(wo, &b);
  if (!s.ok())
    return error(fmt::format("cannot delete a batch of {} rows", keys.size()).c_str(),
                 s.ToString());
  rows_ -= keys.size();
  return {};
}

Status RocksTable::for_each_in_range(uint64_t begin, uint64_t end,
                                     const std::function<void(uint64_t, const float*)>& f) const {
  const size_t rf = identity_.row_floats;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), rows_cf_));
  std::vector<float> row(rf);
  for (it->Seek(encode_key(begin)); it->Valid(); it->Next()) {
    if (it->key().size() != 8)
      return Status::invalid_input(
          fmt::format("{}: a row key of {} bytes", options_.path, it->key().size()));
    const uint64_t key = decode_key(it->key().data());
    if (key >= end) break;
    if (Status e = decode(key, it->value().ToStringView(), row.data()); !e.ok()) return e;
    f(key, row.data());
  }
  if (!it->status().ok()) return error("cannot iterate over the rows", it->status().ToString());
  return {};
}

Status RocksTable::flush() {
  if (!injected_write_failure_.ok()) return injected_write_failure_;
  rocksdb::Status s = db_->Flush(rocksdb::FlushOptions(), {meta_, rows_cf_});
  if (!s.ok()) return error("cannot flush", s.ToString());
  return {};
}

Status RocksTable::checkpoint(const std::string& dir) {
  if (!injected_write_failure_.ok()) return injected_write_failure_;
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db_.get(), &raw);
  if (!s.ok()) return error("cannot start a checkpoint", s.ToString());
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  s = cp->CreateCheckpoint(std::filesystem::absolute(dir).string());
  if (!s.ok())
    return error(fmt::format("cannot write a checkpoint to {}", dir).c_str(), s.ToString());
  return {};
}

uint64_t RocksTable::disk_bytes() const {
  uint64_t v = 0;
  if (!db_->GetIntProperty(rows_cf_, "rocksdb.total-sst-files-size", &v)) return 0;
  return v;
}

}  // namespace colony
