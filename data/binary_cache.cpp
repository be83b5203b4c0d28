#include "data/binary_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace colony {

// The arrays of a block are copied to and from memory as they are.
static_assert(std::endian::native == std::endian::little,
              "the cache's arrays are little-endian; a big-endian port must byte-swap them");

namespace {

constexpr char block_magic[4] = {'C', 'B', 'L', 'K'};

// XXH64 constants (Yann Collet's xxHash, BSD-licensed reference algorithm).
constexpr uint64_t p1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t p2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t p3 = 0x165667B19E3779F9ULL;
constexpr uint64_t p4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t p5 = 0x27D4EB2F165667C5ULL;

inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t xxh_round(uint64_t acc, uint64_t input) {
  acc += input * p2;
  acc = std::rotl(acc, 31);
  return acc * p1;
}
inline uint64_t xxh_merge(uint64_t acc, uint64_t v) {
  acc ^= xxh_round(0, v);
  return acc * p1 + p4;
}

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// Chained checksum of a block: its header's first 16 bytes, then each array.
uint64_t block_checksum(const unsigned char* header16, const float* labels, const uint32_t* lengths,
                        size_t rows, const uint64_t* keys, const float* values, size_t features,
                        const float* dense, size_t dense_floats) {
  uint64_t h = checksum64(header16, 16, 0);
  h = checksum64(labels, rows * sizeof(float), h);
  h = checksum64(lengths, rows * sizeof(uint32_t), h);
  h = checksum64(keys, features * sizeof(uint64_t), h);
  h = checksum64(values, features * sizeof(float), h);
  return checksum64(dense, dense_floats * sizeof(float), h);
}

std::string errno_text(int e) {
  return std::strerror(e);
}

}  // namespace

uint64_t checksum64(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + size;
  uint64_t h;
  if (size >= 32) {
    uint64_t v1 = seed + p1 + p2, v2 = seed + p2, v3 = seed, v4 = seed - p1;
    const unsigned char* const limit = end - 32;
    do {
      v1 = xxh_round(v1, load64(p));
      v2 = xxh_round(v2, load64(p + 8));
      v3 = xxh_round(v3, load64(p + 16));
      v4 = xxh_round(v4, load64(p + 24));
      p += 32;
    } while (p <= limit);
    h = std::rotl(v1, 1) + std::rotl(v2, 7) + std::rotl(v3, 12) + std::rotl(v4, 18);
    h = xxh_merge(h, v1);
    h = xxh_merge(h, v2);
    h = xxh_merge(h, v3);
    h = xxh_merge(h, v4);
  } else {
    h = seed + p5;
  }
  h += static_cast<uint64_t>(size);
  for (; p + 8 <= end; p += 8) {
    h ^= xxh_round(0, load64(p));
    h = std::rotl(h, 27) * p1 + p4;
  }
  if (p + 4 <= end) {
    h ^= uint64_t{load32(p)} * p1;
    h = std::rotl(h, 23) * p2 + p3;
    p += 4;
  }
  for (; p < end; ++p) {
    h ^= uint64_t{*p} * p5;
    h = std::rotl(h, 11) * p1;
  }
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= p3;
  h ^= h >> 32;
  return h;
}

void encode_cache_header(const CacheHeader& header, unsigned char (&out)[cache_header_bytes]) {
  std::memset(out, 0, sizeof out);
  std::memcpy(out, cache_magic, 8);
  put_u32(out + 8, header.version);
  put_u32(out + 12, header.source.format == DataFormat::criteo   ? 1
                    : header.source.format == DataFormat::libffm ? 2
                                                                 : 0);
  put_u64(out + 16, header.source.size);
  put_u64(out + 24, static_cast<uint64_t>(header.source.mtime_ns));
  put_u64(out + 32, header.rows);
  put_u64(out + 40, header.features);
  put_u64(out + 48, header.bad_lines_skipped);
  put_u64(out + 56, header.blocks);
  put_u64(out + 64, header.file_bytes);
  put_u32(out + 72, header.dense_dim);
  put_u32(out + 76, 0);
  put_u64(out + 80, checksum64(out, 80, 0));
}

