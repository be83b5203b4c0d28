#include "worker/trainer.h"

#include <algorithm>
#include <cstring>

namespace colony {

Expected<std::unique_ptr<LocalTrainer>> LocalTrainer::make(const TrainerConfig& config) {
  if (config.model.kind == ModelKind::fm && (config.model.dim < 1 || config.model.dim > max_fm_dim))
    return Status::invalid_input(
        fmt::format("--dim {} is out of range, expected 1..{}", config.model.dim, max_fm_dim));
  auto optimizer = make_optimizer(config.optimizer);
  if (!optimizer) return optimizer.status();
  return std::unique_ptr<LocalTrainer>(new LocalTrainer(config, std::move(optimizer.value())));
}

LocalTrainer::LocalTrainer(const TrainerConfig& config, std::unique_ptr<Optimizer> optimizer)
    : config_(config),
      optimizer_(std::move(optimizer)),
      init_{config.seed, 1, config.factor_init_std},
      width_(config.model.width()),
      state_(optimizer_->state_floats(width_)),
      table_(width_ + state_) {}

double LocalTrainer::train_batch(const Batch& batch) {
  index_.build(batch);
  const auto keys = index_.unique_keys();
  const size_t n = keys.size();
  row_ptr_.resize(n);
  rows_.resize(n * width_);
  grads_.assign(n * width_, 0.0f);
  // Pull: find or lazily create each unique row and gather a copy of its parameters.
  for (size_t s = 0; s < n; ++s) {
    auto [row, inserted] = table_.find_or_insert(keys[s]);
    if (inserted) {
      init_row(keys[s], init_, {row, width_});
      optimizer_->init_state({row, width_}, {row + width_, state_});
    }
    row_ptr_[s] = row;
    std::memcpy(&rows_[s * width_], row, width_ * sizeof(float));
  }
  const double loss = forward_backward(config_.model, batch, index_.slots(), rows_, grads_, {});
  // Push: apply the optimizer to each row with its summed gradient.
  for (size_t s = 0; s < n; ++s) {
    float* row = row_ptr_[s];
    optimizer_->apply({row, width_}, {row + width_, state_}, {&grads_[s * width_], width_});
  }
  return loss;
}

void LocalTrainer::predict(const Batch& batch, std::vector<float>& logits) {
  index_.build(batch);
  const auto keys = index_.unique_keys();
  rows_.resize(keys.size() * width_);
  for (size_t s = 0; s < keys.size(); ++s) row_value(keys[s], {&rows_[s * width_], width_});
  logits.resize(batch.rows());
  forward(config_.model, batch, index_.slots(), rows_, logits);
}

void LocalTrainer::row_value(uint64_t key, std::span<float> out) const {
  COLONY_ASSERT(out.size() == width_, "out={} width={}", out.size(), width_);
  if (const float* row = table_.find(key)) {
    std::copy(row, row + width_, out.begin());
  } else {
    init_row(key, init_, out);
  }
}

}  // namespace colony
