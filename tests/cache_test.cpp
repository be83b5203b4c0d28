#define BOOST_TEST_MODULE cache_test
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/hash.h"
#include "data/binary_cache.h"
#include "data/reader.h"
#include "tests/reader_test_util.h"

namespace fs = std::filesystem;
using namespace colony;
using namespace colony::test;

namespace {

ReaderOptions cached(size_t batch_rows = 512) {
  ReaderOptions o;
  o.batch_rows = batch_rows;
  o.use_cache = true;
  o.prefetch_batches = 0;
  return o;
}

ReaderOptions uncached(size_t batch_rows = 512) {
  ReaderOptions o = cached(batch_rows);
  o.use_cache = false;
  return o;
}

struct Pass {
  std::vector<Batch> batches;
  ReaderStats stats;
};

Pass read_all(const std::string& path, const ReaderOptions& options) {
  Pass pass;
  auto reader = open_reader(path, options);
  BOOST_REQUIRE_MESSAGE(reader.ok(), error_text(reader));
  for (;;) {
    Batch b;
    auto r = (*reader)->next(b);
    BOOST_REQUIRE_MESSAGE(r.ok(), error_text(r));
    if (!r.value()) break;
    pass.batches.push_back(std::move(b));
  }
  pass.stats = (*reader)->stats();
  return pass;
}

size_t total_rows(const std::vector<Batch>& batches) {
  size_t n = 0;
  for (const Batch& b : batches) n += b.rows();
  return n;
}

// Rows with varied lengths (some empty), odd float values, -1/+1 labels.
std::string generated_libsvm(int rows, uint64_t seed) {
  SplitMix64 rng(seed);
  std::string s;
  for (int r = 0; r < rows; ++r) {
    s += (rng.next() & 1) ? "+1" : "-1";
    int n = static_cast<int>(rng.next() % 50);
    for (int i = 0; i < n; ++i) {
      s += fmt::format(" {}:{:.7g}", rng.next() % 100000000, rng.uniform() * 200 - 100);
    }
    s += "\n";
  }
  return s;
}

std::string generated_criteo(int rows, uint64_t seed) {
  SplitMix64 rng(seed);
  std::string s;
  for (int r = 0; r < rows; ++r) {
    s += (rng.next() & 1) ? "1" : "0";
    for (int i = 0; i < 13; ++i) {
      s += '\t';
      if (rng.next() % 4 != 0)
        s += fmt::format("{}", static_cast<int64_t>(rng.next() % 2000) - 100);
    }
    for (int j = 0; j < 26; ++j) {
      s += '\t';
      if (rng.next() % 5 != 0) s += fmt::format("{:08x}", rng.next() % 100000);
    }
    s += "\n";
  }
  return s;
}

bool has_temp_files(const TempDir& dir) {
  for (const auto& f : dir.files()) {
    if (f.find(".tmp-") != std::string::npos) return true;
  }
  return false;
}

void set_mtime_later(const std::string& path) {
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(5));
}

}  // namespace

BOOST_AUTO_TEST_CASE(checksum64_is_xxh64) {
  BOOST_CHECK_EQUAL(checksum64("", 0, 0), 0xEF46DB3751D8E999ULL);
  BOOST_CHECK_EQUAL(checksum64("a", 1, 0), 0xD24EC4F1A98C6E5BULL);
  BOOST_CHECK_EQUAL(checksum64("abc", 3, 0), 0x44BC2CF5AD770999ULL);
  const char* long_text = "Nobody inspects the spammish repetition";
  BOOST_CHECK_EQUAL(checksum64(long_text, std::strlen(long_text), 0), 0xFBCEA83C8A378BF1ULL);
}

