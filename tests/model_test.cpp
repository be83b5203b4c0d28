#define BOOST_TEST_MODULE model_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/hash.h"
#include "common/metrics.h"
#include "data/batch.h"
#include "worker/model.h"
#include "worker/trainer.h"

using namespace colony;

namespace {

// The reference for BatchIndex: slot 0 is bias_key, other keys in order of first appearance.
void reference_index(const Batch& b, std::vector<uint64_t>& unique, std::vector<uint32_t>& slots) {
  std::unordered_map<uint64_t, uint32_t> seen;
  unique.assign(1, bias_key);
  seen[bias_key] = 0;
  slots.clear();
  for (uint64_t k : b.keys) {
    auto [it, inserted] = seen.try_emplace(k, static_cast<uint32_t>(unique.size()));
    if (inserted) unique.push_back(k);
    slots.push_back(it->second);
  }
}

void check_index_matches_reference(const BatchIndex& index, const Batch& b) {
  std::vector<uint64_t> unique;
  std::vector<uint32_t> slots;
  reference_index(b, unique, slots);
  auto got_unique = index.unique_keys();
  auto got_slots = index.slots();
  BOOST_TEST(std::vector<uint64_t>(got_unique.begin(), got_unique.end()) == unique,
             boost::test_tools::per_element());
  BOOST_TEST(std::vector<uint32_t>(got_slots.begin(), got_slots.end()) == slots,
             boost::test_tools::per_element());
}

// A hand-built batch: several rows, keys repeated within a row and across rows, non-unit
// values, one row with no features, both labels.
Batch hand_batch() {
  Batch b;
  const uint64_t a = make_key(1, 11), c = make_key(2, 22), d = make_key(3, 33), e = make_key(1, 44);
  b.add_feature(a, 1.0f);
  b.add_feature(c, 0.5f);
  b.add_feature(a, -1.5f);  // repeated key in one row
  b.finish_row(1.0f);
  b.add_feature(d, 2.0f);
  b.add_feature(c, 0.25f);
  b.finish_row(0.0f);
  b.finish_row(1.0f);  // no features: bias only
  b.add_feature(e, 0.75f);
  b.add_feature(e, 0.75f);
  b.add_feature(e, -0.3f);
  b.add_feature(d, 1.2f);
  b.add_feature(a, 0.9f);
  b.finish_row(0.0f);
  return b;
}

// Random rows from a small key pool so keys repeat within and across rows.
Batch random_batch(uint64_t seed, size_t rows, size_t pool) {
  SplitMix64 rng(seed);
  Batch b;
  for (size_t i = 0; i < rows; ++i) {
    const size_t n = 1 + rng.next() % 7;
    for (size_t f = 0; f < n; ++f) {
      const uint64_t key = make_key(static_cast<uint32_t>(rng.next() % 4), rng.next() % pool);
      const float value = static_cast<float>(rng.uniform() * 2.0 - 0.5);  // [-0.5, 1.5)
      b.add_feature(key, value);
    }
    b.finish_row(rng.uniform() < 0.5 ? 1.0f : 0.0f);
  }
  return b;
}

std::vector<float> random_rows(uint64_t seed, size_t count, double scale) {
  SplitMix64 rng(seed);
  std::vector<float> r(count);
  for (float& x : r) x = static_cast<float>((rng.uniform() * 2.0 - 1.0) * scale);
  return r;
}

double summed_loss(const ModelSpec& spec, const Batch& b, std::span<const uint32_t> slots,
                   std::span<const float> rows) {
  std::vector<float> logits(b.rows());
  forward(spec, b, slots, rows, logits);
  double loss = 0.0;
  for (size_t i = 0; i < b.rows(); ++i) loss += logloss_from_logit(logits[i], b.labels[i]);
  return loss;
}

// Checks every coordinate of forward_backward's gradient against a central difference of
// the summed log loss computed through forward().
void check_gradient(const ModelSpec& spec, const Batch& b, uint64_t seed) {
  BatchIndex index;
  index.build(b);
  const size_t width = spec.width();
  const size_t n = index.unique_keys().size();
  std::vector<float> rows = random_rows(seed, n * width, 0.5);
  std::vector<float> grads(n * width, 0.0f);
  std::vector<float> logits(b.rows());
  const double loss = forward_backward(spec, b, index.slots(), rows, grads, logits);
  BOOST_TEST(loss == summed_loss(spec, b, index.slots(), rows), boost::test_tools::tolerance(1e-9));

  const float h = 1e-2f;
  size_t checked = 0;
  for (size_t j = 0; j < rows.size(); ++j) {
    const float saved = rows[j];
    rows[j] = saved + h;
    const double up = summed_loss(spec, b, index.slots(), rows);
    rows[j] = saved - h;
    const double down = summed_loss(spec, b, index.slots(), rows);
    rows[j] = saved;
    const double step = (static_cast<double>(saved + h) - static_cast<double>(saved - h));
    const double fd = (up - down) / step;
    const double g = grads[j];
    const double tol = 1e-3 + 1e-2 * std::max(std::fabs(fd), std::fabs(g));
    BOOST_TEST(std::fabs(g - fd) <= tol, "slot " << j / width << " entry " << j % width
                                                 << ": analytic " << g << " finite difference "
                                                 << fd);
    ++checked;
  }
  BOOST_TEST(checked == n * width);
}

ModelSpec lr_spec() {
  return ModelSpec{ModelKind::lr, 0};
}
ModelSpec fm_spec(size_t dim) {
  return ModelSpec{ModelKind::fm, dim};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// BatchIndex

BOOST_AUTO_TEST_CASE(batch_index_slot_zero_is_bias_key_even_for_empty_batch) {
  BatchIndex index;
  Batch b;
  index.build(b);
  BOOST_TEST(index.unique_keys().size() == 1u);
  BOOST_TEST(index.unique_keys()[0] == bias_key);
  BOOST_TEST(index.slots().empty());
}

BOOST_AUTO_TEST_CASE(batch_index_assigns_slots_in_first_seen_order_and_shares_repeats) {
  Batch b;
  b.add_feature(30, 1.0f);
  b.add_feature(10, 1.0f);
  b.add_feature(30, 2.0f);
  b.finish_row(1.0f);
  b.add_feature(20, 1.0f);
  b.add_feature(10, 1.0f);
  b.finish_row(0.0f);
  BatchIndex index;
  index.build(b);
  const std::vector<uint64_t> want_unique{bias_key, 30, 10, 20};
  const std::vector<uint32_t> want_slots{1, 2, 1, 3, 2};
  auto u = index.unique_keys();
  auto s = index.slots();
  BOOST_TEST(std::vector<uint64_t>(u.begin(), u.end()) == want_unique,
             boost::test_tools::per_element());
  BOOST_TEST(std::vector<uint32_t>(s.begin(), s.end()) == want_slots,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(batch_index_handles_key_zero_and_bias_key_in_batch) {
  Batch b;
  b.add_feature(0, 1.0f);
  b.add_feature(bias_key, 1.0f);
  b.add_feature(UINT64_MAX, 1.0f);
  b.add_feature(0, 1.0f);
  b.finish_row(1.0f);
  BatchIndex index;
  index.build(b);
  check_index_matches_reference(index, b);
  BOOST_TEST(index.slots()[1] == 0u);  // bias_key always has slot 0
}

BOOST_AUTO_TEST_CASE(batch_index_reused_across_many_batches_matches_reference) {
  BatchIndex index;
  SplitMix64 rng(7);
  for (int round = 0; round < 3000; ++round) {
    // Vary the size so the table grows (big batches) and is reused by small ones; draw from
    // a small pool so keys of old batches reappear with different slots.
    const size_t rows = round % 97 == 0 ? 800 : 1 + rng.next() % 20;
    Batch b = random_batch(rng.next(), rows, round % 5 == 0 ? 1000000 : 50);
    index.build(b);
    check_index_matches_reference(index, b);
  }
}

// ---------------------------------------------------------------------------------------------
// Forward / backward

BOOST_AUTO_TEST_CASE(lr_logit_matches_hand_computation_for_one_row) {
  Batch b;
  b.add_feature(100, 2.0f);
  b.add_feature(200, -0.5f);
  b.add_feature(100, 0.25f);
  b.finish_row(1.0f);
  BatchIndex index;
  index.build(b);
  // slots: bias 0, key 100 -> 1, key 200 -> 2
  const std::vector<float> rows{0.3f, 0.7f, -1.2f};
  std::vector<float> logits(1);
  forward(lr_spec(), b, index.slots(), rows, logits);
  const double want = 0.3 + 0.7 * 2.0 + (-1.2) * (-0.5) + 0.7 * 0.25;
  BOOST_TEST(logits[0] == want, boost::test_tools::tolerance(1e-6));

  std::vector<float> grads(3, 0.0f);
  const double loss = forward_backward(lr_spec(), b, index.slots(), rows, grads, {});
  BOOST_TEST(loss == logloss_from_logit(want, 1.0), boost::test_tools::tolerance(1e-6));
  const double g = sigmoid(want) - 1.0;
  BOOST_TEST(grads[0] == g, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(grads[1] == g * 2.25, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(grads[2] == g * -0.5, boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(fm_logit_matches_hand_computation_for_one_row) {
  // Two distinct keys and a repeat: pairwise sum over occurrences i<j of <v_i,v_j> x_i x_j.
  Batch b;
  b.add_feature(1, 1.5f);
  b.add_feature(2, -2.0f);
  b.add_feature(1, 0.5f);
  b.finish_row(0.0f);
  BatchIndex index;
  index.build(b);
  const size_t dim = 2;
  // rows: bias [b, -, -], key1 [w1, v1], key2 [w2, v2]
  const std::vector<float> rows{0.1f, 9.0f, 9.0f, 0.2f, 0.3f, -0.4f, -0.5f, 0.6f, 0.7f};
  std::vector<float> logits(1);
  forward(fm_spec(dim), b, index.slots(), rows, logits);
  auto dot = [](double a0, double a1, double b0, double b1) { return a0 * b0 + a1 * b1; };
  const double v1v2 = dot(0.3, -0.4, 0.6, 0.7), v1v1 = dot(0.3, -0.4, 0.3, -0.4);
  const double want = 0.1 + 0.2 * 1.5 + (-0.5) * (-2.0) + 0.2 * 0.5 + v1v2 * 1.5 * -2.0 +
                      v1v1 * 1.5 * 0.5 + v1v2 * -2.0 * 0.5;
  BOOST_TEST(logits[0] == want, boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(lr_gradient_matches_finite_differences) {
  check_gradient(lr_spec(), hand_batch(), 1);
  for (uint64_t seed = 1; seed <= 5; ++seed)
    check_gradient(lr_spec(), random_batch(seed, 12, 6), seed);
}

BOOST_AUTO_TEST_CASE(fm_gradient_matches_finite_differences) {
  for (size_t dim : {1, 4, 8, 13, 16, 32}) {
    BOOST_TEST_CONTEXT("dim " << dim) {
      check_gradient(fm_spec(dim), hand_batch(), 100 + dim);
      for (uint64_t seed = 1; seed <= 3; ++seed)
        check_gradient(fm_spec(dim), random_batch(seed * 31 + dim, 10, 5), seed);
    }
  }
}

BOOST_AUTO_TEST_CASE(forward_backward_adds_to_existing_gradients) {
  const Batch b = hand_batch();
  BatchIndex index;
  index.build(b);
  const ModelSpec spec = fm_spec(4);
  const size_t n = index.unique_keys().size() * spec.width();
  const std::vector<float> rows = random_rows(3, n, 0.5);
  std::vector<float> once(n, 0.0f), twice(n, 0.0f);
  (void)forward_backward(spec, b, index.slots(), rows, once, {});
  (void)forward_backward(spec, b, index.slots(), rows, twice, {});
  (void)forward_backward(spec, b, index.slots(), rows, twice, {});
  for (size_t j = 0; j < n; ++j)
    BOOST_TEST(twice[j] == 2.0f * once[j], boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(forward_equals_logits_of_forward_backward) {
  for (const ModelSpec spec :
       {lr_spec(), fm_spec(1), fm_spec(4), fm_spec(8), fm_spec(13), fm_spec(16)}) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const Batch b = random_batch(seed, 40, 30);
      BatchIndex index;
      index.build(b);
      const size_t n = index.unique_keys().size() * spec.width();
      const std::vector<float> rows = random_rows(seed + 9, n, 0.5);
      std::vector<float> grads(n, 0.0f), fb_logits(b.rows()), f_logits(b.rows());
      (void)forward_backward(spec, b, index.slots(), rows, grads, fb_logits);
      forward(spec, b, index.slots(), rows, f_logits);
      BOOST_TEST(std::memcmp(fb_logits.data(), f_logits.data(), b.rows() * sizeof(float)) == 0,
                 "kind " << to_string(spec.kind) << " dim " << spec.dim << " seed " << seed);
    }
  }
}

BOOST_AUTO_TEST_CASE(parse_model_accepts_lr_fm_and_rejects_others) {
  BOOST_TEST((parse_model("lr").ok() && *parse_model("lr") == ModelKind::lr));
  BOOST_TEST((parse_model("fm").ok() && *parse_model("fm") == ModelKind::fm));
  for (const char* bad : {"deepfm", "", "LR", "ffm"}) {
    auto r = parse_model(bad);
    BOOST_TEST(!r.ok(), bad);
    if (!r.ok()) BOOST_TEST((r.status().code() == Status::Code::invalid_input));
  }
}

// ---------------------------------------------------------------------------------------------
// LocalTrainer

namespace {

TrainerConfig trainer_config(ModelKind kind, size_t dim, OptimizerKind opt) {
  TrainerConfig c;
  c.model = ModelSpec{kind, dim};
  c.optimizer = default_optimizer_config(opt);
  c.seed = 42;
  c.factor_init_std = 0.05f;
  return c;
}

std::unique_ptr<LocalTrainer> make_trainer(const TrainerConfig& c) {
  auto t = LocalTrainer::make(c);
  BOOST_REQUIRE_MESSAGE(t.ok(), (t.ok() ? std::string() : t.status().message()));
  return std::move(t).value();
}

}  // namespace

BOOST_AUTO_TEST_CASE(trainer_is_deterministic_bit_for_bit) {
  for (OptimizerKind opt :
       {OptimizerKind::sgd, OptimizerKind::adagrad, OptimizerKind::ftrl, OptimizerKind::adam}) {
    for (ModelKind kind : {ModelKind::lr, ModelKind::fm}) {
      const TrainerConfig c = trainer_config(kind, 8, opt);
      auto t1 = make_trainer(c);
      auto t2 = make_trainer(c);
      std::vector<uint64_t> keys;
      for (uint64_t seed = 1; seed <= 20; ++seed) {
        const Batch b = random_batch(seed, 64, 200);
        const double l1 = t1->train_batch(b);
        const double l2 = t2->train_batch(b);
        BOOST_TEST(std::memcmp(&l1, &l2, sizeof(double)) == 0);
        keys.insert(keys.end(), b.keys.begin(), b.keys.end());
      }
      keys.push_back(bias_key);
      BOOST_TEST(t1->rows() == t2->rows());
      const size_t width = c.model.width();
      std::vector<float> r1(width), r2(width);
      size_t differing = 0;
      for (uint64_t k : keys) {
        t1->row_value(k, r1);
        t2->row_value(k, r2);
        if (std::memcmp(r1.data(), r2.data(), width * sizeof(float)) != 0) ++differing;
      }
      BOOST_TEST(differing == 0u, "optimizer " << to_string(opt) << " model " << to_string(kind));
    }
  }
}

BOOST_AUTO_TEST_CASE(trainer_predict_does_not_insert_rows) {
  auto t = make_trainer(trainer_config(ModelKind::fm, 4, OptimizerKind::adagrad));
  const Batch unseen = random_batch(99, 30, 1000);
  std::vector<float> logits;
  t->predict(unseen, logits);
  BOOST_TEST(t->rows() == 0u);
  BOOST_TEST(logits.size() == unseen.rows());

  (void)t->train_batch(random_batch(1, 30, 1000));
  const size_t after_train = t->rows();
  BOOST_TEST(after_train > 0u);
  t->predict(unseen, logits);
  BOOST_TEST(t->rows() == after_train);
}

BOOST_AUTO_TEST_CASE(trainer_predict_matches_loss_reported_by_next_train_batch) {
  // train_batch reports the loss before its step; predict on the same weights must agree.
  auto t = make_trainer(trainer_config(ModelKind::fm, 8, OptimizerKind::adagrad));
  for (uint64_t seed = 1; seed <= 5; ++seed) (void)t->train_batch(random_batch(seed, 50, 100));
  const Batch b = random_batch(77, 50, 100);
  std::vector<float> logits;
  t->predict(b, logits);
  double want = 0.0;
  for (size_t i = 0; i < b.rows(); ++i) want += logloss_from_logit(logits[i], b.labels[i]);
  BOOST_TEST(t->train_batch(b) == want, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(trainer_first_lr_loss_is_log2_per_row) {
  auto t = make_trainer(trainer_config(ModelKind::lr, 0, OptimizerKind::sgd));
  const Batch b = random_batch(5, 17, 100);
  BOOST_TEST(t->train_batch(b) == 17.0 * std::log(2.0), boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(trainer_reduces_loss_on_repeated_separable_batch) {
  for (ModelKind kind : {ModelKind::lr, ModelKind::fm}) {
    for (OptimizerKind opt : {OptimizerKind::sgd, OptimizerKind::adagrad, OptimizerKind::adam}) {
      TrainerConfig c = trainer_config(kind, 4, opt);
      c.optimizer.lr = 0.1f;
      auto t = make_trainer(c);
      Batch b;
      for (int i = 0; i < 8; ++i) {
        b.add_feature(make_key(1, 1), 1.0f);  // positive feature
        b.finish_row(1.0f);
        b.add_feature(make_key(1, 2), 1.0f);  // negative feature
        b.finish_row(0.0f);
      }
      const double first = t->train_batch(b);
      double last = first;
      for (int step = 0; step < 100; ++step) last = t->train_batch(b);
      BOOST_TEST(last < 0.5 * first, "model " << to_string(kind) << " optimizer " << to_string(opt)
                                              << ": first " << first << " last " << last);
      std::vector<float> logits;
      t->predict(b, logits);
      BOOST_TEST(logits[0] > 0.0f);
      BOOST_TEST(logits[1] < 0.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE(trainer_make_rejects_dim_zero_and_nonpositive_lr) {
  {
    TrainerConfig c = trainer_config(ModelKind::fm, 0, OptimizerKind::adagrad);
    auto t = LocalTrainer::make(c);
    BOOST_REQUIRE(!t.ok());
    BOOST_TEST((t.status().code() == Status::Code::invalid_input));
    BOOST_TEST(t.status().message().find("dim") != std::string::npos, t.status().message());
  }
  {
    TrainerConfig c = trainer_config(ModelKind::fm, max_fm_dim + 1, OptimizerKind::adagrad);
    auto t = LocalTrainer::make(c);
    BOOST_REQUIRE(!t.ok());
    BOOST_TEST((t.status().code() == Status::Code::invalid_input));
  }
  for (float lr : {0.0f, -0.1f}) {
    TrainerConfig c = trainer_config(ModelKind::lr, 0, OptimizerKind::sgd);
    c.optimizer.lr = lr;
    auto t = LocalTrainer::make(c);
    BOOST_REQUIRE(!t.ok());
    BOOST_TEST((t.status().code() == Status::Code::invalid_input));
    BOOST_TEST(t.status().message().find("lr") != std::string::npos, t.status().message());
  }
  // LR ignores dim, so dim 0 is fine there.
  BOOST_TEST(LocalTrainer::make(trainer_config(ModelKind::lr, 0, OptimizerKind::sgd)).ok());
}
