// Per-row optimizers, applied where the row lives (server-side on a PS shard, or in the
// single-process trainer).
//
// A row is `width` parameters plus `state_floats(width)` floats of optimizer state, stored
// together so that values and state are always read, written, checkpointed and moved as one.
// Gradients are summed over a batch (not averaged): a key seen once in a batch of 512 gets
// its whole gradient. Every optimizer here is sparse and lazy: a row that receives no
// gradient is not touched (no decay, no step count).
//
// Thread-safety: an Optimizer is immutable after construction; apply() may be called
// concurrently on different rows.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/value_format.h"

namespace colony {

enum class OptimizerKind { sgd, adagrad, ftrl, adam };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adagrad;
  float lr = 0.05f;            // step size (FTRL: alpha)
  float l1 = 0.0f;             // FTRL's L1 strength (others ignore it)
  float l2 = 0.0f;             // L2 strength: FTRL's proximal L2; others add l2*w to the gradient
  float adagrad_init = 1e-6f;  // Adagrad's initial accumulator (avoids dividing by zero)
  float ftrl_beta = 1.0f;      // FTRL's beta
  float adam_beta1 = 0.9f;
  float adam_beta2 = 0.999f;
  float adam_eps = 1e-8f;
  bool operator==(const OptimizerConfig&) const = default;
};

// Parses "sgd", "adagrad", "ftrl" or "adam".
Expected<OptimizerKind> parse_optimizer(const std::string& name);
const char* to_string(OptimizerKind kind);
// Whether `kind`'s state may be kept in `state` format (a job's --state-format). Fails with
// invalid_input naming the flag for Adam in int8: a second moment rounded to zero beside a first
// moment that is not divides the step by epsilon (measured: a run that diverged).
Status check_state_format(OptimizerKind kind, ValueFormat state);
// The defaults of each optimizer for Colony's sparse CTR models (step size, and for FTRL its
// L1/L2 strengths), chosen by measurement on `colony gen` data (docs/benchmarks.md).
OptimizerConfig default_optimizer_config(OptimizerKind kind);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Floats of state per row of `width` parameters.
  virtual size_t state_floats(size_t width) const = 0;
  // Sets up `state` for a freshly initialised row whose parameters are `value`.
  virtual void init_state(std::span<const float> value, std::span<float> state) const = 0;
  // One update of `value` (and `state`) by the summed gradient `grad` (all of size width).
  virtual void apply(std::span<float> value, std::span<float> state,
                     std::span<const float> grad) const = 0;
  // apply, unless it would leave a parameter or the state NaN or infinite (a finite gradient
  // still overflows a row at a step size far too large): then `value` and `state` are left as
  // they were and it returns false. `scratch` keeps their copy meanwhile (reused across calls).
  bool apply_finite(std::span<float> value, std::span<float> state, std::span<const float> grad,
                    std::vector<float>& scratch) const;
};

// Fails with invalid_input when a setting is out of range (lr <= 0, l1 or l2 < 0, betas
// outside [0, 1), eps <= 0), naming it.
Expected<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& config);

}  // namespace colony
