#define BOOST_TEST_MODULE model_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/hash.h"
#include "common/metrics.h"
#include "data/batch.h"
#include "models/model.h"
#include "tests/random_batch.h"
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

// The hand batch with its keys spread over fields 0..3 and `dense` dense features per row.
Batch hand_batch_in_fields(uint32_t dense) {
  const Batch h = hand_batch();
  Batch b;
  std::vector<float> x(dense);
  for (size_t i = 0; i < h.rows(); ++i) {
    for (uint32_t j = 0; j < dense; ++j) x[j] = 0.3f * static_cast<float>(i + j) - 0.2f;
    b.add_dense(x.data(), dense);
    for (size_t f = h.offsets[i]; f < h.offsets[i + 1]; ++f)
      b.add_feature(make_key(static_cast<uint32_t>(h.keys[f] % 4), h.keys[f]), h.values[f]);
    b.finish_row(h.labels[i]);
  }
  return b;
}

using testing::random_batch;

std::vector<float> random_rows(uint64_t seed, size_t count, double scale) {
  SplitMix64 rng(seed);
  std::vector<float> r(count);
  for (float& x : r) x = static_cast<float>((rng.uniform() * 2.0 - 1.0) * scale);
  return r;
}

std::unique_ptr<Model> make_model(const ModelSpec& spec) {
  auto m = Model::make(spec);
  BOOST_REQUIRE_MESSAGE(m.ok(), (m.ok() ? std::string() : m.status().message()));
  return std::move(m).value();
}

double summed_loss(Model& model, const Batch& b, std::span<const uint32_t> slots,
                   std::span<const float> rows, std::span<const float> dense) {
  std::vector<float> logits(b.rows());
  model.forward(b, slots, rows, dense, logits);
  double loss = 0.0;
  for (size_t i = 0; i < b.rows(); ++i) loss += logloss_from_logit(logits[i], b.labels[i]);
  return loss;
}

// The old free functions' shape, for the hand-computed cases of LR and FM.
double forward_backward(const ModelSpec& spec, const Batch& b, std::span<const uint32_t> slots,
                        std::span<const float> rows, std::span<float> grads,
                        std::span<float> logits) {
  return make_model(spec)->forward_backward(b, slots, rows, {}, grads, {}, logits);
}
void forward(const ModelSpec& spec, const Batch& b, std::span<const uint32_t> slots,
             std::span<const float> rows, std::span<float> logits) {
  make_model(spec)->forward(b, slots, rows, {}, logits);
}

// Checks forward_backward's gradient against central differences of the summed log loss
// computed through forward(): every coordinate of the rows, and up to `dense_checks` dense
// parameters spread over the whole vector (every layer).
void check_gradient(const ModelSpec& spec, const Batch& b, uint64_t seed,
                    size_t dense_checks = 400) {
  auto model = make_model(spec);
  BatchIndex index;
  index.build(b, spec.dense_rows());
  const size_t width = spec.width();
  const size_t n = index.unique_keys().size();
  std::vector<float> rows = random_rows(seed, n * width, 0.5);
  std::vector<float> grads(n * width, 0.0f);
  std::vector<float> dense(model->dense_params());
  model->init_dense(dense, seed);
  // Non-zero biases too, so that no ReLU input sits exactly at its kink.
  const std::vector<float> jitter = random_rows(seed + 7, dense.size(), 0.2);
  for (size_t j = 0; j < dense.size(); ++j) dense[j] += jitter[j];
  std::vector<float> dense_grads(dense.size(), 0.0f);
  std::vector<float> logits(b.rows());
  const double loss =
      model->forward_backward(b, index.slots(), rows, dense, grads, dense_grads, logits);
  BOOST_TEST(loss == summed_loss(*model, b, index.slots(), rows, dense),
             boost::test_tools::tolerance(1e-9));

  auto central = [&](std::vector<float>& params, size_t j, float h) {
    const float saved = params[j];
    params[j] = saved + h;
    const double up = summed_loss(*model, b, index.slots(), rows, dense);
    params[j] = saved - h;
    const double down = summed_loss(*model, b, index.slots(), rows, dense);
    params[j] = saved;
    return (up - down) / (static_cast<double>(saved + h) - static_cast<double>(saved - h));
  };
  // A ReLU input within h of zero bends the loss inside the step: the deep models' difference
  // is also taken with smaller steps, and any may match (a wrong gradient matches none).
  auto check = [&](std::vector<float>& params, size_t j, double analytic, const char* what) {
    auto close = [&](double fd) {
      return std::fabs(analytic - fd) <= 2e-3 + 2e-2 * std::max(std::fabs(fd), std::fabs(analytic));
    };
    const double fd = central(params, j, spec.deep() ? 1e-3f : 1e-2f);
    const bool ok =
        close(fd) ||
        (spec.deep() && (close(central(params, j, 1e-4f)) || close(central(params, j, 2e-5f))));
    BOOST_TEST(ok, to_string(spec.kind) << " " << what << " " << j << ": analytic " << analytic
                                        << " finite difference " << fd);
  };
  for (size_t j = 0; j < rows.size(); ++j) check(rows, j, grads[j], "row float");
  const size_t stride = std::max<size_t>(1, dense.size() / dense_checks);
  for (size_t j = 0; j < dense.size(); j += stride) check(dense, j, dense_grads[j], "dense param");
}

