#include "storage/push_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/hash.h"
#include "storage/dense_file.h"

namespace colony {

namespace {
static_assert(std::endian::native == std::endian::little, "the push log is little-endian");
// Version 2 checksums records with XXH3-64; version 1 (read and replayed, never started) with
// FNV-1a 64, a byte at a time, which was most of an append's time.
constexpr char magic[8] = {'C', 'O', 'L', 'O', 'N', 'Y', 'L', '2'};
constexpr char magic_v1[8] = {'C', 'O', 'L', 'O', 'N', 'Y', 'L', '1'};
constexpr size_t header_bytes = 16;
constexpr size_t record_header_bytes = 24;

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Writes the pieces in order, with as few system calls as the kernel allows.
Status write_all(int fd, std::span<iovec> pieces) {
  while (!pieces.empty()) {
    const ssize_t w = ::writev(fd, pieces.data(), int(std::min<size_t>(pieces.size(), IOV_MAX)));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::io_error(std::strerror(errno));
    }
    for (size_t left = size_t(w); left;) {  // skip what was written
      const size_t n = std::min(left, pieces.front().iov_len);
      pieces.front().iov_base = static_cast<char*>(pieces.front().iov_base) + n;
      pieces.front().iov_len -= n;
      left -= n;
      if (pieces.front().iov_len == 0) pieces = pieces.subspan(1);
    }
    while (!pieces.empty() && pieces.front().iov_len == 0) pieces = pieces.subspan(1);
  }
  return {};
}

Status write_all(int fd, const char* p, size_t n) {
  iovec one{const_cast<char*>(p), n};
  return write_all(fd, std::span<iovec>(&one, 1));
}

std::string header(size_t row_floats) {
  std::string h(magic, sizeof magic);
  put(h, uint32_t(row_floats));
  put(h, uint32_t(0));
  return h;
}
}  // namespace

bool push_log_pending(const std::string& store_dir) {
  struct stat st {};
  const std::string path = store_dir + "/" + push_log_file_name;
  return ::stat(path.c_str(), &st) == 0 && uint64_t(st.st_size) > header_bytes;
}

Status PushLog::fail(const char* what) const {
  return Status::io_error(fmt::format("{}: cannot {}: {}", path_, what, std::strerror(errno)));
}

Expected<std::unique_ptr<PushLog>> PushLog::open(const std::string& path, size_t row_floats,
                                                 bool sync) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::io_error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::unique_ptr<PushLog> log(new PushLog(path, fd, row_floats, sync));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return log->fail("stat it");
  log->bytes_ = uint64_t(st.st_size);
  // Shorter than its header: a crash while the log was being created, before any record.
  if (log->bytes_ < header_bytes) {
    if (::ftruncate(fd, 0) != 0) return log->fail("start it again");
    log->bytes_ = 0;
  }
  if (log->bytes_ == 0) {
    const std::string h = header(row_floats);
    if (Status s = write_all(fd, h.data(), h.size()); !s.ok()) return log->fail("write its header");
    if (::fdatasync(fd) != 0) return log->fail("sync it");
    log->bytes_ = h.size();
    // Its name too, before any record is acknowledged from it.
    if (sync) {
      const std::filesystem::path folder = std::filesystem::path(path).parent_path();
      if (Status s = sync_folder(folder.empty() ? "." : folder.string()); !s.ok()) return s;
    }
    return log;
  }
  char h[header_bytes];
  // The file holds a whole header (above): a read that fails or comes short is the disk's or a
  // concurrent writer's doing, not a file of another kind.
  const ssize_t got = ::pread(fd, h, sizeof h, 0);
  if (got < 0) return log->fail("read its header");
  if (got != ssize_t(sizeof h))
    return Status::io_error(
        fmt::format("{}: cannot read its header: {} of its {} bytes read (cut "
                    "short while being opened?)",
                    path, got, header_bytes));
  if (std::memcmp(h, magic_v1, sizeof magic_v1) == 0)
    log->version_ = 1;
  else if (std::memcmp(h, magic, sizeof magic) != 0)
    return Status::invalid_input(fmt::format("{}: not a Colony push log", path));
  const uint32_t width = get<uint32_t>(h + 8);
  if (width != row_floats)
    return Status::invalid_input(
        fmt::format("{}: a push log of rows of {} floats, not {}", path, width, row_floats));
  return log;
}