Expected<CacheHeader> decode_cache_header(const unsigned char (&in)[cache_header_bytes],
                                          const std::string& path) {
  if (std::memcmp(in, cache_magic, 8) != 0) {
    return Status::invalid_input(
        fmt::format("{}: not a Colony cache file, expected it to start with \"COLONYBC\"", path));
  }
  CacheHeader h;
  h.version = get_u32(in + 8);
  if (h.version != cache_format_version) {
    return Status::invalid_input(fmt::format("{}: cache format version {}, expected {}", path,
                                             h.version, cache_format_version));
  }
  if (get_u64(in + 80) != checksum64(in, 80, 0)) {
    return Status::invalid_input(
        fmt::format("{}: corrupt cache file: header checksum mismatch", path));
  }
  uint32_t format = get_u32(in + 12);
  if (format > 2) {
    return Status::invalid_input(
        fmt::format("{}: corrupt cache file: source format {}, expected 0, 1 or 2", path, format));
  }
  h.source.format = format == 1   ? DataFormat::criteo
                    : format == 2 ? DataFormat::libffm
                                  : DataFormat::libsvm;
  h.source.size = get_u64(in + 16);
  h.source.mtime_ns = static_cast<int64_t>(get_u64(in + 24));
  h.rows = get_u64(in + 32);
  h.features = get_u64(in + 40);
  h.bad_lines_skipped = get_u64(in + 48);
  h.blocks = get_u64(in + 56);
  h.file_bytes = get_u64(in + 64);
  h.dense_dim = get_u32(in + 72);
  if (h.dense_dim > cache_dense_max) {
    return Status::invalid_input(
        fmt::format("{}: corrupt cache file: {} dense features per row, expected at most {}", path,
                    h.dense_dim, cache_dense_max));
  }
  return h;
}

// ---------------------------------------------------------------------------------------------
// CacheReader

