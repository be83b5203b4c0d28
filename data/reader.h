// Streaming sample readers: libsvm, libffm, Criteo TSV and Colony's binary cache.
//
// A reader streams a file in bounded memory (a fixed read buffer plus one batch), so files
// larger than memory train fine. The format is detected from the file's content, not its
// name (but see ReaderOptions::format). Text formats are parsed once: the first complete pass
// writes a binary cache (see cache_path_for) and later opens of the same, unchanged file read the
// cache instead.
//
// Keys (see common/hash.h):
//   libsvm  `label idx:val ...`   key = make_key(0, mix64(idx)); label 0/1 or -1/+1 (-1 -> 0)
//   libffm  `label field:idx[:val] ...` (val 1 when left out), field 0..254:
//           key = make_key(field, mix64(idx)); labels as libsvm. A file is libffm when the
//           first feature of its first line has two ':' (or one and a 3-part form elsewhere
//           is an error naming the line).
//   Criteo  label, 13 integer columns, 26 hex categorical columns, tab-separated, empty =
//           missing. Integer column i (0..12) is dense feature i: log1p(x) (x < 0:
//           -log1p(-x); missing: 0). Categorical column j (0..25) with hex value h:
//           key = make_key(j, mix64(h)), value 1: one field per column.
//
// Errors: every malformed input is a Status::invalid_input whose message starts with
// "FILE:LINE:COLUMN: " (1-based) and says what was expected; a missing file is
// Status::not_found naming it; an empty file (no samples) is invalid_input. Cases detected:
// bad label, bad index, non-numeric value, wrong field count (Criteo), truncated line,
// empty file, missing file. With skip_bad_lines = N, up to N malformed lines are skipped and
// counted (ReaderStats::bad_lines_skipped); line N+1 is an error that says the limit was hit.
// A blank line is malformed unless only blank lines follow it; a last line without a newline
// is fine if it parses. An error takes the place of the batch it occurs in (the rows before
// it in that batch are not returned). Lines are at most 1 MiB.
//
// Caches: a cache whose header does not match the source's current size and mtime, that
// skipped more lines than skip_bad_lines allows, or that is truncated or corrupt is ignored
// and rebuilt by the pass (a corrupt block found mid-pass switches to the text, skipping the
// rows already returned). A cache that cannot be written is not an error; the reason is in
// ReaderStats::cache_note. A cache file given by name is read as is: corruption is an error.
//
// Threads: a reader is used by one thread at a time. open_reader may start one background
// thread (prefetch_batches > 0) that reads ahead; it is joined by the reader's destructor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "data/batch.h"

namespace colony {

enum class DataFormat { libsvm, criteo, cache, libffm };
const char* to_string(DataFormat f);

// Rows held out of a file for validation (data/holdout.h): with fraction F > 0 a reader returns
// only the rows of the held-out fraction F (keep_held_out) or only the others. F = 0 reads all.
struct HoldoutSplit {
  double fraction = 0.0;
  bool keep_held_out = false;
};

struct ReaderOptions {
  size_t batch_rows = 512;      // rows per batch; every batch but the last is full
  uint64_t skip_bad_lines = 0;  // malformed lines tolerated before failing
  bool use_cache = true;        // read a valid cache; write one on the first full pass
  std::string cache_dir;        // where caches live; empty = beside the source file
  size_t prefetch_batches = 4;  // batches read ahead on a background thread; 0 = none
  // The text format to read the file as; nullopt: detected from the content, and a file named
  // *.libffm is libffm (its first feature may have no value, `field:idx`, which looks like
  // libsvm). A binary cache is read as one whatever this says.
  std::optional<DataFormat> format;
  HoldoutSplit holdout;  // which rows to return; the cache holds them all
  // At most the source's first max_rows rows are read, before the hold-out split (0: all). A
  // pass cut short this way writes no cache (a valid cache is still read).
  uint64_t max_rows = 0;
};

// A --format flag: "auto" (nullopt), "libsvm", "libffm" or "criteo"; invalid_input otherwise.
Expected<std::optional<DataFormat>> parse_format_flag(const std::string& text);

struct ReaderStats {
  uint64_t rows = 0;                       // samples returned so far
  uint64_t bad_lines_skipped = 0;          // malformed lines skipped so far (see skip_bad_lines)
  uint64_t bytes_read = 0;                 // bytes of the underlying file consumed so far
  uint64_t bytes_total = 0;                // size of the underlying file (for progress)
  uint64_t rows_total = 0;                 // total samples when known in advance (cache), else 0
  DataFormat format = DataFormat::libsvm;  // the source's format
  bool from_cache = false;                 // true when rows come from a binary cache
  // Why a cache was not used or not written (unwritable directory, stale or corrupt cache),
  // for the user to see; empty when there is nothing to say. Reading goes on without it.
  std::string cache_note;
};

class BatchReader {
 public:
  virtual ~BatchReader() = default;
  // Replaces `out` with the next batch. Returns false at the end of the data (out is empty),
  // true with 1..batch_rows rows otherwise, or the error that stopped reading. After an
  // error or the end, further calls return the same result.
  virtual Expected<bool> next(Batch& out) = 0;
  virtual ReaderStats stats() const = 0;
};

// Opens `path` for one pass. Fails with not_found (missing file), invalid_input (empty file,
// unknown format, or a cache file whose contents are corrupt) or io_error.
Expected<std::unique_ptr<BatchReader>> open_reader(const std::string& path,
                                                   const ReaderOptions& options);

// Where the binary cache of `source_path` lives under `options`: `<source>.colonycache`
// beside it, or `<cache_dir>/<file name>-<hash of absolute path>.colonycache`.
std::string cache_path_for(const std::string& source_path, const ReaderOptions& options);

// A reader over batches already in memory (generated data), re-sliced to batch_rows, returning
// the side of `holdout` it asks for, of the first `max_rows` rows (0: all).
std::unique_ptr<BatchReader> make_memory_reader(std::shared_ptr<const std::vector<Batch>> data,
                                                size_t batch_rows, const HoldoutSplit& holdout = {},
                                                uint64_t max_rows = 0);

}  // namespace colony
