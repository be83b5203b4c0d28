#include "data/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "common/hash.h"
#include "data/binary_cache.h"
#include "data/holdout.h"
#include "data/prefetch.h"
#include "data/text_formats.h"

namespace colony {

Expected<std::optional<DataFormat>> parse_format_flag(const std::string& text) {
  if (text == "auto") return std::optional<DataFormat>();
  if (text == "libsvm") return std::optional<DataFormat>(DataFormat::libsvm);
  if (text == "libffm") return std::optional<DataFormat>(DataFormat::libffm);
  if (text == "criteo") return std::optional<DataFormat>(DataFormat::criteo);
  return Status::invalid_input("--format " + text + ": not one of auto, libsvm, libffm, criteo");
}

const char* to_string(DataFormat f) {
  switch (f) {
    case DataFormat::libsvm:
      return "libsvm";
    case DataFormat::criteo:
      return "criteo";
    case DataFormat::cache:
      return "cache";
    case DataFormat::libffm:
      return "libffm";
  }
  return "unknown";
}

std::string cache_path_for(const std::string& source_path, const ReaderOptions& options) {
  namespace fs = std::filesystem;
  if (options.cache_dir.empty()) return source_path + ".colonycache";
  std::error_code ec;
  fs::path absolute = fs::absolute(source_path, ec);
  if (ec) absolute = source_path;
  fs::path canonical = fs::weakly_canonical(absolute, ec);
  if (ec) canonical = absolute.lexically_normal();
  std::string name = fs::path(source_path).filename().string();
  return (fs::path(options.cache_dir) /
          fmt::format("{}-{:016x}.colonycache", name, hash_bytes(canonical.string())))
      .string();
}

namespace {

constexpr size_t detect_bytes_first = size_t{64} << 10;

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

std::string errno_text(int e) {
  return std::strerror(e);
}

// An opened input file and what its first bytes say it is.
struct SourceFile {
  std::string path;
  UniqueFd fd;
  CacheSource identity;  // size, mtime and (for text) the detected format
  bool is_cache = false;
};

// The format a text file is read as: `forced`, or what its first line says (a *.libffm file
// whose first line reads as libsvm is libffm).
DataFormat text_format(const std::string& path, std::string_view first_line,
                       const std::optional<DataFormat>& forced) {
  if (forced) return *forced;
  const DataFormat seen = classify_text_line(first_line);
  const bool ffm_name = path.size() > 7 && path.compare(path.size() - 7, 7, ".libffm") == 0;
  return seen == DataFormat::libsvm && ffm_name ? DataFormat::libffm : seen;
}

Expected<SourceFile> open_source(const std::string& path, const LineLimits& limits,
                                 const std::optional<DataFormat>& forced) {
  SourceFile src;
  src.path = path;
  src.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!src.fd.valid()) {
    int e = errno;
    if (e == ENOENT) return Status::not_found(fmt::format("{}: no such file", path));
    return Status::io_error(fmt::format("{}: cannot open: {}", path, errno_text(e)));
  }
  struct stat st {};
  if (::fstat(src.fd.get(), &st) != 0) {
    return Status::io_error(fmt::format("{}: cannot stat: {}", path, errno_text(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::invalid_input(fmt::format("{}: not a regular file", path));
  }
  src.identity.size = static_cast<uint64_t>(st.st_size);
  src.identity.mtime_ns = mtime_ns(st);

  // Look at the first non-blank line; a first line longer than the line limit is left for
  // the parser to report.
  const size_t limit = limits.line_bytes_max + 2;
  size_t want = std::min<uint64_t>(src.identity.size, std::min(detect_bytes_first, limit));
  std::string head;
  for (;;) {
    head.resize(want);
    int64_t n = pread_full(src.fd.get(), head.data(), want, 0);
    if (n < 0) return Status::io_error(fmt::format("{}: read failed: {}", path, errno_text(errno)));
    bool whole_file = static_cast<size_t>(n) < want || want == src.identity.size;
    head.resize(static_cast<size_t>(n));
    if (head.size() >= sizeof cache_magic &&
        std::memcmp(head.data(), cache_magic, sizeof cache_magic) == 0) {
      src.is_cache = true;
      src.identity.format = DataFormat::cache;
      return src;
    }
    size_t pos = 0;
    while (pos < head.size()) {
      size_t nl = head.find('\n', pos);
      if (nl == std::string::npos && !whole_file) break;  // an incomplete line
      size_t end = nl == std::string::npos ? head.size() : nl;
      std::string_view line(head.data() + pos, end - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!is_blank_line(line)) {
        src.identity.format = text_format(path, line, forced);
        return src;
      }
      pos = end + 1;
    }
    if (whole_file) return Status::invalid_input(fmt::format("{}: empty file, no samples", path));
    if (want >= limit) {
      src.identity.format = forced.value_or(DataFormat::libsvm);
      return src;
    }
    want = std::min<uint64_t>(src.identity.size, limit);
  }
}

// Keeps the rows after the first `n` of `b`.
void drop_front_rows(Batch& b, size_t n) {
  if (n == 0) return;
  uint32_t f = b.offsets[n];
  b.labels.erase(b.labels.begin(), b.labels.begin() + static_cast<ptrdiff_t>(n));
  b.keys.erase(b.keys.begin(), b.keys.begin() + f);
  b.values.erase(b.values.begin(), b.values.begin() + f);
  b.dense.erase(b.dense.begin(), b.dense.begin() + static_cast<ptrdiff_t>(n * b.dense_dim));
  for (size_t i = 0; i + n < b.offsets.size(); ++i) b.offsets[i] = b.offsets[i + n] - f;
  b.offsets.resize(b.offsets.size() - n);
}

void add_note(std::string& notes, const std::string& note) {
  if (!notes.empty()) notes += "; ";
  notes += note;
}

// Parses a text file, writing its cache on the way when given a CacheWriter.
class TextReader final : public BatchReader {
 public:
  TextReader(SourceFile src, const ReaderOptions& options, const LineLimits& limits,
             std::unique_ptr<CacheWriter> writer, std::string note, uint64_t rows_to_drop)
      : path_(std::move(src.path)),
        source_(src.identity),
        lines_(std::move(src.fd), limits),
        parser_(line_parser_for(src.identity.format)),
        batch_rows_(options.batch_rows),
        skip_bad_lines_(options.skip_bad_lines),
        writer_(std::move(writer)),
        rows_to_drop_(rows_to_drop) {
    stats_.bytes_total = source_.size;
    stats_.format = source_.format;
    stats_.cache_note = std::move(note);
  }

  Expected<bool> next(Batch& out) override {
    for (;;) {
      out.clear();
      if (!error_.ok()) return error_;
      if (done_) return false;
      if (Status s = fill(out); !s.ok()) return fail(std::move(s), out);
      stats_.bytes_read = lines_.bytes_read();
      stats_.rows += out.rows();
      if (writer_ && !out.empty()) {
        if (Status s = writer_->append(out); !s.ok()) drop_writer(s.message());
      }
      if (done_) {
        if (Status s = finish_pass(); !s.ok()) return fail(std::move(s), out);
      }
      if (rows_to_drop_ > 0) {  // rows a corrupt cache delivered before it failed
        size_t n = std::min<uint64_t>(rows_to_drop_, out.rows());
        drop_front_rows(out, n);
        rows_to_drop_ -= n;
        if (out.empty()) continue;
      }
      return !out.empty();
    }
  }

  ReaderStats stats() const override { return stats_; }

 private:
  Status fill(Batch& out) {
    LineError error;
    while (out.rows() < batch_rows_) {
      switch (lines_.next()) {
        case LineReader::Result::end:
          done_ = true;
          return Status();
        case LineReader::Result::io_error:
          return Status::io_error(
              fmt::format("{}: read failed: {}", path_, errno_text(lines_.error_number())));
        case LineReader::Result::too_long: {
          if (Status s = flush_blank_lines(); !s.ok()) return s;
          size_t max = lines_.limits().line_bytes_max;
          if (Status s = bad_line(lines_.line_number(), max + 1,
                                  fmt::format("line longer than {} bytes, expected at most {} "
                                              "bytes per line",
                                              max, max));
              !s.ok()) {
            return s;
          }
          continue;
        }
        case LineReader::Result::line:
          break;
      }
      std::string_view line = lines_.line();
      if (is_blank_line(line)) {  // an error unless only blank lines follow it
        if (blank_lines_pending_++ == 0) first_blank_line_ = lines_.line_number();
        continue;
      }
      if (Status s = flush_blank_lines(); !s.ok()) return s;
      if (!parser_(line, out, error)) {
        if (!lines_.line_has_newline()) {
          error.what += " (the last line has no newline: is the file truncated?)";
        }
        if (Status s = bad_line(lines_.line_number(), error.column, error.what); !s.ok()) {
          return s;
        }
      }
    }
    return Status();
  }

  // Blank lines are malformed only when a non-blank line follows them.
  Status flush_blank_lines() {
    for (; blank_lines_pending_ > 0; --blank_lines_pending_) {
      if (Status s = bad_line(first_blank_line_++, 1, "empty line, expected a sample"); !s.ok()) {
        return s;
      }
    }
    return Status();
  }

  Status bad_line(uint64_t line, size_t column, const std::string& what) {
    if (stats_.bad_lines_skipped < skip_bad_lines_) {
      ++stats_.bad_lines_skipped;
      return Status();
    }
    std::string message = fmt::format("{}:{}:{}: {}", path_, line, column, what);
    if (skip_bad_lines_ > 0) {
      message += fmt::format("; more than --skip-bad-lines {} malformed lines, limit exceeded",
                             skip_bad_lines_);
    }
    return Status::invalid_input(std::move(message));
  }

  Status finish_pass() {
    if (stats_.rows == 0) {
      writer_.reset();
      if (stats_.bad_lines_skipped == 0) {
        return Status::invalid_input(fmt::format("{}: empty file, no samples", path_));
      }
      return Status::invalid_input(
          fmt::format("{}: no samples: all {} non-blank lines are malformed (skipped under "
                      "--skip-bad-lines {})",
                      path_, stats_.bad_lines_skipped, skip_bad_lines_));
    }
    if (!writer_) return Status();
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) != source_.size ||
        mtime_ns(st) != source_.mtime_ns) {
      drop_writer(fmt::format("{} changed while it was read", path_));
      return Status();
    }
    if (Status s = writer_->commit(stats_.bad_lines_skipped); !s.ok()) {
      drop_writer(s.message());
      return Status();
    }
    writer_.reset();
    return Status();
  }

  void drop_writer(const std::string& why) {
    add_note(stats_.cache_note, fmt::format("cache {} not written: {}", writer_->path(), why));
    writer_.reset();
  }

  Status fail(Status s, Batch& out) {
    writer_.reset();
    out.clear();
    error_ = std::move(s);
    return error_;
  }

  std::string path_;
  CacheSource source_;
  LineReader lines_;
  LineParser parser_;
  size_t batch_rows_;
  uint64_t skip_bad_lines_;
  std::unique_ptr<CacheWriter> writer_;  // null: no cache to write (or writing failed)
  uint64_t rows_to_drop_;
  uint64_t blank_lines_pending_ = 0;
  uint64_t first_blank_line_ = 0;
  bool done_ = false;
  Status error_;
  ReaderStats stats_;
};

Expected<std::unique_ptr<BatchReader>> open_text(SourceFile src, const ReaderOptions& options,
                                                 const LineLimits& limits, std::string note,
                                                 uint64_t rows_to_drop) {
  std::unique_ptr<CacheWriter> writer;
  if (options.use_cache && options.max_rows == 0) {
    auto w = CacheWriter::create(cache_path_for(src.path, options), src.identity);
    if (w.ok()) {
      writer = std::move(w.value());
    } else {
      add_note(note, fmt::format("no cache written: {}", w.status().message()));
    }
  }
  return std::unique_ptr<BatchReader>(std::make_unique<TextReader>(
      std::move(src), options, limits, std::move(writer), std::move(note), rows_to_drop));
}

// Reads a source's valid-looking cache. If a block turns out corrupt, it goes on from the
// text (skipping the rows already returned) and rebuilds the cache, so the caller sees one
// uninterrupted pass.
class CachedSourceReader final : public BatchReader {
 public:
  using Reparse =
      std::function<Expected<std::unique_ptr<BatchReader>>(uint64_t rows_done, std::string note)>;

