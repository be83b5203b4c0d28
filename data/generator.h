// Synthetic Criteo-like CTR data drawn from a planted model.
//
// Each sample has 13 integer fields (heavy-tailed counts, some missing) and 26 categorical
// fields whose ids are Zipf-skewed over per-field vocabularies of Criteo's sizes (3 to ten
// million ids). The label is drawn from a planted model: an intercept, a weight per integer
// field on log1p(count), a bias per categorical id, and a low-rank factorization-machine
// interaction between categorical ids. The planted probability of each sample is known, so
// `planted_logloss_test` is the best logloss any model can reach on the test rows.
//
// With PlantedKind::deep the logit also has a nonlinear term no FM can express: a random
// one-hidden-layer ReLU network over per-field embeddings of the ids of the fields with
// vocabularies of at most 20,000 (before --vocab-scale) and the 13 integer features (their
// log1p values), scaled to a standard deviation of deep_planted_std over calibration rows.
//
// Every row is a pure function of (seed, stream, row index): rows can be made in any order,
// in parallel, and again later, with identical results.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/batch.h"
#include "data/zipf.h"

namespace colony {

inline constexpr size_t gen_int_fields = 13;
inline constexpr size_t gen_cat_fields = 26;

enum class PlantedKind { fm, deep };
// "fm" or "deep"; invalid_input otherwise.
Expected<PlantedKind> parse_planted(const std::string& text);
const char* to_string(PlantedKind kind);
// The planted deep network: embedding size, hidden units, and the logit's standard deviation.
inline constexpr size_t deep_planted_embedding = 4;
inline constexpr size_t deep_planted_hidden = 16;
inline constexpr double deep_planted_std = 1.0;

struct GeneratorConfig {
  uint64_t seed = 1;
  // Multiplies every categorical vocabulary (each stays >= 2). 1.0 is Criteo-sized; tests
  // use smaller vocabularies so that small data sets can be learned well.
  double vocab_scale = 1.0;
  // False: the intercept is not calibrated (it stays 0, so labels miss the 25% rate). For callers
  // that use only draw_features, whose features do not depend on it.
  bool calibrate = true;
  PlantedKind planted = PlantedKind::fm;
};

struct RawRow {
  float label = 0.0f;
  double planted_p = 0.0;    // the planted model's probability of a click
  uint32_t int_present = 0;  // bit i: integer field i is present
  uint32_t cat_present = 0;  // bit j: categorical field j is present
  std::array<int64_t, gen_int_fields> ints{};
  std::array<uint32_t, gen_cat_fields> cats{};  // 0-based id within the field (0 = most frequent)
};

enum class Stream : uint32_t { train = 0, test = 1, calibration = 2 };

class Generator {
 public:
  // Calibrates the intercept for a positive rate of about 25% (deterministic).
  explicit Generator(const GeneratorConfig& config);

  // Row `index` of `stream`.
  void generate(Stream stream, uint64_t index, RawRow& row) const;
  // The features generate() gives row `index` (the same integers and categorical ids), without
  // the planted model: planted_p and label are 0. Several times cheaper than generate().
  void draw_features(Stream stream, uint64_t index, RawRow& row) const;

  // Appends `row` to `out` exactly as the libsvm reader would read write_libsvm's line.
  void append_features(const RawRow& row, Batch& out) const;
  // Appends `row` exactly as the Criteo reader would read write_criteo's line: 13 dense
  // features, categorical column j in field j.
  void append_criteo_features(const RawRow& row, Batch& out) const;
  // Appends one line (with '\n') in libsvm or Criteo TSV form.
  void write_libsvm(const RawRow& row, std::string& out) const { write_indexed(row, false, out); }
  // The same features as write_libsvm, each in its field: integer column i in field i,
  // categorical column j in field 13 + j (`field:index:value`).
  void write_libffm(const RawRow& row, std::string& out) const { write_indexed(row, true, out); }
  void write_criteo(const RawRow& row, std::string& out) const;

  uint32_t vocab(size_t field) const { return fields_[field].vocab; }
  double intercept() const { return intercept_; }
  // The planted deep network's contribution to `row`'s logit (0 unless PlantedKind::deep).
  double deep_logit(const RawRow& row) const;

 private:
  void init_deep();
  // Draws the row's features; with `planted`, also returns the planted model's logit (else 0).
  double logit_without_intercept(RawRow& row, uint64_t row_seed, bool planted) const;
  uint64_t libsvm_index(size_t field, uint32_t id) const;
  // A libsvm line (`label index:value ...`), or with `fields` a libffm one (`field:index:value`).
  void write_indexed(const RawRow& row, bool fields, std::string& out) const;

  GeneratorConfig config_;
  struct CatFieldParams {
    uint32_t vocab;
    double missing;
    double factor_std;
    uint64_t libsvm_offset;
  };
  std::array<CatFieldParams, gen_cat_fields> fields_;
  std::vector<ZipfSampler> samplers_;
  std::array<double, gen_int_fields> int_weight_{};
  double intercept_ = 0.0;
  // The planted deep network (PlantedKind::deep): the fields it embeds, their embedding
  // tables (vocab x deep_planted_embedding, from embed_offset_[j]), its weights, and the
  // affine map that standardises its output.
  std::vector<size_t> deep_fields_;
  std::array<size_t, gen_cat_fields> embed_offset_{};
  std::vector<float> embed_, w1_, b1_, w2_;
  double deep_shift_ = 0.0, deep_scale_ = 0.0;
};

struct GenOptions {
  uint64_t rows = 1000000;
  uint64_t test_rows = 200000;
  uint64_t seed = 1;
  std::string out_dir;
  std::string format = "libsvm";  // libsvm | libffm | criteo
  double vocab_scale = 1.0;
  // False: the intercept is not calibrated (it stays 0, so labels miss the 25% rate). For callers
  // that use only draw_features, whose features do not depend on it.
  bool calibrate = true;
  PlantedKind planted = PlantedKind::fm;
};

struct GenSummary {
  double planted_logloss_test = 0.0;
  double planted_auc_test = 0.0;
  double base_rate_logloss_test = 0.0;
  double positive_rate = 0.0;  // over train and test rows
  std::string train_path, test_path, meta_path;
};

// Writes out_dir/train.<fmt>, out_dir/test.<fmt> and out_dir/meta.json (creating out_dir).
// `progress(done_rows, total_rows)` is called now and then. Fails with invalid_input for a
// bad format or zero rows, io_error when a file cannot be written (naming it).
Expected<GenSummary> generate_dataset(const GenOptions& options,
                                      const std::function<void(uint64_t, uint64_t)>& progress);

// Generated data held in memory (for `colony train` without --data): train and test batches
// as the Criteo reader would produce them when options.format is "criteo", else as the libsvm
// reader would, and the planted model's test metrics.
struct InMemoryData {
  std::vector<Batch> train;
  std::vector<Batch> test;
  GenSummary summary;  // left default when options.test_rows is 0
};
// `progress(done_rows, total_rows)`, when given, is called now and then.
InMemoryData generate_in_memory(const GenOptions& options,
                                const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

}  // namespace colony