ModelSpec spec_of(ModelKind kind, size_t dim) {
  ModelSpec s;
  s.kind = kind;
  s.dim = dim;
  return s;
}
ModelSpec lr_spec() {
  return spec_of(ModelKind::lr, 0);
}
ModelSpec fm_spec(size_t dim) {
  return spec_of(ModelKind::fm, dim);
}
// A deep model over random_batch's fields 0..3 with small layers.
ModelSpec deep_spec(ModelKind kind, uint32_t dense) {
  ModelSpec s = spec_of(kind, 4);
  s.fields = 4;
  s.dense = dense;
  s.mlp = {6, 5};
  s.bottom = {5};
  s.cross_layers = 2;
  return s;
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
  for (const ModelSpec& spec :
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

BOOST_AUTO_TEST_CASE(deep_model_gradients_match_finite_differences) {
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn}) {
    for (uint32_t dense : {0u, 3u}) {
      BOOST_TEST_CONTEXT(to_string(kind) << " dense " << dense) {
        check_gradient(deep_spec(kind, dense), hand_batch_in_fields(dense), 11 + dense);
        for (uint64_t seed = 1; seed <= 2; ++seed)
          check_gradient(deep_spec(kind, dense), random_batch(seed * 7 + dense, 6, 5, dense), seed);
      }
    }
  }
}