BOOST_AUTO_TEST_CASE(first_full_pass_writes_cache_and_later_passes_read_it) {
  TempDir dir;
  std::string content = generated_libsvm(5000, 1);
  std::string path = dir.write("data.libsvm", content);
  std::string cache_path = cache_path_for(path, cached());
  BOOST_CHECK_EQUAL(cache_path, path + ".colonycache");

  {  // The cache appears only when the pass completes.
    auto reader = open_reader(path, cached(1000));
    BOOST_REQUIRE(reader.ok());
    Batch b;
    for (int i = 0; i < 5; ++i) {
      auto r = (*reader)->next(b);
      BOOST_REQUIRE(r.ok() && r.value());
      BOOST_CHECK(!fs::exists(cache_path));
    }
    auto r = (*reader)->next(b);
    BOOST_REQUIRE(r.ok() && !r.value());
    BOOST_CHECK(fs::exists(cache_path));
    BOOST_CHECK(!(*reader)->stats().from_cache);
    BOOST_CHECK_EQUAL((*reader)->stats().cache_note, "");
  }
  BOOST_CHECK(!has_temp_files(dir));

  for (size_t batch_rows : {1, 7, 512, 1000, 2048, 2049, 100000}) {
    BOOST_TEST_CONTEXT("batch_rows " << batch_rows) {
      Pass text = read_all(path, uncached(batch_rows));
      Pass cache = read_all(path, cached(batch_rows));
      BOOST_CHECK_EQUAL(total_rows(text.batches), 5000u);
      BOOST_CHECK(same_batches(text.batches, cache.batches));
      BOOST_CHECK(cache.stats.from_cache);
      BOOST_CHECK(cache.stats.format == DataFormat::libsvm);
      BOOST_CHECK_EQUAL(cache.stats.rows, 5000u);
      BOOST_CHECK_EQUAL(cache.stats.rows_total, 5000u);
      BOOST_CHECK_EQUAL(cache.stats.bytes_read, cache.stats.bytes_total);
      BOOST_CHECK_EQUAL(cache.stats.bytes_total, fs::file_size(cache_path));
    }
  }
}

BOOST_AUTO_TEST_CASE(criteo_cache_matches_text) {
  TempDir dir;
  std::string path = dir.write("day_0.tsv", generated_criteo(3000, 2));
  Pass first = read_all(path, cached(333));
  BOOST_CHECK(!first.stats.from_cache);
  Pass second = read_all(path, cached(333));
  BOOST_CHECK(second.stats.from_cache);
  BOOST_CHECK(second.stats.format == DataFormat::criteo);
  BOOST_CHECK(same_batches(first.batches, second.batches));
  BOOST_CHECK_EQUAL(total_rows(second.batches), 3000u);
  // The integer columns came back as dense features, 13 per row.
  for (const Batch& b : second.batches) {
    BOOST_CHECK_EQUAL(b.dense_dim, 13u);
    BOOST_CHECK_EQUAL(b.dense.size(), b.rows() * 13);
  }
}

BOOST_AUTO_TEST_CASE(cache_file_can_be_opened_by_name) {
  TempDir dir;
  std::string path = dir.write("data.libsvm", generated_libsvm(700, 3));
  Pass text = read_all(path, cached(64));
  Pass direct = read_all(path + ".colonycache", uncached(64));
  BOOST_CHECK(same_batches(text.batches, direct.batches));
  BOOST_CHECK(direct.stats.format == DataFormat::cache);
  BOOST_CHECK(direct.stats.from_cache);
  ReaderOptions prefetch = cached(64);
  prefetch.prefetch_batches = 3;
  BOOST_CHECK(same_batches(text.batches, read_all(path + ".colonycache", prefetch).batches));
  BOOST_CHECK(same_batches(text.batches, read_all(path, prefetch).batches));
}

BOOST_AUTO_TEST_CASE(changed_source_invalidates_cache) {
  TempDir dir;
  std::string path = dir.write("data.libsvm", "1 1:1\n0 2:2\n");
  read_all(path, cached());
  BOOST_REQUIRE(read_all(path, cached()).stats.from_cache);

  dir.write("data.libsvm", "1 1:1\n0 2:2\n1 3:3\n");  // new size
  Pass changed = read_all(path, cached());
  BOOST_CHECK(!changed.stats.from_cache);
  BOOST_CHECK_EQUAL(total_rows(changed.batches), 3u);
  BOOST_CHECK(changed.stats.cache_note.find("out of date") != std::string::npos);
  BOOST_CHECK(read_all(path, cached()).stats.from_cache);

  dir.write("data.libsvm", "1 1:1\n0 2:2\n1 3:4\n");  // same size, only mtime differs
  set_mtime_later(path);
  Pass touched = read_all(path, cached());
  BOOST_CHECK(!touched.stats.from_cache);
  BOOST_CHECK_EQUAL(touched.batches.at(0).values.at(2), 4.0f);
  Pass again = read_all(path, cached());
  BOOST_CHECK(again.stats.from_cache);
  BOOST_CHECK(same_batches(touched.batches, again.batches));
}

