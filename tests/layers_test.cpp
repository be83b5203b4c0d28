#define BOOST_TEST_MODULE layers_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/hash.h"
#include "models/dense_optimizer.h"
#include "models/layers.h"

using namespace colony;
using namespace colony::nn;

namespace {

std::vector<float> random_vec(uint64_t seed, size_t count, double lo, double hi) {
  SplitMix64 rng(seed);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// L = sum(y ⊙ r), accumulated in double: the scalar loss every gradient check differentiates.
double weighted_sum(const float* y, const std::vector<float>& r) {
  double sum = 0.0;
  for (size_t k = 0; k < r.size(); ++k) sum += static_cast<double>(y[k]) * r[k];
  return sum;
}

// Checks analytic[i] against the central difference of loss() in v[i], for every i. The
// difference divides by the step actually stored in fp32, and the loss is summed in double,
// so what remains is fp32 rounding of the forward pass.
template <class Loss>
void check_gradient(const char* what, std::vector<float>& v, const std::vector<float>& analytic,
                    float h, Loss&& loss) {
  BOOST_REQUIRE(analytic.size() == v.size());
  double largest = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    const float saved = v[i];
    const float up = saved + h, down = saved - h;
    v[i] = up;
    const double loss_up = loss();
    v[i] = down;
    const double loss_down = loss();
    v[i] = saved;
    const double fd = (loss_up - loss_down) / (static_cast<double>(up) - down);
    const double a = analytic[i];
    const double tol = 1e-2 * std::max({1.0, std::fabs(a), std::fabs(fd)});
    BOOST_TEST(std::fabs(a - fd) <= tol,
               what << "[" << i << "]: analytic " << a << " finite difference " << fd);
    largest = std::max(largest, std::fabs(a));
  }
  // An all-zero gradient would pass only if the loss did not depend on v: make sure it does.
  BOOST_TEST(largest > 0.05, what << ": largest gradient " << largest);
}

// A value no backward() writes: output buffers start with it, so overwriting is tested.
constexpr float sentinel = 7.0f;

// The pre-activations of an Mlp's ReLU layers, computed layer by layer with Linear.
double min_abs_preactivation(const Mlp& mlp, const std::vector<float>& params,
                             const std::vector<float>& x, size_t n) {
  double margin = std::numeric_limits<double>::infinity();
  std::vector<float> input = x;
  const auto& layers = mlp.layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    std::vector<float> y(n * layers[i].out);
    layers[i].forward(params.data(), input.data(), n, y.data());
    const bool relu = !mlp.last_linear() || i + 1 < layers.size();
    if (relu) {
      for (float& v : y) {
        margin = std::min(margin, std::fabs(static_cast<double>(v)));
        v = std::max(v, 0.0f);
      }
    }
    input = y;
  }
  return margin;
}

void check_mlp_gradients(bool last_linear) {
  const size_t n = 4;
  ParamLayout layout;
  Mlp mlp = Mlp::make(layout, {5, 6, 4, 3}, last_linear);
  BOOST_REQUIRE(mlp.layers().size() == 3u);
  // Finite differences are only right away from ReLU's kink: pick the first seed whose
  // pre-activations are all far from 0 compared with what a step of h moves them.
  const float h = 1e-3f;
  std::vector<float> params, x;
  bool found = false;
  for (uint64_t seed = 1; seed <= 200 && !found; ++seed) {
    params = random_vec(seed, layout.size(), -0.8, 0.8);
    x = random_vec(seed + 1000, n * mlp.in(), -1.0, 1.0);
    found = min_abs_preactivation(mlp, params, x, n) > 0.03;
  }
  BOOST_REQUIRE(found);
  const std::vector<float> r = random_vec(99, n * mlp.out(), -1.0, 1.0);

  mlp.forward(params.data(), x.data(), n);
  std::vector<float> grads(layout.size(), 0.0f);
  std::vector<float> dx(n * mlp.in(), sentinel);
  mlp.backward(params.data(), x.data(), r.data(), n, grads.data(), dx.data());

  auto loss = [&] { return weighted_sum(mlp.forward(params.data(), x.data(), n), r); };
  check_gradient("mlp params", params, grads, h, loss);
  check_gradient("mlp dx", x, dx, h, loss);
}