PushLog::~PushLog() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t PushLog::checksum(std::span<const std::span<const char>> pieces) const {
  if (version_ == 1) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (std::span<const char> p : pieces) h = fnv1a64(p.data(), p.size(), h);
    return h;
  }
  if (!hash_state_) {
    hash_state_.reset(XXH3_createState());
    COLONY_ASSERT(hash_state_, "out of memory for an XXH3 state");
  }
  XXH3_state_t* state = hash_state_.get();
  XXH3_64bits_reset(state);
  for (std::span<const char> p : pieces) XXH3_64bits_update(state, p.data(), p.size());
  return XXH3_64bits_digest(state);
}

void PushLog::HashStateFree::operator()(XXH3_state_s* s) const {
  XXH3_freeState(s);
}

Status PushLog::append(const Record& r) {
  if (r.keys.empty() && r.clocks.empty()) return {};
  const size_t row_bytes = r.kind == Kind::rows ? r.keys.size() * row_floats_ * sizeof(float) : 0;
  // The record's header and counts and clocks are put together here; its keys and rows are
  // written from where they are (no copy), and checksummed in place.
  buf_.clear();
  put(buf_, uint32_t(r.kind));
  put(buf_, uint32_t(0));
  const uint64_t payload = 16 + r.clocks.size() * 16 + r.keys.size() * sizeof(uint64_t) + row_bytes;
  put(buf_, payload);
  put(buf_, uint64_t(0));  // the checksum, filled in below
  put(buf_, uint64_t(r.clocks.size()));
  put(buf_, uint64_t(r.keys.size()));
  for (auto [sender, clock] : r.clocks) {
    put(buf_, sender);
    put(buf_, uint64_t(clock));
  }
  const std::span<const char> pieces[3] = {
      {buf_.data() + record_header_bytes, buf_.size() - record_header_bytes},
      {reinterpret_cast<const char*>(r.keys.data()), r.keys.size() * sizeof(uint64_t)},
      {reinterpret_cast<const char*>(r.rows.data()), row_bytes}};
  const uint64_t sum = checksum(pieces);
  std::memcpy(buf_.data() + 16, &sum, sizeof sum);
  iovec iov[3] = {{buf_.data(), buf_.size()},
                  {const_cast<char*>(pieces[1].data()), pieces[1].size()},
                  {const_cast<char*>(pieces[2].data()), pieces[2].size()}};
  Status written;
  if (!injected_append_failure_.ok()) {
    const size_t part = std::min(injected_append_bytes_, buf_.size());
    written = write_all(fd_, buf_.data(), part);
    if (written.ok()) written = std::exchange(injected_append_failure_, Status());
  } else {
    written = write_all(fd_, iov);
    if (written.ok() && sync_ && ::fdatasync(fd_) != 0) written = fail("sync it");
  }
  if (!written.ok()) {
    // Nothing of a failed append stays: a record appended after its torn bytes would be cut off
    // with them at replay.
    if (::ftruncate(fd_, off_t(bytes_)) != 0)
      return Status::io_error(
          fmt::format("{}: cannot append a push ({}), nor cut off what it "
                      "wrote: {}",
                      path_, written.message(), std::strerror(errno)));
    return Status::io_error(fmt::format("{}: cannot append a push: {}", path_, written.message()));
  }
  bytes_ += buf_.size() + pieces[1].size() + pieces[2].size();
  return {};
}

Status PushLog::truncate() {
  if (version_ == 1) {
    // Started again in the current version.
    const std::string h = header(row_floats_);
    if (::ftruncate(fd_, 0) != 0) return fail("truncate it");
    if (Status s = write_all(fd_, h.data(), h.size()); !s.ok()) return fail("write its header");
    if (::fdatasync(fd_) != 0) return fail("sync it");
    version_ = 2;
    bytes_ = header_bytes;
    return {};
  }
  if (bytes_ == header_bytes) return {};
  if (::ftruncate(fd_, header_bytes) != 0) return fail("truncate it");
  if (sync_ && ::fdatasync(fd_) != 0) return fail("sync it");
  bytes_ = header_bytes;
  return {};
}

