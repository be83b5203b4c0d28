// The single-process trainer: one model table, one optimizer, batches in, weights updated.
//
// Each step has the shape a parameter-server step will have (so the two give the same
// weights): deduplicate the batch's keys, gather ("pull") their rows, run the model's
// forward/backward on the gathered copy, then apply the optimizer to each unique row with its
// summed gradient ("push"). Rows are created lazily and deterministically (ps/row_init.h).
// A deep model's dense parameters are updated after the rows by the dense optimizer, with the
// gradient averaged over the batch's samples.
//
// Thread-safety: none; one thread drives a trainer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/batch.h"
#include "models/dense_optimizer.h"
#include "models/model.h"
#include "ps/optimizer.h"
#include "ps/row_init.h"
#include "storage/row_table.h"
#include "worker/gradient_alert.h"

namespace colony {

struct TrainerConfig {
  ModelSpec model;
  OptimizerConfig optimizer;
  nn::DenseOptimizerConfig dense_optimizer;  // deep models' dense parameters
  uint64_t seed = 1;
  float factor_init_std = 0.01f;  // FM factors start uniform with this standard deviation
  // --on-nan: a step whose gradients are not all finite fails (false) or is skipped (true;
  // nothing of it applied). See LocalTrainer::train_batch and WorkerConfig::skip_not_finite.
  bool skip_not_finite = false;
  // Exploding and vanishing gradient alerts (worker/gradient_alert.h): a step's gradient norm
  // per sample beyond this many times, or below 1/this of, the median of the last steps.
  // 0: none. LocalTrainer watches with it; the cluster engine's replicas with
  // WorkerConfig::gradient_alert_ratio.
  double gradient_alert_ratio = 100.0;
};

class LocalTrainer {
 public:
  // Fails with invalid_input for an out-of-range optimizer setting or model shape.
  static Expected<std::unique_ptr<LocalTrainer>> make(const TrainerConfig& config);

  // One optimizer step on `batch`. Returns the batch's summed log loss under the weights
  // before the step (progressive validation: every sample is scored before it is learned).
  // Fails with invalid_input, changing nothing, when the batch does not fit the model
  // (Model::check). A gradient that is not finite (a diverged model) changes nothing either: it
  // fails the step with internal naming the key, or with config().skip_not_finite skips it
  // (counted in steps_skipped(), described by last_skip(); the loss is still returned).
  Expected<double> train_batch(const Batch& batch);
  uint64_t steps_skipped() const { return steps_skipped_; }
  // "a gradient of nan for key 77" for the last skipped step; empty before any.
  const std::string& last_skip() const { return last_skip_; }
  // Exploding or vanishing gradient alerts raised by trained steps (once per excursion), and
  // the last ("step 5: gradient norm ..."; empty kind before any).
  uint64_t gradient_alerts() const { return gradient_alerts_; }
  // Row updates refused because, from a finite gradient, they would have made a row or its
  // optimizer state NaN or infinite (the row keeps its last finite value, as a shard does:
  // ShardStats::updates_not_finite), and the last of them ("step 3: key 77").
  uint64_t updates_not_finite() const { return updates_not_finite_; }
  const std::string& last_update_not_finite() const { return last_update_not_finite_; }
  const GradientAlert& last_gradient_alert() const { return last_gradient_alert_; }

  // Each sample's logit under the current weights (unseen keys use their initial rows and
  // are not inserted). `logits` is resized to batch.rows().
  // Fails with invalid_input when the batch does not fit the model (Model::check).
  Status predict(const Batch& batch, std::vector<float>& logits);

  // The current parameters of `key` (its initial row when unseen); size model.width().
  void row_value(uint64_t key, std::span<float> out) const;

  size_t rows() const { return table_.size(); }
  size_t table_bytes() const { return table_.memory_bytes(); }
  size_t row_floats() const { return table_.row_floats(); }
  const TrainerConfig& config() const { return config_; }
  // The dense parameters (empty for LR and FM).
  std::span<const float> dense() const { return dense_; }

 private:
  LocalTrainer(const TrainerConfig& config, std::unique_ptr<Model> model,
               std::unique_ptr<Optimizer> optimizer, nn::DenseOptimizer dense_optimizer);

  TrainerConfig config_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  nn::DenseOptimizer dense_optimizer_;
  std::vector<float> dense_, dense_grads_;
  RowInit init_;
  size_t width_;
  size_t state_;
  RowTable table_;
  BatchIndex index_;
  std::vector<float*> row_ptr_;  // per slot of the current batch
  std::vector<float> rows_;      // gathered parameters, slots x width
  std::vector<float> grads_;     // summed gradients, slots x width
  uint64_t steps_skipped_ = 0;
  uint64_t steps_ = 0;  // batches train_batch took (trained or skipped)
  GradientWatch gradient_watch_;
  uint64_t gradient_alerts_ = 0;
  GradientAlert last_gradient_alert_;
  uint64_t updates_not_finite_ = 0;
  std::string last_update_not_finite_;
  // What each part of the model's threads found and did in the step's checks and updates.
  struct Part {
    static constexpr size_t none = SIZE_MAX;
    size_t bad = none, bad_dense = none;  // the first gradient not finite in its ranges
    double squares = 0.0;                 // the squares of its gradients, summed
    uint64_t not_finite = 0;              // row updates refused
    size_t last_not_finite = 0;           // the last refused row's slot
    std::vector<float> saved_row;         // Optimizer::apply_finite's scratch
  };
  std::vector<Part> parts_;
  std::string last_skip_;
};

}  // namespace colony