// Runs back to back (the threads still spinning) and runs after a pause (the threads asleep), and
// parts that finish after the caller's (run() waits for them).
BOOST_AUTO_TEST_CASE(part_threads_run_every_part_once_a_run) {
  for (size_t parts : {size_t{1}, size_t{2}, size_t{5}}) {
    PartThreads threads(parts);
    BOOST_TEST(threads.parts() == parts);
    std::vector<uint64_t> ran(parts, 0);
    for (uint64_t r = 1; r <= 500; ++r) {
      if (r % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      threads.run([&](size_t p) {
        if (p > 0 && r % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
        ran[p] += r;  // each part its own slot: no race
      });
      for (size_t p = 0; p < parts; ++p) BOOST_REQUIRE(ran[p] == r * (r + 1) / 2);
    }
  }
}

// A deep model whose batches are shared among threads gives what one thread gives, within
// rounding (each share's products run on fewer rows), and the same bits on every run.
BOOST_AUTO_TEST_CASE(a_deep_model_shared_among_threads_trains_as_one_and_repeats_bit_for_bit) {
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn}) {
    for (size_t threads : {size_t{2}, size_t{3}, size_t{5}}) {
      for (size_t rows : {size_t{0}, size_t{1}, size_t{2}, size_t{37}}) {
        BOOST_TEST_CONTEXT(to_string(kind) << ", " << threads << " threads, " << rows << " rows") {
          ModelSpec one = deep_spec(kind, 3), shared = one;
          shared.compute_threads = threads;
          auto m1 = make_model(one), m2 = make_model(shared), m3 = make_model(shared);
          BOOST_TEST(m1->part_threads() == nullptr);
          BOOST_REQUIRE(m2->part_threads() != nullptr);
          BOOST_TEST(m2->part_threads()->parts() == threads);
          BOOST_REQUIRE(m2->dense_params() == m1->dense_params());
          const Batch b = random_batch(rows + threads, rows, 20, 3);
          BatchIndex index;
          index.build(b, one.dense_rows());
          const size_t n = index.unique_keys().size() * one.width();
          const std::vector<float> rows_v = random_rows(rows + 5, n, 0.5);
          std::vector<float> dense(m1->dense_params());
          m1->init_dense(dense, 3);
          std::vector<float> check(dense.size());
          m2->init_dense(check, 3);
          BOOST_TEST(std::memcmp(check.data(), dense.data(), dense.size() * sizeof(float)) == 0);
          struct Out {
            std::vector<float> grads, dense_grads, logits, forward;
            double loss = 0.0;
          };
          const auto run = [&](Model& m) {
            Out o;
            o.grads.assign(n, 1.0f);  // forward_backward adds to what is there
            o.dense_grads.assign(dense.size(), 1.0f);
            o.logits.resize(b.rows());
            o.forward.resize(b.rows());
            o.loss = m.forward_backward(b, index.slots(), rows_v, dense, o.grads, o.dense_grads,
                                        o.logits);
            m.forward(b, index.slots(), rows_v, dense, o.forward);
            return o;
          };
          const Out a = run(*m1), s1 = run(*m2), s2 = run(*m2), s3 = run(*m3);
          BOOST_TEST(std::fabs(s1.loss - a.loss) <= 1e-5 * (1.0 + std::fabs(a.loss)));
          const auto close = [](const std::vector<float>& x, const std::vector<float>& y) {
            size_t bad = 0;
            for (size_t i = 0; i < x.size(); ++i)
              if (std::fabs(x[i] - y[i]) > 1e-5f * (1.0f + std::fabs(y[i]))) ++bad;
            return bad;
          };
          BOOST_TEST(close(s1.grads, a.grads) == 0u);
          BOOST_TEST(close(s1.dense_grads, a.dense_grads) == 0u);
          BOOST_TEST(close(s1.logits, a.logits) == 0u);
          BOOST_TEST(close(s1.forward, a.forward) == 0u);
          for (const Out* again : {&s2, &s3}) {
            BOOST_TEST(std::memcmp(&again->loss, &s1.loss, sizeof(double)) == 0);
            BOOST_TEST(again->grads == s1.grads, boost::test_tools::per_element());
            BOOST_TEST(again->dense_grads == s1.dense_grads, boost::test_tools::per_element());
            BOOST_TEST(again->logits == s1.logits, boost::test_tools::per_element());
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_deep_model_shared_among_threads_has_right_gradients) {
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn}) {
    BOOST_TEST_CONTEXT(to_string(kind)) {
      ModelSpec s = deep_spec(kind, 3);
      s.compute_threads = 3;
      check_gradient(s, random_batch(31, 7, 5, 3), 4);
    }
  }
}

BOOST_AUTO_TEST_CASE(compute_threads_out_of_range_are_refused_naming_the_flag) {
  for (size_t threads : {size_t{0}, max_compute_threads + 1}) {
    ModelSpec s = deep_spec(ModelKind::deepfm, 0);
    s.compute_threads = threads;
    auto m = Model::make(s);
    BOOST_REQUIRE(!m.ok());
    BOOST_TEST(m.status().message().find("--compute-threads") != std::string::npos,
               m.status().message());
  }
}

BOOST_AUTO_TEST_CASE(deep_models_without_hidden_layers_or_with_one_field_have_right_gradients) {
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn}) {
    BOOST_TEST_CONTEXT(to_string(kind)) {
      ModelSpec s = deep_spec(kind, 2);
      s.mlp.clear();
      s.bottom.clear();
      check_gradient(s, random_batch(5, 6, 5, 2), 5);
      ModelSpec one = deep_spec(kind, 0);
      one.fields = 1;
      Batch b;
      for (int i = 0; i < 5; ++i) {
        b.add_feature(make_key(0, 1 + i % 3), 1.0f);
        b.add_feature(make_key(0, 7), 0.5f);
        b.finish_row(i % 2 ? 1.0f : 0.0f);
      }
      check_gradient(one, b, 6);
    }
  }
}

BOOST_AUTO_TEST_CASE(fm_reads_dense_features_as_rows_of_their_own) {
  // A dense feature j of value x is the feature dense_key(j) with value x: same logits.
  Batch dense = random_batch(3, 20, 8, 2), sparse;
  for (size_t i = 0; i < dense.rows(); ++i) {
    for (uint32_t j = 0; j < 2; ++j) sparse.add_feature(dense_key(j), dense.row_dense(i)[j]);
    for (size_t f = dense.offsets[i]; f < dense.offsets[i + 1]; ++f)
      sparse.add_feature(dense.keys[f], dense.values[f]);
    sparse.finish_row(dense.labels[i]);
  }
  for (const ModelSpec& spec : {lr_spec(), fm_spec(4)}) {
    BatchIndex a, c;
    a.build(dense, true);
    c.build(sparse, false);
    BOOST_TEST((std::vector<uint64_t>(a.unique_keys().begin(), a.unique_keys().end()) ==
                std::vector<uint64_t>(c.unique_keys().begin(), c.unique_keys().end())));
    const std::vector<float> rows = random_rows(4, a.unique_keys().size() * spec.width(), 0.5);
    std::vector<float> la(dense.rows()), lc(dense.rows());
    forward(spec, dense, a.slots(), rows, la);
    forward(spec, sparse, c.slots(), rows, lc);
    for (size_t i = 0; i < la.size(); ++i)
      BOOST_TEST(la[i] == lc[i], boost::test_tools::tolerance(1e-5f));
  }
}

BOOST_AUTO_TEST_CASE(deep_model_check_refuses_batches_that_do_not_fit) {
  auto m = make_model(deep_spec(ModelKind::deepfm, 2));
  BOOST_TEST(m->check(random_batch(1, 5, 5, 2)).ok());
  const Status wrong_dense = m->check(random_batch(1, 5, 5, 3));
  BOOST_TEST(!wrong_dense.ok());
  BOOST_TEST(wrong_dense.message().find("3 dense features") != std::string::npos,
             wrong_dense.message());
  Batch b;
  b.add_dense(std::vector<float>{1.0f, 2.0f}.data(), 2);
  b.add_feature(make_key(9, 1), 1.0f);
  b.finish_row(1.0f);
  const Status wrong_field = m->check(b);
  BOOST_TEST(!wrong_field.ok());
  BOOST_TEST(wrong_field.message().find("--fields 10") != std::string::npos, wrong_field.message());
  // LR and FM take any batch.
  BOOST_TEST(make_model(fm_spec(4))->check(b).ok());
  // The reserved field 255 is no field of a deep model either.
  Batch reserved;
  reserved.add_dense(std::vector<float>{1.0f, 2.0f}.data(), 2);
  reserved.add_feature(make_key(255, 7), 1.0f);
  reserved.finish_row(0.0f);
  BOOST_TEST(!m->check(reserved).ok());
}

// The CUDA backend's device code (gpu/fm_pass.h) built for the host does what the CPU model does,
// bit for bit: logits, gradients added to non-zero ones, and the loss. Over LR and FM of several
// dimensions, batches with and without dense features (rows of their own), keys repeated inside a
// sample, samples without features, and an empty batch.
BOOST_AUTO_TEST_CASE(device_code_built_for_the_host_equals_the_cpu_model_bit_for_bit) {
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  size_t cases = 0;
  for (ModelSpec spec :
       {lr_spec(), fm_spec(1), fm_spec(4), fm_spec(8), fm_spec(13), fm_spec(16), fm_spec(32)}) {
    ModelSpec on_device = spec;
    on_device.device.backend = Backend::device_host;
    auto cpu = make_model(spec);
    auto device = make_model(on_device);
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      const uint32_t dense = seed % 3 == 0 ? 3 : 0;
      const Batch b = seed == 1   ? Batch{}
                      : seed == 2 ? hand_batch()
                                  : random_batch(seed, 1 + seed * 7, 25, dense);
      BatchIndex index;
      index.build(b, spec.dense_rows());
      const size_t n = index.unique_keys().size() * spec.width();
      const std::vector<float> rows = random_rows(seed + 31, n, 0.5);
      std::vector<float> g_cpu = random_rows(seed + 57, n, 0.1), g_dev = g_cpu;
      std::vector<float> z_cpu(b.rows()), z_dev(b.rows()), f_dev(b.rows());
      const double l_cpu = cpu->forward_backward(b, index.slots(), rows, {}, g_cpu, {}, z_cpu);
      const double l_dev = device->forward_backward(b, index.slots(), rows, {}, g_dev, {}, z_dev);
      device->forward(b, index.slots(), rows, {}, f_dev);
      BOOST_TEST_CONTEXT(to_string(spec.kind) << " dim " << spec.dim << " seed " << seed) {
        BOOST_TEST(std::memcmp(&l_cpu, &l_dev, sizeof(double)) == 0);
        BOOST_TEST(same(z_cpu, z_dev));
        BOOST_TEST(same(z_cpu, f_dev));
        BOOST_TEST(same(g_cpu, g_dev));
      }
      ++cases;
    }
  }
  BOOST_TEST(cases == 84u);
}