Status PushLog::replay(const std::function<Status(const Record&)>& f, Replayed& out) {
  out = {};
  // Record by record: what is held at once is one record, not the log (which may be several
  // times a large cache).
  const uint64_t end = bytes_;
  auto read = [&](char* to, size_t n, uint64_t from) {
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::pread(fd_, to + got, n - got, off_t(from + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return false;
      if (r == 0) {
        errno = EIO;  // the file is shorter than it was when opened
        return false;
      }
      got += size_t(r);
    }
    return true;
  };
  char h[record_header_bytes];
  std::string payload_buf;
  Status read_error;
  // The payload's size when the record at `at` is whole, read into payload_buf (its kind in
  // h); 0 when it is torn or damaged, or could not be read (read_error).
  auto whole = [&](uint64_t at) -> uint64_t {
    if (end - at < record_header_bytes) return 0;
    if (!read(h, record_header_bytes, at)) {
      read_error = fail("read it");
      return 0;
    }
    const uint32_t kind = get<uint32_t>(h);
    const uint64_t payload = get<uint64_t>(h + 8);
    if ((kind != uint32_t(Kind::rows) && kind != uint32_t(Kind::erase)) || payload < 16 ||
        payload > end - at - record_header_bytes)
      return 0;
    payload_buf.resize(payload);
    if (!read(payload_buf.data(), payload, at + record_header_bytes)) {
      read_error = fail("read it");
      return 0;
    }
    out.largest_record = std::max(out.largest_record, record_header_bytes + payload);
    const char* p = payload_buf.data();
    const std::span<const char> all[1] = {{p, payload}};
    if (checksum(all) != get<uint64_t>(h + 16)) return 0;
    const uint64_t n_clocks = get<uint64_t>(p), n_keys = get<uint64_t>(p + 8);
    const uint64_t row_bytes =
        kind == uint32_t(Kind::rows) ? n_keys * row_floats_ * sizeof(float) : 0;
    // A record that checks out but whose counts do not add up was not written by append().
    if (n_clocks > payload / 16 || n_keys > payload / 8 ||
        16 + n_clocks * 16 + n_keys * 8 + row_bytes != payload)
      return 0;
    for (uint64_t i = 0; i < n_clocks; ++i)
      if (get<uint64_t>(p + 16 + i * 16 + 8) > UINT32_MAX) return 0;
    return payload;
  };
  std::vector<std::pair<uint64_t, uint32_t>> clocks;
  std::vector<uint64_t> keys;
  std::vector<float> rows;
  uint64_t at = header_bytes;
  while (const uint64_t payload = whole(at)) {
    const uint32_t kind = get<uint32_t>(h);
    const char* p = payload_buf.data();
    const uint64_t n_clocks = get<uint64_t>(p), n_keys = get<uint64_t>(p + 8);
    p += 16;
    clocks.clear();
    for (uint64_t i = 0; i < n_clocks; ++i, p += 16)
      clocks.emplace_back(get<uint64_t>(p), uint32_t(get<uint64_t>(p + 8)));
    keys.resize(n_keys);
    std::memcpy(keys.data(), p, n_keys * 8);
    p += n_keys * 8;
    rows.resize(kind == uint32_t(Kind::rows) ? n_keys * row_floats_ : 0);
    std::memcpy(rows.data(), p, rows.size() * sizeof(float));
    if (Status s = f(Record{Kind(kind), clocks, keys, rows}); !s.ok()) return s;
    ++out.records;
    if (kind == uint32_t(Kind::rows)) out.rows += n_keys;
    at += record_header_bytes + payload;
  }
  if (!read_error.ok()) return read_error;
  // Under sync every record was on disk before the next was written: a bad record followed by
  // a whole one is damage, not the torn tail of a crash, and cutting it would lose what was
  // acknowledged after it. (Without sync a crash of the machine may lose any unsynced page.)
  if (sync_ && end - at >= record_header_bytes) {
    const uint64_t declared = get<uint64_t>(h + 8);
    if (declared <= end - at - record_header_bytes &&
        whole(at + record_header_bytes + declared) != 0)
      return Status::io_error(fmt::format(
          "{}: the record at byte {} is damaged and whole records follow it: not a torn tail; the "
          "log is kept (moving it away starts the store without the {} bytes from there on)",
          path_, at, end - at));
    if (!read_error.ok()) return read_error;
  }
  out.dropped_bytes = end - at;
  if (out.dropped_bytes) {
    if (::ftruncate(fd_, off_t(at)) != 0 || ::fdatasync(fd_) != 0)
      return fail("cut off its torn tail");
    bytes_ = at;
  }
  return {};
}

}  // namespace colony