BOOST_AUTO_TEST_CASE(truncated_cache_is_an_error_by_name_and_rebuilt_via_source) {
  TempDir dir;
  std::string path = dir.write("data.libsvm", generated_libsvm(3000, 4));
  std::string cache_path = path + ".colonycache";
  Pass text = read_all(path, cached());
  std::string bytes = read_file(cache_path);
  for (size_t keep : {size_t{10}, size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
    BOOST_TEST_CONTEXT("kept " << keep << " bytes") {
      dir.write("data.libsvm.colonycache", bytes.substr(0, keep));
      auto direct = open_reader(cache_path, uncached());
      BOOST_REQUIRE(!direct.ok());
      BOOST_CHECK(direct.status().code() == Status::Code::invalid_input);
      BOOST_CHECK_MESSAGE(direct.status().message().rfind(cache_path + ": ", 0) == 0,
                          direct.status().message());

      Pass rebuilt = read_all(path, cached());
      BOOST_CHECK(!rebuilt.stats.from_cache);
      BOOST_CHECK(!rebuilt.stats.cache_note.empty());
      BOOST_CHECK(same_batches(text.batches, rebuilt.batches));
      BOOST_CHECK_EQUAL(read_file(cache_path), bytes);  // rewritten whole
    }
  }
}

BOOST_AUTO_TEST_CASE(corrupt_cache_block_is_an_error_by_name_and_recovered_via_source) {
  TempDir dir;
  std::string path = dir.write("data.libsvm", generated_libsvm(9000, 5));
  std::string cache_path = path + ".colonycache";
  Pass text = read_all(path, cached(100));
  std::string bytes = read_file(cache_path);
  std::string corrupt = bytes;
  corrupt[corrupt.size() * 2 / 3] ^= 0x10;  // somewhere in a later block
  dir.write("data.libsvm.colonycache", corrupt);
  // Keep the source's mtime check happy: only the cache changed.

  auto direct = open_reader(cache_path, uncached(100));
  BOOST_REQUIRE(direct.ok());  // the header is fine; the block fails when reached
  Batch b;
  Status error;
  size_t rows = 0;
  for (;;) {
    auto r = (*direct)->next(b);
    if (!r.ok()) {
      error = r.status();
      break;
    }
    BOOST_REQUIRE(r.value());
    rows += b.rows();
  }
  BOOST_CHECK(error.code() == Status::Code::invalid_input);
  BOOST_CHECK_MESSAGE(error.message().rfind(cache_path + ": corrupt cache file: block ", 0) == 0,
                      error.message());
  BOOST_CHECK_GT(rows, 0u);
  BOOST_CHECK_LT(rows, 9000u);

  for (size_t prefetch : {0, 2}) {
    dir.write("data.libsvm.colonycache", corrupt);
    ReaderOptions o = cached(100);
    o.prefetch_batches = prefetch;
    Pass recovered = read_all(path, o);
    BOOST_CHECK(same_batches(text.batches, recovered.batches));
    BOOST_CHECK(!recovered.stats.from_cache);
    BOOST_CHECK(recovered.stats.cache_note.find("corrupt") != std::string::npos);
    BOOST_CHECK_EQUAL(recovered.stats.rows, 9000u);
    BOOST_CHECK_EQUAL(read_file(cache_path), bytes);  // rebuilt
  }
}

BOOST_AUTO_TEST_CASE(abandoned_or_failed_pass_leaves_no_cache) {
  TempDir dir;
  std::string path = dir.write("data.libsvm", generated_libsvm(4000, 6));
  for (size_t prefetch : {0, 1, 4}) {
    ReaderOptions o = cached(100);
    o.prefetch_batches = prefetch;
    {
      auto reader = open_reader(path, o);
      BOOST_REQUIRE(reader.ok());
      Batch b;
      BOOST_REQUIRE((*reader)->next(b).ok());
    }
    BOOST_CHECK((dir.files() == std::vector<std::string>{"data.libsvm"}));
  }
  std::string bad = dir.write("bad.libsvm", "1 1:1\n0 2:2\n1 x:1\n");
  {
    auto reader = open_reader(bad, cached());
    BOOST_REQUIRE(reader.ok());
    Batch b;
    BOOST_CHECK(!(*reader)->next(b).ok());
  }
  BOOST_CHECK((dir.files() == std::vector<std::string>{"bad.libsvm", "data.libsvm"}));
}

BOOST_AUTO_TEST_CASE(cache_dir_option_puts_caches_there) {
  TempDir dir;
  std::string path = dir.write("data.libsvm", generated_libsvm(100, 7));
  ReaderOptions o = cached();
  o.cache_dir = (dir.path / "caches" / "nested").string();
  std::string cache_path = cache_path_for(path, o);
  BOOST_CHECK_EQUAL(fs::path(cache_path).parent_path().string(), o.cache_dir);
  BOOST_CHECK(fs::path(cache_path).filename().string().rfind("data.libsvm-", 0) == 0);
  // Sources with the same name in different directories get different caches.
  BOOST_CHECK_NE(cache_path, cache_path_for((dir.path / "other" / "data.libsvm").string(), o));

  Pass first = read_all(path, o);
  BOOST_CHECK(fs::exists(cache_path));
  BOOST_CHECK(!fs::exists(path + ".colonycache"));
  Pass second = read_all(path, o);
  BOOST_CHECK(second.stats.from_cache);
  BOOST_CHECK(same_batches(first.batches, second.batches));
}

BOOST_AUTO_TEST_CASE(unwritable_cache_location_reads_without_cache) {
  TempDir dir;
  std::string path = dir.write("data.libsvm", generated_libsvm(300, 8));
  dir.write("not_a_dir", "x");
  ReaderOptions o = cached(50);
  o.cache_dir = (dir.path / "not_a_dir" / "caches").string();  // cannot be created
  Pass pass = read_all(path, o);
  BOOST_CHECK_EQUAL(total_rows(pass.batches), 300u);
  BOOST_CHECK(!pass.stats.from_cache);
  BOOST_CHECK_MESSAGE(pass.stats.cache_note.find("no cache written") != std::string::npos,
                      pass.stats.cache_note);
  BOOST_CHECK(same_batches(pass.batches, read_all(path, uncached(50)).batches));
}

BOOST_AUTO_TEST_CASE(cache_remembers_skipped_lines_and_respects_a_lower_limit) {
  TempDir dir;
  std::string path = dir.write("data.libsvm", "1 1:1\nbad\n0 2:2\n1 3:x\n1 4:4\n");
  ReaderOptions o = cached();
  o.skip_bad_lines = 2;
  Pass first = read_all(path, o);
  BOOST_CHECK_EQUAL(first.stats.bad_lines_skipped, 2u);
  Pass second = read_all(path, o);
  BOOST_CHECK(second.stats.from_cache);
  BOOST_CHECK_EQUAL(second.stats.bad_lines_skipped, 2u);
  BOOST_CHECK(same_batches(first.batches, second.batches));

  o.skip_bad_lines = 1;
  auto reader = open_reader(path, o);
  BOOST_REQUIRE(reader.ok());
  Batch b;
  auto r = (*reader)->next(b);
  BOOST_REQUIRE(!r.ok());
  BOOST_CHECK_MESSAGE(r.status().message().rfind(path + ":4:5: bad feature value", 0) == 0,
                      r.status().message());
}

BOOST_AUTO_TEST_CASE(garbage_with_the_magic_is_invalid_input) {
  TempDir dir;
  std::string path = dir.write("fake.colonycache", std::string("COLONYBC") + std::string(200, 'z'));
  auto r = open_reader(path, uncached());
  BOOST_REQUIRE(!r.ok());
  BOOST_CHECK(r.status().code() == Status::Code::invalid_input);
  BOOST_CHECK_MESSAGE(r.status().message().rfind(path + ": ", 0) == 0, r.status().message());
}