  CachedSourceReader(std::unique_ptr<CacheReader> cache, Reparse reparse)
      : cache_(std::move(cache)), reparse_(std::move(reparse)) {}

  Expected<bool> next(Batch& out) override {
    if (text_) return text_->next(out);
    if (!error_.ok()) {
      out.clear();
      return error_;
    }
    Expected<bool> r = cache_->next(out);
    if (r.ok() || r.status().code() != Status::Code::invalid_input) return r;
    auto text = reparse_(cache_->stats().rows,
                         fmt::format("{}; re-reading the source", r.status().message()));
    if (!text.ok()) {
      error_ = text.status();
      return error_;
    }
    text_ = std::move(text.value());
    cache_.reset();
    return text_->next(out);
  }

  ReaderStats stats() const override { return text_ ? text_->stats() : cache_->stats(); }

 private:
  std::unique_ptr<CacheReader> cache_;
  Reparse reparse_;
  std::unique_ptr<BatchReader> text_;
  Status error_;
};

Expected<std::unique_ptr<BatchReader>> open_unbuffered(const std::string& path,
                                                       const ReaderOptions& options,
                                                       const LineLimits& limits) {
  auto src = open_source(path, limits, options.format);
  if (!src.ok()) return src.status();
  if (src->is_cache) {
    src->fd.reset();
    auto cache = CacheReader::open(path, options.batch_rows, false);
    if (!cache.ok()) return cache.status();
    return std::unique_ptr<BatchReader>(std::move(cache.value()));
  }
  std::string note;
  if (options.use_cache) {
    std::string cache_path = cache_path_for(path, options);
    auto cache = CacheReader::open(cache_path, options.batch_rows, true);
    if (cache.ok()) {
      const CacheHeader& h = cache.value()->header();
      if (h.source.size != src->identity.size || h.source.mtime_ns != src->identity.mtime_ns ||
          h.source.format != src->identity.format) {
        note = fmt::format("cache {} is out of date; rebuilding it", cache_path);
      } else if (h.bad_lines_skipped > options.skip_bad_lines) {
        note = fmt::format(
            "cache {} skipped {} malformed lines, more than --skip-bad-lines {}; "
            "re-reading {}",
            cache_path, h.bad_lines_skipped, options.skip_bad_lines, path);
      } else {
        auto reparse = [path, options, limits](
                           uint64_t rows_done,
                           std::string why) -> Expected<std::unique_ptr<BatchReader>> {
          auto again = open_source(path, limits, options.format);
          if (!again.ok()) return again.status();
          if (again->is_cache) {
            return Status::invalid_input(fmt::format("{}: became a cache file while read", path));
          }
          return open_text(std::move(again.value()), options, limits, std::move(why), rows_done);
        };
        return std::unique_ptr<BatchReader>(
            std::make_unique<CachedSourceReader>(std::move(cache.value()), std::move(reparse)));
      }
    } else if (cache.status().code() != Status::Code::not_found) {
      note = fmt::format("{}; rebuilding it", cache.status().message());
    }
  }
  return open_text(std::move(src.value()), options, limits, std::move(note), 0);
}

// Re-slices batches held in memory.
class MemoryReader final : public BatchReader {
 public:
  MemoryReader(std::shared_ptr<const std::vector<Batch>> data, size_t batch_rows)
      : data_(std::move(data)), batch_rows_(batch_rows) {
    COLONY_ASSERT(data_ != nullptr && batch_rows_ > 0);
    for (const Batch& b : *data_) stats_.rows_total += b.rows();
  }

