#include "worker/worker_core.h"

#include <cstring>

namespace colony {

Expected<std::unique_ptr<WorkerCore>> WorkerCore::make(const WorkerConfig& config) {
  if (config.max_inflight == 0) return Status::invalid_input("max_inflight must be at least 1");
  auto map = ShardMap::make(config.map);
  if (!map) return map.status();
  if (config.shard_nodes.size() != map->shards())
    return Status::invalid_input(fmt::format("{} shard nodes given for a map of {} shards",
                                             config.shard_nodes.size(), map->shards()));
  return std::unique_ptr<WorkerCore>(new WorkerCore(config, std::move(map.value())));
}

WorkerCore::WorkerCore(const WorkerConfig& config, ShardMap map)
    : config_(config), map_(std::move(map)), width_(config.model.width()) {}

bool WorkerCore::wants_batch() const {
  return error_.ok() && !finishing_ && steps_.size() < config_.max_inflight;
}

void WorkerCore::fail(Status status) {
  if (error_.ok()) error_ = std::move(status);
}

void WorkerCore::add_batch(Batch batch, Outbox& out) {
  COLONY_ASSERT(wants_batch(), "worker {}: add_batch with {} steps in flight", config_.id, steps_.size());
  COLONY_ASSERT(!batch.empty());
  Step& step = steps_.emplace_back();
  step.clock = next_step_++;
  step.batch = std::move(batch);
  index_.build(step.batch);
  step.keys.assign(index_.unique_keys().begin(), index_.unique_keys().end());
  step.slots.assign(index_.slots().begin(), index_.slots().end());
  step.rows.resize(step.keys.size() * width_);
  send_pulls(step, out);
}

void WorkerCore::send_pulls(Step& step, Outbox& out) {
  const size_t shards = map_.shards();
  step.shard_slots.assign(shards, {});
  step.request_ids.assign(shards, 0);
  for (uint32_t s = 0; s < step.keys.size(); ++s) step.shard_slots[map_.shard_of(step.keys[s])].push_back(s);
  step.replies_missing = 0;
  for (uint32_t shard = 0; shard < shards; ++shard) {
    const auto& slots = step.shard_slots[shard];
    if (slots.empty()) continue;
    PullRequest pull{{config_.id, next_request_++, map_.version()}, step.clock,
                     config_.aggregator.value_or(config_.id), {}};
    pull.keys.reserve(slots.size());
    for (uint32_t s : slots) pull.keys.push_back(step.keys[s]);
    step.request_ids[shard] = pull.header.request_id;
    pulls_[pull.header.request_id] = {step.clock, shard};
    ++step.replies_missing;
    ++stats_.pull_messages;
    out.push_back({config_.shard_nodes[shard], std::move(pull)});
  }
}

void WorkerCore::on_message(const PsMessage& message, Outbox& out) {
  if (!error_.ok()) return;
  if (auto* reply = std::get_if<PullReply>(&message)) {
    auto it = pulls_.find(reply->header.request_id);
    if (it == pulls_.end()) return;  // a reply to a pull that was re-sent under a newer map
    const auto [clock, shard] = it->second;
    pulls_.erase(it);
    COLONY_ASSERT(!steps_.empty() && clock >= steps_.front().clock, "worker {}: reply for step {}",
                  config_.id, clock);
    Step& step = steps_[clock - steps_.front().clock];
    const auto& slots = step.shard_slots[shard];
    if (reply->values.size() != slots.size() * width_) {
      return fail(Status::internal(fmt::format("shard node {} answered {} floats for {} keys of width {}",
                                               reply->header.sender, reply->values.size(), slots.size(),
                                               width_)));
    }
    for (size_t i = 0; i < slots.size(); ++i)
      std::memcpy(&step.rows[size_t{slots[i]} * width_], &reply->values[i * width_], width_ * sizeof(float));
    --step.replies_missing;
    complete_ready_steps(out);
  } else if (std::get_if<PushAck>(&message)) {
    COLONY_ASSERT(unacked_pushes_ > 0, "worker {}: unexpected push ack", config_.id);
    --unacked_pushes_;
  } else if (auto* update = std::get_if<ShardMapUpdate>(&message)) {
    auto it = pulls_.find(update->header.request_id);
    if (it == pulls_.end()) {
      return fail(Status::internal("the shard map changed while a push was in flight; pushes are not "
                                   "re-routed in this version"));
    }
    const uint32_t clock = it->second.first;
    if (update->version > map_.version()) {
      auto map = ShardMap::make({update->version, update->shards, update->vnodes_per_shard, update->seed});
      if (!map) return fail(map.status());
      if (map->shards() != config_.shard_nodes.size())
        return fail(Status::internal(fmt::format("new shard map has {} shards; this worker knows {} shard nodes",
                                                 map->shards(), config_.shard_nodes.size())));
      map_ = std::move(map.value());
    }
    // Re-send all of the step's pulls under the current map; replies to the old ones are ignored.
    Step& step = steps_[clock - steps_.front().clock];
    for (uint64_t id : step.request_ids) pulls_.erase(id);
    ++stats_.pull_retries;
    send_pulls(step, out);
  } else if (auto* err = std::get_if<PsError>(&message)) {
    fail(Status::internal(fmt::format("node {} refused request {}: {}", err->header.sender,
                                      err->header.request_id, err->message)));
  } else {
    COLONY_ASSERT(false, "worker {} got a message of kind {}", config_.id, message.index());
  }
}

void WorkerCore::complete_ready_steps(Outbox& out) {
  while (!steps_.empty() && steps_.front().replies_missing == 0) {
    push(steps_.front(), out);
    steps_.pop_front();
  }
  maybe_send_done(out);
}

void WorkerCore::push(Step& step, Outbox& out) {
  grads_.assign(step.keys.size() * width_, 0.0f);
  stats_.loss_sum += forward_backward(config_.model, step.batch, step.slots, step.rows, grads_, {});
  stats_.samples += step.batch.rows();
  ++stats_.steps;
  const uint32_t clock = step.clock + 1;
  auto send_push = [&](NodeId to, const std::vector<uint32_t>* slots) {
    PushRequest p{{config_.id, next_request_++, map_.version()}, clock, {}, {}};
    const size_t n = slots ? slots->size() : step.keys.size();
    p.keys.resize(n);
    p.grads.resize(n * width_);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t s = slots ? (*slots)[i] : static_cast<uint32_t>(i);
      p.keys[i] = step.keys[s];
      std::memcpy(&p.grads[i * width_], &grads_[size_t{s} * width_], width_ * sizeof(float));
    }
    ++unacked_pushes_;
    ++stats_.push_messages;
    stats_.push_bytes += n * (sizeof(uint64_t) + width_ * sizeof(float));
    out.push_back({to, std::move(p)});
  };
  if (config_.aggregator) {
    send_push(*config_.aggregator, nullptr);
  } else {
    for (uint32_t shard = 0; shard < map_.shards(); ++shard) {
      if (step.shard_slots[shard].empty()) {
        ++stats_.push_messages;
        out.push_back({config_.shard_nodes[shard], ClockAdvance{{config_.id, next_request_++, map_.version()}, clock}});
      } else {
        send_push(config_.shard_nodes[shard], &step.shard_slots[shard]);
      }
    }
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
    out.push_back({*config_.aggregator, ClockAdvance{{config_.id, next_request_++, map_.version()}, clock_done}});
  } else {
    for (NodeId shard : config_.shard_nodes)
      out.push_back({shard, ClockAdvance{{config_.id, next_request_++, map_.version()}, clock_done}});
  }
}

}  // namespace colony
