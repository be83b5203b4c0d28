#include "models/dense_optimizer.h"

#include <cmath>

#include <fmt/format.h>

namespace colony::nn {

namespace {

// True when 0 <= v < 1 (false for NaN).
bool in_unit_interval(float v) {
  return v >= 0.0f && v < 1.0f;
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

void DenseOptimizer::step(std::span<float> params, std::span<const float> grads) {
  COLONY_ASSERT(params.size() == params_ && grads.size() == params_, "params={} grads={} want={}",
                params.size(), grads.size(), params_);
  ++steps_;
  const size_t n = params_;
  float* w = params.data();
  const float* g = grads.data();
  const float lr = config_.lr;
  const float wd = config_.weight_decay;
  if (config_.kind == DenseOptimizerKind::sgd_momentum) {
    const float mu = config_.momentum;
    float* buf = state_.data();
    for (size_t i = 0; i < n; ++i) {
      buf[i] = mu * buf[i] + (g[i] + wd * w[i]);
      w[i] -= lr * buf[i];
    }
    return;
  }
  const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  // Bias corrections in double: 1 - beta^t loses most of its digits in float for small t.
  const double t = static_cast<double>(steps_);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(double{b1}, t)));
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{b2}, t)));
  const float l2 = config_.kind == DenseOptimizerKind::adam ? wd : 0.0f;
  const float decay = config_.kind == DenseOptimizerKind::adamw ? 1.0f - lr * wd : 1.0f;
  float* m = state_.data();
  float* v = state_.data() + n;
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] + l2 * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    w[i] = decay * w[i] - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
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