  Expected<bool> next(Batch& out) override {
    out.clear();
    while (out.rows() < batch_rows_ && batch_ < data_->size()) {
      const Batch& b = (*data_)[batch_];
      if (row_ == b.rows()) {
        ++batch_;
        row_ = 0;
        continue;
      }
      size_t n = std::min(batch_rows_ - out.rows(), b.rows() - row_);
      out.append_rows(b, row_, n);
      row_ += n;
    }
    stats_.rows += out.rows();
    return !out.empty();
  }

  ReaderStats stats() const override { return stats_; }

 private:
  std::shared_ptr<const std::vector<Batch>> data_;
  size_t batch_rows_;
  size_t batch_ = 0;  // the source batch holding the next row
  size_t row_ = 0;    // that row's index in it
  ReaderStats stats_;
};

// Returns the first max_rows rows of `inner`, in its batches (the last one cut).
class RowLimitReader final : public BatchReader {
 public:
  RowLimitReader(std::unique_ptr<BatchReader> inner, uint64_t max_rows)
      : inner_(std::move(inner)), max_rows_(max_rows) {}

  Expected<bool> next(Batch& out) override {
    out.clear();
    if (rows_ == max_rows_) return false;
    auto more = inner_->next(in_);
    if (!more) return more.status();
    if (!*more) return false;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(in_.rows(), max_rows_ - rows_));
    if (n == in_.rows()) {
      std::swap(out, in_);
    } else {
      out.append_rows(in_, 0, n);
    }
    rows_ += n;
    return true;
  }