// Reference: y = x W + b with a triple loop in double.
std::vector<double> naive_linear(const Linear& l, const std::vector<float>& params,
                                 const std::vector<float>& x, size_t n) {
  std::vector<double> y(n * l.out);
  for (size_t r = 0; r < n; ++r) {
    for (size_t j = 0; j < l.out; ++j) {
      double sum = params[l.b + j];
      for (size_t k = 0; k < l.in; ++k) {
        sum += static_cast<double>(x[r * l.in + k]) * params[l.w + k * l.out + j];
      }
      y[r * l.out + j] = sum;
    }
  }
  return y;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ParamLayout, init

BOOST_AUTO_TEST_CASE(layout_hands_out_consecutive_ranges_in_order) {
  ParamLayout layout;
  const Linear a = Linear::make(layout, 3, 2);
  Mlp mlp = Mlp::make(layout, {2, 4, 1}, true);
  const CrossNet cross = CrossNet::make(layout, 3, 2);
  BOOST_TEST(a.w == 0u);
  BOOST_TEST(a.b == 6u);
  BOOST_TEST(mlp.layers()[0].w == 8u);
  BOOST_TEST(mlp.layers()[0].b == 16u);
  BOOST_TEST(mlp.layers()[1].w == 20u);
  BOOST_TEST(mlp.layers()[1].b == 24u);
  BOOST_TEST(cross.layers()[0].w == 25u);
  BOOST_TEST(cross.layers()[1].w == 37u);
  BOOST_TEST(layout.size() == 49u);
  BOOST_TEST(mlp.in() == 2u);
  BOOST_TEST(mlp.out() == 1u);
  BOOST_TEST(mlp.flops_per_sample() == 2u * (2 * 4 + 4 * 1));
}

BOOST_AUTO_TEST_CASE(init_is_seeded_glorot_with_zero_bias_and_differs_between_layers) {
  ParamLayout layout;
  Mlp mlp = Mlp::make(layout, {30, 20, 20, 20}, false);
  std::vector<float> p1(layout.size(), sentinel), p2(layout.size(), sentinel),
      p3(layout.size(), sentinel);
  mlp.init(p1, 5);
  mlp.init(p2, 5);
  mlp.init(p3, 6);
  BOOST_TEST(p1 == p2, boost::test_tools::per_element());
  BOOST_TEST(p1 != p3);
  for (const Linear& l : mlp.layers()) {
    const float limit = static_cast<float>(std::sqrt(6.0 / static_cast<double>(l.in + l.out)));
    double sum_sq = 0.0;
    for (size_t i = 0; i < l.in * l.out; ++i) {
      BOOST_TEST(std::fabs(p1[l.w + i]) <= limit);
      sum_sq += static_cast<double>(p1[l.w + i]) * p1[l.w + i];
    }
    // uniform(-limit, limit) has variance limit^2 / 3.
    const double var = sum_sq / static_cast<double>(l.in * l.out);
    BOOST_TEST(var == limit * limit / 3.0, boost::test_tools::tolerance(0.15));
    for (size_t j = 0; j < l.out; ++j) BOOST_TEST(p1[l.b + j] == 0.0f);
  }
  // Layers 1 and 2 have the same shape (20 x 20): one seed must still give them different
  // weights.
  const Linear& l1 = mlp.layers()[1];
  const Linear& l2 = mlp.layers()[2];
  const auto at = [&](size_t offset) { return p1.begin() + static_cast<std::ptrdiff_t>(offset); };
  BOOST_TEST(!std::equal(at(l1.w), at(l1.b), at(l2.w)));
}

// ---------------------------------------------------------------------------------------------
// Linear

BOOST_AUTO_TEST_CASE(linear_forward_matches_naive_triple_loop) {
  struct Shape {
    size_t n, in, out;
  };
  std::vector<Shape> shapes{{1, 1, 1}, {1, 7, 1}, {1, 5, 9}, {6, 1, 1}, {9, 13, 1}, {64, 429, 1}};
  SplitMix64 rng(11);
  for (int i = 0; i < 8; ++i) {
    shapes.push_back({1 + rng.next() % 70, 1 + rng.next() % 70, 1 + rng.next() % 70});
  }
  uint64_t seed = 100;
  for (const Shape& s : shapes) {
    BOOST_TEST_CONTEXT("n=" << s.n << " in=" << s.in << " out=" << s.out) {
      ParamLayout layout;
      layout.add(3);  // a layer not at offset 0
      const Linear l = Linear::make(layout, s.in, s.out);
      const std::vector<float> params = random_vec(++seed, layout.size(), -1.0, 1.0);
      const std::vector<float> x = random_vec(++seed, s.n * s.in, -1.0, 1.0);
      std::vector<float> y(s.n * s.out, sentinel);
      l.forward(params.data(), x.data(), s.n, y.data());
      const std::vector<double> want = naive_linear(l, params, x, s.n);
      size_t bad = 0;
      for (size_t k = 0; k < y.size(); ++k) {
        if (std::fabs(y[k] - want[k]) > 1e-5 * (1.0 + static_cast<double>(s.in))) ++bad;
      }
      BOOST_TEST(bad == 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(linear_gradients_match_finite_differences) {
  const size_t n = 4, in = 5, out = 3;
  ParamLayout layout;
  const Linear l = Linear::make(layout, in, out);
  std::vector<float> params = random_vec(1, layout.size(), -1.0, 1.0);
  std::vector<float> x = random_vec(2, n * in, -1.0, 1.0);
  const std::vector<float> r = random_vec(3, n * out, -1.0, 1.0);
  std::vector<float> grads(layout.size(), 0.0f);
  std::vector<float> dx(n * in, sentinel);
  l.backward(params.data(), x.data(), r.data(), n, grads.data(), dx.data());

  std::vector<float> y(n * out);
  auto loss = [&] {
    l.forward(params.data(), x.data(), n, y.data());
    return weighted_sum(y.data(), r);
  };
  check_gradient("linear params", params, grads, 1e-2f, loss);
  check_gradient("linear dx", x, dx, 1e-2f, loss);
}

BOOST_AUTO_TEST_CASE(linear_backward_accumulates_parameter_gradients_and_overwrites_dx) {
  const size_t n = 7, in = 6, out = 4;
  ParamLayout layout;
  const Linear l = Linear::make(layout, in, out);
  const std::vector<float> params = random_vec(4, layout.size(), -1.0, 1.0);
  const std::vector<float> x = random_vec(5, n * in, -1.0, 1.0);
  const std::vector<float> dy = random_vec(6, n * out, -1.0, 1.0);
  std::vector<float> once(layout.size(), 0.0f), twice(layout.size(), 0.0f);
  std::vector<float> dx1(n * in, sentinel), dx2(n * in, sentinel);
  l.backward(params.data(), x.data(), dy.data(), n, once.data(), dx1.data());
  l.backward(params.data(), x.data(), dy.data(), n, twice.data(), dx2.data());
  l.backward(params.data(), x.data(), dy.data(), n, twice.data(), dx2.data());
  for (size_t i = 0; i < once.size(); ++i) {
    BOOST_TEST(twice[i] == 2.0f * once[i], boost::test_tools::tolerance(1e-5f));
  }
  BOOST_TEST(dx1 == dx2, boost::test_tools::per_element());
  // dx == nullptr computes the same parameter gradients.
  std::vector<float> no_dx(layout.size(), 0.0f);
  l.backward(params.data(), x.data(), dy.data(), n, no_dx.data(), nullptr);
  BOOST_TEST(no_dx == once, boost::test_tools::per_element());
}

// ---------------------------------------------------------------------------------------------
// Mlp

BOOST_AUTO_TEST_CASE(mlp_with_linear_head_gradients_match_finite_differences) {
  check_mlp_gradients(true);
}

BOOST_AUTO_TEST_CASE(mlp_ending_in_relu_gradients_match_finite_differences) {
  check_mlp_gradients(false);
}

BOOST_AUTO_TEST_CASE(mlp_forward_is_its_linear_layers_with_relu_between) {
  const size_t n = 6;
  for (bool last_linear : {true, false}) {
    BOOST_TEST_CONTEXT("last_linear=" << last_linear) {
      ParamLayout layout;
      Mlp mlp = Mlp::make(layout, {5, 7, 4}, last_linear);
      const std::vector<float> params = random_vec(12, layout.size(), -1.0, 1.0);
      const std::vector<float> x = random_vec(13, n * mlp.in(), -1.0, 1.0);
      const Linear& l0 = mlp.layers()[0];
      const Linear& l1 = mlp.layers()[1];
      std::vector<float> h(n * l0.out), want(n * l1.out);
      l0.forward(params.data(), x.data(), n, h.data());
      for (float& v : h) v = std::max(v, 0.0f);
      l1.forward(params.data(), h.data(), n, want.data());
      size_t negative = 0;
      for (float& v : want) {
        negative += v < 0.0f;
        if (!last_linear) v = std::max(v, 0.0f);
      }
      BOOST_REQUIRE(negative > 0u);  // so that the last activation makes a difference
      const float* y = mlp.forward(params.data(), x.data(), n);
      BOOST_TEST(std::vector<float>(y, y + want.size()) == want, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(mlp_backward_accumulates_parameter_gradients_and_overwrites_dx) {
  const size_t n = 9;
  ParamLayout layout;
  Mlp mlp = Mlp::make(layout, {8, 16, 8, 1}, true);
  std::vector<float> params(layout.size());
  mlp.init(params, 3);
  const std::vector<float> x = random_vec(7, n * mlp.in(), -1.0, 1.0);
  const std::vector<float> dy = random_vec(8, n * mlp.out(), -1.0, 1.0);
  mlp.forward(params.data(), x.data(), n);
  std::vector<float> once(layout.size(), 0.0f), twice(layout.size(), 0.0f);
  std::vector<float> dx1(n * mlp.in(), sentinel), dx2(n * mlp.in(), sentinel);
  mlp.backward(params.data(), x.data(), dy.data(), n, once.data(), dx1.data());
  mlp.backward(params.data(), x.data(), dy.data(), n, twice.data(), dx2.data());
  mlp.backward(params.data(), x.data(), dy.data(), n, twice.data(), dx2.data());
  for (size_t i = 0; i < once.size(); ++i) {
    BOOST_TEST(twice[i] == 2.0f * once[i], boost::test_tools::tolerance(1e-5f));
  }
  BOOST_TEST(dx1 == dx2, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(mlp_forward_backward_is_bit_identical_across_runs_and_batch_sizes) {
  // Big enough that the BLAS library may split the products between threads.
  const size_t n = 300, small = 5;
  ParamLayout layout;
  Mlp mlp = Mlp::make(layout, {64, 128, 64, 1}, true);
  std::vector<float> params(layout.size());
  mlp.init(params, 9);
  const std::vector<float> x = random_vec(10, n * mlp.in(), -1.0, 1.0);
  const std::vector<float> dy = random_vec(11, n * mlp.out(), -1.0, 1.0);
  auto run = [&](Mlp& m, size_t rows, std::vector<float>& y, std::vector<float>& grads,
                 std::vector<float>& dx) {
    const float* out = m.forward(params.data(), x.data(), rows);
    y.assign(out, out + rows * m.out());
    grads.assign(layout.size(), 0.0f);
    dx.assign(rows * m.in(), 0.0f);
    m.backward(params.data(), x.data(), dy.data(), rows, grads.data(), dx.data());
  };
  std::vector<float> y1, g1, dx1, y2, g2, dx2;
  run(mlp, n, y1, g1, dx1);
  run(mlp, n, y2, g2, dx2);
  BOOST_TEST(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) == 0);
  BOOST_TEST(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
  BOOST_TEST(std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(float)) == 0);
  // A small batch after a large one (workspace reused, not shrunk) gives what a fresh Mlp
  // gives.
  ParamLayout fresh_layout;
  Mlp fresh = Mlp::make(fresh_layout, {64, 128, 64, 1}, true);
  run(mlp, small, y1, g1, dx1);
  run(fresh, small, y2, g2, dx2);
  BOOST_TEST(y1 == y2, boost::test_tools::per_element());
  BOOST_TEST(g1 == g2, boost::test_tools::per_element());
  BOOST_TEST(dx1 == dx2, boost::test_tools::per_element());
}

// ---------------------------------------------------------------------------------------------
// CrossNet

BOOST_AUTO_TEST_CASE(cross_net_gradients_match_finite_differences) {
  const size_t n = 4, d = 5;
  ParamLayout layout;
  CrossNet cross = CrossNet::make(layout, d, 3);
  BOOST_REQUIRE(layout.size() == 3 * (d * d + d));
  std::vector<float> params = random_vec(21, layout.size(), -0.5, 0.5);
  std::vector<float> x0 = random_vec(22, n * d, -1.0, 1.0);
  const std::vector<float> r = random_vec(23, n * d, -1.0, 1.0);
  cross.forward(params.data(), x0.data(), n);
  std::vector<float> grads(layout.size(), 0.0f);
  std::vector<float> dx0(n * d, sentinel);
  cross.backward(params.data(), x0.data(), r.data(), n, grads.data(), dx0.data());

  auto loss = [&] { return weighted_sum(cross.forward(params.data(), x0.data(), n), r); };
  check_gradient("cross params", params, grads, 3e-3f, loss);
  check_gradient("cross dx0", x0, dx0, 3e-3f, loss);

  // Without dx0 the parameter gradients are the same.
  cross.forward(params.data(), x0.data(), n);
  std::vector<float> no_dx(layout.size(), 0.0f);
  cross.backward(params.data(), x0.data(), r.data(), n, no_dx.data(), nullptr);
  BOOST_TEST(no_dx == grads, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(cross_net_forward_matches_its_formula) {
  const size_t n = 3, d = 4;
  ParamLayout layout;
  CrossNet cross = CrossNet::make(layout, d, 2);
  const std::vector<float> params = random_vec(31, layout.size(), -0.5, 0.5);
  const std::vector<float> x0 = random_vec(32, n * d, -1.0, 1.0);
  const float* y = cross.forward(params.data(), x0.data(), n);
  // x_{l+1} = x0 ⊙ (x_l W_l + b_l) + x_l, in double.
  for (size_t s = 0; s < n; ++s) {
    std::vector<double> xl(x0.begin() + static_cast<std::ptrdiff_t>(s * d),
                           x0.begin() + static_cast<std::ptrdiff_t>((s + 1) * d));
    for (const Linear& l : cross.layers()) {
      std::vector<double> next(d);
      for (size_t j = 0; j < d; ++j) {
        double u = params[l.b + j];
        for (size_t k = 0; k < d; ++k) u += xl[k] * params[l.w + k * d + j];
        next[j] = x0[s * d + j] * u + xl[j];
      }
      xl = next;
    }
    for (size_t j = 0; j < d; ++j)
      BOOST_TEST(y[s * d + j] == xl[j], boost::test_tools::tolerance(1e-5));
  }
}

BOOST_AUTO_TEST_CASE(cross_net_is_bit_identical_across_runs) {
  const size_t n = 200, d = 48;
  ParamLayout layout;
  CrossNet cross = CrossNet::make(layout, d, 3);
  std::vector<float> params(layout.size());
  cross.init(params, 4);
  const std::vector<float> x0 = random_vec(41, n * d, -1.0, 1.0);
  const std::vector<float> dy = random_vec(42, n * d, -1.0, 1.0);
  std::vector<float> y[2], g[2], dx[2];
  for (int run = 0; run < 2; ++run) {
    const float* out = cross.forward(params.data(), x0.data(), n);
    y[run].assign(out, out + n * d);
    g[run].assign(layout.size(), 0.0f);
    dx[run].assign(n * d, 0.0f);
    cross.backward(params.data(), x0.data(), dy.data(), n, g[run].data(), dx[run].data());
  }
  BOOST_TEST(std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)) == 0);
  BOOST_TEST(std::memcmp(g[0].data(), g[1].data(), g[0].size() * sizeof(float)) == 0);
  BOOST_TEST(std::memcmp(dx[0].data(), dx[1].data(), dx[0].size() * sizeof(float)) == 0);
}

// ---------------------------------------------------------------------------------------------
// DotInteraction

BOOST_AUTO_TEST_CASE(dot_interaction_outputs_pairs_in_dlrm_order) {
  const DotInteraction dot{4, 3};
  BOOST_TEST(dot.out() == 6u);
  const size_t n = 2;
  const std::vector<float> x = random_vec(51, n * dot.f * dot.d, -1.0, 1.0);
  std::vector<float> y(n * dot.out(), sentinel);
  dot.forward(x.data(), n, y.data());
  const size_t order[6][2] = {{0, 1}, {0, 2}, {1, 2}, {0, 3}, {1, 3}, {2, 3}};
  for (size_t s = 0; s < n; ++s) {
    for (size_t p = 0; p < 6; ++p) {
      double want = 0.0;
      for (size_t k = 0; k < dot.d; ++k) {
        want += static_cast<double>(x[(s * dot.f + order[p][0]) * dot.d + k]) *
                x[(s * dot.f + order[p][1]) * dot.d + k];
      }
      BOOST_TEST(y[s * dot.out() + p] == want, boost::test_tools::tolerance(1e-5));
    }
  }
}

BOOST_AUTO_TEST_CASE(dot_interaction_gradient_matches_finite_differences) {
  // d = 11 exercises both the 8-wide part of the dot product and its tail.
  const DotInteraction dot{4, 11};
  const size_t n = 3;
  std::vector<float> x = random_vec(61, n * dot.f * dot.d, -1.0, 1.0);
  const std::vector<float> r = random_vec(62, n * dot.out(), -1.0, 1.0);
  std::vector<float> dx(x.size(), sentinel);
  dot.backward(x.data(), r.data(), n, dx.data());
  std::vector<float> y(n * dot.out());
  auto loss = [&] {
    dot.forward(x.data(), n, y.data());
    return weighted_sum(y.data(), r);
  };
  check_gradient("dot dx", x, dx, 1e-2f, loss);
}

// ---------------------------------------------------------------------------------------------
// DenseOptimizer

namespace {

DenseOptimizer make_ok(const DenseOptimizerConfig& config, size_t params) {
  auto opt = DenseOptimizer::make(config, params);
  if (!opt.ok()) BOOST_FAIL(opt.status().message());
  return std::move(opt).value();
}

}  // namespace

BOOST_AUTO_TEST_CASE(parse_dense_optimizer_round_trips_names_and_rejects_others) {
  for (auto kind :
       {DenseOptimizerKind::adam, DenseOptimizerKind::adamw, DenseOptimizerKind::sgd_momentum}) {
    auto parsed = parse_dense_optimizer(to_string(kind));
    BOOST_REQUIRE(parsed.ok());
    BOOST_TEST(static_cast<int>(*parsed) == static_cast<int>(kind));
  }
  auto bad = parse_dense_optimizer("rmsprop");
  BOOST_REQUIRE(!bad.ok());
  BOOST_TEST(static_cast<int>(bad.status().code()) ==
             static_cast<int>(Status::Code::invalid_input));
  BOOST_TEST(bad.status().message().find("rmsprop") != std::string::npos);
  BOOST_TEST(bad.status().message().find("adam, adamw, sgd") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(make_rejects_bad_settings_naming_them) {
  struct Bad {
    const char* name;
    void (*set)(DenseOptimizerConfig&);
  };
  const Bad bads[] = {
      {"lr", [](DenseOptimizerConfig& c) { c.lr = 0.0f; }},
      {"lr", [](DenseOptimizerConfig& c) { c.lr = -1.0f; }},
      {"lr", [](DenseOptimizerConfig& c) { c.lr = std::numeric_limits<float>::quiet_NaN(); }},
      {"beta1", [](DenseOptimizerConfig& c) { c.beta1 = 1.0f; }},
      {"beta1", [](DenseOptimizerConfig& c) { c.beta1 = -0.1f; }},
      {"beta2", [](DenseOptimizerConfig& c) { c.beta2 = 1.0f; }},
      {"eps", [](DenseOptimizerConfig& c) { c.eps = 0.0f; }},
      {"weight_decay", [](DenseOptimizerConfig& c) { c.weight_decay = -0.01f; }},
      {"momentum", [](DenseOptimizerConfig& c) { c.momentum = 1.0f; }},
  };
  for (const Bad& b : bads) {
    for (auto kind :
         {DenseOptimizerKind::adam, DenseOptimizerKind::adamw, DenseOptimizerKind::sgd_momentum}) {
      BOOST_TEST_CONTEXT(b.name << " for " << to_string(kind)) {
        DenseOptimizerConfig c;
        c.kind = kind;
        b.set(c);
        auto opt = DenseOptimizer::make(c, 4);
        BOOST_REQUIRE(!opt.ok());
        BOOST_TEST(static_cast<int>(opt.status().code()) ==
                   static_cast<int>(Status::Code::invalid_input));
        BOOST_TEST(opt.status().message().find(b.name) != std::string::npos,
                   opt.status().message());
      }
    }
  }
  DenseOptimizerConfig edge;
  edge.beta1 = 0.0f;
  edge.momentum = 0.0f;
  BOOST_TEST(DenseOptimizer::make(edge, 4).ok());
  BOOST_TEST(make_ok(DenseOptimizerConfig{}, 5).state_floats() == 10u);
  edge.kind = DenseOptimizerKind::sgd_momentum;
  BOOST_TEST(make_ok(edge, 5).state_floats() == 5u);
}

BOOST_AUTO_TEST_CASE(adam_first_step_moves_each_param_by_lr_against_its_gradient) {
  DenseOptimizerConfig c;
  c.lr = 1e-2f;
  DenseOptimizer opt = make_ok(c, 6);
  std::vector<float> w{0.5f, -0.5f, 1.0f, 2.0f, -1.0f, 0.25f};
  const std::vector<float> g{3.0f, -0.2f, 1e-3f, -50.0f, 0.0f, 1e-4f};
  const std::vector<float> w0 = w;
  opt.step(w, g);
  BOOST_TEST(opt.steps() == 1u);
  for (size_t i = 0; i < w.size(); ++i) {
    const float sign = g[i] > 0 ? 1.0f : (g[i] < 0 ? -1.0f : 0.0f);
    BOOST_TEST(std::fabs((w[i] - w0[i]) + c.lr * sign) <= 1e-3f * c.lr,
               "param " << i << " moved " << w[i] - w0[i]);
  }
}

BOOST_AUTO_TEST_CASE(a_step_shared_among_threads_is_bit_identical_to_one_threads) {
  // Elementwise updates: each part's range updated as one thread would, whatever the split
  // (sizes around the cache-line ranges and the 4096 below which one thread does it all).
  for (auto kind :
       {DenseOptimizerKind::adam, DenseOptimizerKind::adamw, DenseOptimizerKind::sgd_momentum}) {
    for (size_t params : {size_t{5}, size_t{4096}, size_t{10007}}) {
      for (size_t parts : {size_t{2}, size_t{3}}) {
        BOOST_TEST_CONTEXT(to_string(kind) << " " << params << " params, " << parts << " parts") {
          DenseOptimizerConfig c;
          c.kind = kind;
          c.weight_decay = 0.01f;
          DenseOptimizer one = make_ok(c, params), shared = make_ok(c, params);
          PartThreads threads(parts);
          std::vector<float> w1(params), w2(params), g(params);
          for (size_t i = 0; i < params; ++i) w1[i] = w2[i] = 0.01f * float(i % 97) - 0.4f;
          for (int s = 0; s < 4; ++s) {
            for (size_t i = 0; i < params; ++i) g[i] = 0.1f * float((i * 7 + s) % 13) - 0.6f;
            one.step(w1, g);
            shared.step(w2, g, &threads);
          }
          BOOST_TEST(shared.steps() == 4u);
          BOOST_TEST(std::memcmp(w1.data(), w2.data(), params * sizeof(float)) == 0);
          BOOST_TEST(std::memcmp(one.state().data(), shared.state().data(),
                                 one.state().size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(sgd_momentum_matches_hand_computed_steps) {
  DenseOptimizerConfig c;
  c.kind = DenseOptimizerKind::sgd_momentum;
  c.lr = 0.1f;
  c.momentum = 0.9f;
  DenseOptimizer opt = make_ok(c, 1);
  std::vector<float> w{1.0f};
  // buf = 0.9 buf + g; w -= 0.1 buf.
  const float grads[3] = {0.5f, -1.0f, 2.0f};
  const float want[3] = {0.95f, 1.005f, 0.8545f};  // buf: 0.5, -0.55, 1.505
  for (int s = 0; s < 3; ++s) {
    opt.step(w, std::span<const float>(&grads[s], 1));
    BOOST_TEST(w[0] == want[s], boost::test_tools::tolerance(1e-6f));
  }

  // With L2: g = 0 + 0.1 w, momentum 0.5.
  c.momentum = 0.5f;
  c.weight_decay = 0.1f;
  DenseOptimizer l2 = make_ok(c, 1);
  std::vector<float> v{2.0f};
  const std::vector<float> zero{0.0f};
  const float want_l2[3] = {1.98f, 1.9502f, 1.915798f};  // buf: 0.2, 0.298, 0.34402
  for (int s = 0; s < 3; ++s) {
    l2.step(v, zero);
    BOOST_TEST(v[0] == want_l2[s], boost::test_tools::tolerance(1e-6f));
  }
}

BOOST_AUTO_TEST_CASE(adamw_decays_decoupled_with_zero_gradient_and_adam_l2_does_not) {
  DenseOptimizerConfig c;
  c.kind = DenseOptimizerKind::adamw;
  c.lr = 0.01f;
  c.weight_decay = 0.1f;
  DenseOptimizer adamw = make_ok(c, 2);
  std::vector<float> w{1.0f, -3.0f};
  const std::vector<float> zero{0.0f, 0.0f};
  for (int s = 0; s < 5; ++s) adamw.step(w, zero);
  const double factor = std::pow(1.0 - 0.01 * 0.1, 5);  // w *= 1 - lr * weight_decay per step
  BOOST_TEST(w[0] == 1.0 * factor, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(w[1] == -3.0 * factor, boost::test_tools::tolerance(1e-6));

  // Adam's L2 goes through the moments: the decay gradient is normalised, each step ~lr.
  c.kind = DenseOptimizerKind::adam;
  DenseOptimizer adam = make_ok(c, 2);
  std::vector<float> v{1.0f, -3.0f};
  for (int s = 0; s < 5; ++s) adam.step(v, zero);
  BOOST_TEST(v[0] == 1.0f - 5 * c.lr, boost::test_tools::tolerance(1e-3f));
  BOOST_TEST(v[1] == -3.0f + 5 * c.lr, boost::test_tools::tolerance(1e-3f));
}

BOOST_AUTO_TEST_CASE(adam_and_sgd_converge_on_a_quadratic) {
  // L = 1/2 sum a_i (w_i - c_i)^2, gradient a_i (w_i - c_i).
  const size_t n = 10;
  const std::vector<float> a = random_vec(71, n, 0.5, 5.0);
  const std::vector<float> target = random_vec(72, n, -2.0, 2.0);
  for (auto kind :
       {DenseOptimizerKind::adam, DenseOptimizerKind::adamw, DenseOptimizerKind::sgd_momentum}) {
    BOOST_TEST_CONTEXT(to_string(kind)) {
      DenseOptimizerConfig c;
      c.kind = kind;
      c.lr = kind == DenseOptimizerKind::sgd_momentum ? 0.02f : 0.01f;
      DenseOptimizer opt = make_ok(c, n);
      std::vector<float> w(n, 0.0f), g(n);
      for (int s = 0; s < 3000; ++s) {
        for (size_t i = 0; i < n; ++i) g[i] = a[i] * (w[i] - target[i]);
        opt.step(w, g);
      }
      for (size_t i = 0; i < n; ++i) BOOST_TEST(std::fabs(w[i] - target[i]) < 1e-3f);
    }
  }
}

BOOST_AUTO_TEST_CASE(restore_round_trips_state_and_rejects_wrong_size) {
  for (auto kind :
       {DenseOptimizerKind::adam, DenseOptimizerKind::adamw, DenseOptimizerKind::sgd_momentum}) {
    BOOST_TEST_CONTEXT(to_string(kind)) {
      DenseOptimizerConfig c;
      c.kind = kind;
      c.weight_decay = 0.01f;
      const size_t n = 8;
      DenseOptimizer a = make_ok(c, n);
      std::vector<float> w = random_vec(81, n, -1.0, 1.0);
      for (int s = 0; s < 3; ++s) a.step(w, random_vec(82 + s, n, -1.0, 1.0));
      const std::vector<float> saved(a.state().begin(), a.state().end());

      DenseOptimizer b = make_ok(c, n);
      BOOST_REQUIRE(b.restore(saved, a.steps()).ok());
      BOOST_TEST(b.steps() == 3u);
      std::vector<float> wa = w, wb = w;
      const std::vector<float> g = random_vec(90, n, -1.0, 1.0);
      a.step(wa, g);
      b.step(wb, g);
      BOOST_TEST(std::memcmp(wa.data(), wb.data(), n * sizeof(float)) == 0);
      BOOST_TEST(std::equal(a.state().begin(), a.state().end(), b.state().begin()));

      const std::vector<float> before(b.state().begin(), b.state().end());
      const Status st = b.restore(std::vector<float>(saved.size() + 1), 7);
      BOOST_TEST(static_cast<int>(st.code()) == static_cast<int>(Status::Code::invalid_input));
      BOOST_TEST(st.message().find("expected") != std::string::npos, st.message());
      BOOST_TEST(b.steps() == 4u);  // unchanged
      BOOST_TEST(std::equal(before.begin(), before.end(), b.state().begin()));
    }
  }
}