// The device code of the deep models (gpu/deep_pass.h) built for the host does what the CPU
// models do, bit for bit: logits, sparse and dense gradients added to non-zero ones, and the
// loss. Over batches with and without dense features (DLRM: with and without its bottom MLP and
// its dot interactions' first vector), one field alone, keys repeated inside a sample, an empty
// batch, MLPs of zero, one and two hidden layers (DCN-v2: no tower, one, two), and a model
// sharing its batches among threads.
BOOST_AUTO_TEST_CASE(deep_device_code_built_for_the_host_equals_the_cpu_model_bit_for_bit) {
  size_t cases = 0;
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn})
    for (uint32_t fields : {4u, 1u})
      for (uint32_t dense : {0u, 3u}) {
        for (const std::vector<size_t>& mlp :
             {std::vector<size_t>{}, std::vector<size_t>{7}, std::vector<size_t>{6, 5}}) {
          for (size_t threads : {size_t{1}, size_t{2}}) {
            ModelSpec spec = deep_spec(kind, dense);
            spec.fields = fields;
            spec.mlp = mlp;
            spec.compute_threads = threads;
            ModelSpec on_device = spec;
            on_device.device.backend = Backend::device_host;
            auto cpu = make_model(spec);
            auto device = make_model(on_device);
            BOOST_REQUIRE(device->dense_params() == cpu->dense_params());
            std::vector<float> params(cpu->dense_params());
            cpu->init_dense(params, 9);
            for (uint64_t seed = 1; seed <= 6; ++seed) {
              Batch b = seed == 1 ? Batch{} : random_batch(seed * 13 + dense, seed * 11, 25, dense);
              if (fields == 1)  // every key in field 0
                for (uint64_t& k : b.keys) k &= key_value_mask;
              BatchIndex index;
              index.build(b, spec.dense_rows());
              const size_t n = index.unique_keys().size() * spec.width();
              const std::vector<float> rows = random_rows(seed + 31, n, 0.5);
              std::vector<float> g_cpu = random_rows(seed + 57, n, 0.1), g_dev = g_cpu;
              std::vector<float> d_cpu = random_rows(seed + 71, params.size(), 0.1), d_dev = d_cpu;
              std::vector<float> z_cpu(b.rows()), z_dev(b.rows()), f_dev(b.rows());
              const double l_cpu =
                  cpu->forward_backward(b, index.slots(), rows, params, g_cpu, d_cpu, z_cpu);
              const double l_dev =
                  device->forward_backward(b, index.slots(), rows, params, g_dev, d_dev, z_dev);
              device->forward(b, index.slots(), rows, params, f_dev);
              BOOST_TEST_CONTEXT(to_string(kind) << ", " << fields << " fields, dense " << dense
                                                 << ", " << mlp.size() << " hidden layers, "
                                                 << threads << " threads, seed " << seed) {
                BOOST_TEST(std::memcmp(&l_cpu, &l_dev, sizeof(double)) == 0);
                BOOST_TEST(z_cpu == z_dev, boost::test_tools::per_element());
                BOOST_TEST(z_cpu == f_dev, boost::test_tools::per_element());
                BOOST_TEST(g_cpu == g_dev, boost::test_tools::per_element());
                BOOST_TEST(d_cpu == d_dev, boost::test_tools::per_element());
              }
              ++cases;
            }
          }
        }
      }
  BOOST_TEST(cases == 432u);
}