  // The inner reader's, with rows_total at most max_rows and, when rows_total is unknown,
  // bytes_total estimated as the bytes that hold max_rows rows (for progress).
  ReaderStats stats() const override {
    ReaderStats s = inner_->stats();
    s.rows = rows_;
    if (s.rows_total > 0) s.rows_total = std::min(s.rows_total, max_rows_);
    if (s.rows_total == 0 && rows_ > 0)
      s.bytes_total = std::min<uint64_t>(
          s.bytes_total,
          static_cast<uint64_t>(double(s.bytes_read) / double(rows_) * double(max_rows_)));
    return s;
  }

 private:
  std::unique_ptr<BatchReader> inner_;
  uint64_t max_rows_;
  uint64_t rows_ = 0;
  Batch in_;
};

std::unique_ptr<BatchReader> limit_rows(std::unique_ptr<BatchReader> r, uint64_t max_rows) {
  if (max_rows == 0) return r;
  return std::make_unique<RowLimitReader>(std::move(r), max_rows);
}

}  // namespace

Expected<std::unique_ptr<BatchReader>> open_reader(const std::string& path,
                                                   const ReaderOptions& options,
                                                   const LineLimits& limits) {
  if (options.batch_rows == 0) {
    return Status::invalid_input("batch_rows is 0, expected at least 1 row per batch");
  }
  auto reader = open_unbuffered(path, options, limits);
  if (!reader.ok()) return reader;
  std::unique_ptr<BatchReader> r = limit_rows(std::move(reader.value()), options.max_rows);
  // The split is made on the prefetch thread, off the reader's caller.
  if (options.holdout.fraction > 0.0)
    r = make_holdout_reader(std::move(r), options.holdout, options.batch_rows);
  if (options.prefetch_batches > 0)
    r = make_prefetch_reader(std::move(r), options.prefetch_batches);
  return r;
}

Expected<std::unique_ptr<BatchReader>> open_reader(const std::string& path,
                                                   const ReaderOptions& options) {
  return open_reader(path, options, LineLimits{});
}

std::unique_ptr<BatchReader> make_memory_reader(std::shared_ptr<const std::vector<Batch>> data,
                                                size_t batch_rows, const HoldoutSplit& holdout,
                                                uint64_t max_rows) {
  std::unique_ptr<BatchReader> r =
      limit_rows(std::make_unique<MemoryReader>(std::move(data), batch_rows), max_rows);
  if (holdout.fraction > 0.0) r = make_holdout_reader(std::move(r), holdout, batch_rows);
  return r;
}

}  // namespace colony
