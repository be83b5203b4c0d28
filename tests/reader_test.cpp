#define BOOST_TEST_MODULE reader_test
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <ctime>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/hash.h"
#include "data/holdout.h"
#include "data/reader.h"
#include "data/text_formats.h"
#include "tests/reader_test_util.h"

namespace fs = std::filesystem;
using namespace colony;
using namespace colony::test;

namespace {

ReaderOptions plain(size_t batch_rows = 512) {
  ReaderOptions o;
  o.batch_rows = batch_rows;
  o.use_cache = false;
  o.prefetch_batches = 0;
  return o;
}

// Reads everything; fails the test on an error.
std::vector<Batch> read_all(const std::string& path, const ReaderOptions& options,
                            const LineLimits& limits = {}) {
  std::vector<Batch> out;
  auto reader = open_reader(path, options, limits);
  BOOST_REQUIRE_MESSAGE(reader.ok(), error_text(reader));
  for (;;) {
    Batch b;
    auto r = (*reader)->next(b);
    BOOST_REQUIRE_MESSAGE(r.ok(), error_text(r));
    if (!r.value()) {
      BOOST_CHECK(b.empty());
      break;
    }
    out.push_back(std::move(b));
  }
  return out;
}

Batch concat(const std::vector<Batch>& batches) {
  Batch all;
  for (const Batch& b : batches) {
    for (size_t i = 0; i < b.rows(); ++i) {
      for (size_t j = b.offsets[i]; j < b.offsets[i + 1]; ++j) {
        all.add_feature(b.keys[j], b.values[j]);
      }
      all.finish_row(b.labels[i]);
    }
  }
  return all;
}

// The status that stops reading `path` (ok if it reads to the end).
Status read_error(const std::string& path, const ReaderOptions& options,
                  const LineLimits& limits = {}) {
  auto reader = open_reader(path, options, limits);
  if (!reader.ok()) return reader.status();
  Batch b;
  for (int i = 0; i < 1'000'000; ++i) {
    auto r = (*reader)->next(b);
    if (!r.ok()) return r.status();
    if (!r.value()) return Status();
  }
  BOOST_FAIL("reader did not end");
  return Status();
}

uint64_t svm_key(uint64_t index) {
  return make_key(0, mix64(index));
}

std::string criteo_line(const std::string& label, const std::vector<std::string>& ints,
                        const std::vector<std::string>& cats) {
  std::string s = label;
  for (int i = 0; i < 13; ++i) s += "\t" + (i < static_cast<int>(ints.size()) ? ints[i] : "");
  for (int j = 0; j < 26; ++j) s += "\t" + (j < static_cast<int>(cats.size()) ? cats[j] : "");
  return s;
}

std::string generated_libsvm(int rows, uint64_t seed) {
  SplitMix64 rng(seed);
  std::string s;
  for (int r = 0; r < rows; ++r) {
    s += (rng.next() & 1) ? "1" : "-1";
    int n = static_cast<int>(rng.next() % 40);
    for (int i = 0; i < n; ++i) {
      s += fmt::format(" {}:{}", rng.next() % 1000000, static_cast<float>(rng.uniform() * 4 - 2));
    }
    s += "\n";
  }
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(libsvm_good_input_gives_exact_rows) {
  TempDir dir;
  std::string path = dir.write(
      "good.libsvm",
      "1 3:0.5 7:1\n-1\t2:-1.5e2  9:3\r\n+1 1:2 \t\n0.0 4:0.25\n1.0 18446744073709551615:+1\n"
      "0\n1 5:1e-50 6:7");
  auto batches = read_all(path, plain());
  BOOST_REQUIRE_EQUAL(batches.size(), 1u);
  const Batch& b = batches[0];
  BOOST_CHECK((b.labels == std::vector<float>{1, 0, 1, 0, 1, 0, 1}));
  BOOST_CHECK((b.offsets == std::vector<uint32_t>{0, 2, 4, 5, 6, 7, 7, 9}));
  BOOST_CHECK((b.keys == std::vector<uint64_t>{
                             svm_key(3), svm_key(7), svm_key(2), svm_key(9), svm_key(1), svm_key(4),
                             svm_key(18446744073709551615ULL), svm_key(5), svm_key(6)}));
  BOOST_CHECK((b.values == std::vector<float>{0.5f, 1, -150, 3, 2, 0.25f, 1, 0, 7}));
  for (uint64_t k : b.keys) BOOST_CHECK_EQUAL(key_field(k), 0u);
}

BOOST_AUTO_TEST_CASE(libffm_good_input_gives_exact_rows_with_fields) {
  TempDir dir;
  std::string path =
      dir.write("good.libffm", "1 0:3:0.5 7:7\n-1\t2:2:-1.5e2  254:9:3\r\n0 1:1:2 \t\n1\n");
  ReaderOptions cached = plain();
  cached.use_cache = true;
  auto batches = read_all(path, cached);
  BOOST_REQUIRE_EQUAL(batches.size(), 1u);
  const Batch& b = batches[0];
  BOOST_CHECK((b.labels == std::vector<float>{1, 0, 0, 1}));
  BOOST_CHECK((b.offsets == std::vector<uint32_t>{0, 2, 4, 5, 5}));
  BOOST_CHECK((b.keys == std::vector<uint64_t>{make_key(0, mix64(3)), make_key(7, mix64(7)),
                                               make_key(2, mix64(2)), make_key(254, mix64(9)),
                                               make_key(1, mix64(1))}));
  BOOST_CHECK((b.values == std::vector<float>{0.5f, 1, -150, 3, 2}));  // no value: 1
  BOOST_CHECK_EQUAL(key_field(b.keys[3]), 254u);
  // The cache written by that pass reads back the same rows, and says the source was libffm.
  auto again = open_reader(path, cached);
  BOOST_REQUIRE(again.ok());
  Batch c;
  BOOST_REQUIRE(again.value()->next(c).value());
  BOOST_CHECK(again.value()->stats().from_cache);
  BOOST_CHECK(again.value()->stats().format == DataFormat::libffm);
  BOOST_CHECK((c.keys == b.keys));
  BOOST_CHECK((c.values == b.values));
}

BOOST_AUTO_TEST_CASE(criteo_good_input_gives_exact_rows) {
  TempDir dir;
  std::string lines = criteo_line("1", {"1", "", "-3", "0"}, {"68fd1e64", "", "ABCDEF0123456789"}) +
                      "\n" + criteo_line("0", {}, {}) + "\r\n" +
                      criteo_line("0", {"", "", "", "", "", "", "", "", "", "", "", "", "100"},
                                  {"", "", "", "", "", "", "", "", "", "", "", "", "",
                                   "", "", "", "", "", "", "", "", "", "", "", "", "0"});
  std::string path = dir.write("good.tsv", lines);
  auto batches = read_all(path, plain());
  BOOST_REQUIRE_EQUAL(batches.size(), 1u);
  const Batch& b = batches[0];
  BOOST_CHECK((b.labels == std::vector<float>{1, 0, 0}));
  BOOST_CHECK((b.offsets == std::vector<uint32_t>{0, 2, 2, 3}));
  BOOST_CHECK((b.keys == std::vector<uint64_t>{make_key(0, mix64(0x68fd1e64)),
                                               make_key(2, mix64(0xABCDEF0123456789ULL)),
                                               make_key(25, mix64(0))}));
  BOOST_CHECK((b.values == std::vector<float>{1, 1, 1}));
  // The integer columns are the dense features: log1p, negative mirrored, missing 0.
  BOOST_CHECK_EQUAL(b.dense_dim, 13u);
  std::vector<float> want(3 * 13, 0.0f);
  want[0] = static_cast<float>(std::log1p(1.0));
  want[2] = static_cast<float>(-std::log1p(3.0));
  want[3] = 0.0f;
  want[2 * 13 + 12] = static_cast<float>(std::log1p(100.0));
  BOOST_CHECK((b.dense == want));
  BOOST_CHECK(read_all(path, plain()).size() == 1);
  auto reader = open_reader(path, plain());
  BOOST_REQUIRE(reader.ok());
  BOOST_CHECK((*reader)->stats().format == DataFormat::criteo);
}

BOOST_AUTO_TEST_CASE(libsvm_labels_accept_0_1_and_minus1_plus1_spellings) {
  TempDir dir;
  std::string path = dir.write("labels.libsvm", "0\n1\n-1\n+1\n0.0\n1.0\n-1.0\n");
  auto b = concat(read_all(path, plain()));
  BOOST_CHECK((b.labels == std::vector<float>{0, 1, 0, 1, 0, 1, 0}));
}

struct BadCase {
  std::string name;
  std::string content;
  std::string expected;  // the message after "FILE" starts with this
};

BOOST_AUTO_TEST_CASE(malformed_lines_name_file_line_and_column) {
  const std::string criteo_ok = criteo_line("1", {"1"}, {"a"});
  const std::string criteo_39 = criteo_ok.substr(0, criteo_ok.rfind('\t'));
  const std::string criteo_41 = criteo_ok + "\tff";
  const std::vector<BadCase> cases = {
      {"bad label", "1 1:1\n2 1:1\n", ":2:1: bad label \"2\", expected 0, 1, -1 or +1"},
      {"bad label 0.5", "0.5 1:1\n", ":1:1: bad label \"0.5\""},
      {"bad index", "1 1:1\n1 2:1 x7:1\n",
       ":2:7: bad feature index \"x7\", expected an unsigned integer"},
      {"negative index", "1 -2:1\n", ":1:3: bad feature index \"-2\""},
      {"index overflow", "1 18446744073709551616:1\n",
       ":1:3: bad feature index \"18446744073709551616\""},
      {"non-numeric value", "1 3:abc\n",
       ":1:5: bad feature value \"abc\", expected a finite number"},
      {"nan value", "1 1:1\n1 3:nan\n", ":2:5: bad feature value \"nan\""},
      {"inf value", "1 3:-inf\n", ":1:5: bad feature value \"-inf\""},
      {"huge value", "1 3:1e40\n", ":1:5: bad feature value \"1e40\""},
      {"value with junk", "1 3:1.5x\n", ":1:5: bad feature value \"1.5x\""},
      {"truncated after colon", "1 3:\n",
       ":1:3: truncated feature \"3:\", expected a value after ':'"},
      {"truncated without colon", "1 1:1 34\n",
       ":1:7: truncated feature \"34\", expected index:value"},
      {"truncated last line", "1 1:1\n1 2:", ":2:3: truncated feature \"2:\""},
      {"blank line in the middle", "1 1:1\n\n1 2:1\n", ":2:1: empty line, expected a sample"},
      {"whitespace line in the middle", "1 1:1\n \t\r\n1 2:1\n", ":2:1: empty line"},
      {"criteo too few fields", criteo_ok + "\n" + criteo_39 + "\n",
       fmt::format(":2:{}: wrong number of fields: found 39 tab-separated fields, expected 40",
                   criteo_39.size() + 1)},
      {"criteo too many fields", criteo_ok + "\n" + criteo_41 + "\n",
       fmt::format(":2:{}: wrong number of fields: found 41", criteo_ok.size() + 2)},
      {"criteo bad integer", criteo_ok + "\n" + criteo_line("0", {"1", "x"}, {}) + "\n",
       ":2:5: bad integer \"x\" in field I2"},
      {"criteo bad categorical", criteo_line("0", {}, {"a", "b", "0x12"}) + "\n",
       ":1:20: bad categorical \"0x12\" in field C3, expected 1 to 16 hex digits"},
      {"criteo long categorical", criteo_line("0", {}, {"12345678901234567"}) + "\n",
       ":1:16: bad categorical \"12345678901234567\""},
      {"criteo bad label", criteo_line("2", {}, {}) + "\n",
       ":1:1: bad label \"2\", expected 0 or 1"},
      {"libffm field too large", "1 1:2:1\n1 255:2:1\n",
       ":2:3: bad field \"255\", expected an integer 0..254 then ':'"},
      {"libffm bad field", "1 1:2:1 x:2:1\n", ":1:9: bad field \"x\""},
      {"libffm missing index", "1 1:2:1 3:\n", ":1:11: bad feature index \"3:\""},
      {"libffm bad value", "1 1:2:1 3:4:nan\n", ":1:13: bad feature value \"nan\""},
      {"libffm empty value", "1 1:2:1 3:4:\n", ":1:13: bad feature value \"\""},
      // A first line without ':' but with tabs is taken for Criteo, so the count is reported.
      {"criteo bad first line", criteo_39 + "\n", ":1:"},
  };
  TempDir dir;
  for (const BadCase& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      std::string path = dir.write("bad.txt", c.content);
      Status s = read_error(path, plain());
      BOOST_CHECK(s.code() == Status::Code::invalid_input);
      BOOST_CHECK_MESSAGE(s.message().rfind(path + c.expected, 0) == 0,
                          "message: " << s.message() << "\nwanted prefix: " << path + c.expected);
    }
  }
}

BOOST_AUTO_TEST_CASE(truncated_last_line_says_so_but_unterminated_valid_line_is_fine) {
  TempDir dir;
  Status s = read_error(dir.write("cut.libsvm", "1 1:1\n1 2"), plain());
  BOOST_CHECK(s.code() == Status::Code::invalid_input);
  BOOST_CHECK(s.message().find("truncated") != std::string::npos);
  BOOST_CHECK(s.message().find("no newline") != std::string::npos);
  BOOST_CHECK_EQUAL(concat(read_all(dir.write("ok.libsvm", "1 1:1\n1 2:5"), plain())).rows(), 2u);
}

BOOST_AUTO_TEST_CASE(empty_and_missing_files_are_errors) {
  TempDir dir;
  for (const char* content : {"", "\n", "  \n\t\n\r\n"}) {
    std::string path = dir.write("empty.libsvm", content);
    Status s = read_error(path, plain());
    BOOST_CHECK(s.code() == Status::Code::invalid_input);
    BOOST_CHECK_EQUAL(s.message(), path + ": empty file, no samples");
  }
  std::string missing = (dir.path / "missing.libsvm").string();
  auto r = open_reader(missing, plain());
  BOOST_REQUIRE(!r.ok());
  BOOST_CHECK(r.status().code() == Status::Code::not_found);
  BOOST_CHECK_EQUAL(r.status().message(), missing + ": no such file");
}

BOOST_AUTO_TEST_CASE(trailing_blank_lines_are_ignored) {
  TempDir dir;
  auto b = concat(read_all(dir.write("t.libsvm", "1 1:1\n0 2:2\n\n \n"), plain()));
  BOOST_CHECK_EQUAL(b.rows(), 2u);
}

BOOST_AUTO_TEST_CASE(skip_bad_lines_counts_and_enforces_its_limit) {
  TempDir dir;
  std::string path = dir.write("some_bad.libsvm", "1 1:1\nx 1:1\n0 2:2\n1 3:nan\n\n1 4:4\n0 5:5\n");
  ReaderOptions o = plain();
  o.skip_bad_lines = 3;
  auto reader = open_reader(path, o);
  BOOST_REQUIRE(reader.ok());
  Batch b;
  auto r = (*reader)->next(b);
  BOOST_REQUIRE(r.ok() && r.value());
  BOOST_CHECK((b.labels == std::vector<float>{1, 0, 1, 0}));
  BOOST_CHECK((b.keys == std::vector<uint64_t>{svm_key(1), svm_key(2), svm_key(4), svm_key(5)}));
  BOOST_CHECK_EQUAL((*reader)->stats().bad_lines_skipped, 3u);
  BOOST_CHECK_EQUAL((*reader)->stats().rows, 4u);

  o.skip_bad_lines = 2;
  Status s = read_error(path, o);
  BOOST_CHECK(s.code() == Status::Code::invalid_input);
  BOOST_CHECK_MESSAGE(s.message().rfind(path + ":5:1: empty line", 0) == 0, s.message());
  BOOST_CHECK(s.message().find("--skip-bad-lines 2") != std::string::npos);

  std::string all_bad = dir.write("all_bad.libsvm", "x\ny\n");
  o.skip_bad_lines = 5;
  s = read_error(all_bad, o);
  BOOST_CHECK(s.code() == Status::Code::invalid_input);
  BOOST_CHECK(s.message().find("no samples") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(batches_are_full_but_the_last) {
  TempDir dir;
  std::string content;
  for (int i = 0; i < 10; ++i) content += fmt::format("{} {}:{}\n", i % 2, i, i);
  std::string path = dir.write("ten.libsvm", content);
  for (size_t prefetch : {0, 2}) {
    ReaderOptions o = plain(3);
    o.prefetch_batches = prefetch;
    auto reader = open_reader(path, o);
    BOOST_REQUIRE(reader.ok());
    Batch b;
    std::vector<size_t> sizes;
    for (;;) {
      auto r = (*reader)->next(b);
      BOOST_REQUIRE(r.ok());
      if (!r.value()) break;
      sizes.push_back(b.rows());
    }
    BOOST_CHECK((sizes == std::vector<size_t>{3, 3, 3, 1}));
    auto again = (*reader)->next(b);
    BOOST_CHECK(again.ok() && !again.value() && b.empty());
    ReaderStats st = (*reader)->stats();
    BOOST_CHECK_EQUAL(st.rows, 10u);
    BOOST_CHECK_EQUAL(st.bytes_read, content.size());
    BOOST_CHECK_EQUAL(st.bytes_total, content.size());
    BOOST_CHECK(st.format == DataFormat::libsvm);
    BOOST_CHECK(!st.from_cache);
  }
}

BOOST_AUTO_TEST_CASE(line_reader_handles_lines_across_chunks) {
  TempDir dir;
  std::vector<std::string> lines = {"a", "", "bcdefghijkl", "mn\r", "0123456789abcdef", "z"};
  std::string content;
  for (const auto& l : lines) content += l + "\n";
  content += "tail";
  std::string path = dir.write("lines.txt", content);
  for (size_t chunk : {1, 2, 3, 7, 16, 4096}) {
    BOOST_TEST_CONTEXT("chunk " << chunk) {
      LineReader reader(UniqueFd(::open(path.c_str(), O_RDONLY)), LineLimits{chunk, 16});
      std::vector<std::string> got;
      LineReader::Result r;
      while ((r = reader.next()) == LineReader::Result::line) got.emplace_back(reader.line());
      BOOST_CHECK(r == LineReader::Result::end);
      BOOST_CHECK((got == std::vector<std::string>{"a", "", "bcdefghijkl", "mn", "0123456789abcdef",
                                                   "z", "tail"}));
      BOOST_CHECK(!reader.line_has_newline());
      BOOST_CHECK_EQUAL(reader.line_number(), 7u);
      BOOST_CHECK_EQUAL(reader.bytes_read(), content.size());
    }
  }
}

BOOST_AUTO_TEST_CASE(lines_longer_than_the_limit_are_errors_and_skippable) {
  TempDir dir;
  std::string path = dir.write(
      "long.libsvm", "1 1:1\n1 " + std::string(40, '1') + ":1\n0 2:2\n1 " + std::string(50, '3'));
  LineLimits limits{5, 32};
  Status s = read_error(path, plain(), limits);
  BOOST_CHECK(s.code() == Status::Code::invalid_input);
  BOOST_CHECK_MESSAGE(s.message().rfind(path + ":2:33: line longer than 32 bytes", 0) == 0,
                      s.message());
  ReaderOptions o = plain();
  o.skip_bad_lines = 2;
  auto b = concat(read_all(path, o, limits));
  BOOST_CHECK((b.keys == std::vector<uint64_t>{svm_key(1), svm_key(2)}));
}

BOOST_AUTO_TEST_CASE(tiny_read_chunks_give_the_same_batches) {
  TempDir dir;
  std::string path = dir.write("gen.libsvm", generated_libsvm(300, 7));
  auto reference = read_all(path, plain(64));
  BOOST_CHECK_EQUAL(concat(reference).rows(), 300u);
  for (size_t chunk : {1, 13, 100}) {
    BOOST_CHECK(same_batches(read_all(path, plain(64), LineLimits{chunk, 4096}), reference));
  }
}

BOOST_AUTO_TEST_CASE(files_larger_than_the_read_chunk_parse_fully) {
  TempDir dir;
  std::string content = generated_libsvm(12000, 11);  // several MiB: many 1 MiB chunks
  BOOST_REQUIRE_GT(content.size(), 3 * read_chunk_bytes_default);
  std::string path = dir.write("big.libsvm", content);
  auto big = read_all(path, plain(1000));
  BOOST_CHECK_EQUAL(big.size(), 12u);
  // Same rows as parsing the file in small chunks.
  BOOST_CHECK(same_batches(big, read_all(path, plain(1000), LineLimits{4093, 4096})));
}

BOOST_AUTO_TEST_CASE(format_is_detected_from_content) {
  TempDir dir;
  std::string tabs = dir.write("tabs.tsv", "1\t1:1\t2:2\n");  // libsvm with tab separators
  auto r = open_reader(tabs, plain());
  BOOST_REQUIRE(r.ok());
  BOOST_CHECK((*r)->stats().format == DataFormat::libsvm);
  std::string crit = dir.write("x.libsvm", "\n" + criteo_line("0", {}, {}) + "\n");
  r = open_reader(crit, plain());
  BOOST_REQUIRE(r.ok());
  BOOST_CHECK((*r)->stats().format == DataFormat::criteo);
  BOOST_CHECK_EQUAL(std::string(to_string(DataFormat::criteo)), "criteo");
  BOOST_CHECK_EQUAL(std::string(to_string(DataFormat::libsvm)), "libsvm");
  BOOST_CHECK_EQUAL(std::string(to_string(DataFormat::cache)), "cache");
  std::string ffm = dir.write("x.txt", "0\t3:17:1\t4:2\n");  // libffm, tabs and a short feature
  r = open_reader(ffm, plain());
  BOOST_REQUIRE(r.ok());
  BOOST_CHECK((*r)->stats().format == DataFormat::libffm);
  BOOST_CHECK_EQUAL(std::string(to_string(DataFormat::libffm)), "libffm");
}

BOOST_AUTO_TEST_CASE(a_libffm_name_or_the_format_option_says_how_to_read_a_file) {
  TempDir dir;
  // Without values, `field:idx` looks like libsvm's `idx:val`: the .libffm name decides.
  const std::string rows = "1 3:17 4:2\n0 5:9\n";
  std::string named = dir.write("short.libffm", rows);
  auto batches = read_all(named, plain());
  BOOST_REQUIRE_EQUAL(batches.size(), 1u);
  BOOST_CHECK(
      (batches[0].keys == std::vector<uint64_t>{make_key(3, mix64(17)), make_key(4, mix64(2)),
                                                make_key(5, mix64(9))}));
  BOOST_CHECK((batches[0].values == std::vector<float>{1, 1, 1}));
  // The same bytes under another name are libsvm, unless the option says libffm.
  std::string other = dir.write("short.txt", rows);
  BOOST_CHECK((read_all(other, plain())[0].keys ==
               std::vector<uint64_t>{svm_key(3), svm_key(4), svm_key(5)}));
  ReaderOptions ffm = plain();
  ffm.format = DataFormat::libffm;
  BOOST_CHECK((read_all(other, ffm)[0].keys == batches[0].keys));
  // Forced to a format the file is not in: the parser says where.
  ReaderOptions criteo = plain();
  criteo.format = DataFormat::criteo;
  const Status s = read_error(named, criteo);
  BOOST_CHECK(s.message().find("wrong number of fields") != std::string::npos);
  BOOST_CHECK(parse_format_flag("auto").value() == std::nullopt);
  BOOST_CHECK(parse_format_flag("libffm").value() == DataFormat::libffm);
  BOOST_CHECK(parse_format_flag("svm").status().message().find("--format svm") !=
              std::string::npos);
}

BOOST_AUTO_TEST_CASE(prefetch_gives_the_same_batches) {
  TempDir dir;
  std::string path = dir.write("gen.libsvm", generated_libsvm(2000, 3));
  auto reference = read_all(path, plain(37));
  for (size_t prefetch : {1, 2, 8}) {
    ReaderOptions o = plain(37);
    o.prefetch_batches = prefetch;
    BOOST_CHECK(same_batches(read_all(path, o), reference));
  }
}

BOOST_AUTO_TEST_CASE(prefetch_delivers_errors_after_the_good_batches) {
  TempDir dir;
  std::string content;
  for (int i = 0; i < 10; ++i) content += fmt::format("1 {}:1\n", i);
  content += "1 x:1\n1 3:3\n";
  std::string path = dir.write("err.libsvm", content);
  ReaderOptions o = plain(3);
  o.prefetch_batches = 2;
  auto reader = open_reader(path, o);
  BOOST_REQUIRE(reader.ok());
  Batch b;
  for (int i = 0; i < 3; ++i) {
    auto r = (*reader)->next(b);
    BOOST_REQUIRE(r.ok() && r.value());
    BOOST_CHECK_EQUAL(b.rows(), 3u);
    BOOST_CHECK_EQUAL(b.keys[0], svm_key(3 * i));
  }
  for (int i = 0; i < 2; ++i) {
    auto r = (*reader)->next(b);
    BOOST_REQUIRE(!r.ok());
    BOOST_CHECK(r.status().code() == Status::Code::invalid_input);
    BOOST_CHECK_MESSAGE(r.status().message().rfind(path + ":11:3: bad feature index", 0) == 0,
                        r.status().message());
    BOOST_CHECK(b.empty());
  }
  BOOST_CHECK_EQUAL((*reader)->stats().rows, 9u);
}

BOOST_AUTO_TEST_CASE(prefetch_reader_destroyed_early_joins) {
  TempDir dir;
  std::string path = dir.write("gen.libsvm", generated_libsvm(5000, 5));
  for (int consumed : {0, 1, 3}) {
    ReaderOptions o = plain(10);
    o.prefetch_batches = 2;
    auto reader = open_reader(path, o);
    BOOST_REQUIRE(reader.ok());
    Batch b;
    for (int i = 0; i < consumed; ++i) BOOST_REQUIRE((*reader)->next(b).ok());
    // The producer is blocked on a full queue by now (or soon); destruction must not hang.
  }
}

BOOST_AUTO_TEST_CASE(memory_reader_reslices_batches) {
  auto data = std::make_shared<std::vector<Batch>>();
  uint64_t key = 0;
  for (size_t rows : {4, 1, 0, 6}) {
    Batch b;
    for (size_t r = 0; r < rows; ++r) {
      for (size_t f = 0; f <= key % 3; ++f) b.add_feature(key * 10 + f, static_cast<float>(f));
      b.finish_row(static_cast<float>(key % 2));
      ++key;
    }
    data->push_back(std::move(b));
  }
  Batch all = concat(*data);
  for (size_t batch_rows : {1, 3, 5, 11, 100}) {
    auto reader = make_memory_reader(data, batch_rows);
    std::vector<Batch> got;
    Batch b;
    for (;;) {
      auto r = reader->next(b);
      BOOST_REQUIRE(r.ok());
      if (!r.value()) break;
      got.push_back(b);
    }
    BOOST_CHECK_EQUAL(got.size(), (11 + batch_rows - 1) / batch_rows);
    for (size_t i = 0; i + 1 < got.size(); ++i) BOOST_CHECK_EQUAL(got[i].rows(), batch_rows);
    Batch joined = concat(got);
    BOOST_CHECK(joined.labels == all.labels && joined.offsets == all.offsets &&
                joined.keys == all.keys && joined.values == all.values);
    BOOST_CHECK_EQUAL(reader->stats().rows, 11u);
  }
}

// Rows of `b` as text, one string per row, to compare multisets of rows.
std::vector<std::string> row_texts(const Batch& b) {
  std::vector<std::string> out;
  for (size_t i = 0; i < b.rows(); ++i) {
    std::string t = fmt::format("{}", b.labels[i]);
    for (size_t j = b.offsets[i]; j < b.offsets[i + 1]; ++j)
      t += fmt::format(" {}:{}", b.keys[j], b.values[j]);
    out.push_back(t);
  }
  std::sort(out.begin(), out.end());
  return out;
}

BOOST_AUTO_TEST_CASE(holdout_splits_rows_in_two_by_content) {
  TempDir dir;
  const int rows = 5000;
  std::string path = dir.write("gen.libsvm", generated_libsvm(rows, 5));
  const Batch all = concat(read_all(path, plain(64)));
  for (double fraction : {0.05, 0.3}) {
    ReaderOptions train = plain(64), valid = plain(64);
    train.holdout = HoldoutSplit{fraction, false};
    valid.holdout = HoldoutSplit{fraction, true};
    auto train_batches = read_all(path, train), valid_batches = read_all(path, valid);
    // Every batch but the last is full.
    for (const auto* side : {&train_batches, &valid_batches})
      for (size_t i = 0; i + 1 < side->size(); ++i) BOOST_CHECK_EQUAL((*side)[i].rows(), 64u);
    const Batch t = concat(train_batches), v = concat(valid_batches);
    BOOST_CHECK_EQUAL(t.rows() + v.rows(), all.rows());
    // The held-out share is near the fraction (binomial: 6 standard deviations).
    const double sd = std::sqrt(fraction * (1 - fraction) / rows);
    BOOST_CHECK_LT(std::abs(double(v.rows()) / rows - fraction), 6 * sd);
    // The two sides are exactly the rows of the file.
    std::vector<std::string> both = row_texts(t), vt = row_texts(v);
    both.insert(both.end(), vt.begin(), vt.end());
    std::sort(both.begin(), both.end());
    BOOST_CHECK(both == row_texts(all));
    for (size_t i = 0; i < v.rows(); ++i) BOOST_CHECK(row_held_out(v, i, fraction));
    for (size_t i = 0; i < t.rows(); ++i) BOOST_CHECK(!row_held_out(t, i, fraction));
  }
}

BOOST_AUTO_TEST_CASE(holdout_is_the_same_through_cache_prefetch_and_memory) {
  TempDir dir;
  std::string path = dir.write("gen.libsvm", generated_libsvm(3000, 9));
  ReaderOptions o = plain(50);
  o.holdout = HoldoutSplit{0.2, true};
  const Batch reference = concat(read_all(path, o));
  BOOST_REQUIRE_GT(reference.rows(), 0u);
  ReaderOptions cached = o;
  cached.use_cache = true;
  cached.prefetch_batches = 3;
  cached.batch_rows = 7;
  BOOST_CHECK(row_texts(concat(read_all(path, cached))) == row_texts(reference));  // writes
  BOOST_CHECK(row_texts(concat(read_all(path, cached))) == row_texts(reference));  // reads
  auto mem = std::make_shared<std::vector<Batch>>(read_all(path, plain(33)));
  auto reader = make_memory_reader(mem, 19, o.holdout);
  std::vector<Batch> got;
  Batch b;
  while (true) {
    auto r = reader->next(b);
    BOOST_REQUIRE(r.ok());
    if (!*r) break;
    got.push_back(b);
  }
  BOOST_CHECK(row_texts(concat(got)) == row_texts(reference));
  BOOST_CHECK_EQUAL(reader->stats().rows, reference.rows());
}

BOOST_AUTO_TEST_CASE(holdout_keeps_dense_features_with_their_rows) {
  Batch b;
  for (int i = 0; i < 400; ++i) {
    const float d[2] = {float(i), float(-i)};
    b.add_feature(make_key(0, uint64_t(i)), 1.0f);
    b.add_dense(d, 2);
    b.finish_row(float(i % 2));
  }
  auto mem = std::make_shared<std::vector<Batch>>(1, b);
  auto reader = make_memory_reader(mem, 16, HoldoutSplit{0.5, true});
  Batch out;
  size_t seen = 0;
  while (*reader->next(out)) {
    BOOST_REQUIRE_EQUAL(out.dense_dim, 2u);
    BOOST_REQUIRE_EQUAL(out.dense.size(), out.rows() * 2);
    for (size_t i = 0; i < out.rows(); ++i) {
      const float x = out.row_dense(i)[0];
      BOOST_CHECK_EQUAL(out.row_dense(i)[1], -x);
      BOOST_CHECK_EQUAL(out.row_keys(i)[0], make_key(0, uint64_t(x)));
    }
    seen += out.rows();
  }
  BOOST_CHECK(seen > 100 && seen < 300);
}

// --trial-rows: a reader stops after the source's first max_rows rows (the hold-out split is made
// among them), from the text, from the cache or from memory, and a pass cut short writes no
// cache.
BOOST_AUTO_TEST_CASE(max_rows_reads_the_first_rows_before_the_holdout_and_writes_no_cache) {
  TempDir dir;
  std::string path = dir.write("gen.libsvm", generated_libsvm(3000, 11));
  const Batch all = concat(read_all(path, plain(64)));
  BOOST_REQUIRE_EQUAL(all.rows(), 3000u);
  auto first = [&](size_t n) {
    Batch b;
    b.append_rows(all, 0, std::min<size_t>(n, all.rows()));
    return b;
  };
  auto mem = std::make_shared<std::vector<Batch>>(read_all(path, plain(33)));
  auto drain = [](BatchReader& r) {
    std::vector<Batch> got;
    Batch b;
    while (true) {
      auto more = r.next(b);
      BOOST_REQUIRE(more.ok());
      if (!*more) break;
      got.push_back(b);
    }
    return concat(got);
  };
  for (uint64_t max : {1u, 64u, 1000u, 2999u, 3000u, 5000u}) {
    BOOST_TEST_CONTEXT("max_rows " << max) {
      ReaderOptions o = plain(64);
      o.max_rows = max;
      o.use_cache = true;  // a valid cache would be read; a cut pass writes none
      o.prefetch_batches = 2;
      const Batch got = concat(read_all(path, o));
      BOOST_CHECK(row_texts(got) == row_texts(first(max)));
      BOOST_CHECK_EQUAL(fs::exists(cache_path_for(path, o)), false);
      // The split among the first rows: held out and kept, exactly those rows.
      for (bool held_out : {true, false}) {
        ReaderOptions side = o;
        side.holdout = HoldoutSplit{0.3, held_out};
        const Batch s = concat(read_all(path, side));
        const Batch f = first(max);
        Batch expected;
        for (size_t i = 0; i < f.rows(); ++i)
          if (row_held_out(f, i, 0.3) == held_out) expected.append_rows(f, i, 1);
        BOOST_CHECK(row_texts(s) == row_texts(expected));
      }
      auto m = make_memory_reader(mem, 19, {}, max);
      BOOST_CHECK(row_texts(drain(*m)) == row_texts(first(max)));
      BOOST_CHECK_EQUAL(m->stats().rows, std::min<uint64_t>(max, 3000));
    }
  }
  // A full pass writes the cache; a capped read of it gives the same first rows.
  ReaderOptions full = plain(64);
  full.use_cache = true;
  read_all(path, full);
  BOOST_REQUIRE(fs::exists(cache_path_for(path, full)));
  ReaderOptions capped = full;
  capped.max_rows = 700;
  auto reader = open_reader(path, capped);
  BOOST_REQUIRE(reader.ok());
  BOOST_CHECK(row_texts(drain(**reader)) == row_texts(first(700)));
  BOOST_CHECK((*reader)->stats().from_cache);
  BOOST_CHECK_EQUAL((*reader)->stats().rows_total, 700u);
}
