#include "data/generator.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/hash.h"
#include "common/metrics.h"
#include "data/text_formats.h"

namespace colony {

namespace {

// Criteo (Kaggle display-advertising) vocabulary sizes and missing rates, field by field.
constexpr std::array<uint32_t, gen_cat_fields> criteo_vocab = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};
constexpr std::array<double, gen_cat_fields> criteo_cat_missing = {
    0, 0, 0.03, 0.03, 0, 0,    0,    0,    0,    0, 0,    0.03, 0,
    0, 0, 0.03, 0,    0, 0.44, 0.44, 0.03, 0.76, 0, 0.03, 0.44, 0.44};
constexpr std::array<double, gen_int_fields> criteo_int_missing = {
    0.45, 0, 0.21, 0.22, 0.03, 0.22, 0.04, 0, 0.04, 0.45, 0.04, 0.77, 0.22};
// Typical log-scale of each integer field's counts.
constexpr std::array<double, gen_int_fields> int_log_mean = {0.8, 2.5, 1.5, 1.8, 7.5, 3.5, 1.7,
                                                             2.4, 3.5, 0.4, 1.0, 0.3, 1.9};

// Planted-model shape. Effects shrink with an id's rank, (1 + rank / rank_scale)^-rank_decay,
// so that the signal sits mostly in ids that recur, as in real click logs.
constexpr double bias_std = 0.55;
constexpr double factor_std = 0.12;
constexpr uint32_t factor_vocab_max = 20000;  // fields with larger vocabularies get no factors
constexpr size_t factor_rank = 4;
constexpr double rank_scale = 5.0;
constexpr double rank_decay = 2.0;
constexpr double int_weight_std = 0.12;
constexpr double target_positive_rate = 0.25;
constexpr uint64_t calibration_rows = 20000;

double normal_from(uint64_t h) {
  const double u1 = (static_cast<double>(h >> 40) + 0.5) * 0x1.0p-24;
  const double u2 = static_cast<double>(h & 0xffffffULL) * 0x1.0p-24;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

double rank_shrink(uint32_t id) {
  return std::pow(1.0 + id / rank_scale, -rank_decay);
}

// A bijection on 32 bits, for Criteo-style hex tokens that look random but never collide.
uint32_t permute32(uint32_t x, uint32_t salt) {
  x ^= salt;
  x *= 0x9e3779b1u;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  return x;
}

void append_float(std::string& out, float v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}
void append_uint(std::string& out, uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace

Generator::Generator(const GeneratorConfig& config) : config_(config) {
  COLONY_ASSERT(config.vocab_scale > 0.0, "vocab_scale={}", config.vocab_scale);
  uint64_t offset = 1 + gen_int_fields;  // libsvm indices 1..13 are the integer fields
  for (size_t j = 0; j < gen_cat_fields; ++j) {
    CatFieldParams& f = fields_[j];
    const double v = std::round(criteo_vocab[j] * config.vocab_scale);
    f.vocab = static_cast<uint32_t>(std::max(2.0, std::min(v, 4.0e9)));
    // Exponents between 1.05 and 1.35, fixed per field (not per seed): the data's shape is
    // the same for every seed, only its draws differ.
    const double zipf_exponent = 1.05 + 0.3 * unit_double(mix64(0xC0101 + j));
    f.missing = criteo_cat_missing[j];
    f.factor_std = criteo_vocab[j] <= factor_vocab_max ? factor_std : 0.0;
    f.libsvm_offset = offset;
    offset += f.vocab;
    samplers_.emplace_back(f.vocab, zipf_exponent);
  }
  for (size_t i = 0; i < gen_int_fields; ++i)
    int_weight_[i] = int_weight_std * normal_from(hash_combine(config.seed, 0x1000 + i));
  if (config.planted == PlantedKind::deep) init_deep();

  if (!config.calibrate) return;
  // Intercept: bisect so that the mean planted probability over calibration rows is 25%.
  std::vector<double> logits(calibration_rows);
  RawRow row;
  for (uint64_t r = 0; r < calibration_rows; ++r) {
    generate(Stream::calibration, r, row);  // intercept_ is still 0 here
    logits[r] = std::log(row.planted_p / (1.0 - row.planted_p));
  }
  double lo = -10.0, hi = 10.0;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    double mean = 0.0;
    for (double z : logits) mean += sigmoid(z + mid);
    mean /= static_cast<double>(logits.size());
    (mean < target_positive_rate ? lo : hi) = mid;
  }
  intercept_ = 0.5 * (lo + hi);
}

Expected<PlantedKind> parse_planted(const std::string& text) {
  if (text == "fm") return PlantedKind::fm;
  if (text == "deep") return PlantedKind::deep;
  return Status::invalid_input("--planted " + text + " is unknown, expected fm or deep");
}

const char* to_string(PlantedKind kind) {
  return kind == PlantedKind::deep ? "deep" : "fm";
}

void Generator::init_deep() {
  const size_t k = deep_planted_embedding, hidden = deep_planted_hidden;
  size_t offset = 0;
  for (size_t j = 0; j < gen_cat_fields; ++j) {
    if (criteo_vocab[j] > factor_vocab_max) continue;
    deep_fields_.push_back(j);
    embed_offset_[j] = offset;
    offset += size_t{fields_[j].vocab} * k;
  }
  // Embeddings shrink with an id's rank like every planted effect: rare ids sit near 0.
  embed_.resize(offset);
  for (size_t j : deep_fields_)
    for (uint32_t id = 0; id < fields_[j].vocab; ++id)
      for (size_t d = 0; d < k; ++d)
        embed_[embed_offset_[j] + size_t{id} * k + d] = static_cast<float>(
            rank_shrink(id) *
            normal_from(hash_combine(hash_combine(config_.seed, 0x3000 + j), id * k + d)));
  const size_t in = deep_fields_.size() * k + gen_int_fields;
  w1_.resize(hidden * in);
  b1_.resize(hidden);
  w2_.resize(hidden);
  for (size_t i = 0; i < w1_.size(); ++i)
    w1_[i] = static_cast<float>(normal_from(hash_combine(config_.seed, 0x4000000 + i)) /
                                std::sqrt(double(in)));
  for (size_t u = 0; u < hidden; ++u) {
    b1_[u] = static_cast<float>(0.5 * normal_from(hash_combine(config_.seed, 0x5000 + u)));
    w2_[u] = static_cast<float>(normal_from(hash_combine(config_.seed, 0x6000 + u)));
  }
  // Standardise over calibration rows: mean 0, standard deviation deep_planted_std.
  deep_scale_ = 1.0;
  double sum = 0.0, sum_sq = 0.0;
  RawRow row;
  for (uint64_t r = 0; r < calibration_rows; ++r) {
    draw_features(Stream::calibration, r, row);
    const double z = deep_logit(row);
    sum += z;
    sum_sq += z * z;
  }
  const double n = double(calibration_rows), mean = sum / n;
  const double sd = std::sqrt(std::max(sum_sq / n - mean * mean, 1e-12));
  deep_shift_ = mean;
  deep_scale_ = deep_planted_std / sd;
}

double Generator::deep_logit(const RawRow& row) const {
  if (deep_fields_.empty()) return 0.0;
  const size_t k = deep_planted_embedding, hidden = deep_planted_hidden;
  float x[gen_cat_fields * deep_planted_embedding + gen_int_fields] = {};
  size_t at = 0;
  for (size_t j : deep_fields_) {
    if (row.cat_present & (1u << j))
      std::copy_n(&embed_[embed_offset_[j] + size_t{row.cats[j]} * k], k, x + at);
    at += k;
  }
  // Integer features standardised (about N(0, 1)); a missing one sits at the mean.
  for (size_t i = 0; i < gen_int_fields; ++i, ++at)
    if (row.int_present & (1u << i))
      x[at] = static_cast<float>((criteo_dense_value(row.ints[i]) - int_log_mean[i]) / 1.2);
  const size_t in = at;
  double out = 0.0;
  for (size_t u = 0; u < hidden; ++u) {
    double a = b1_[u];
    const float* w = &w1_[u * in];
    for (size_t i = 0; i < in; ++i) a += double(w[i]) * x[i];
    if (a > 0) out += w2_[u] * a;
  }
  return deep_scale_ * (out - deep_shift_);
}

double Generator::logit_without_intercept(RawRow& row, uint64_t row_seed, bool planted) const {
  SplitMix64 rng(row_seed);
  double z = 0.0;
  row.int_present = 0;
  for (size_t i = 0; i < gen_int_fields; ++i) {
    if (rng.uniform() < criteo_int_missing[i]) {
      rng.next();
      continue;
    }
    const double g = normal_from(rng.next());
    const int64_t x =
        std::max<int64_t>(0, static_cast<int64_t>(std::exp(int_log_mean[i] + 1.2 * g)) - 1);
    row.ints[i] = x;
    row.int_present |= 1u << i;
    z += int_weight_[i] * criteo_dense_value(x);
  }
  row.cat_present = 0;
  std::array<double, factor_rank> sum{};
  double sum_sq = 0.0;
  for (size_t j = 0; j < gen_cat_fields; ++j) {
    const CatFieldParams& f = fields_[j];
    const bool missing = rng.uniform() < f.missing;
    const uint32_t id = static_cast<uint32_t>(samplers_[j](rng) - 1);
    if (missing) continue;
    row.cats[j] = id;
    row.cat_present |= 1u << j;
    if (!planted) continue;
    const double shrink = rank_shrink(id);
    const uint64_t id_hash = hash_combine(hash_combine(config_.seed, 0x2000 + j), id);
    z += bias_std * shrink * normal_from(id_hash);
    if (f.factor_std > 0.0) {
      for (size_t k = 0; k < factor_rank; ++k) {
        const double v = f.factor_std * shrink * normal_from(hash_combine(id_hash, 1 + k));
        sum[k] += v;
        sum_sq += v * v;
      }
    }
  }
  double pair = 0.0;
  for (double s : sum) pair += s * s;
  z += 0.5 * (pair - sum_sq);
  if (planted) z += deep_logit(row);
  return z;
}

void Generator::generate(Stream stream, uint64_t index, RawRow& row) const {
  const uint64_t row_seed =
      hash_combine(hash_combine(config_.seed, static_cast<uint64_t>(stream)), index);
  const double z = logit_without_intercept(row, row_seed, true) + intercept_;
  row.planted_p = sigmoid(z);
  const double u = unit_double(hash_combine(row_seed, 0x5EED));
  row.label = u < row.planted_p ? 1.0f : 0.0f;
}

void Generator::draw_features(Stream stream, uint64_t index, RawRow& row) const {
  const uint64_t row_seed =
      hash_combine(hash_combine(config_.seed, static_cast<uint64_t>(stream)), index);
  logit_without_intercept(row, row_seed, false);
  row.planted_p = 0.0;
  row.label = 0.0f;
}

uint64_t Generator::libsvm_index(size_t field, uint32_t id) const {
  return fields_[field].libsvm_offset + id;
}

void Generator::append_features(const RawRow& row, Batch& out) const {
  for (size_t i = 0; i < gen_int_fields; ++i)
    if (row.int_present & (1u << i))
      out.add_feature(make_key(0, mix64(i + 1)), criteo_dense_value(row.ints[i]));
  for (size_t j = 0; j < gen_cat_fields; ++j)
    if (row.cat_present & (1u << j))
      out.add_feature(make_key(0, mix64(libsvm_index(j, row.cats[j]))), 1.0f);
  out.finish_row(row.label);
}

void Generator::append_criteo_features(const RawRow& row, Batch& out) const {
  float dense[gen_int_fields] = {};
  for (size_t i = 0; i < gen_int_fields; ++i) {
    if (!(row.int_present & (1u << i))) continue;
    dense[i] = criteo_dense_value(row.ints[i]);
  }
  out.add_dense(dense, gen_int_fields);
  for (size_t j = 0; j < gen_cat_fields; ++j)
    if (row.cat_present & (1u << j))
      out.add_feature(make_key(static_cast<uint32_t>(j),
                               mix64(permute32(row.cats[j], static_cast<uint32_t>(mix64(j))))),
                      1.0f);
  out.finish_row(row.label);
}

void Generator::write_indexed(const RawRow& row, bool fields, std::string& out) const {
  out.push_back(row.label > 0.5f ? '1' : '0');
  // " [field:]index:"
  auto begin_feature = [&](size_t field, uint64_t index) {
    out.push_back(' ');
    if (fields) {
      append_uint(out, field);
      out.push_back(':');
    }
    append_uint(out, index);
    out.push_back(':');
  };
  for (size_t i = 0; i < gen_int_fields; ++i) {
    if (!(row.int_present & (1u << i))) continue;
    begin_feature(i, i + 1);
    append_float(out, criteo_dense_value(row.ints[i]));
  }
  for (size_t j = 0; j < gen_cat_fields; ++j) {
    if (!(row.cat_present & (1u << j))) continue;
    begin_feature(gen_int_fields + j, libsvm_index(j, row.cats[j]));
    out.push_back('1');
  }
  out.push_back('\n');
}

void Generator::write_criteo(const RawRow& row, std::string& out) const {
  out.push_back(row.label > 0.5f ? '1' : '0');
  for (size_t i = 0; i < gen_int_fields; ++i) {
    out.push_back('\t');
    if (row.int_present & (1u << i)) append_uint(out, static_cast<uint64_t>(row.ints[i]));
  }
  for (size_t j = 0; j < gen_cat_fields; ++j) {
    out.push_back('\t');
    if (!(row.cat_present & (1u << j))) continue;
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", permute32(row.cats[j], static_cast<uint32_t>(mix64(j))));
    out.append(buf, 8);
  }
  out.push_back('\n');
}

namespace {

struct TestMetrics {
  std::vector<float> p, y;
  double positives = 0.0;
};

GenSummary summarize(const TestMetrics& test, double train_positives, uint64_t train_rows) {
  GenSummary s;
  s.planted_logloss_test = logloss(test.p, test.y);
  s.planted_auc_test = auc(test.p, test.y);
  const double n_test = static_cast<double>(test.y.size());
  const double q = test.positives / n_test;  // base rate: the test set's own positive rate
  s.base_rate_logloss_test = -(q * std::log(q) + (1.0 - q) * std::log1p(-q));
  s.positive_rate = (train_positives + test.positives) / (static_cast<double>(train_rows) + n_test);
  return s;
}

}  // namespace

Expected<GenSummary> generate_dataset(const GenOptions& o,
                                      const std::function<void(uint64_t, uint64_t)>& progress) {
  if (o.format != "libsvm" && o.format != "libffm" && o.format != "criteo")
    return Status::invalid_input("--format " + o.format +
                                 " is unknown, expected libsvm, libffm or criteo");
  if (o.rows == 0) return Status::invalid_input("--rows must be at least 1");
  if (o.test_rows == 0) return Status::invalid_input("--test-rows must be at least 1");
  if (!(o.vocab_scale > 0.0) || o.vocab_scale > 1.0)
    return Status::invalid_input("--vocab-scale must be in (0, 1]");
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return Status::io_error(o.out_dir + ": cannot create directory: " + ec.message());

  Generator gen({o.seed, o.vocab_scale, true, o.planted});
  const std::string train_path = o.out_dir + "/train." + o.format;
  const std::string test_path = o.out_dir + "/test." + o.format;
  const uint64_t total = o.rows + o.test_rows;
  uint64_t done = 0;
  double train_positives = 0.0;
  TestMetrics test;
  test.p.reserve(o.test_rows);
  test.y.reserve(o.test_rows);

  auto write_file = [&](const std::string& path, Stream stream, uint64_t rows) -> Status {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    if (!f) return Status::io_error(path + ": cannot open for writing: " + std::strerror(errno));
    std::string buf;
    buf.reserve(1 << 21);
    RawRow row;
    for (uint64_t r = 0; r < rows; ++r) {
      gen.generate(stream, r, row);
      if (stream == Stream::train) {
        train_positives += row.label;
      } else {
        test.p.push_back(static_cast<float>(row.planted_p));
        test.y.push_back(row.label);
        test.positives += row.label;
      }
      if (o.format == "libsvm")
        gen.write_libsvm(row, buf);
      else if (o.format == "libffm")
        gen.write_libffm(row, buf);
      else
        gen.write_criteo(row, buf);
      if (buf.size() >= (1 << 20)) {
        if (std::fwrite(buf.data(), 1, buf.size(), f.get()) != buf.size())
          return Status::io_error(path + ": write failed: " + std::strerror(errno));
        buf.clear();
      }
      if (++done % 65536 == 0 && progress) progress(done, total);
    }
    if (std::fwrite(buf.data(), 1, buf.size(), f.get()) != buf.size() || std::fflush(f.get()) != 0)
      return Status::io_error(path + ": write failed: " + std::strerror(errno));
    return Status();
  };
  if (Status s = write_file(train_path, Stream::train, o.rows); !s.ok()) return s;
  if (Status s = write_file(test_path, Stream::test, o.test_rows); !s.ok()) return s;
  if (progress) progress(total, total);

  GenSummary s = summarize(test, train_positives, o.rows);
  s.train_path = train_path;
  s.test_path = test_path;
  s.meta_path = o.out_dir + "/meta.json";
  nlohmann::json meta = {
      {"planted_logloss_test", s.planted_logloss_test},
      {"planted_auc_test", s.planted_auc_test},
      {"base_rate_logloss_test", s.base_rate_logloss_test},
      {"positive_rate", s.positive_rate},
      {"rows", o.rows},
      {"test_rows", o.test_rows},
      {"seed", o.seed},
      {"format", o.format},
      {"planted", to_string(o.planted)},
      {"vocab_scale", o.vocab_scale},
      {"int_fields", gen_int_fields},
      {"cat_fields", gen_cat_fields},
  };
  std::ofstream m(s.meta_path);
  m << meta.dump(2) << "\n";
  m.close();
  if (!m) return Status::io_error(s.meta_path + ": write failed");
  return s;
}

InMemoryData generate_in_memory(const GenOptions& o,
                                const std::function<void(uint64_t, uint64_t)>& progress) {
  const uint64_t total = o.rows + o.test_rows;
  Generator gen({o.seed, o.vocab_scale, true, o.planted});
  InMemoryData data;
  constexpr size_t rows_per_batch = 4096;
  auto append = [&](const RawRow& row, Batch& out) {
    if (o.format == "criteo")
      gen.append_criteo_features(row, out);
    else
      gen.append_features(row, out);
  };
  double train_positives = 0.0;
  RawRow row;
  for (uint64_t r = 0; r < o.rows; ++r) {
    if (r % rows_per_batch == 0) data.train.emplace_back();
    gen.generate(Stream::train, r, row);
    train_positives += row.label;
    append(row, data.train.back());
    if (progress && (r + 1) % 65536 == 0) progress(r + 1, total);
  }
  TestMetrics test;
  for (uint64_t r = 0; r < o.test_rows; ++r) {
    if (r % rows_per_batch == 0) data.test.emplace_back();
    gen.generate(Stream::test, r, row);
    test.p.push_back(static_cast<float>(row.planted_p));
    test.y.push_back(row.label);
    test.positives += row.label;
    append(row, data.test.back());
  }
  if (o.test_rows > 0) data.summary = summarize(test, train_positives, o.rows);
  return data;
}

}  // namespace colony