Expected<std::unique_ptr<CacheReader>> CacheReader::open(const std::string& path, size_t batch_rows,
                                                         bool report_source_format) {
  COLONY_ASSERT(batch_rows > 0);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    int e = errno;
    if (e == ENOENT) return Status::not_found(fmt::format("{}: no such file", path));
    return Status::io_error(fmt::format("{}: cannot open: {}", path, errno_text(e)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return Status::io_error(fmt::format("{}: cannot stat: {}", path, errno_text(errno)));
  }
  auto size = static_cast<uint64_t>(st.st_size);
  unsigned char raw[cache_header_bytes];
  int64_t n = pread_full(fd.get(), raw, sizeof raw, 0);
  if (n < 0) return Status::io_error(fmt::format("{}: read failed: {}", path, errno_text(errno)));
  if (static_cast<size_t>(n) < sizeof raw) {
    return Status::invalid_input(
        fmt::format("{}: truncated cache file: {} bytes, expected at least a {}-byte header", path,
                    n, cache_header_bytes));
  }
  auto header = decode_cache_header(raw, path);
  if (!header) return header.status();
  if (header->file_bytes != size) {
    return Status::invalid_input(fmt::format(
        "{}: truncated or corrupt cache file: {} bytes, expected {} (as its header says)", path,
        size, header->file_bytes));
  }
  // Every block holds at least one row, and at least its header.
  if (header->blocks > size / cache_block_header_bytes || header->blocks > header->rows ||
      header->rows > header->blocks * cache_block_rows_max) {
    return Status::invalid_input(fmt::format("{}: corrupt cache file: {} rows in {} blocks", path,
                                             header->rows, header->blocks));
  }

  std::unique_ptr<CacheReader> r(new CacheReader());
  r->path_ = path;
  r->fd_ = std::move(fd);
  r->header_ = *header;
  r->batch_rows_ = batch_rows;
  r->offset_ = cache_header_bytes;
  r->stats_.bytes_read = cache_header_bytes;
  r->stats_.bytes_total = size;
  r->stats_.rows_total = header->rows;
  r->stats_.bad_lines_skipped = header->bad_lines_skipped;
  r->stats_.format = report_source_format ? header->source.format : DataFormat::cache;
  r->stats_.from_cache = true;
  return r;
}

Status CacheReader::corrupt(const std::string& what) const {
  return Status::invalid_input(fmt::format("{}: corrupt cache file: block {} at byte {}: {}", path_,
                                           blocks_read_, offset_, what));
}

Status CacheReader::load_block() {
  unsigned char head[cache_block_header_bytes];
  if (offset_ + sizeof head > header_.file_bytes) return corrupt("truncated block header");
  int64_t n = pread_full(fd_.get(), head, sizeof head, offset_);
  if (n < 0) return Status::io_error(fmt::format("{}: read failed: {}", path_, errno_text(errno)));
  if (static_cast<size_t>(n) < sizeof head) return corrupt("truncated block header");
  if (std::memcmp(head, block_magic, 4) != 0) return corrupt("bad block magic");
  uint32_t rows = get_u32(head + 4);
  uint64_t features = get_u64(head + 8);
  uint64_t checksum = get_u64(head + 16);
  if (rows == 0 || rows > cache_block_rows_max || features > cache_block_features_max) {
    return corrupt(fmt::format("{} rows and {} features, expected 1..{} and at most {}", rows,
                               features, cache_block_rows_max, cache_block_features_max));
  }
  const uint64_t dense_floats = uint64_t{rows} * header_.dense_dim;
  uint64_t payload = uint64_t{rows} * 8 + features * 12 + dense_floats * 4;
  if (offset_ + sizeof head + payload > header_.file_bytes) return corrupt("truncated block");

  if (labels_.size() < rows) {
    labels_.resize(rows);
    lengths_.resize(rows);
  }
  if (keys_.size() < features) {
    keys_.resize(features);
    values_.resize(features);
  }
  if (dense_.size() < dense_floats) dense_.resize(dense_floats);
  uint64_t at = offset_ + sizeof head;
  struct Part {
    void* data;
    size_t bytes;
  };
  const Part parts[] = {{labels_.data(), rows * sizeof(float)},
                        {lengths_.data(), rows * sizeof(uint32_t)},
                        {keys_.data(), features * sizeof(uint64_t)},
                        {values_.data(), features * sizeof(float)},
                        {dense_.data(), dense_floats * sizeof(float)}};
  for (const Part& part : parts) {
    int64_t got = pread_full(fd_.get(), part.data, part.bytes, at);
    if (got < 0) {
      return Status::io_error(fmt::format("{}: read failed: {}", path_, errno_text(errno)));
    }
    if (static_cast<size_t>(got) < part.bytes) return corrupt("truncated block");
    at += part.bytes;
  }
  if (block_checksum(head, labels_.data(), lengths_.data(), rows, keys_.data(), values_.data(),
                     features, dense_.data(), dense_floats) != checksum) {
    return corrupt("checksum mismatch");
  }
  uint64_t sum = 0;
  for (uint32_t i = 0; i < rows; ++i) sum += lengths_[i];
  if (sum != features) {
    return corrupt(fmt::format("row lengths sum to {}, expected {}", sum, features));
  }
  offset_ = at;
  ++blocks_read_;
  features_read_ += features;
  block_rows_ = rows;
  row_ = 0;
  feature_ = 0;
  return Status();
}

Expected<bool> CacheReader::next(Batch& out) {
  out.clear();
  if (!error_.ok()) return error_;
  while (!done_ && out.rows() < batch_rows_) {
    if (row_ == block_rows_) {
      if (blocks_read_ == header_.blocks) {
        if (stats_.rows + out.rows() != header_.rows || features_read_ != header_.features ||
            offset_ != header_.file_bytes) {
          error_ = corrupt(fmt::format("blocks hold {} rows and {} features, header says {} and {}",
                                       stats_.rows + out.rows(), features_read_, header_.rows,
                                       header_.features));
          out.clear();
          return error_;
        }
        done_ = true;
        break;
      }
      if (Status s = load_block(); !s.ok()) {
        error_ = std::move(s);
        out.clear();
        return error_;
      }
      stats_.bytes_read = offset_;
    }
    size_t n = std::min(batch_rows_ - out.rows(), block_rows_ - row_);
    out.labels.insert(out.labels.end(), labels_.data() + row_, labels_.data() + row_ + n);
    uint64_t base = out.offsets.back();
    uint64_t f = 0;
    for (size_t i = 0; i < n; ++i) {
      f += lengths_[row_ + i];
      out.offsets.push_back(static_cast<uint32_t>(base + f));
    }
    COLONY_ASSERT(base + f <= UINT32_MAX, "batch of {} features", base + f);
    out.keys.insert(out.keys.end(), keys_.data() + feature_, keys_.data() + feature_ + f);
    out.values.insert(out.values.end(), values_.data() + feature_, values_.data() + feature_ + f);
    out.dense_dim = header_.dense_dim;
    out.dense.insert(out.dense.end(), dense_.data() + row_ * header_.dense_dim,
                     dense_.data() + (row_ + n) * header_.dense_dim);
    row_ += n;
    feature_ += f;
  }
  stats_.rows += out.rows();
  return !out.empty();
}

// ---------------------------------------------------------------------------------------------
// CacheWriter

Expected<std::unique_ptr<CacheWriter>> CacheWriter::create(const std::string& cache_path,
                                                           const CacheSource& source) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path dir = std::filesystem::path(cache_path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return Status::io_error(
          fmt::format("{}: cannot create cache directory: {}", dir.string(), ec.message()));
    }
  }
  std::string temp = fmt::format("{}.tmp-{}-{}", cache_path, ::getpid(), counter++);
  UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return Status::io_error(fmt::format("{}: cannot create: {}", temp, errno_text(errno)));
  }
  std::unique_ptr<CacheWriter> w(new CacheWriter());
  w->path_ = cache_path;
  w->temp_path_ = std::move(temp);
  w->fd_ = std::move(fd);
  w->header_.source = source;
  return w;
}

