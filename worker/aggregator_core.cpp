#include "worker/aggregator_core.h"

#include <cstring>

namespace colony {

Expected<std::unique_ptr<AggregatorCore>> AggregatorCore::make(const AggregatorConfig& config,
                                                               std::unique_ptr<Reducer> reducer) {
  if (config.replicas.empty()) return Status::invalid_input("an aggregator needs at least one replica");
  auto map = ShardMap::make(config.map);
  if (!map) return map.status();
  if (config.shard_nodes.size() != map->shards())
    return Status::invalid_input(fmt::format("{} shard nodes given for a map of {} shards",
                                             config.shard_nodes.size(), map->shards()));
  COLONY_ASSERT(reducer != nullptr);
  return std::unique_ptr<AggregatorCore>(
      new AggregatorCore(config, std::move(map.value()), std::move(reducer)));
}

AggregatorCore::AggregatorCore(const AggregatorConfig& config, ShardMap map,
                               std::unique_ptr<Reducer> reducer)
    : config_(config),
      map_(std::move(map)),
      reducer_(std::move(reducer)),
      replica_clock_(config.replicas.size(), 0),
      replica_done_(config.replicas.size(), false) {
  for (size_t i = 0; i < config.replicas.size(); ++i) replica_index_[config.replicas[i]] = i;
}

void AggregatorCore::on_message(const PsMessage& message, Outbox& out) {
  if (!error_.ok()) return;
  if (auto* push = std::get_if<PushRequest>(&message)) {
    auto it = replica_index_.find(push->header.sender);
    if (it == replica_index_.end())
      return fail(Status::internal(fmt::format("aggregator {}: push from unknown node {}", config_.id,
                                               push->header.sender)));
    const size_t r = it->second;
    if (push->clock != replica_clock_[r] + 1 || replica_done_[r] ||
        push->grads.size() != push->keys.size() * config_.width)
      return fail(Status::internal(fmt::format("aggregator {}: bad push (clock {}) from replica {} at clock {}",
                                               config_.id, push->clock, push->header.sender,
                                               replica_clock_[r])));
    replica_clock_[r] = push->clock;
    auto& slot = pending_[push->clock - 1];
    slot.resize(config_.replicas.size());
    slot[r] = SparseGrads{push->keys, push->grads};
    ++stats_.contributions;
    out.push_back({push->header.sender, PushAck{{config_.id, push->header.request_id, map_.version()}}});
    flush(out);
  } else if (auto* clock = std::get_if<ClockAdvance>(&message)) {
    auto it = replica_index_.find(clock->header.sender);
    if (it == replica_index_.end() || clock->clock != clock_done)
      return fail(Status::internal(fmt::format("aggregator {}: unexpected clock {} from node {}", config_.id,
                                               clock->clock, clock->header.sender)));
    replica_done_[it->second] = true;
    flush(out);
  } else if (std::get_if<PushAck>(&message)) {
    COLONY_ASSERT(unacked_pushes_ > 0, "aggregator {}: unexpected ack", config_.id);
    --unacked_pushes_;
  } else if (auto* err = std::get_if<PsError>(&message)) {
    fail(Status::internal(fmt::format("node {} refused request {}: {}", err->header.sender,
                                      err->header.request_id, err->message)));
  } else if (std::get_if<ShardMapUpdate>(&message)) {
    fail(Status::internal("the shard map changed while a push was in flight; pushes are not re-routed "
                          "in this version"));
  } else {
    COLONY_ASSERT(false, "aggregator {} got a message of kind {}", config_.id, message.index());
  }
}

void AggregatorCore::flush(Outbox& out) {
  while (!done_sent_) {
    // Step next_step_ is ready when every replica has either sent it or finished before it.
    bool ready = true, any = false;
    for (size_t r = 0; r < config_.replicas.size(); ++r) {
      if (replica_clock_[r] > next_step_) any = true;
      else if (!replica_done_[r]) ready = false;
    }
    if (!ready) return;
    if (!any) {  // every replica has finished: nothing more will come
      done_sent_ = true;
      for (NodeId shard : config_.shard_nodes)
        out.push_back({shard, ClockAdvance{{config_.id, next_request_++, map_.version()}, clock_done}});
      return;
    }
    auto node = pending_.extract(next_step_);
    std::vector<const SparseGrads*> inputs;
    for (auto& c : node.mapped())
      if (c) inputs.push_back(&*c);
    reducer_->sum(inputs, config_.width, sum_);
    const size_t width = config_.width;
    shard_rows_.assign(map_.shards(), {});
    for (uint32_t i = 0; i < sum_.keys.size(); ++i) shard_rows_[map_.shard_of(sum_.keys[i])].push_back(i);
    const uint32_t clock = next_step_ + 1;
    for (uint32_t shard = 0; shard < map_.shards(); ++shard) {
      const auto& rows = shard_rows_[shard];
      ++stats_.push_messages;
      if (rows.empty()) {
        out.push_back({config_.shard_nodes[shard], ClockAdvance{{config_.id, next_request_++, map_.version()}, clock}});
        continue;
      }
      PushRequest p{{config_.id, next_request_++, map_.version()}, clock, {}, {}};
      p.keys.resize(rows.size());
      p.grads.resize(rows.size() * width);
      for (size_t i = 0; i < rows.size(); ++i) {
        p.keys[i] = sum_.keys[rows[i]];
        std::memcpy(&p.grads[i * width], &sum_.values[size_t{rows[i]} * width], width * sizeof(float));
      }
      stats_.push_bytes += rows.size() * (sizeof(uint64_t) + width * sizeof(float));
      ++unacked_pushes_;
      out.push_back({config_.shard_nodes[shard], std::move(p)});
    }
    ++stats_.steps_pushed;
    ++next_step_;
  }
}

}  // namespace colony
