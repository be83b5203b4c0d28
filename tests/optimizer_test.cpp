#define BOOST_TEST_MODULE optimizer_test
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/hash.h"
#include "ps/optimizer.h"
#include "ps/row_init.h"

using namespace colony;

namespace {

std::unique_ptr<Optimizer> make(const OptimizerConfig& c) {
  auto o = make_optimizer(c);
  BOOST_REQUIRE_MESSAGE(o.ok(), (o.ok() ? std::string() : o.status().message()));
  return std::move(o).value();
}

// Float results against double references: relative 1e-5 with a small absolute floor.
void check_close(const std::vector<float>& got, const std::vector<double>& want, const char* what,
                 int step) {
  BOOST_REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 1e-7 + 1e-5 * std::fabs(want[i]);
    BOOST_TEST(std::fabs(got[i] - want[i]) <= tol, what << " step " << step << " coord " << i
                                                        << ": got " << got[i] << " want "
                                                        << want[i]);
  }
}

// Gradients for 3 steps over 3 coordinates (mixed signs, one zero, one large).
const std::vector<std::vector<float>> kGrads{
    {0.5f, -1.25f, 0.0f},
    {-0.3f, 2.0f, 0.75f},
    {0.8f, -0.1f, -3.0f},
};

}  // namespace

BOOST_AUTO_TEST_CASE(state_floats_per_optimizer) {
  for (size_t width : {1, 5, 33}) {
    OptimizerConfig c;
    c.kind = OptimizerKind::sgd;
    BOOST_TEST(make(c)->state_floats(width) == 0u);
    c.kind = OptimizerKind::adagrad;
    BOOST_TEST(make(c)->state_floats(width) == width);
    c.kind = OptimizerKind::ftrl;
    BOOST_TEST(make(c)->state_floats(width) == 3 * width);
    c.kind = OptimizerKind::adam;
    BOOST_TEST(make(c)->state_floats(width) == 2 * width + 1);
  }
}

BOOST_AUTO_TEST_CASE(sgd_matches_hand_computed_steps_with_l2) {
  OptimizerConfig c;
  c.kind = OptimizerKind::sgd;
  c.lr = 0.1f;
  c.l2 = 0.5f;
  auto opt = make(c);
  std::vector<float> w{0.2f, -0.4f, 1.0f};
  std::vector<double> ref(w.begin(), w.end());
  std::vector<float> state;
  opt->init_state(w, state);
  for (int t = 0; t < 3; ++t) {
    opt->apply(w, state, kGrads[t]);
    for (size_t i = 0; i < ref.size(); ++i)
      ref[i] -= double{c.lr} * (double{kGrads[t][i]} + double{c.l2} * ref[i]);
    check_close(w, ref, "sgd", t);
  }
}

BOOST_AUTO_TEST_CASE(adagrad_matches_hand_computed_steps_with_l2) {
  OptimizerConfig c;
  c.kind = OptimizerKind::adagrad;
  c.lr = 0.05f;
  c.l2 = 0.1f;
  c.adagrad_init = 0.01f;
  auto opt = make(c);
  std::vector<float> w{0.2f, -0.4f, 1.0f};
  std::vector<float> state(opt->state_floats(3), -7.0f);
  opt->init_state(w, state);
  for (float s : state) BOOST_TEST(s == c.adagrad_init);
  std::vector<double> ref(w.begin(), w.end());
  std::vector<double> acc(3, double{c.adagrad_init});
  for (int t = 0; t < 3; ++t) {
    opt->apply(w, state, kGrads[t]);
    for (size_t i = 0; i < 3; ++i) {
      const double g = double{kGrads[t][i]} + double{c.l2} * ref[i];
      acc[i] += g * g;
      ref[i] -= double{c.lr} * g / std::sqrt(acc[i]);
    }
    check_close(w, ref, "adagrad w", t);
    check_close(state, acc, "adagrad accumulator", t);
  }
}

