#include "ps/optimizer.h"

#include <cmath>
#include <cstring>

#include "common/finite.h"

namespace colony {

namespace {

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c) : lr_(c.lr), l2_(c.l2) {}
  size_t state_floats(size_t) const override { return 0; }
  void init_state(std::span<const float>, std::span<float>) const override {}
  void apply(std::span<float> w, std::span<float>, std::span<const float> g) const override {
    for (size_t i = 0; i < w.size(); ++i) w[i] -= lr_ * (g[i] + l2_ * w[i]);
  }

 private:
  float lr_, l2_;
};

// Duchi et al.: per-coordinate step lr / sqrt(sum of squared gradients).
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(const OptimizerConfig& c) : lr_(c.lr), l2_(c.l2), init_(c.adagrad_init) {}
  size_t state_floats(size_t width) const override { return width; }
  void init_state(std::span<const float>, std::span<float> s) const override {
    for (float& x : s) x = init_;
  }
  void apply(std::span<float> w, std::span<float> s, std::span<const float> g) const override {
    for (size_t i = 0; i < w.size(); ++i) {
      const float gi = g[i] + l2_ * w[i];
      s[i] += gi * gi;
      w[i] -= lr_ * gi / std::sqrt(s[i]);
    }
  }

 private:
  float lr_, l2_, init_;
};

// FTRL-Proximal (McMahan et al., "Ad Click Prediction: a View from the Trenches", alg. 1),
// with its proximal centre at the row's initial value w0 instead of at zero. For linear
// weights (w0 = 0) this is the published algorithm. For factorization-machine factors, which
// start random, it means a factor leaves its initial value only once the id has gathered
// enough gradient to pass the L1 threshold: rare ids cannot overfit their factors.
// State per coordinate: z, n and w0.
class Ftrl final : public Optimizer {
 public:
  explicit Ftrl(const OptimizerConfig& c)
      : alpha_(c.lr), beta_(c.ftrl_beta), l1_(c.l1), l2_(c.l2) {}
  size_t state_floats(size_t width) const override { return 3 * width; }
  void init_state(std::span<const float> w, std::span<float> s) const override {
    const size_t n = w.size();
    for (size_t i = 0; i < n; ++i) {
      s[i] = 0.0f;
      s[n + i] = 0.0f;
      s[2 * n + i] = w[i];
    }
  }
  void apply(std::span<float> w, std::span<float> s, std::span<const float> g) const override {
    const size_t n = w.size();
    float* z = s.data();
    float* acc = s.data() + n;
    const float* w0 = s.data() + 2 * n;
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i];
      const float n_new = acc[i] + gi * gi;
      const float sigma = (std::sqrt(n_new) - std::sqrt(acc[i])) / alpha_;
      z[i] += gi - sigma * (w[i] - w0[i]);
      acc[i] = n_new;
      if (std::fabs(z[i]) <= l1_) {
        w[i] = w0[i];
      } else {
        w[i] =
            w0[i] - (z[i] - std::copysign(l1_, z[i])) / ((beta_ + std::sqrt(n_new)) / alpha_ + l2_);
      }
    }
  }

 private:
  float alpha_, beta_, l1_, l2_;
};

// Adam (Kingma & Ba) with a step count per row, so bias correction counts the row's own
// updates (lazy/sparse Adam). State: m[width], v[width], then the step count.
class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerConfig& c)
      : lr_(c.lr), l2_(c.l2), b1_(c.adam_beta1), b2_(c.adam_beta2), eps_(c.adam_eps) {}
  size_t state_floats(size_t width) const override { return 2 * width + 1; }
  void init_state(std::span<const float>, std::span<float> s) const override {
    for (float& x : s) x = 0.0f;
  }
  void apply(std::span<float> w, std::span<float> s, std::span<const float> g) const override {
    const size_t n = w.size();
    float* m = s.data();
    float* v = s.data() + n;
    const float t = s[2 * n] + 1.0f;  // exact up to 2^24 updates of one row
    s[2 * n] = t;
    const float step = lr_ * std::sqrt(1.0f - std::pow(b2_, t)) / (1.0f - std::pow(b1_, t));
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] + l2_ * w[i];
      m[i] = b1_ * m[i] + (1.0f - b1_) * gi;
      v[i] = b2_ * v[i] + (1.0f - b2_) * gi * gi;
      w[i] -= step * m[i] / (std::sqrt(v[i]) + eps_);
    }
  }

 private:
  float lr_, l2_, b1_, b2_, eps_;
};

}  // namespace

