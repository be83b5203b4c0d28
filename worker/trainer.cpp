#include "worker/trainer.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "common/finite.h"

namespace colony {

Expected<std::unique_ptr<LocalTrainer>> LocalTrainer::make(const TrainerConfig& config) {
  auto model = Model::make(config.model);
  if (!model) return model.status();
  auto optimizer = make_optimizer(config.optimizer);
  if (!optimizer) return optimizer.status();
  auto dense = nn::DenseOptimizer::make(config.dense_optimizer, (*model)->dense_params());
  if (!dense) return dense.status();
  return std::unique_ptr<LocalTrainer>(new LocalTrainer(
      config, std::move(model.value()), std::move(optimizer.value()), std::move(dense.value())));
}

LocalTrainer::LocalTrainer(const TrainerConfig& config, std::unique_ptr<Model> model,
                           std::unique_ptr<Optimizer> optimizer, nn::DenseOptimizer dense_optimizer)
    : config_(config),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      dense_optimizer_(std::move(dense_optimizer)),
      dense_(model_->dense_params()),
      dense_grads_(model_->dense_params()),
      init_{config.seed, config.model.linear(), config.factor_init_std},
      width_(config.model.width()),
      state_(optimizer_->state_floats(width_)),
      table_(width_ + state_),
      gradient_watch_(config.gradient_alert_ratio) {
  model_->init_dense(dense_, config.seed);
}

Expected<double> LocalTrainer::train_batch(const Batch& batch) {
  if (Status s = model_->check(batch); !s.ok()) return s;
  index_.build(batch, config_.model.dense_rows());
  const auto keys = index_.unique_keys();
  const size_t n = keys.size();
  // The pull, the checks and the row updates below run on the model's threads when it has them,
  // each part on a range of the rows (and of the dense gradients), combined in part order: the
  // same results as on one thread, but for the last bits of the gradient norm.
  PartThreads* threads = model_->part_threads();
  const size_t parts = parts_of(threads);
  parts_.resize(parts);
  const auto for_parts = [threads](const std::function<void(size_t)>& f) { run_parts(threads, f); };
  const auto range = [parts](size_t count, size_t p) { return part_range(count, p, parts); };
  row_ptr_.resize(n);
  rows_.resize(n * width_);
  grads_.resize(n * width_);
  // Pull: each part looks up its range of the unique keys (reading the table only), gathers a
  // copy of the rows it finds and zeroes their gradients; then this thread creates the rows not
  // there yet (lazily, in slot order: the table grows) and gathers them.
  for_parts([&](size_t p) {
    const auto [r0, r1] = range(n, p);
    for (size_t s = r0; s < r1; ++s) {
      float* row = table_.find(keys[s]);
      row_ptr_[s] = row;
      if (row != nullptr) std::memcpy(&rows_[s * width_], row, width_ * sizeof(float));
    }
    std::fill(grads_.begin() + std::ptrdiff_t(r0 * width_),
              grads_.begin() + std::ptrdiff_t(r1 * width_), 0.0f);
  });
  for (size_t s = 0; s < n; ++s) {
    if (row_ptr_[s] != nullptr) continue;
    auto [row, inserted] = table_.find_or_insert(keys[s]);
    COLONY_ASSERT(inserted, "key {} twice in one batch's unique keys", keys[s]);
    init_row(keys[s], init_, {row, width_});
    optimizer_->init_state({row, width_}, {row + width_, state_});
    row_ptr_[s] = row;
    std::memcpy(&rows_[s * width_], row, width_ * sizeof(float));
  }
  std::fill(dense_grads_.begin(), dense_grads_.end(), 0.0f);
  const double loss =
      model_->forward_backward(batch, index_.slots(), rows_, dense_, grads_, dense_grads_, {});
  ++steps_;
  for_parts([&](size_t p) {
    Part& part = parts_[p];
    const auto [r0, r1] = range(n, p);
    const auto [d0, d1] = range(dense_grads_.size(), p);
    const std::span<const float> g{grads_.data() + r0 * width_, (r1 - r0) * width_};
    const std::span<const float> dg{dense_grads_.data() + d0, d1 - d0};
    const size_t i = first_not_finite(g), j = first_not_finite(dg);
    part.bad = i < g.size() ? r0 * width_ + i : Part::none;
    part.bad_dense = j < dg.size() ? d0 + j : Part::none;
    part.squares = gradient_squares(g, dg);
  });
  // A gradient that is not finite reaches no row (as a shard refuses it).
  std::string bad;
  double squares = 0.0;
  for (const Part& part : parts_) {
    if (part.bad != Part::none && bad.empty())
      bad = fmt::format("a gradient of {} for key {}", grads_[part.bad], keys[part.bad / width_]);
    squares += part.squares;
  }
  for (const Part& part : parts_)
    if (const size_t d = part.bad_dense; d != Part::none && bad.empty())
      bad = fmt::format("a dense gradient of {} for dense parameter {}", dense_grads_[d], d);
  if (!bad.empty()) {
    if (!config_.skip_not_finite) return Status::internal(bad);
    ++steps_skipped_;
    last_skip_ = bad;
    return loss;
  }
  const double norm = gradient_norm_from_squares(squares, batch.rows());
  if (auto e = gradient_watch_.observe(norm)) {
    ++gradient_alerts_;
    last_gradient_alert_ = {
        e->kind, fmt::format("step {}: gradient norm {:.3g} a sample, {:.3g} times the median of "
                             "its last {} steps ({:.3g})",
                             steps_, norm, norm / e->median, e->window, e->median)};
  }
  // Push: apply the optimizer to each row with its summed gradient.
  for_parts([&](size_t p) {
    Part& part = parts_[p];
    part.not_finite = 0;
    const auto [r0, r1] = range(n, p);
    for (size_t s = r0; s < r1; ++s) {
      float* row = row_ptr_[s];
      // An update that would overflow the row is not made (as a shard does).
      if (!optimizer_->apply_finite({row, width_}, {row + width_, state_},
                                    {&grads_[s * width_], width_}, part.saved_row)) {
        ++part.not_finite;
        part.last_not_finite = s;
      }
    }
  });
  for (const Part& part : parts_) {
    if (part.not_finite == 0) continue;
    updates_not_finite_ += part.not_finite;
    last_update_not_finite_ = fmt::format("step {}: key {}", steps_, keys[part.last_not_finite]);
  }
  if (!dense_.empty() && batch.rows() > 0) {
    const float scale = 1.0f / static_cast<float>(batch.rows());
    for (float& g : dense_grads_) g *= scale;
    dense_optimizer_.step(dense_, dense_grads_, threads);
  }
  return loss;
}

Status LocalTrainer::predict(const Batch& batch, std::vector<float>& logits) {
  if (Status s = model_->check(batch); !s.ok()) return s;
  index_.build(batch, config_.model.dense_rows());
  const auto keys = index_.unique_keys();
  rows_.resize(keys.size() * width_);
  for (size_t s = 0; s < keys.size(); ++s) row_value(keys[s], {&rows_[s * width_], width_});
  logits.resize(batch.rows());
  model_->forward(batch, index_.slots(), rows_, dense_, logits);
  return Status();
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