// Trained end to end, the device code's host build ends where the CPU trainer does, bit for bit.
BOOST_AUTO_TEST_CASE(trainer_on_device_code_built_for_the_host_equals_the_cpu_trainer) {
  for (ModelKind kind :
       {ModelKind::lr, ModelKind::fm, ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn}) {
    TrainerConfig c;
    c.model.kind = kind;
    c.model.dim = 8;
    if (c.model.deep()) {
      c.model.fields = 4;  // random_batch's
      c.model.mlp = {16, 8};
    }
    c.optimizer = default_optimizer_config(OptimizerKind::adagrad);
    c.seed = 42;
    TrainerConfig d = c;
    d.model.device.backend = Backend::device_host;
    auto cpu = LocalTrainer::make(c);
    auto dev = LocalTrainer::make(d);
    BOOST_REQUIRE(cpu.ok());
    BOOST_REQUIRE(dev.ok());
    std::vector<uint64_t> keys{bias_key};
    for (uint64_t seed = 1; seed <= 15; ++seed) {
      const Batch b = random_batch(seed, 64, 150);
      const double l1 = *(*cpu)->train_batch(b);
      const double l2 = *(*dev)->train_batch(b);
      BOOST_TEST(std::memcmp(&l1, &l2, sizeof(double)) == 0, "seed " << seed);
      keys.insert(keys.end(), b.keys.begin(), b.keys.end());
    }
    const size_t width = c.model.width();
    std::vector<float> r1(width), r2(width);
    size_t differing = 0;
    for (uint64_t k : keys) {
      (*cpu)->row_value(k, r1);
      (*dev)->row_value(k, r2);
      if (std::memcmp(r1.data(), r2.data(), width * sizeof(float)) != 0) ++differing;
    }
    BOOST_TEST(differing == 0u, to_string(kind));
    const auto d1 = (*cpu)->dense(), d2 = (*dev)->dense();
    BOOST_TEST(c.model.deep() == !d1.empty());
    BOOST_TEST((d1.size() == d2.size() &&
                std::memcmp(d1.data(), d2.data(), d1.size() * sizeof(float)) == 0),
               to_string(kind));
  }
}