Expected<OptimizerKind> parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "adagrad") return OptimizerKind::adagrad;
  if (name == "ftrl") return OptimizerKind::ftrl;
  if (name == "adam") return OptimizerKind::adam;
  return Status::invalid_input("unknown optimizer \"" + name +
                               "\", expected one of sgd, adagrad, ftrl, adam");
}

Status check_state_format(OptimizerKind kind, ValueFormat state) {
  if (kind == OptimizerKind::adam && state == ValueFormat::int8)
    return Status::invalid_input(
        "--state-format int8: Adam's second moments round to zero in 8 bits beside first moments "
        "that do not, and its steps diverge; use --state-format fp16 or bf16");
  return {};
}

const char* to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd:
      return "sgd";
    case OptimizerKind::adagrad:
      return "adagrad";
    case OptimizerKind::ftrl:
      return "ftrl";
    case OptimizerKind::adam:
      return "adam";
  }
  return "?";
}

OptimizerConfig default_optimizer_config(OptimizerKind kind) {
  OptimizerConfig c;
  c.kind = kind;
  switch (kind) {
    case OptimizerKind::sgd:
      c.lr = 0.02f;
      break;
    case OptimizerKind::adagrad:
      c.lr = 0.02f;
      break;
    case OptimizerKind::ftrl:
      c.lr = 0.05f;
      c.l1 = 20.0f;
      c.l2 = 20.0f;
      break;
    case OptimizerKind::adam:
      c.lr = 0.001f;
      break;
  }
  return c;
}

bool Optimizer::apply_finite(std::span<float> value, std::span<float> state,
                             std::span<const float> grad, std::vector<float>& scratch) const {
  scratch.assign(value.begin(), value.end());
  scratch.insert(scratch.end(), state.begin(), state.end());
  apply(value, state, grad);
  if (first_not_finite(value) == value.size() && first_not_finite(state) == state.size())
    return true;
  std::copy(scratch.begin(), scratch.begin() + std::ptrdiff_t(value.size()), value.begin());
  std::copy(scratch.begin() + std::ptrdiff_t(value.size()), scratch.end(), state.begin());
  return false;
}

Expected<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& c) {
  auto bad = [](const char* what, float v, const char* expected) {
    return Status::invalid_input(
        fmt::format("optimizer setting {} = {} is out of range, expected {}", what, v, expected));
  };
  if (!(c.lr > 0.0f) || !std::isfinite(c.lr)) return bad("lr", c.lr, "a finite number > 0");
  if (!(c.l1 >= 0.0f) || !std::isfinite(c.l1)) return bad("l1", c.l1, "a finite number >= 0");
  if (!(c.l2 >= 0.0f) || !std::isfinite(c.l2)) return bad("l2", c.l2, "a finite number >= 0");
  switch (c.kind) {
    case OptimizerKind::sgd:
      return std::unique_ptr<Optimizer>(new Sgd(c));
    case OptimizerKind::adagrad:
      if (!(c.adagrad_init > 0.0f) || !std::isfinite(c.adagrad_init))
        return bad("adagrad_init", c.adagrad_init, "> 0");
      return std::unique_ptr<Optimizer>(new Adagrad(c));
    case OptimizerKind::ftrl:
      if (!(c.ftrl_beta >= 0.0f) || !std::isfinite(c.ftrl_beta))
        return bad("ftrl_beta", c.ftrl_beta, ">= 0");
      return std::unique_ptr<Optimizer>(new Ftrl(c));
    case OptimizerKind::adam:
      if (!(c.adam_beta1 >= 0.0f && c.adam_beta1 < 1.0f))
        return bad("adam_beta1", c.adam_beta1, "in [0, 1)");
      if (!(c.adam_beta2 >= 0.0f && c.adam_beta2 < 1.0f))
        return bad("adam_beta2", c.adam_beta2, "in [0, 1)");
      if (!(c.adam_eps > 0.0f) || !std::isfinite(c.adam_eps))
        return bad("adam_eps", c.adam_eps, "> 0");
      return std::unique_ptr<Optimizer>(new Adam(c));
  }
  return Status::invalid_input("unknown optimizer kind");
}

}  // namespace colony
