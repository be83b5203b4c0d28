#include "data/text_formats.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "common/hash.h"

namespace colony {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int64_t pread_full(int fd, void* buf, size_t size, uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<int64_t>(done);
}

// ---------------------------------------------------------------------------------------------
// LineReader

LineReader::LineReader(UniqueFd fd, LineLimits limits) : fd_(std::move(fd)), limits_(limits) {
  COLONY_ASSERT(limits_.chunk_bytes > 0 && limits_.line_bytes_max > 0, "chunk {} line max {}",
                limits_.chunk_bytes, limits_.line_bytes_max);
  // After compaction at most line_bytes_max bytes of a partial line remain, so one more chunk
  // always fits.
  capacity_ = limits_.chunk_bytes + limits_.line_bytes_max + 1;
  buffer_ = std::make_unique_for_overwrite<char[]>(capacity_);
}

void LineReader::set_line(const char* begin, const char* end, bool has_newline) {
  if (end > begin && end[-1] == '\r') --end;
  line_ = std::string_view(begin, static_cast<size_t>(end - begin));
  has_newline_ = has_newline;
}

bool LineReader::fill() {
  char* base = buffer_.get();
  if (begin_ > 0) {
    std::memmove(base, base + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  COLONY_ASSERT(capacity_ - end_ >= limits_.chunk_bytes, "end {} capacity {}", end_, capacity_);
  for (;;) {
    ssize_t n = ::read(fd_.get(), base + end_, limits_.chunk_bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      errno_ = errno;
      return false;
    }
    if (n == 0) eof_ = true;
    end_ += static_cast<size_t>(n);
    bytes_read_ += static_cast<uint64_t>(n);
    return true;
  }
}

LineReader::Result LineReader::next() {
  if (errno_ != 0) return Result::io_error;
  for (;;) {
    char* base = buffer_.get();
    size_t avail = end_ - begin_;
    if (scanned_ < avail) {
      const char* from = base + begin_ + scanned_;
      const auto* nl = static_cast<const char*>(std::memchr(from, '\n', avail - scanned_));
      if (nl != nullptr) {
        const char* line_begin = base + begin_;
        size_t length = static_cast<size_t>(nl - line_begin);
        begin_ = static_cast<size_t>(nl - base) + 1;
        scanned_ = 0;
        if (skipping_) {
          skipping_ = false;
          continue;
        }
        ++line_number_;
        if (length > limits_.line_bytes_max) return Result::too_long;
        set_line(line_begin, nl, true);
        return Result::line;
      }
      scanned_ = avail;
    }
    // No newline in [begin_, end_).
    if (skipping_) {
      begin_ = end_ = scanned_ = 0;
    } else if (avail > limits_.line_bytes_max) {
      ++line_number_;
      skipping_ = true;
      begin_ = end_ = scanned_ = 0;
      return Result::too_long;
    }
    if (eof_) {
      if (end_ > begin_) {
        ++line_number_;
        set_line(base + begin_, base + end_, false);
        begin_ = end_;
        scanned_ = 0;
        return Result::line;
      }
      skipping_ = false;
      return Result::end;
    }
    if (!fill()) return Result::io_error;
  }
}

// ---------------------------------------------------------------------------------------------
// Parsers

namespace {

inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}
inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// A token for an error message: bounded, with unprintable bytes escaped.
std::string quote(const char* begin, const char* end) {
  constexpr size_t shown_max = 40;
  std::string s = "\"";
  size_t n = static_cast<size_t>(end - begin);
  for (size_t i = 0; i < std::min(n, shown_max); ++i) {
    auto c = static_cast<unsigned char>(begin[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      s += static_cast<char>(c);
    } else {
      s += fmt::format("\\x{:02x}", c);
    }
  }
  if (n > shown_max) s += "...";
  s += '"';
  return s;
}

bool fail(LineError& error, std::string_view line, const char* at, std::string what) {
  error.column = static_cast<size_t>(at - line.data()) + 1;
  error.what = std::move(what);
  return false;
}

// A finite float in [begin, end), with an optional leading '+'. Values too small for a float
// round to it (0 or a subnormal); values too large are rejected.
bool parse_finite_float(const char* begin, const char* end, float& out) {
  if (begin < end && *begin == '+' && end - begin > 1 && begin[1] != '-') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, out);
  if (ec == std::errc() && ptr == end) return std::isfinite(out);
  if (ec != std::errc::result_out_of_range) return false;
  double d = 0;
  auto [dptr, dec] = std::from_chars(begin, end, d);
  if (dec != std::errc() || dptr != end || !std::isfinite(d)) return false;
  if (std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max())) return false;
  out = static_cast<float>(d);
  return true;
}

// libsvm labels: 0/1 and -1/+1 in any decimal spelling ("1.0", "-1", "+1"); -1 means 0.
bool parse_libsvm_label(const char* begin, const char* end, float& label) {
  if (end - begin == 1 && (*begin == '0' || *begin == '1')) {
    label = static_cast<float>(*begin - '0');
    return true;
  }
  if (begin < end && *begin == '+' && end - begin > 1 && begin[1] != '-') ++begin;
  double v = 0;
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || ptr != end) return false;
  if (v == 1.0) {
    label = 1;
  } else if (v == 0.0 || v == -1.0) {
    label = 0;
  } else {
    return false;
  }
  return true;
}

}  // namespace

