#include "worker/worker_core.h"

#include <algorithm>

namespace colony {

Expected<std::unique_ptr<WorkerCore>> WorkerCore::make(const WorkerConfig& config) {
  if (config.max_inflight == 0) return Status::invalid_input("max_inflight must be at least 1");
  auto model = Model::make(config.model);
  if (!model) return model.status();
  if (Status s = require_sparse_model(config.model.kind); !s.ok()) return s;
  auto kv = KvClient::make(
      {config.id, config.map, config.shard_nodes, config.model.width(), config.durable_shards});
  if (!kv) return kv.status();
  return std::unique_ptr<WorkerCore>(
      new WorkerCore(config, std::move(kv.value()), std::move(model.value())));
}

WorkerCore::WorkerCore(const WorkerConfig& config, std::unique_ptr<KvClient> kv,
                       std::unique_ptr<Model> model)
    : config_(config), kv_(std::move(kv)), model_(std::move(model)), width_(config.model.width()) {}

bool WorkerCore::wants_batch() const {
  return error_.ok() && !finishing_ && steps_.size() < config_.max_inflight;
}

bool WorkerCore::done() const {
  if (!done_sent_ || unacked_pushes_ > 0) return false;
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
  const uint64_t sent = kv_->messages_sent();
  step.pull =
      kv_->pull(step.keys, step.clock, config_.aggregator.value_or(config_.id), step.rows, out);
  stats_.pull_messages += kv_->messages_sent() - sent;
}

void WorkerCore::on_message(const PsMessage& message, Outbox& out) {
  if (!error_.ok()) return;
  const NodeId from = std::visit([](const auto& m) { return m.header.sender; }, message);
  if (config_.aggregator && from == *config_.aggregator) {
    if (auto* err = std::get_if<PsError>(&message)) {
      return fail(Status::internal(fmt::format("aggregator {} refused request {}: {}", from,
                                               err->header.request_id, err->message)));
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

void WorkerCore::complete_ready_steps(Outbox& out) {
  while (!steps_.empty() && kv_->done(steps_.front().pull)) {
    push(steps_.front(), out);
    steps_.pop_front();
  }
  maybe_send_done(out);
}

void WorkerCore::push(Step& step, Outbox& out) {
  grads_.assign(step.keys.size() * width_, 0.0f);
  stats_.loss_sum +=
      model_->forward_backward(step.batch, step.slots, step.rows, {}, grads_, {}, {});
  stats_.samples += step.batch.rows();
  ++stats_.steps;
  const uint32_t clock = step.clock + 1;
  if (config_.aggregator) {
    // Hierarchical: the whole step's gradients go to the node aggregator in one message.
    ++unacked_pushes_;
    ++stats_.push_messages;
    stats_.push_bytes += step.keys.size() * (sizeof(uint64_t) + width_ * sizeof(float));
    out.push_back(
        {*config_.aggregator,
         PushRequest{
             {config_.id, next_request_++, kv_->map().version()}, clock, step.keys, grads_}});
  } else {
    const uint64_t sent = kv_->messages_sent(), bytes = kv_->push_bytes();
    push_tickets_.push_back(kv_->push(step.keys, grads_, clock, out));
    stats_.push_messages += kv_->messages_sent() - sent;
    stats_.push_bytes += kv_->push_bytes() - bytes;
  }
  clock_ = clock;
}

void WorkerCore::finish(Outbox& out) {
  finishing_ = true;
  maybe_send_done(out);
}

void WorkerCore::maybe_send_done(Outbox& out) {
  if (!finishing_ || done_sent_ || !steps_.empty() || !error_.ok()) return;
  done_sent_ = true;
  if (config_.aggregator) {
    out.push_back({*config_.aggregator,
                   ClockAdvance{{config_.id, next_request_++, kv_->map().version()}, clock_done}});
  } else {
    kv_->finish(out);
  }
}

void WorkerCore::on_shards_restarted(const std::vector<NodeId>& nodes, Outbox& out) {
  for (NodeId n : nodes)
    for (uint32_t s = 0; s < config_.shard_nodes.size(); ++s)
      if (config_.shard_nodes[s] == n) kv_->resync(s, out);
}

}  // namespace colony