BOOST_AUTO_TEST_CASE(devices_are_parsed_and_refused_with_their_flag_named) {
  BOOST_TEST((parse_device("cpu")->backend == Backend::cpu));
  BOOST_TEST((parse_device("cuda")->backend == Backend::cuda));
  BOOST_TEST(parse_device("cuda")->index == 0);
  BOOST_TEST(parse_device("cuda:3")->index == 3);
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1x", "cuda:99999999999", "CPU"}) {
    auto d = parse_device(bad);
    BOOST_TEST(!d.ok(), bad);
    if (!d.ok()) BOOST_TEST(d.status().message().find("--device") != std::string::npos);
  }
  // Every deep model runs on the device code.
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn}) {
    ModelSpec s = deep_spec(kind, 2);
    s.device.backend = Backend::device_host;
    BOOST_TEST(Model::make(s).ok(), to_string(kind));
  }
  // A CUDA device this machine does not have: built without CUDA, no device, or too few.
  ModelSpec f = fm_spec(4);
  f.device = *parse_device("cuda:4096");
  auto c = Model::make(f);
  BOOST_TEST(!c.ok());
  if (!c.ok()) {
    const std::string& why = c.status().message();
    BOOST_TEST(why.find("--device cuda:4096") == 0u, why);
    BOOST_TEST((why.find("without CUDA") != std::string::npos ||
                why.find("no CUDA device") != std::string::npos ||
                why.find("CUDA is unusable") != std::string::npos ||
                why.find("this machine has") != std::string::npos),
               why);
  }
}

