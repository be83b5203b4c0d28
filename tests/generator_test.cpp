#define BOOST_TEST_MODULE generator_test
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <map>

#include "common/hash.h"
#include "common/metrics.h"
#include "data/generator.h"
#include "data/text_formats.h"
#include "data/zipf.h"

using namespace colony;

// CLI.md: defaults as hard as Criteo. Planted AUC about 0.78-0.82, positive rate about 25%,
// planted logloss at least 15% below the base-rate logloss.
BOOST_AUTO_TEST_CASE(defaults_are_as_hard_as_criteo) {
  for (uint64_t seed : {1, 2, 3}) {
    GenOptions o;
    o.rows = 20000;
    o.test_rows = 100000;
    o.seed = seed;
    const InMemoryData d = generate_in_memory(o);
    const GenSummary& s = d.summary;
    BOOST_TEST_CONTEXT("seed " << seed) {
      BOOST_TEST(s.planted_auc_test >= 0.78);
      BOOST_TEST(s.planted_auc_test <= 0.82);
      BOOST_TEST(s.positive_rate >= 0.22);
      BOOST_TEST(s.positive_rate <= 0.28);
      BOOST_TEST(s.planted_logloss_test <= 0.85 * s.base_rate_logloss_test);
    }
  }
}

BOOST_AUTO_TEST_CASE(rows_are_a_pure_function_of_seed_stream_and_index) {
  Generator a({7, 1.0}), b({7, 1.0}), c({8, 1.0});
  RawRow x, y, z;
  int differ = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    a.generate(Stream::train, i, x);
    b.generate(Stream::train, i, y);
    c.generate(Stream::train, i, z);
    BOOST_TEST(x.planted_p == y.planted_p);
    BOOST_TEST(x.cats == y.cats);
    differ += x.planted_p != z.planted_p;
  }
  BOOST_TEST(differ > 190);
  // Out-of-order generation gives the same row.
  a.generate(Stream::test, 5, x);
  a.generate(Stream::test, 99, y);
  b.generate(Stream::test, 5, z);
  BOOST_TEST(x.planted_p == z.planted_p);
}

BOOST_AUTO_TEST_CASE(vocabularies_are_criteo_sized_and_scalable) {
  Generator full({1, 1.0}), small({1, 0.001});
  uint64_t largest = 0, smallest = UINT64_MAX;
  for (size_t j = 0; j < gen_cat_fields; ++j) {
    largest = std::max<uint64_t>(largest, full.vocab(j));
    smallest = std::min<uint64_t>(smallest, full.vocab(j));
    BOOST_TEST(small.vocab(j) >= 2u);
    BOOST_TEST(small.vocab(j) <= full.vocab(j));
  }
  BOOST_TEST(largest >= 10000000u);
  BOOST_TEST(smallest <= 10u);
}

BOOST_AUTO_TEST_CASE(in_memory_rows_match_libsvm_lines) {
  Generator g({3, 0.01});
  RawRow row;
  g.generate(Stream::train, 11, row);
  Batch b;
  g.append_features(row, b);
  std::string line;
  g.write_libsvm(row, line);
  BOOST_TEST(b.rows() == 1u);
  // One feature per present field, each "idx:val" in the line.
  size_t colons = 0;
  for (char ch : line) colons += ch == ':';
  BOOST_TEST(colons == b.features());
  BOOST_TEST(line.back() == '\n');
}

// In-memory rows in the Criteo layout are what the Criteo reader makes of write_criteo's line,
// bit for bit: 13 dense features and the categorical columns in fields 0..25.
BOOST_AUTO_TEST_CASE(in_memory_criteo_rows_match_criteo_lines_as_read) {
  Generator g({7, 0.01});
  Batch mem, read;
  for (uint64_t i = 0; i < 300; ++i) {
    RawRow row;
    g.generate(Stream::train, i, row);
    g.append_criteo_features(row, mem);
    std::string line;
    g.write_criteo(row, line);
    line.pop_back();
    LineError error;
    BOOST_REQUIRE_MESSAGE(parse_criteo_line(line, read, error), error.what);
  }
  BOOST_TEST(mem.dense_dim == 13u);
  BOOST_TEST((mem.labels == read.labels));
  BOOST_TEST((mem.offsets == read.offsets));
  BOOST_TEST((mem.keys == read.keys));
  BOOST_TEST((mem.values == read.values));
  BOOST_TEST((mem.dense == read.dense));
}

