// Line splitting and line parsers for the text sample formats (libsvm, libffm, Criteo TSV).
//
// LineReader streams a file through one fixed buffer (read() in chunks), so memory stays
// bounded however large the file is; a line may span any number of chunks but not exceed
// LineLimits::line_bytes_max. The parsers turn one line into one row of a Batch, or into a
// LineError saying which column is wrong and what was expected. The key and value mapping of
// each format is described in data/reader.h.
//
// Threads: none of this is shared; each object is used by one thread at a time.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "data/batch.h"
#include "data/reader.h"

namespace colony {

inline constexpr size_t read_chunk_bytes_default = size_t{1} << 20;
inline constexpr size_t line_bytes_max_default = size_t{1} << 20;
inline constexpr int criteo_fields = 40;  // label, 13 integers, 26 categoricals
inline constexpr int criteo_integer_fields = 13;
inline constexpr int criteo_categorical_fields = 26;
// A Criteo integer column's value as a dense feature: log(1 + x), mirrored (-log(1 - x)) for
// negative x. The reader and the generator's Criteo rows both use it.
inline float criteo_dense_value(int64_t x) {
  return static_cast<float>(x >= 0 ? std::log1p(static_cast<double>(x))
                                   : -std::log1p(-static_cast<double>(x)));
}

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// Reads exactly `size` bytes at `offset` unless the file ends first. Returns the number of
// bytes read, or -1 with errno set on a read error.
int64_t pread_full(int fd, void* buf, size_t size, uint64_t offset);

struct LineLimits {
  size_t chunk_bytes = read_chunk_bytes_default;   // bytes asked of each read() call
  size_t line_bytes_max = line_bytes_max_default;  // a longer line is an error
};

// Splits a file into lines. The buffer holds chunk_bytes + line_bytes_max bytes.
class LineReader {
 public:
  enum class Result {
    line,      // line() is the next line
    end,       // no more lines
    too_long,  // line line_number() exceeds line_bytes_max; it is skipped, reading goes on
    io_error,  // read() failed with error_number(); further calls return io_error again
  };

  // Takes ownership of `fd`, positioned at the start of the file. Both limits must be > 0.
  LineReader(UniqueFd fd, LineLimits limits);

  Result next();
  // The line last returned, without its '\n' and without one '\r' before it. Valid until
  // the next call to next().
  std::string_view line() const { return line_; }
  // 1-based number of the line last returned (or of the line too long to return).
  uint64_t line_number() const { return line_number_; }
  // False when the line last returned ended at the end of the file without a newline.
  bool line_has_newline() const { return has_newline_; }
  uint64_t bytes_read() const { return bytes_read_; }
  int error_number() const { return errno_; }
  const LineLimits& limits() const { return limits_; }

 private:
  bool fill();  // reads one chunk after compacting; false on error (errno_ set)
  void set_line(const char* begin, const char* end, bool has_newline);

  UniqueFd fd_;
  LineLimits limits_;
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
  size_t begin_ = 0;    // first unconsumed byte
  size_t end_ = 0;      // one past the last byte read
  size_t scanned_ = 0;  // bytes in [begin_, begin_ + scanned_) hold no '\n'
  bool eof_ = false;
  bool skipping_ = false;  // discarding the rest of a line that was too long
  bool has_newline_ = true;
  int errno_ = 0;
  uint64_t line_number_ = 0;
  uint64_t bytes_read_ = 0;
  std::string_view line_;
};

// Why a line could not be parsed: a 1-based byte column and "<what is wrong>, expected <what>".
struct LineError {
  size_t column = 0;
  std::string what;
};

// True for an empty line or one of spaces and tabs only.
bool is_blank_line(std::string_view line);

// Which text format a file's first non-blank line is in: Criteo when it has a tab and either
// exactly criteo_fields tab-separated fields or no ':' at all (so a Criteo file with a wrong
// field count in its first line still reports that, not a libsvm error); libffm when it has no
// tab and its first feature has two ':' (field:index:value); else libsvm.
DataFormat classify_text_line(std::string_view line);

// Parse one line and append it as a row of `out` (features, then finish_row). On failure
// `out` is left as it was and `error` says why. Trailing spaces, tabs and a '\r' are allowed.
bool parse_libsvm_line(std::string_view line, Batch& out, LineError& error);
bool parse_libffm_line(std::string_view line, Batch& out, LineError& error);
bool parse_criteo_line(std::string_view line, Batch& out, LineError& error);

// The parser for a text format (not DataFormat::cache).
using LineParser = bool (*)(std::string_view, Batch&, LineError&);
LineParser line_parser_for(DataFormat format);

// Opens `path` like open_reader(path, options) but with the given line limits: for tests of
// lines that span read chunks and of overlong lines. Defined in reader.cpp.
Expected<std::unique_ptr<BatchReader>> open_reader(const std::string& path,
                                                   const ReaderOptions& options,
                                                   const LineLimits& limits);

}  // namespace colony