bool is_blank_line(std::string_view line) {
  for (char c : line) {
    if (!is_space(c)) return false;
  }
  return true;
}

DataFormat classify_text_line(std::string_view line) {
  if (line.find('\t') != std::string_view::npos) {
    auto fields = std::count(line.begin(), line.end(), '\t') + 1;
    if (fields == criteo_fields || line.find(':') == std::string_view::npos)
      return DataFormat::criteo;
  }
  // libffm when the first feature is field:index:value (two ':').
  size_t p = 0;
  while (p < line.size() && is_space(line[p])) ++p;
  while (p < line.size() && !is_space(line[p])) ++p;  // the label
  while (p < line.size() && is_space(line[p])) ++p;
  size_t colons = 0;
  for (; p < line.size() && !is_space(line[p]); ++p) colons += line[p] == ':';
  return colons == 2 ? DataFormat::libffm : DataFormat::libsvm;
}

namespace {

// A libsvm or libffm line: the label, then space-separated features. `feature(p, e)` parses
// the one at `p` (ending at the next space or `e`), adds it to `out` and moves `p` past it, or
// fills `error` and returns false; the row is then dropped and `out` left as it was.
template <class ParseFeature>
bool parse_sparse_line(std::string_view line, Batch& out, LineError& error,
                       ParseFeature&& feature) {
  const char* p = line.data();
  const char* const e = p + line.size();
  while (p < e && is_space(*p)) ++p;
  const char* label_begin = p;
  while (p < e && !is_space(*p)) ++p;
  float label = 0;
  if (label_begin == p) return fail(error, line, p, "empty line, expected a sample");
  if (!parse_libsvm_label(label_begin, p, label))
    return fail(error, line, label_begin,
                fmt::format("bad label {}, expected 0, 1, -1 or +1", quote(label_begin, p)));
  for (;;) {
    while (p < e && is_space(*p)) ++p;
    if (p == e) break;
    if (!feature(p, e)) {
      out.abandon_row();
      return false;
    }
  }
  COLONY_ASSERT(out.keys.size() <= std::numeric_limits<uint32_t>::max(), "batch of {} features",
                out.keys.size());
  out.finish_row(label);
  return true;
}

}  // namespace

bool parse_libsvm_line(std::string_view line, Batch& out, LineError& error) {
  return parse_sparse_line(line, out, error, [&](const char*& p, const char* e) {
    const char* feature = p;
    uint64_t index = 0;
    auto [index_end, ec] = std::from_chars(p, e, index);
    if (ec == std::errc() && is_digit(*p) && (index_end == e || is_space(*index_end)))
      return fail(
          error, line, feature,
          fmt::format("truncated feature {}, expected index:value", quote(feature, index_end)));
    if (ec != std::errc() || !is_digit(*p) || *index_end != ':') {
      const char* token_end = p;
      while (token_end < e && *token_end != ':' && !is_space(*token_end)) ++token_end;
      return fail(error, line, feature,
                  fmt::format("bad feature index {}, expected an unsigned integer",
                              quote(feature, token_end)));
    }
    const char* value_begin = index_end + 1;
    p = value_begin;
    while (p < e && !is_space(*p)) ++p;
    if (value_begin == p)
      return fail(
          error, line, feature,
          fmt::format("truncated feature {}, expected a value after ':'", quote(feature, p)));
    float value = 0;
    if (!parse_finite_float(value_begin, p, value))
      return fail(
          error, line, value_begin,
          fmt::format("bad feature value {}, expected a finite number", quote(value_begin, p)));
    out.add_feature(make_key(0, mix64(index)), value);
    return true;
  });
}