// The libffm line of a row holds the libsvm line's features, each in its field: integer column i
// in field i, categorical column j in field 13 + j; read back, the values and labels are the
// same and every key's index part is the libsvm key's.
BOOST_AUTO_TEST_CASE(libffm_lines_are_the_libsvm_lines_in_fields) {
  Generator g({5, 0.01});
  for (uint64_t i = 0; i < 200; ++i) {
    RawRow row;
    g.generate(Stream::train, i, row);
    std::string svm, ffm;
    g.write_libsvm(row, svm);
    g.write_libffm(row, ffm);
    svm.pop_back();
    ffm.pop_back();
    Batch a, b;
    LineError error;
    BOOST_REQUIRE(parse_libsvm_line(svm, a, error));
    BOOST_REQUIRE_MESSAGE(parse_libffm_line(ffm, b, error), error.what);
    BOOST_TEST((classify_text_line(ffm) == DataFormat::libffm));
    BOOST_TEST(a.labels == b.labels, boost::test_tools::per_element());
    BOOST_TEST(a.values == b.values, boost::test_tools::per_element());
    BOOST_REQUIRE_EQUAL(a.keys.size(), b.keys.size());
    uint32_t last_field = 0;
    for (size_t k = 0; k < a.keys.size(); ++k) {
      BOOST_TEST((b.keys[k] & key_value_mask) == (a.keys[k] & key_value_mask));
      BOOST_TEST(key_field(b.keys[k]) >= last_field);  // fields in column order
      BOOST_TEST(key_field(b.keys[k]) < 13u + 26u);
      last_field = key_field(b.keys[k]);
    }
  }
}

BOOST_AUTO_TEST_CASE(zipf_sampler_follows_the_power_law) {
  ZipfSampler z(1000, 1.2);
  SplitMix64 rng(42);
  std::map<uint64_t, int> counts;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const uint64_t k = z(rng);
    BOOST_REQUIRE(k >= 1 && k <= 1000);
    ++counts[k];
  }
  // P(1)/P(2) = 2^1.2 = 2.30; P(1)/P(10) = 10^1.2 = 15.8.
  BOOST_TEST(double(counts[1]) / counts[2] == std::pow(2.0, 1.2),
             boost::test_tools::tolerance(0.05));
  BOOST_TEST(double(counts[1]) / counts[10] == std::pow(10.0, 1.2),
             boost::test_tools::tolerance(0.15));
}

BOOST_AUTO_TEST_CASE(draw_features_gives_generates_features_without_calibration) {
  const Generator full(GeneratorConfig{7, 1.0});
  const Generator keys_only(GeneratorConfig{7, 1.0, false});
  BOOST_TEST(keys_only.intercept() == 0.0);
  RawRow a, b;
  for (uint64_t i = 0; i < 500; ++i) {
    full.generate(Stream::train, i, a);
    keys_only.draw_features(Stream::train, i, b);
    BOOST_TEST(a.int_present == b.int_present, "row " << i);
    BOOST_TEST(a.cat_present == b.cat_present, "row " << i);
    BOOST_TEST((a.ints == b.ints), "row " << i);
    BOOST_TEST((a.cats == b.cats), "row " << i);
    BOOST_TEST(b.label == 0.0f);
  }
}

// --planted deep: the same features as --planted fm for a seed, labels from a logit with a
// nonlinear term whose spread is deep_planted_std, recorded in meta.json; a pure function of
// the seed.
BOOST_AUTO_TEST_CASE(planted_deep_adds_a_nonlinear_term_to_the_same_features) {
  GeneratorConfig fm_config{9, 1.0};
  GeneratorConfig deep_config{9, 1.0, true, PlantedKind::deep};
  const Generator fm(fm_config), deep(deep_config), again(deep_config);
  RawRow a, b, c;
  double sum = 0.0, sum_sq = 0.0;
  size_t labels_differ = 0;
  const int n = 20000;
  for (uint64_t i = 0; i < n; ++i) {
    fm.generate(Stream::train, i, a);
    deep.generate(Stream::train, i, b);
    again.generate(Stream::train, i, c);
    BOOST_REQUIRE((a.ints == b.ints && a.cats == b.cats && a.cat_present == b.cat_present));
    BOOST_REQUIRE(b.planted_p == c.planted_p);
    BOOST_REQUIRE(fm.deep_logit(a) == 0.0);
    const double z = deep.deep_logit(b);
    sum += z;
    sum_sq += z * z;
    labels_differ += a.label != b.label;
  }
  const double mean = sum / n, sd = std::sqrt(sum_sq / n - mean * mean);
  BOOST_TEST(std::abs(mean) < 0.05);
  BOOST_TEST(sd == deep_planted_std, boost::test_tools::tolerance(0.05));
  BOOST_TEST(labels_differ > size_t(n / 20));

  // The network is not a sum of per-feature terms: changing two inputs together is not the
  // sum of changing each alone (a ReLU crosses its kink somewhere among these rows).
  size_t nonadditive = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    deep.generate(Stream::test, i, b);
    RawRow x = b, y = b, xy = b;
    x.cats[0] = xy.cats[0] = (b.cats[0] + 1) % 3;
    x.cat_present |= 1u;
    xy.cat_present |= 1u;
    y.ints[1] = xy.ints[1] = b.ints[1] * 7 + 50;
    y.int_present |= 2u;
    xy.int_present |= 2u;
    const double d =
        deep.deep_logit(xy) - deep.deep_logit(x) - deep.deep_logit(y) + deep.deep_logit(b);
    nonadditive += std::abs(d) > 1e-3;
  }
  BOOST_TEST(nonadditive > 10u);
}