BOOST_AUTO_TEST_CASE(make_refuses_layer_lists_and_sizes_out_of_range) {
  auto refused = [](ModelSpec s, const std::string& words) {
    auto m = Model::make(s);
    BOOST_TEST(!m.ok());
    if (!m.ok())
      BOOST_TEST(m.status().message().find(words) != std::string::npos, m.status().message());
  };
  ModelSpec s = deep_spec(ModelKind::deepfm, 2);
  s.mlp = {0};
  refused(s, "--mlp");
  s.mlp = std::vector<size_t>(17, 4);
  refused(s, "--mlp");
  s = deep_spec(ModelKind::dlrm, 2);
  s.bottom = {70000};
  refused(s, "--bottom");
  s = deep_spec(ModelKind::dcn, 2);
  s.fields = 255;
  s.dim = 1024;
  refused(s, "dense parameters");
}

BOOST_AUTO_TEST_CASE(parse_model_and_layer_sizes) {
  BOOST_TEST((parse_model("lr").ok() && *parse_model("lr") == ModelKind::lr));
  BOOST_TEST((parse_model("fm").ok() && *parse_model("fm") == ModelKind::fm));
  BOOST_TEST((parse_model("deepfm").ok() && *parse_model("deepfm") == ModelKind::deepfm));
  BOOST_TEST((parse_model("dlrm").ok() && *parse_model("dlrm") == ModelKind::dlrm));
  BOOST_TEST((parse_model("dcn").ok() && *parse_model("dcn") == ModelKind::dcn));
  BOOST_TEST((*parse_layer_sizes("256,128") == std::vector<size_t>{256, 128}));
  BOOST_TEST(parse_layer_sizes("none")->empty());
  for (const char* bad : {"256,", "0", "a,1", "70000", ",5", "1,,2"}) {
    auto r = parse_layer_sizes(bad);
    BOOST_TEST(!r.ok(), bad);
  }
  for (const char* bad : {"", "LR", "ffm", "deep"}) {
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
  c.model = spec_of(kind, dim);
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
        const double l1 = *t1->train_batch(b);
        const double l2 = *t2->train_batch(b);
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

// The trainer's checks and row updates run on the model's threads too (each a range of the
// rows): two trainers sharing their batches among 3 threads end bit for bit alike, and within
// rounding of one thread's.
BOOST_AUTO_TEST_CASE(a_trainer_sharing_its_batches_among_threads_repeats_bit_for_bit) {
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm}) {
    BOOST_TEST_CONTEXT(to_string(kind)) {
      TrainerConfig c;
      c.model = deep_spec(kind, 3);
      c.optimizer = default_optimizer_config(OptimizerKind::adagrad);
      c.seed = 5;
      TrainerConfig shared = c;
      shared.model.compute_threads = 3;
      auto t1 = make_trainer(c), t2 = make_trainer(shared), t3 = make_trainer(shared);
      std::vector<uint64_t> keys{bias_key};
      double l1 = 0.0, l2 = 0.0;
      for (uint64_t seed = 1; seed <= 12; ++seed) {
        const Batch b = random_batch(seed, 48, 60, 3);
        l1 += *t1->train_batch(b);
        const double a = *t2->train_batch(b), again = *t3->train_batch(b);
        BOOST_TEST(std::memcmp(&a, &again, sizeof(double)) == 0);
        l2 += a;
        keys.insert(keys.end(), b.keys.begin(), b.keys.end());
      }
      BOOST_TEST(std::fabs(l1 - l2) <= 1e-4 * l1);
      BOOST_TEST(t2->rows() == t1->rows());
      const size_t width = c.model.width();
      std::vector<float> r1(width), r2(width), r3(width);
      size_t differing = 0, far = 0;
      for (uint64_t k : keys) {
        t1->row_value(k, r1);
        t2->row_value(k, r2);
        t3->row_value(k, r3);
        if (std::memcmp(r2.data(), r3.data(), width * sizeof(float)) != 0) ++differing;
        for (size_t j = 0; j < width; ++j)
          if (std::fabs(r1[j] - r2[j]) > 1e-4f) ++far;
      }
      BOOST_TEST(differing == 0u);
      BOOST_TEST(far == 0u);
      const auto d2 = t2->dense(), d3 = t3->dense();
      BOOST_TEST(std::memcmp(d2.data(), d3.data(), d2.size() * sizeof(float)) == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(trainer_predict_does_not_insert_rows) {
  auto t = make_trainer(trainer_config(ModelKind::fm, 4, OptimizerKind::adagrad));
  const Batch unseen = random_batch(99, 30, 1000);
  std::vector<float> logits;
  BOOST_TEST(t->predict(unseen, logits).ok());
  BOOST_TEST(t->rows() == 0u);
  BOOST_TEST(logits.size() == unseen.rows());

  *t->train_batch(random_batch(1, 30, 1000));
  const size_t after_train = t->rows();
  BOOST_TEST(after_train > 0u);
  BOOST_TEST(t->predict(unseen, logits).ok());
  BOOST_TEST(t->rows() == after_train);
}

BOOST_AUTO_TEST_CASE(trainer_predict_matches_loss_reported_by_next_train_batch) {
  // train_batch reports the loss before its step; predict on the same weights must agree.
  auto t = make_trainer(trainer_config(ModelKind::fm, 8, OptimizerKind::adagrad));
  for (uint64_t seed = 1; seed <= 5; ++seed) *t->train_batch(random_batch(seed, 50, 100));
  const Batch b = random_batch(77, 50, 100);
  std::vector<float> logits;
  BOOST_TEST(t->predict(b, logits).ok());
  double want = 0.0;
  for (size_t i = 0; i < b.rows(); ++i) want += logloss_from_logit(logits[i], b.labels[i]);
  BOOST_TEST(*t->train_batch(b) == want, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(trainer_first_lr_loss_is_log2_per_row) {
  auto t = make_trainer(trainer_config(ModelKind::lr, 0, OptimizerKind::sgd));
  const Batch b = random_batch(5, 17, 100);
  BOOST_TEST(*t->train_batch(b) == 17.0 * std::log(2.0), boost::test_tools::tolerance(1e-9));
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
      const double first = *t->train_batch(b);
      double last = first;
      for (int step = 0; step < 100; ++step) last = *t->train_batch(b);
      BOOST_TEST(last < 0.5 * first, "model " << to_string(kind) << " optimizer " << to_string(opt)
                                              << ": first " << first << " last " << last);
      std::vector<float> logits;
      BOOST_TEST(t->predict(b, logits).ok());
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