bool parse_libffm_line(std::string_view line, Batch& out, LineError& error) {
  return parse_sparse_line(line, out, error, [&](const char*& p, const char* e) {
    const char* feature = p;
    const char* token_end = p;
    while (token_end < e && !is_space(*token_end)) ++token_end;
    // field:index[:value]
    uint32_t field = 0;
    auto [field_end, fec] = std::from_chars(p, token_end, field);
    if (fec != std::errc() || !is_digit(*p) || field_end == token_end || *field_end != ':' ||
        field > key_field_max)
      return fail(error, line, feature,
                  fmt::format("bad field {}, expected an integer 0..{} then ':'",
                              quote(feature, std::find(p, token_end, ':')), key_field_max));
    const char* index_begin = field_end + 1;
    uint64_t index = 0;
    auto [index_end, iec] = std::from_chars(index_begin, token_end, index);
    if (iec != std::errc() || index_begin == token_end || !is_digit(*index_begin) ||
        (index_end != token_end && *index_end != ':'))
      return fail(error, line, index_begin,
                  fmt::format("bad feature index {}, expected field:index[:value] with an "
                              "unsigned integer index",
                              quote(feature, token_end)));
    float value = 1.0f;
    if (index_end != token_end) {
      const char* value_begin = index_end + 1;
      if (value_begin == token_end || !parse_finite_float(value_begin, token_end, value))
        return fail(error, line, value_begin,
                    fmt::format("bad feature value {}, expected a finite number",
                                quote(value_begin, token_end)));
    }
    out.add_feature(make_key(field, mix64(index)), value);
    p = token_end;
    return true;
  });
}

bool parse_criteo_line(std::string_view line, Batch& out, LineError& error) {
  const char* const begin = line.data();
  const char* e = begin + line.size();
  while (e > begin && (e[-1] == ' ' || e[-1] == '\r')) --e;

  auto fields = std::count(begin, e, '\t') + 1;
  if (fields != criteo_fields) {
    const char* at = e;
    if (fields > criteo_fields) {  // point at the first field too many
      at = begin;
      for (int i = 0; i < criteo_fields; ++i) at = std::find(at, e, '\t') + 1;
    }
    return fail(error, line, at,
                fmt::format("wrong number of fields: found {} tab-separated fields, expected {}",
                            fields, criteo_fields));
  }

  const char* p = begin;
  auto field_end = [&] { return static_cast<const char*>(std::find(p, e, '\t')); };

  const char* f = field_end();
  if (f - p != 1 || (*p != '0' && *p != '1')) {
    return fail(error, line, p, fmt::format("bad label {}, expected 0 or 1", quote(p, f)));
  }
  float label = static_cast<float>(*p - '0');
  p = f + 1;

  float dense[criteo_integer_fields] = {};
  for (int i = 0; i < criteo_integer_fields; ++i) {
    f = field_end();
    if (f != p) {
      int64_t x = 0;
      auto [ptr, ec] = std::from_chars(p, f, x);
      if (ec != std::errc() || ptr != f) {
        out.abandon_row();
        return fail(error, line, p,
                    fmt::format("bad integer {} in field I{}, expected an integer or nothing",
                                quote(p, f), i + 1));
      }
      dense[i] = criteo_dense_value(x);
    }
    p = f + 1;
  }

  for (int j = 0; j < criteo_categorical_fields; ++j) {
    f = field_end();
    if (f != p) {
      uint64_t h = 0;
      auto [ptr, ec] = std::from_chars(p, f, h, 16);
      if (f - p > 16 || ec != std::errc() || ptr != f) {
        out.abandon_row();
        return fail(error, line, p,
                    fmt::format("bad categorical {} in field C{}, expected 1 to 16 hex digits "
                                "or nothing",
                                quote(p, f), j + 1));
      }
      out.add_feature(make_key(static_cast<uint32_t>(j), mix64(h)), 1.0f);
    }
    p = f + 1;
  }
  COLONY_ASSERT(out.keys.size() <= std::numeric_limits<uint32_t>::max(), "batch of {} features",
                out.keys.size());
  out.add_dense(dense, criteo_integer_fields);
  out.finish_row(label);
  return true;
}

LineParser line_parser_for(DataFormat format) {
  switch (format) {
    case DataFormat::libsvm:
      return &parse_libsvm_line;
    case DataFormat::criteo:
      return &parse_criteo_line;
    case DataFormat::libffm:
      return &parse_libffm_line;
    case DataFormat::cache:
      break;
  }
  COLONY_ASSERT(false, "no line parser for format {}", static_cast<int>(format));
  return nullptr;
}

}  // namespace colony