CacheWriter::~CacheWriter() {
  if (!committed_ && !temp_path_.empty()) {
    fd_.reset();
    ::unlink(temp_path_.c_str());
  }
}

Status CacheWriter::write_at_end(const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::pwrite(fd_.get(), p, size, static_cast<off_t>(offset_));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::io_error(fmt::format("{}: write failed: {}", temp_path_, errno_text(errno)));
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset_ += static_cast<uint64_t>(n);
  }
  return Status();
}

Status CacheWriter::write_block() {
  size_t rows = labels_.size();
  if (rows == 0) return Status();
  size_t features = keys_.size();
  unsigned char head[cache_block_header_bytes];
  std::memcpy(head, block_magic, 4);
  put_u32(head + 4, static_cast<uint32_t>(rows));
  put_u64(head + 8, features);
  put_u64(head + 16, block_checksum(head, labels_.data(), lengths_.data(), rows, keys_.data(),
                                    values_.data(), features, dense_.data(), dense_.size()));
  struct Part {
    const void* data;
    size_t bytes;
  };
  const Part parts[] = {{head, sizeof head},
                        {labels_.data(), rows * sizeof(float)},
                        {lengths_.data(), rows * sizeof(uint32_t)},
                        {keys_.data(), features * sizeof(uint64_t)},
                        {values_.data(), features * sizeof(float)},
                        {dense_.data(), dense_.size() * sizeof(float)}};
  for (const Part& part : parts) {
    if (Status s = write_at_end(part.data, part.bytes); !s.ok()) return s;
  }
  header_.rows += rows;
  header_.features += features;
  ++header_.blocks;
  labels_.clear();
  lengths_.clear();
  keys_.clear();
  values_.clear();
  dense_.clear();
  return Status();
}

Status CacheWriter::append(const Batch& batch) {
  COLONY_ASSERT(!committed_);
  if (batch.empty()) return Status();
  if (!started_) {
    COLONY_ASSERT(batch.dense_dim <= cache_dense_max, "dense_dim {}", batch.dense_dim);
    header_.dense_dim = batch.dense_dim;
    started_ = true;
  }
  COLONY_ASSERT(batch.dense_dim == header_.dense_dim, "dense_dim {} after {}", batch.dense_dim,
                header_.dense_dim);
  for (size_t r = 0; r < batch.rows(); ++r) {
    uint32_t begin = batch.offsets[r], end = batch.offsets[r + 1];
    uint64_t row_features = end - begin;
    COLONY_ASSERT(row_features <= cache_block_features_max, "row of {} features", row_features);
    if (labels_.size() == cache_block_rows ||
        (!labels_.empty() && keys_.size() + row_features > cache_block_features_target)) {
      if (Status s = write_block(); !s.ok()) return s;
    }
    labels_.push_back(batch.labels[r]);
    lengths_.push_back(static_cast<uint32_t>(row_features));
    keys_.insert(keys_.end(), batch.keys.begin() + begin, batch.keys.begin() + end);
    values_.insert(values_.end(), batch.values.begin() + begin, batch.values.begin() + end);
    const auto dense = batch.row_dense(r);
    dense_.insert(dense_.end(), dense.begin(), dense.end());
  }
  return Status();
}

Status CacheWriter::commit(uint64_t bad_lines_skipped) {
  COLONY_ASSERT(!committed_);
  if (Status s = write_block(); !s.ok()) return s;
  header_.bad_lines_skipped = bad_lines_skipped;
  header_.file_bytes = offset_;
  unsigned char raw[cache_header_bytes];
  encode_cache_header(header_, raw);
  offset_ = 0;
  if (Status s = write_at_end(raw, sizeof raw); !s.ok()) return s;
  if (::close(fd_.release()) != 0) {
    return Status::io_error(fmt::format("{}: close failed: {}", temp_path_, errno_text(errno)));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return Status::io_error(
        fmt::format("cannot rename {} to {}: {}", temp_path_, path_, errno_text(errno)));
  }
  committed_ = true;
  return Status();
}

}  // namespace colony
