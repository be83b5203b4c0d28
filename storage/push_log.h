// A shard's push log: the rows each push left behind, appended before the push is acknowledged,
// so that a store keeping rows dirty in memory (the tiered store) loses nothing acknowledged
// when its process dies (`--durability log`), or its machine (`--durability fsync`).
//
// It logs row images, not gradients: replaying a record puts its rows back as they were after
// that push, so replaying any suffix of the log over a store that already holds some of it (rows
// written back or evicted since) ends in the same rows. The store truncates the log once every
// row it names is in the table (TieredRowStore::write_back), which bounds its length.
//
// File layout (little-endian), in the store's folder (push_log_file_name):
//   header: 8 bytes "COLONYL2", u32 row_floats, u32 zero
//   record: u32 kind (1 rows, 2 erase), u32 zero, u64 payload bytes, u64 checksum
//           (XXH3-64 of the payload, seed 0), payload:
//           u64 clocks, u64 keys, clocks x (u64 sender, u64 clock), keys x u64,
//           rows: keys x row_floats x f32 (kind 1 only)
// A record is complete or it is the torn tail of a crash: replay() stops at the first record that
// is short or fails its checksum, cuts the file there and says how many bytes it dropped.
// A log of version 1 ("COLONYL1": the same records, checksummed with FNV-1a 64), left by an
// earlier Colony, is replayed and appended to as it is; truncate() starts it again as version 2.
//
// Errors: io_error naming the file (open, write, sync, truncate), invalid_input for a file that
// is not a push log or was written for another row width (nothing is replayed then).
//
// Thread-safety: none; one store owns its log.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "common/status.h"

struct XXH3_state_s;  // xxhash.h

namespace colony {

inline constexpr const char* push_log_file_name = "COLONY-PUSH-LOG";

// True when the shard store folder `store_dir` has a push log holding records: pushes its table
// may not hold yet (the ps or job that had it open did not exit cleanly). Opening the store
// (open_shard_store) replays them; readers of the table alone (export) must not go on without.
bool push_log_pending(const std::string& store_dir);

class PushLog {
 public:
  enum class Kind : uint32_t { rows = 1, erase = 2 };
  struct Record {
    Kind kind = Kind::rows;
    std::span<const std::pair<uint64_t, uint32_t>> clocks;  // (sender, clock)
    std::span<const uint64_t> keys;
    std::span<const float> rows;  // keys.size() x row_floats (rows); empty (erase)
  };
  struct Replayed {
    uint64_t records = 0;
    uint64_t rows = 0;
    uint64_t dropped_bytes = 0;  // a torn or damaged tail, cut off
    // The bytes of the largest record read: replay holds one record at a time, never the log.
    uint64_t largest_record = 0;
  };

  // Opens the log at `path`, creating it (with its header) when missing or shorter than its
  // header (a crash while it was created); `sync`: every append and truncate is followed by
  // fdatasync, and a log created here has its folder synced too. Fails as the header says.
  static Expected<std::unique_ptr<PushLog>> open(const std::string& path, size_t row_floats,
                                                 bool sync);
  ~PushLog();
  PushLog(const PushLog&) = delete;
  PushLog& operator=(const PushLog&) = delete;

  // Calls f for every whole record in the order they were appended, then cuts off a torn tail.
  // Fails with io_error when the file cannot be read or cut, or with f's first failure; and,
  // for a log opened with `sync`, naming the byte, when a damaged record is followed by a whole
  // one (every record was synced before the next: that is damage, not a torn tail), keeping it.
  Status replay(const std::function<Status(const Record&)>& f, Replayed& out);
  // Appends one record (one writev, then fdatasync when `sync`). A record with no keys and no
  // clocks writes nothing. Fails with io_error, having cut off what it wrote (a crash meanwhile
  // leaves a torn record at the end, which replay() cuts off).
  Status append(const Record& record);
  // Empties the log (keeps the header; a version-1 log gets a version-2 one). Call only when every
  // row it names is in the table.
  Status truncate();
  // Tests (a full disk): the next append writes the first `bytes` of its record (at most its
  // header), then fails with `s`.
  void inject_append_failure(Status s, size_t bytes = 0) {
    injected_append_failure_ = std::move(s);
    injected_append_bytes_ = bytes;
  }
  // Bytes in the file now, header included.
  uint64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  PushLog(std::string path, int fd, size_t row_floats, bool sync)
      : path_(std::move(path)), fd_(fd), row_floats_(row_floats), sync_(sync) {}
  Status fail(const char* what) const;
  // The record checksum of this log's version over `pieces` in order.
  uint64_t checksum(std::span<const std::span<const char>> pieces) const;

  std::string path_;
  Status injected_append_failure_;
  size_t injected_append_bytes_ = 0;
  int fd_ = -1;
  size_t row_floats_ = 0;
  bool sync_ = false;
  uint64_t bytes_ = 0;
  int version_ = 2;  // of the file's format (header magic)
  struct HashStateFree {
    void operator()(XXH3_state_s* s) const;
  };
  // The XXH3 state checksum() reuses (its layout is the library's own, so the library makes it).
  mutable std::unique_ptr<XXH3_state_s, HashStateFree> hash_state_;
  std::string buf_;
};

}  // namespace colony
