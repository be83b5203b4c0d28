#include "worker/worker_core.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/finite.h"
#include "common/hash.h"

namespace colony {

Expected<std::unique_ptr<WorkerCore>> WorkerCore::make(const WorkerConfig& config) {
  if (config.max_inflight == 0) return Status::invalid_input("max_inflight must be at least 1");
  auto model = Model::make(config.model);
  if (!model) return model.status();
  if (config.dense_sync_every == 0)
    return Status::invalid_input("--dense-sync every:K needs K of at least 1");
  if ((*model)->dense_params() > 0 && !config.aggregator && !config.dense_alone)
    return Status::invalid_input(fmt::format(
        "worker {}: a {} model with several workers needs --push hierarchical (the node "
        "aggregators all-reduce its dense layers)",
        config.id, to_string(config.model.kind)));
  if (config.dense_checkpoint_every % config.dense_sync_every != 0)
    return Status::invalid_input(fmt::format(
        "--checkpoint-every {} with --dense-sync every:{}: the replicas' dense layers are equal "
        "only after an averaging; give a multiple of {}",
        config.dense_checkpoint_every, config.dense_sync_every, config.dense_sync_every));
  auto kv = KvClient::make({config.id, config.map, config.shard_nodes, config.model.width(),
                            config.durable_shards, config.push_format, config.part_bytes,
                            config.pull_format, config.error_feedback_rows});
  if (!kv) return kv.status();
  auto core = std::unique_ptr<WorkerCore>(
      new WorkerCore(config, std::move(kv.value()), std::move(model.value())));
  if (const size_t n = core->model_->dense_params(); n > 0) {
    auto opt = nn::DenseOptimizer::make(config.dense_optimizer, n);
    if (!opt) return opt.status();
    core->dense_optimizer_.emplace(std::move(opt.value()));
    core->dense_.resize(n);
    core->dense_grads_.resize(n);
    core->model_->init_dense(core->dense_, config.seed);
    if (const DenseState* start = config.dense_start.get())
      if (Status s = core->restore_dense(*start); !s.ok()) return s;
  }
  return core;
}

Status WorkerCore::restore_dense(const DenseState& state) {
  if (clock_ > 0 || !steps_.empty())
    return Status::invalid_input(
        fmt::format("worker {}: dense layers to start from after step {}", config_.id, clock_));
  if (state.params.size() != dense_.size() || !dense_optimizer_)
    return Status::invalid_input(
        fmt::format("saved dense layers of {} parameters; this {} model has {}",
                    state.params.size(), to_string(config_.model.kind), dense_.size()));
  if (Status s = dense_optimizer_->restore(state.optimizer_state, state.optimizer_steps); !s.ok())
    return s;
  dense_ = state.params;
  return Status();
}

WorkerCore::WorkerCore(const WorkerConfig& config, std::unique_ptr<KvClient> kv,
                       std::unique_ptr<Model> model)
    : config_(config),
      kv_(std::move(kv)),
      model_(std::move(model)),
      width_(config.model.width()),
      gradient_watch_(config.gradient_alert_ratio) {}

void WorkerCore::step_dense(uint64_t samples) {
  // As LocalTrainer: the gradient averaged over the samples, then one optimizer step.
  const float scale = 1.0f / static_cast<float>(samples);
  for (float& g : dense_grads_) g *= scale;
  dense_optimizer_->step(dense_, dense_grads_, model_->part_threads());
}

void WorkerCore::dense_advanced(uint32_t steps) {
  COLONY_ASSERT(clock_ == steps, "dense parameters of step {} at clock {}", steps, clock_);
  const uint32_t every = config_.dense_checkpoint_every;
  if (every && steps % every == 0) dense_checkpoints_.push_back(dense_state());
}

DenseState WorkerCore::dense_state() const {
  DenseState s;
  s.step = clock_;
  s.params = dense_;
  if (dense_optimizer_) {
    const auto state = dense_optimizer_->state();
    s.optimizer_state.assign(state.begin(), state.end());
    s.optimizer_steps = dense_optimizer_->steps();
  }
  return s;
}

std::optional<DenseState> WorkerCore::take_dense_checkpoint() {
  if (dense_checkpoints_.empty()) return std::nullopt;
  DenseState s = std::move(dense_checkpoints_.front());
  dense_checkpoints_.pop_front();
  return s;
}

bool WorkerCore::wants_batch() const {
  return error_.ok() && !finishing_ &&
         steps_.size() < config_.max_inflight + config_.read_ahead_batches;
}

bool WorkerCore::done() const {
  if (!done_sent_ || unacked_pushes_ > 0 || awaiting_dense_) return false;
  return std::all_of(push_tickets_.begin(), push_tickets_.end(),
                     [&](auto t) { return kv_->done(t); });
}

void WorkerCore::fail(Status status) {
  if (error_.ok()) error_ = std::move(status);
}

void WorkerCore::add_batch(Batch batch, Outbox& out) {
  COLONY_ASSERT(wants_batch(), "worker {}: add_batch with {} steps in flight", config_.id,
                steps_.size());
  COLONY_ASSERT(!batch.empty());
  if (Status s = model_->check(batch); !s.ok()) return fail(std::move(s));
  Step& step = steps_.emplace_back();
  step.clock = next_step_++;
  step.batch = std::move(batch);
  index_.build(step.batch, config_.model.dense_rows());
  step.keys.assign(index_.unique_keys().begin(), index_.unique_keys().end());
  step.slots.assign(index_.slots().begin(), index_.slots().end());
  step.rows.resize(step.keys.size() * width_);
  if (started_ >= config_.max_inflight) {
    // Read-ahead: the shards hear of its keys now, its pulls go out once a step is pushed.
    const uint64_t sent = kv_->hint_messages();
    kv_->hint(step.keys, out);
    stats_.hint_messages += kv_->hint_messages() - sent;
    return;
  }
  start_pulls(out);
}

void WorkerCore::start_pulls(Outbox& out) {
  while (started_ < steps_.size() && started_ < config_.max_inflight) {
    Step& step = steps_[started_++];
    if (config_.aggregator) {
      // Hierarchical: the node aggregator pulls for the whole node and hands the rows back.
      step.pull = next_request_++;
      out.push_back({*config_.aggregator, PullRequest{{config_.id, step.pull, kv_->map().version()},
                                                      step.clock,
                                                      *config_.aggregator,
                                                      step.keys}});
      continue;
    }
    const uint64_t sent = kv_->messages_sent();
    step.pull = kv_->pull(step.keys, step.clock, config_.id, step.rows, out);
    stats_.pull_messages += kv_->messages_sent() - sent;
  }
}

void WorkerCore::on_node_rows(const PullReply& m) {
  const auto started_end = steps_.begin() + std::ptrdiff_t(started_);
  auto it = std::find_if(steps_.begin(), started_end,
                         [&](const Step& s) { return s.pull == m.header.request_id && !s.pulled; });
  if (it == started_end || m.values.size() != it->rows.size())
    return fail(Status::internal(
        fmt::format("worker {}: rows for request {} ({} floats) from its aggregator that no "
                    "step waits for",
                    config_.id, m.header.request_id, m.values.size())));
  std::copy(m.values.begin(), m.values.end(), it->rows.begin());
  it->pulled = true;
}

bool WorkerCore::pulled(const Step& step) const {
  return config_.aggregator ? step.pulled : kv_->done(step.pull);
}

void WorkerCore::on_message(const PsMessage& message, Outbox& out) {
  if (!error_.ok()) return;
  const NodeId from = std::visit([](const auto& m) { return m.header.sender; }, message);
  if (config_.aggregator && from == *config_.aggregator) {
    if (auto* err = std::get_if<PsError>(&message)) {
      return fail(Status::internal(fmt::format("aggregator {} refused request {}: {}", from,
                                               err->header.request_id, err->message)));
    }
    if (auto* b = std::get_if<DenseBroadcast>(&message)) return on_dense_broadcast(*b, out);
    if (auto* rows = std::get_if<PullReply>(&message)) {
      on_node_rows(*rows);
      return complete_ready_steps(out);
    }
    COLONY_ASSERT(std::holds_alternative<PushAck>(message) && unacked_pushes_ > 0,
                  "worker {}: unexpected message of kind {} from its aggregator", config_.id,
                  message.index());
    --unacked_pushes_;
    return;
  }
  kv_->on_message(message, out);
  stats_.pull_retries = kv_->retries();
  stats_.replies_dropped = kv_->replies_dropped();
  if (!kv_->error().ok()) return fail(kv_->error());
  std::erase_if(push_tickets_, [&](auto t) { return kv_->done(t); });
  complete_ready_steps(out);
}

void WorkerCore::on_dense_broadcast(const DenseBroadcast& m, Outbox& out) {
  // 0 samples: every replica skipped the step (--on-nan skip), which only such a job can say.
  if (!awaiting_dense_ || m.step != *awaiting_dense_ || m.values.size() != dense_.size() ||
      (m.samples == 0 && !config_.skip_not_finite))
    return fail(Status::internal(fmt::format(
        "worker {}: a dense all-reduce of step {} ({} floats over {} samples) it does not wait "
        "for",
        config_.id, m.step, m.values.size(), m.samples)));
  awaiting_dense_.reset();
  if (config_.dense_sync_every == 1) {
    dense_grads_.assign(m.values.begin(), m.values.end());
    if (m.samples > 0) step_dense(m.samples);
  } else {
    // Parameter averaging: the sum of the replicas' parameters, each weighted by `samples` in
    // all (1 each every K steps; the steps each trained, at the end).
    const float scale = 1.0f / static_cast<float>(m.samples);
    for (size_t i = 0; i < dense_.size(); ++i) dense_[i] = m.values.data()[i] * scale;
  }
  ++stats_.dense_syncs;
  // FNV-1a over the floats' bits, a word at a time: a few microseconds per step, not a byte loop.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (float x : dense_) h = (h ^ std::bit_cast<uint32_t>(x)) * 0x100000001b3ULL;
  dense_digest_ = hash_combine(dense_digest_, h);
  if (m.step != clock_done) dense_advanced(m.step + 1);
  complete_ready_steps(out);
}

void WorkerCore::complete_ready_steps(Outbox& out) {
  while (error_.ok() && started_ > 0 && !awaiting_dense_ && pulled(steps_.front())) {
    push(steps_.front(), out);
    steps_.pop_front();
    --started_;
    start_pulls(out);
  }
  maybe_send_done(out);
}

std::string WorkerCore::not_finite_gradient(const Step& step, uint32_t clock) const {
  if (const size_t bad = first_not_finite(grads_); bad < grads_.size())
    return fmt::format("worker {}: step {} made a gradient of {} for key {}", config_.id, clock,
                       grads_[bad], step.keys[bad / width_]);
  if (const size_t bad = first_not_finite(dense_grads_); bad < dense_grads_.size())
    return fmt::format("worker {}: step {} made a dense gradient of {} for dense parameter {}",
                       config_.id, clock, dense_grads_[bad], bad);
  return "";
}

void WorkerCore::check_gradient_norm(uint32_t clock) {
  const double norm = stats_.grad_norm;
  if (auto e = gradient_watch_.observe(norm)) {
    ++stats_.gradient_alerts;
    last_gradient_alert_ = {
        e->kind,
        fmt::format("worker {}: step {}: gradient norm {:.3g} a sample, {:.3g} times the median "
                    "of its last {} steps ({:.3g})",
                    config_.id, clock, norm, norm / e->median, e->window, e->median)};
  }
}

void WorkerCore::push(Step& step, Outbox& out) {
  grads_.assign(step.keys.size() * width_, 0.0f);
  std::fill(dense_grads_.begin(), dense_grads_.end(), 0.0f);
  const double loss =
      model_->forward_backward(step.batch, step.slots, step.rows, dense_, grads_, dense_grads_, {});
  const uint32_t clock = step.clock + 1;
  if (clock == config_.poison_step && !grads_.empty()) grads_[0] = std::nanf("");
  // A gradient that is not finite is never pushed: the shards would refuse it anyway, and here
  // the step and the replica can be named.
  const std::string bad = not_finite_gradient(step, clock);
  if (!bad.empty() && !config_.skip_not_finite)
    return fail(Status::internal(
        bad +
        " (the model diverged: try a lower --lr or --dense-lr, or --on-nan skip); nothing "
        "of the step was pushed"));
  const bool skipped = !bad.empty();
  if (skipped) {
    ++stats_.steps_skipped;
    last_skip_ = bad;
  } else {
    stats_.loss_sum += loss;
    stats_.samples += step.batch.rows();
    stats_.grad_norm = gradient_norm_per_sample(grads_, dense_grads_, step.batch.rows());
    check_gradient_norm(clock);
  }
  ++stats_.steps;
  // A skipped step pushes no rows: the shards see its clock move, nothing else.
  const std::span<const uint64_t> keys =
      skipped ? std::span<const uint64_t>() : std::span<const uint64_t>(step.keys);
  const std::span<const float> grads =
      skipped ? std::span<const float>() : std::span<const float>(grads_);
  if (config_.aggregator) {
    // Hierarchical: the whole step's gradients go to the node aggregator in one message.
    ++unacked_pushes_;
    ++stats_.push_messages;
    stats_.push_bytes += keys.size() * (sizeof(uint64_t) + width_ * sizeof(float));
    out.push_back(
        {*config_.aggregator, PushRequest{{config_.id, next_request_++, kv_->map().version()},
                                          clock,
                                          {keys.begin(), keys.end()},
                                          std::vector<float>(grads.begin(), grads.end())}});
  } else {
    const uint64_t sent = kv_->messages_sent(), bytes = kv_->push_bytes();
    push_tickets_.push_back(kv_->push(keys, grads, clock, out));
    stats_.push_messages += kv_->messages_sent() - sent;
    stats_.push_bytes += kv_->push_bytes() - bytes;
  }
  clock_ = clock;
  if (!dense_.empty()) sync_dense(step, skipped, out);
}

void WorkerCore::sync_dense(const Step& step, bool skipped, Outbox& out) {
  const MessageHeader header{config_.id, next_request_++, kv_->map().version()};
  if (config_.dense_sync_every == 1 && config_.aggregator) {
    // A skipped step still takes part (the all-reduce waits for every replica), with nothing.
    if (skipped) std::fill(dense_grads_.begin(), dense_grads_.end(), 0.0f);
    out.push_back({*config_.aggregator,
                   DenseReduce{header, step.clock, skipped ? 0 : step.batch.rows(), dense_grads_}});
    awaiting_dense_ = step.clock;
    return;
  }
  if (!skipped) step_dense(step.batch.rows());
  if (!config_.aggregator) return dense_advanced(step.clock + 1);
  if ((step.clock + 1) % config_.dense_sync_every == 0) {
    out.push_back({*config_.aggregator, DenseReduce{header, step.clock, 1, dense_}});
    awaiting_dense_ = step.clock;
  }
}

void WorkerCore::finish(Outbox& out) {
  finishing_ = true;
  maybe_send_done(out);
}

void WorkerCore::maybe_send_done(Outbox& out) {
  if (!finishing_ || done_sent_ || !steps_.empty() || awaiting_dense_ || !error_.ok()) return;
  done_sent_ = true;
  if (config_.aggregator) {
    out.push_back({*config_.aggregator,
                   ClockAdvance{{config_.id, next_request_++, kv_->map().version()}, clock_done}});
    if (!dense_.empty()) {
      // Under parameter averaging the replicas end by averaging their final parameters, each
      // weighted by the steps it trained (one that trained none sends nothing and keeps its own).
      const bool average = config_.dense_sync_every > 1 && clock_ > 0;
      DenseReduce last{{config_.id, next_request_++, kv_->map().version()}, clock_done, 0, {}};
      if (average) {
        last.samples = clock_;
        std::vector<float> weighted(dense_);
        for (float& x : weighted) x *= static_cast<float>(clock_);
        last.values = std::move(weighted);
        awaiting_dense_ = clock_done;
      }
      out.push_back({*config_.aggregator, std::move(last)});
    }
  } else {
    kv_->finish(out);
  }
}

void WorkerCore::on_shards_restarted(const std::vector<NodeId>& nodes, Outbox& out) {
  for (NodeId n : nodes)
    for (uint32_t s = 0; s < config_.shard_nodes.size(); ++s)
      if (config_.shard_nodes[s] == n) kv_->resync(s, out);
}

const WorkerCore& latest_dense(std::span<const WorkerCore* const> replicas) {
  COLONY_ASSERT(!replicas.empty());
  const WorkerCore* best = replicas.front();
  for (const WorkerCore* w : replicas)
    if (w->stats().dense_syncs > best->stats().dense_syncs) best = w;
  return *best;
}

}  // namespace colony
