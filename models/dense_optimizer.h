// Optimizers for a model's dense parameters: the flat vector of models/layers.h, replicated
// on every worker and updated identically everywhere after the gradients are all-reduced.
//
// Unlike the sparse, lazy optimizers of ps/optimizer.h, every parameter is updated on every
// step (a zero gradient still moves momentum and decays weights), and Adam's bias correction
// uses one step counter for the whole vector.
//
// Gradients are taken as given: the caller decides whether they are summed or averaged over
// the batch (and over workers). Updates are elementwise loops in a fixed order, so the same
// state, parameters and gradients give bit-identical results on every machine running the
// same binary.
//
// Thread-safety: a DenseOptimizer owns its state; step() and restore() must not run
// concurrently with anything else on the same instance (step() may split its own work among
// threads it is given).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"

namespace colony::nn {

enum class DenseOptimizerKind { adam, adamw, sgd_momentum };

struct DenseOptimizerConfig {
  DenseOptimizerKind kind = DenseOptimizerKind::adam;
  float lr = 1e-3f;
  float beta1 = 0.9f;  // Adam, AdamW
  float beta2 = 0.999f;
  float eps = 1e-8f;
  // AdamW: decoupled decay, w -= lr * weight_decay * w before the Adam update (Loshchilov &
  // Hutter). Adam and SGD: L2, weight_decay * w added to the gradient.
  float weight_decay = 0.0f;
  float momentum = 0.9f;  // SGD with momentum (heavy ball, as PyTorch's SGD with dampening 0)
  bool operator==(const DenseOptimizerConfig&) const = default;
};

// Parses "adam", "adamw" or "sgd" (SGD with momentum). Anything else: invalid_input naming
// the accepted values.
Expected<DenseOptimizerKind> parse_dense_optimizer(const std::string& name);
// The name parse_dense_optimizer() accepts for `kind`.
const char* to_string(DenseOptimizerKind kind);

class DenseOptimizer {
 public:
  // An optimizer for `params` parameters, its state zeroed and its step count 0.
  // Fails with invalid_input, naming the setting, when lr <= 0, beta1 or beta2 outside
  // [0, 1), eps <= 0, weight_decay < 0 or momentum outside [0, 1) (NaN is out of range).
  static Expected<DenseOptimizer> make(const DenseOptimizerConfig& config, size_t params);

  const DenseOptimizerConfig& config() const { return config_; }
  size_t params() const { return params_; }
  // Floats of state: 2 * params() for Adam and AdamW (first and second moments, in that
  // order), params() for SGD (the momentum buffer).
  size_t state_floats() const { return state_.size(); }

  // One update of `params` by `grads` (both of size params(), asserted).
  // Adam and AdamW: bias-corrected with this optimizer's step count (Kingma & Ba, algorithm
  // 1: w -= lr * m_hat / (sqrt(v_hat) + eps)). SGD: buf = momentum * buf + g; w -= lr * buf.
  // With `threads`, each of its parts updates a range of the parameters (elementwise, so the
  // result is bit-identical to one thread's).
  void step(std::span<float> params, std::span<const float> grads, PartThreads* threads = nullptr);

  // For checkpoints: the state (state_floats() floats) and the number of steps taken.
  std::span<const float> state() const { return state_; }
  uint64_t steps() const { return steps_; }
  // Replaces the state and step count with those saved from an optimizer of the same kind
  // and size. Fails with invalid_input, changing nothing, when state.size() !=
  // state_floats().
  Status restore(std::span<const float> state, uint64_t steps);

 private:
  DenseOptimizer(const DenseOptimizerConfig& config, size_t params);
  DenseOptimizerConfig config_;
  size_t params_ = 0;
  std::vector<float> state_;
  uint64_t steps_ = 0;
};

}  // namespace colony::nn
