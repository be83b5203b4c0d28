// Colony's binary sample cache: a text file parsed once, stored so later passes skip parsing.
//
// Layout (every integer little-endian, floats IEEE-754 binary32, all written via memcpy):
//
//   header, cache_header_bytes (88) bytes:
//     0  char[8] magic "COLONYBC"
//     8  u32     format version (cache_format_version)
//    12  u32     source format (0 libsvm, 1 criteo, 2 libffm)
//    16  u64     source file size in bytes
//    24  i64     source file mtime, ns since the epoch
//    32  u64     rows (samples) in the cache
//    40  u64     features in the cache
//    48  u64     malformed source lines skipped while parsing (skip_bad_lines)
//    56  u64     number of blocks
//    64  u64     size of the whole cache file in bytes
//    72  u32     dense features per row d (0..cache_dense_max)
//    76  u32     reserved, 0
//    80  u64     checksum of bytes 0..80
//   then `blocks` blocks, each:
//     0  u32     block magic "CBLK"
//     4  u32     rows r (1..cache_block_rows_max)
//     8  u64     features f (0..cache_block_features_max)
//    16  u64     checksum: XXH64 of bytes 0..16, then of each array below in turn, each
//                seeded with the previous hash
//    24  f32[r]  labels
//        u32[r]  features per row (they sum to f)
//        u64[f]  keys
//        f32[f]  values
//        f32[r*d] dense features, row by row
//
// Checksums are XXH64 (checksum64 below). A cache is written to a temporary file in the
// directory of its final path and renamed into place only once complete, so a reader sees
// either a whole cache or none. It is not fsync'ed: after a crash it may be truncated or
// zeroed, which the checksums and the size in the header detect.
//
// Errors: anything wrong with a cache file (bad magic, version, checksum, truncation, sizes
// out of bounds) is Status::invalid_input naming the cache file; never undefined behaviour.
//
// Threads: a CacheReader or CacheWriter is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/batch.h"
#include "data/reader.h"
#include "data/text_formats.h"

namespace colony {

inline constexpr char cache_magic[8] = {'C', 'O', 'L', 'O', 'N', 'Y', 'B', 'C'};
inline constexpr uint32_t cache_format_version = 2;
inline constexpr uint32_t cache_dense_max = 1024;
inline constexpr size_t cache_header_bytes = 88;
inline constexpr size_t cache_block_header_bytes = 24;
// Blocks hold up to this many rows; the writer also closes a block once it holds
// cache_block_features_target features. Readers reject blocks over the _max bounds, which
// also bound the memory a corrupt header can make them allocate.
inline constexpr uint32_t cache_block_rows = 2048;
inline constexpr uint32_t cache_block_rows_max = 1 << 16;
inline constexpr uint64_t cache_block_features_target = uint64_t{1} << 20;
inline constexpr uint64_t cache_block_features_max = uint64_t{1} << 22;

// XXH64 of `size` bytes.
uint64_t checksum64(const void* data, size_t size, uint64_t seed);

// The source file a cache was made from, as it was when parsing started.
struct CacheSource {
  DataFormat format = DataFormat::libsvm;  // libsvm, criteo or libffm
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

struct CacheHeader {
  uint32_t version = cache_format_version;
  CacheSource source;
  uint64_t rows = 0;
  uint64_t features = 0;
  uint64_t bad_lines_skipped = 0;
  uint64_t blocks = 0;
  uint64_t file_bytes = 0;
  uint32_t dense_dim = 0;  // dense features per row
};

// Encodes/decodes the fixed header. decode fails (invalid_input naming `path`) on a bad
// magic, version or checksum.
void encode_cache_header(const CacheHeader& header, unsigned char (&out)[cache_header_bytes]);
Expected<CacheHeader> decode_cache_header(const unsigned char (&in)[cache_header_bytes],
                                          const std::string& path);

// Streams a cache file into batches of batch_rows rows (the last may be short): the same
// batches, bit for bit, that parsing its source with the same batch_rows gives.
class CacheReader final : public BatchReader {
 public:
  // Opens `path` and checks its header and size. `report_format` is what stats().format
  // says: DataFormat::cache for a cache opened by name, the source's format otherwise.
  // Fails with not_found (no file), invalid_input (not a valid cache) or io_error.
  static Expected<std::unique_ptr<CacheReader>> open(const std::string& path, size_t batch_rows,
                                                     bool report_source_format);

  const CacheHeader& header() const { return header_; }
  Expected<bool> next(Batch& out) override;
  ReaderStats stats() const override { return stats_; }

 private:
  CacheReader() = default;
  Status load_block();  // reads and checks the next block into the arrays below
  Status corrupt(const std::string& what) const;

  std::string path_;
  UniqueFd fd_;
  CacheHeader header_;
  size_t batch_rows_ = 0;
  ReaderStats stats_;
  uint64_t offset_ = 0;  // file offset of the next block
  uint64_t blocks_read_ = 0;
  uint64_t features_read_ = 0;  // features in the blocks loaded so far
  std::vector<float> labels_;   // the current block
  std::vector<uint32_t> lengths_;
  std::vector<uint64_t> keys_;
  std::vector<float> values_;
  std::vector<float> dense_;
  size_t block_rows_ = 0;  // rows in the current block
  size_t row_ = 0;         // next row of the current block
  size_t feature_ = 0;     // its first feature
  bool done_ = false;
  Status error_;
};

// Writes a cache while its source is parsed: append() every batch of a pass in order, then
// commit(). Until commit succeeds the data is in a temporary file beside `cache_path`, which
// the destructor removes, so an abandoned or failed pass leaves no cache behind.
class CacheWriter {
 public:
  // Creates the directory of `cache_path` if needed and the temporary file. Fails with
  // io_error (naming the file) when either cannot be created.
  static Expected<std::unique_ptr<CacheWriter>> create(const std::string& cache_path,
                                                       const CacheSource& source);
  ~CacheWriter();
  CacheWriter(const CacheWriter&) = delete;
  CacheWriter& operator=(const CacheWriter&) = delete;

  // Appends the rows of `batch`. On io_error the writer is unusable; destroy it.
  Status append(const Batch& batch);
  // Writes the last block and the header, then renames the file into place.
  Status commit(uint64_t bad_lines_skipped);
  const std::string& path() const { return path_; }

 private:
  CacheWriter() = default;
  Status write_block();
  Status write_at_end(const void* data, size_t size);

  std::string path_;
  std::string temp_path_;
  UniqueFd fd_;
  CacheHeader header_;
  uint64_t offset_ = cache_header_bytes;
  std::vector<float> labels_;  // the block being filled
  std::vector<uint32_t> lengths_;
  std::vector<uint64_t> keys_;
  std::vector<float> values_;
  std::vector<float> dense_;
  bool started_ = false;  // a row was appended: header_.dense_dim is set
  bool committed_ = false;
};

}  // namespace colony