namespace {

// McMahan et al. 2013, algorithm 1 (per coordinate), with the proximal centre at w0.
struct FtrlRef {
  double alpha, beta, l1, l2;
  double z = 0, n = 0, w0 = 0, w = 0;
  void step(double g) {
    const double sigma = (std::sqrt(n + g * g) - std::sqrt(n)) / alpha;
    z += g - sigma * (w - w0);
    n += g * g;
    if (std::fabs(z) <= l1)
      w = w0;
    else
      w = w0 - (z - (z > 0 ? l1 : -l1)) / ((beta + std::sqrt(n)) / alpha + l2);
  }
};

void run_ftrl_case(const std::vector<float>& w_init, const OptimizerConfig& c,
                   const std::vector<std::vector<float>>& grads) {
  auto opt = make(c);
  const size_t n = w_init.size();
  std::vector<float> w = w_init;
  std::vector<float> state(opt->state_floats(n), 99.0f);
  opt->init_state(w, state);
  for (size_t i = 0; i < n; ++i) {
    BOOST_TEST(state[i] == 0.0f);          // z
    BOOST_TEST(state[n + i] == 0.0f);      // n
    BOOST_TEST(state[2 * n + i] == w[i]);  // w0
  }
  std::vector<FtrlRef> ref(n, FtrlRef{c.lr, c.ftrl_beta, c.l1, c.l2});
  for (size_t i = 0; i < n; ++i) ref[i].w = ref[i].w0 = w_init[i];
  for (size_t t = 0; t < grads.size(); ++t) {
    opt->apply(w, state, grads[t]);
    std::vector<double> want_w(n), want_z(n), want_n(n);
    for (size_t i = 0; i < n; ++i) {
      ref[i].step(grads[t][i]);
      want_w[i] = ref[i].w;
      want_z[i] = ref[i].z;
      want_n[i] = ref[i].n;
    }
    check_close(w, want_w, "ftrl w", static_cast<int>(t));
    check_close({state.begin(), state.begin() + n}, want_z, "ftrl z", static_cast<int>(t));
    check_close({state.begin() + n, state.begin() + 2 * n}, want_n, "ftrl n", static_cast<int>(t));
    // w0 never changes.
    for (size_t i = 0; i < n; ++i) BOOST_TEST(state[2 * n + i] == w_init[i]);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(ftrl_with_zero_start_matches_mcmahan_algorithm_1) {
  OptimizerConfig c;
  c.kind = OptimizerKind::ftrl;
  c.lr = 0.1f;
  c.ftrl_beta = 1.0f;
  c.l1 = 0.2f;
  c.l2 = 0.3f;
  // Coordinates 0 and 1 pass the L1 threshold at once; coordinate 2 (zero first gradient) stays
  // at 0 for one step.
  run_ftrl_case({0.0f, 0.0f, 0.0f}, c, kGrads);
}

BOOST_AUTO_TEST_CASE(ftrl_with_nonzero_start_is_centered_at_initial_value) {
  OptimizerConfig c;
  c.kind = OptimizerKind::ftrl;
  c.lr = 0.05f;
  c.ftrl_beta = 0.5f;
  c.l1 = 0.4f;
  c.l2 = 1.5f;
  run_ftrl_case({0.03f, -0.02f, 0.01f}, c, kGrads);
}

BOOST_AUTO_TEST_CASE(ftrl_l1_threshold_keeps_weight_at_initial_value) {
  OptimizerConfig c;
  c.kind = OptimizerKind::ftrl;
  c.lr = 0.1f;
  c.l1 = 1.0f;
  c.l2 = 0.0f;
  auto opt = make(c);
  for (float w_start : {0.0f, 0.0125f, -0.5f}) {
    std::vector<float> w{w_start};
    std::vector<float> state(3);
    opt->init_state(w, state);
    // While |z| <= l1, w stays exactly at w0 (sigma*(w-w0) is then 0, so z = sum of g).
    double z = 0.0;
    for (float g : {0.3f, 0.3f, 0.3f}) {
      opt->apply(w, state, std::vector<float>{g});
      z += g;
      BOOST_TEST(std::fabs(z) <= 1.0);
      BOOST_TEST(w[0] == w_start);  // exact
    }
    // z reaches 0.9 + 0.2 = 1.1 > l1: the weight moves, opposite to the gradient's sign.
    opt->apply(w, state, std::vector<float>{0.2f});
    BOOST_TEST(w[0] < w_start);
    // Gradients of the other sign bring |z| back under l1: w returns exactly to w0.
    // (z after this step is 1.1 - 0.5 - sigma*(w-w0), which is within [-1, 1].)
    opt->apply(w, state, std::vector<float>{-0.5f});
    BOOST_TEST(std::fabs(state[0]) <= 1.0f);
    BOOST_TEST(w[0] == w_start);
  }
}

BOOST_AUTO_TEST_CASE(adam_matches_published_algorithm_with_l2) {
  OptimizerConfig c;
  c.kind = OptimizerKind::adam;
  c.lr = 0.01f;
  c.l2 = 0.2f;
  c.adam_beta1 = 0.8f;
  c.adam_beta2 = 0.95f;
  c.adam_eps = 1e-8f;
  auto opt = make(c);
  std::vector<float> w{0.2f, -0.4f, 1.0f};
  std::vector<float> state(opt->state_floats(3), 5.0f);
  opt->init_state(w, state);
  for (float s : state) BOOST_TEST(s == 0.0f);
  std::vector<double> ref(w.begin(), w.end()), m(3, 0.0), v(3, 0.0);
  const double b1 = c.adam_beta1, b2 = c.adam_beta2;
  for (int t = 1; t <= 3; ++t) {
    opt->apply(w, state, kGrads[t - 1]);
    for (size_t i = 0; i < 3; ++i) {
      // Kingma & Ba, algorithm 1, with L2 added to the gradient.
      const double g = double{kGrads[t - 1][i]} + double{c.l2} * ref[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double vhat = v[i] / (1 - std::pow(b2, t));
      ref[i] -= double{c.lr} * mhat / (std::sqrt(vhat) + double{c.adam_eps});
    }
    check_close(w, ref, "adam w", t);
    check_close({state.begin(), state.begin() + 3}, m, "adam m", t);
    check_close({state.begin() + 3, state.begin() + 6}, v, "adam v", t);
    BOOST_TEST(state[6] == static_cast<float>(t));  // the row's own step count
  }
}

BOOST_AUTO_TEST_CASE(adam_step_count_is_per_row) {
  // Two rows sharing one optimizer: bias correction depends on each row's own updates.
  OptimizerConfig c;
  c.kind = OptimizerKind::adam;
  c.lr = 0.01f;
  auto opt = make(c);
  std::vector<float> a{0.0f}, b{0.0f};
  std::vector<float> sa(3), sb(3);
  opt->init_state(a, sa);
  opt->init_state(b, sb);
  for (int i = 0; i < 5; ++i) opt->apply(a, sa, std::vector<float>{1.0f});
  opt->apply(b, sb, std::vector<float>{1.0f});
  BOOST_TEST(sa[2] == 5.0f);
  BOOST_TEST(sb[2] == 1.0f);
  // First Adam step with a constant gradient moves by lr (up to eps).
  BOOST_TEST(b[0] == -0.01f, boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(make_optimizer_rejects_bad_settings_naming_them) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* name;
    OptimizerKind kind;
    void (*set)(OptimizerConfig&, float);
    float value;
  };
  auto set_lr = [](OptimizerConfig& c, float v) { c.lr = v; };
  auto set_l1 = [](OptimizerConfig& c, float v) { c.l1 = v; };
  auto set_l2 = [](OptimizerConfig& c, float v) { c.l2 = v; };
  auto set_b1 = [](OptimizerConfig& c, float v) { c.adam_beta1 = v; };
  auto set_b2 = [](OptimizerConfig& c, float v) { c.adam_beta2 = v; };
  auto set_eps = [](OptimizerConfig& c, float v) { c.adam_eps = v; };
  auto set_init = [](OptimizerConfig& c, float v) { c.adagrad_init = v; };
  auto set_beta = [](OptimizerConfig& c, float v) { c.ftrl_beta = v; };
  const std::vector<Case> cases{
      {"lr", OptimizerKind::sgd, set_lr, 0.0f},
      {"lr", OptimizerKind::adagrad, set_lr, -0.5f},
      {"lr", OptimizerKind::adam, set_lr, nan},
      {"lr", OptimizerKind::ftrl, set_lr, inf},
      {"l1", OptimizerKind::ftrl, set_l1, -0.1f},
      {"l1", OptimizerKind::ftrl, set_l1, nan},
      {"l2", OptimizerKind::sgd, set_l2, -1.0f},
      {"l2", OptimizerKind::ftrl, set_l2, nan},
      {"adam_beta1", OptimizerKind::adam, set_b1, 1.0f},
      {"adam_beta1", OptimizerKind::adam, set_b1, -0.1f},
      {"adam_beta1", OptimizerKind::adam, set_b1, nan},
      {"adam_beta2", OptimizerKind::adam, set_b2, 1.0f},
      {"adam_eps", OptimizerKind::adam, set_eps, 0.0f},
      {"adagrad_init", OptimizerKind::adagrad, set_init, 0.0f},
      {"ftrl_beta", OptimizerKind::ftrl, set_beta, -1.0f},
  };
  for (const Case& k : cases) {
    OptimizerConfig c;
    c.kind = k.kind;
    k.set(c, k.value);
    auto o = make_optimizer(c);
    BOOST_TEST_CONTEXT(k.name << " = " << k.value << " for " << to_string(k.kind)) {
      BOOST_REQUIRE(!o.ok());
      BOOST_TEST((o.status().code() == Status::Code::invalid_input));
      BOOST_TEST(o.status().message().find(k.name) != std::string::npos, o.status().message());
    }
  }
}

BOOST_AUTO_TEST_CASE(make_optimizer_accepts_defaults_and_boundary_values) {
  for (OptimizerKind k :
       {OptimizerKind::sgd, OptimizerKind::adagrad, OptimizerKind::ftrl, OptimizerKind::adam}) {
    BOOST_TEST(make_optimizer(default_optimizer_config(k)).ok(), to_string(k));
    BOOST_TEST((default_optimizer_config(k).kind == k));
  }
  OptimizerConfig c;
  c.kind = OptimizerKind::adam;
  c.adam_beta1 = 0.0f;
  c.adam_beta2 = 0.0f;
  BOOST_TEST(make_optimizer(c).ok());
  c.kind = OptimizerKind::ftrl;
  c.ftrl_beta = 0.0f;
  c.l1 = 0.0f;
  c.l2 = 0.0f;
  BOOST_TEST(make_optimizer(c).ok());
}

BOOST_AUTO_TEST_CASE(parse_optimizer_accepts_four_names_and_rejects_others) {
  for (OptimizerKind k :
       {OptimizerKind::sgd, OptimizerKind::adagrad, OptimizerKind::ftrl, OptimizerKind::adam}) {
    auto p = parse_optimizer(to_string(k));
    BOOST_REQUIRE(p.ok());
    BOOST_TEST((*p == k));
  }
  BOOST_TEST((*parse_optimizer("sgd") == OptimizerKind::sgd));
  BOOST_TEST((*parse_optimizer("adagrad") == OptimizerKind::adagrad));
  BOOST_TEST((*parse_optimizer("ftrl") == OptimizerKind::ftrl));
  BOOST_TEST((*parse_optimizer("adam") == OptimizerKind::adam));
  for (const char* bad : {"", "SGD", "Adam", "adamw", "rmsprop", "ftrl ", " sgd"}) {
    auto p = parse_optimizer(bad);
    BOOST_TEST(!p.ok(), '"' << bad << '"');
    if (!p.ok()) BOOST_TEST((p.status().code() == Status::Code::invalid_input));
  }
}

// ---------------------------------------------------------------------------------------------
// Row initialisation

BOOST_AUTO_TEST_CASE(init_row_is_deterministic_given_key_and_seed) {
  const RowInit init{123, 1, 0.05f};
  for (uint64_t key : {uint64_t{0}, uint64_t{1}, make_key(3, 777), UINT64_MAX}) {
    std::vector<float> a(17, -1.0f), b(17, 5.0f);
    init_row(key, init, a);
    init_row(key, init, b);
    BOOST_TEST(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
}

BOOST_AUTO_TEST_CASE(init_row_differs_across_keys_and_seeds) {
  std::vector<float> base(9), other(9);
  init_row(make_key(1, 5), RowInit{7, 1, 0.01f}, base);
  init_row(make_key(1, 6), RowInit{7, 1, 0.01f}, other);
  BOOST_TEST(std::memcmp(base.data() + 1, other.data() + 1, 8 * sizeof(float)) != 0);
  init_row(make_key(1, 5), RowInit{8, 1, 0.01f}, other);
  BOOST_TEST(std::memcmp(base.data() + 1, other.data() + 1, 8 * sizeof(float)) != 0);
  // Entries within a row differ too.
  BOOST_TEST(base[1] != base[2]);
}

BOOST_AUTO_TEST_CASE(init_row_linear_part_is_zero_and_bias_row_all_zero) {
  for (size_t linear : {0, 1, 3}) {
    std::vector<float> v(9, 42.0f);
    init_row(make_key(2, 99), RowInit{1, linear, 0.1f}, v);
    for (size_t i = 0; i < linear; ++i) BOOST_TEST(v[i] == 0.0f);
    for (size_t i = linear; i < v.size(); ++i) BOOST_TEST(v[i] != 0.0f);
    std::vector<float> b(9, 42.0f);
    init_row(bias_key, RowInit{1, linear, 0.1f}, b);
    for (float x : b) BOOST_TEST(x == 0.0f);
  }
  // linear wider than the row: everything is zero (LR rows of width 1 as well).
  std::vector<float> lr_row(1, 3.0f);
  init_row(make_key(2, 99), RowInit{1, 1, 0.1f}, lr_row);
  BOOST_TEST(lr_row[0] == 0.0f);
  std::vector<float> short_row(2, 3.0f);
  init_row(make_key(2, 99), RowInit{1, 5, 0.1f}, short_row);
  BOOST_TEST(short_row[0] == 0.0f);
  BOOST_TEST(short_row[1] == 0.0f);
}

BOOST_AUTO_TEST_CASE(init_row_factors_have_requested_std_over_many_keys) {
  for (float std_want : {0.01f, 0.1f}) {
    for (uint64_t seed : {1u, 99u}) {
      const RowInit init{seed, 1, std_want};
      const size_t width = 9, keys = 20000;
      std::vector<float> v(width);
      double sum = 0, sum_sq = 0, max_abs = 0;
      size_t count = 0;
      for (uint64_t k = 0; k < keys; ++k) {
        init_row(make_key(static_cast<uint32_t>(k % 8), k * 2654435761u), init, v);
        for (size_t i = 1; i < width; ++i) {
          sum += v[i];
          sum_sq += double{v[i]} * v[i];
          max_abs = std::max(max_abs, std::fabs(double{v[i]}));
          ++count;
        }
      }
      const double mean = sum / count;
      const double sd = std::sqrt(sum_sq / count - mean * mean);
      // 160k samples: the sample std of a uniform is within well under 1% of the truth.
      BOOST_TEST(sd == double{std_want}, boost::test_tools::tolerance(0.03));
      BOOST_TEST(std::fabs(mean) < 0.02 * std_want);
      // Uniform on [-a, a] with a = sqrt(3) std.
      BOOST_TEST(max_abs <= std::sqrt(3.0) * std_want * 1.0001);
      BOOST_TEST(max_abs > 0.95 * std::sqrt(3.0) * std_want);
    }
  }
}

// apply_finite makes an update only when it leaves the row and its state finite.
BOOST_AUTO_TEST_CASE(apply_finite_leaves_a_row_an_update_would_overflow_as_it_was) {
  colony::OptimizerConfig c = colony::default_optimizer_config(colony::OptimizerKind::sgd);
  c.lr = 1e37f;
  auto opt = std::move(colony::make_optimizer(c).value());
  std::vector<float> row = {0.5f, -0.25f}, scratch;
  const std::vector<float> big = {100.0f, 0.0f}, small = {1e-37f, 0.0f};
  BOOST_TEST(!opt->apply_finite(row, {}, big, scratch));
  BOOST_TEST(row == (std::vector<float>{0.5f, -0.25f}), boost::test_tools::per_element());
  BOOST_TEST(opt->apply_finite(row, {}, small, scratch));
  BOOST_TEST(row[0] == -0.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(row[1] == -0.25f);
}
