#include "models/dense_optimizer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace colony::nn {

namespace {

// True when 0 <= v < 1 (false for NaN).
bool in_unit_interval(float v) {
  return v >= 0.0f && v < 1.0f;
}

// The elementwise updates, compiled for AVX-512 and for the build's baseline, the one to run
// chosen when the program loads (GCC's target_clones). Both do the same IEEE operations on each
// element (this library is built with -ffp-contract=off, so no multiply-add is fused, and sqrt
// and division are correctly rounded at any width), so every machine gets bit-identical
// results; -fno-math-errno lets sqrt vectorise at all.
struct AdamStep {
  float b1, b2, eps, step_size, inv_sqrt_bc2, l2, decay;
};

__attribute__((target_clones("avx512f", "default"))) void adam_range(
    float* __restrict w, const float* __restrict g, float* __restrict m, float* __restrict v,
    const AdamStep& a, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    const float gi = g[i] + a.l2 * w[i];
    m[i] = a.b1 * m[i] + (1.0f - a.b1) * gi;
    v[i] = a.b2 * v[i] + (1.0f - a.b2) * gi * gi;
    w[i] = a.decay * w[i] - a.step_size * m[i] / (std::sqrt(v[i]) * a.inv_sqrt_bc2 + a.eps);
  }
}

__attribute__((target_clones("avx512f", "default"))) void sgd_range(float* __restrict w,
                                                                    const float* __restrict g,
                                                                    float* __restrict buf, float lr,
                                                                    float wd, float mu,
                                                                    size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    buf[i] = mu * buf[i] + (g[i] + wd * w[i]);
    w[i] -= lr * buf[i];
  }
}

}  // namespace

Expected<DenseOptimizerKind> parse_dense_optimizer(const std::string& name) {
  if (name == "adam") return DenseOptimizerKind::adam;
  if (name == "adamw") return DenseOptimizerKind::adamw;
  if (name == "sgd") return DenseOptimizerKind::sgd_momentum;
  return Status::invalid_input("unknown dense optimizer \"" + name +
                               "\", expected one of adam, adamw, sgd");
}

const char* to_string(DenseOptimizerKind kind) {
  switch (kind) {
    case DenseOptimizerKind::adam:
      return "adam";
    case DenseOptimizerKind::adamw:
      return "adamw";
    case DenseOptimizerKind::sgd_momentum:
      return "sgd";
  }
  return "?";
}

DenseOptimizer::DenseOptimizer(const DenseOptimizerConfig& config, size_t params)
    : config_(config),
      params_(params),
      state_(config.kind == DenseOptimizerKind::sgd_momentum ? params : 2 * params, 0.0f) {}

Expected<DenseOptimizer> DenseOptimizer::make(const DenseOptimizerConfig& c, size_t params) {
  const char* kind = to_string(c.kind);
  if (!(c.lr > 0.0f))
    return Status::invalid_input(fmt::format("{}: lr {} must be > 0", kind, c.lr));
  if (!in_unit_interval(c.beta1)) {
    return Status::invalid_input(fmt::format("{}: beta1 {} must be in [0, 1)", kind, c.beta1));
  }
  if (!in_unit_interval(c.beta2)) {
    return Status::invalid_input(fmt::format("{}: beta2 {} must be in [0, 1)", kind, c.beta2));
  }
  if (!(c.eps > 0.0f)) {
    return Status::invalid_input(fmt::format("{}: eps {} must be > 0", kind, c.eps));
  }
  if (!(c.weight_decay >= 0.0f)) {
    return Status::invalid_input(
        fmt::format("{}: weight_decay {} must be >= 0", kind, c.weight_decay));
  }
  if (!in_unit_interval(c.momentum)) {
    return Status::invalid_input(
        fmt::format("{}: momentum {} must be in [0, 1)", kind, c.momentum));
  }
  return DenseOptimizer(c, params);
}

void DenseOptimizer::step(std::span<float> params, std::span<const float> grads,
                          PartThreads* threads) {
  COLONY_ASSERT(params.size() == params_ && grads.size() == params_, "params={} grads={} want={}",
                params.size(), grads.size(), params_);
  ++steps_;
  float* w = params.data();
  const float* g = grads.data();
  const float lr = config_.lr, wd = config_.weight_decay;
  AdamStep a{};
  if (config_.kind != DenseOptimizerKind::sgd_momentum) {
    // Bias corrections in double: 1 - beta^t loses most of its digits in float for small t.
    const double t = static_cast<double>(steps_);
    a = {config_.beta1,
         config_.beta2,
         config_.eps,
         static_cast<float>(lr / (1.0 - std::pow(double{config_.beta1}, t))),
         static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{config_.beta2}, t))),
         config_.kind == DenseOptimizerKind::adam ? wd : 0.0f,
         config_.kind == DenseOptimizerKind::adamw ? 1.0f - lr * wd : 1.0f};
  }
  const auto update = [&](size_t begin, size_t end) {
    if (config_.kind == DenseOptimizerKind::sgd_momentum)
      sgd_range(w, g, state_.data(), lr, wd, config_.momentum, begin, end);
    else
      adam_range(w, g, state_.data(), state_.data() + params_, a, begin, end);
  };
  const size_t parts = params_ < 4096 ? 1 : parts_of(threads);
  if (parts == 1) return update(0, params_);
  // Ranges of whole cache lines (16 floats).
  const size_t lines = (params_ + 15) / 16;
  threads->run([&](size_t part) {
    const auto [first, last] = part_range(lines, part, parts);
    update(std::min(params_, first * 16), std::min(params_, last * 16));
  });
}

Status DenseOptimizer::restore(std::span<const float> state, uint64_t steps) {
  if (state.size() != state_.size()) {
    return Status::invalid_input(
        fmt::format("{} optimizer state has {} floats, expected {} for {} parameters",
                    to_string(config_.kind), state.size(), state_.size(), params_));
  }
  state_.assign(state.begin(), state.end());
  steps_ = steps;
  return Status();
}

}  // namespace colony::nn
