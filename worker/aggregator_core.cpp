#include "worker/aggregator_core.h"

#include <cstring>

namespace colony {

Expected<std::unique_ptr<AggregatorCore>> AggregatorCore::make(const AggregatorConfig& config,
                                                               std::unique_ptr<Reducer> reducer) {
  if (config.replicas.empty())
    return Status::invalid_input("an aggregator needs at least one replica");
  auto kv = KvClient::make({config.id, config.map, config.shard_nodes, config.width,
                            config.durable_shards, config.push_format, config.part_bytes,
                            config.pull_format, config.error_feedback_rows});
  if (!kv) return kv.status();
  COLONY_ASSERT(reducer != nullptr);
  std::unique_ptr<AggregatorCore> core(
      new AggregatorCore(config, std::move(kv.value()), std::move(reducer)));
  if (Status s = core->make_dense_tree(); !s.ok()) return s;
  return core;
}

Status AggregatorCore::make_dense_tree() {
  if (config_.dense_params == 0) return Status();
  DenseTreeConfig tc;
  tc.id = config_.id;
  tc.params = config_.dense_params;
  tc.children = config_.replicas;
  tc.children.insert(tc.children.end(), config_.dense_peers.begin(), config_.dense_peers.end());
  tc.parent = config_.dense_root;
  auto tree = DenseTree::make(tc, *reducer_);
  if (!tree) return tree.status();
  dense_.emplace(std::move(tree.value()));
  return Status();
}

AggregatorCore::AggregatorCore(const AggregatorConfig& config, std::unique_ptr<KvClient> kv,
                               std::unique_ptr<Reducer> reducer)
    : config_(config),
      kv_(std::move(kv)),
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
      return fail(Status::internal(fmt::format("aggregator {}: push from unknown node {}",
                                               config_.id, push->header.sender)));
    const size_t r = it->second;
    if (push->clock != replica_clock_[r] + 1 || replica_done_[r] || push->more ||
        push->grads.size() != push->keys.size() * config_.width)
      return fail(Status::internal(
          fmt::format("aggregator {}: bad push (clock {}) from replica {} at clock {}", config_.id,
                      push->clock, push->header.sender, replica_clock_[r])));
    replica_clock_[r] = push->clock;
    auto& slot = pending_[push->clock - 1];
    slot.resize(config_.replicas.size());
    slot[r] = SparseGrads{push->keys, {push->grads.begin(), push->grads.end()}};
    ++stats_.contributions;
    out.push_back({push->header.sender,
                   PushAck{{config_.id, push->header.request_id, kv_->map().version()}}});
    flush(out);
  } else if (auto* clock = std::get_if<ClockAdvance>(&message)) {
    auto it = replica_index_.find(clock->header.sender);
    if (it == replica_index_.end() || clock->clock != clock_done)
      return fail(Status::internal(fmt::format("aggregator {}: unexpected clock {} from node {}",
                                               config_.id, clock->clock, clock->header.sender)));
    replica_done_[it->second] = true;
    flush(out);
    serve_pulls(out);
  } else if (auto* pull = std::get_if<PullRequest>(&message)) {
    on_pull(*pull, out);
  } else if (std::holds_alternative<DenseReduce>(message) ||
             std::holds_alternative<DenseBroadcast>(message)) {
    on_dense(message, out);
  } else {
    // Replies from the shards to this node's pulls and pushes.
    const uint64_t sent = kv_->messages_sent();
    kv_->on_message(message, out);
    stats_.pull_messages += kv_->messages_sent() - sent;  // pulls re-sent under a new map
    stats_.replies_dropped = kv_->replies_dropped();
    if (!kv_->error().ok()) return fail(kv_->error());
    std::erase_if(push_tickets_, [&](auto t) { return kv_->done(t); });
    serve_pulls(out);
  }
}

void AggregatorCore::on_pull(const PullRequest& m, Outbox& out) {
  auto it = replica_index_.find(m.header.sender);
  if (it == replica_index_.end())
    return fail(Status::internal(
        fmt::format("aggregator {}: pull from unknown node {}", config_.id, m.header.sender)));
  const size_t r = it->second;
  NodePull& p = pulls_[m.clock];
  p.asked.resize(config_.replicas.size());
  // A replica pulls each step once, before it pushes it, and never after it finished.
  if (replica_done_[r] || m.clock < replica_clock_[r] || p.asked[r] || p.sent ||
      m.writer != config_.id)
    return fail(Status::internal(
        fmt::format("aggregator {}: bad pull of step {} from replica {} at clock {}", config_.id,
                    m.clock, m.header.sender, replica_clock_[r])));
  p.asked[r] = m;
  stats_.keys_requested += m.keys.size();
  serve_pulls(out);
}

void AggregatorCore::serve_pulls(Outbox& out) {
  for (auto it = pulls_.begin(); it != pulls_.end();) {
    NodePull& p = it->second;
    if (!p.sent) {
      bool ready = true;
      for (size_t r = 0; r < config_.replicas.size(); ++r)
        if (!p.asked[r] && !replica_done_[r]) ready = false;
      if (!ready) {
        ++it;
        continue;
      }
      // Each key once, in the order the replicas first asked for it. One replica asking (the
      // others finished, or it is the node's only one): its keys as they are.
      size_t asking = 0, asked_keys = 0;
      for (const auto& a : p.asked)
        if (a) ++asking, asked_keys += a->keys.size();
      p.places.resize(config_.replicas.size());
      index_.clear();
      if (asking > 1) index_.reserve(asked_keys);
      for (size_t r = 0; r < config_.replicas.size(); ++r) {
        if (!p.asked[r]) continue;
        if (asking == 1) {
          p.keys = std::move(p.asked[r]->keys);  // only its request id is needed from now on
          p.whole = true;
          break;
        }
        for (uint64_t key : p.asked[r]->keys) {
          const auto [place, fresh] =
              index_.find_or_insert(key, [&] { return uint64_t(p.keys.size()); });
          if (fresh) p.keys.push_back(key);
          p.places[r].push_back(uint32_t(place));
        }
      }
      p.values.resize(p.keys.size() * config_.width);
      stats_.keys_pulled += p.keys.size();
      const uint64_t sent = kv_->messages_sent();
      p.ticket = kv_->pull(p.keys, it->first, config_.id, p.values, out, &p.min_clock);
      stats_.pull_messages += kv_->messages_sent() - sent;
      p.sent = true;
    }
    if (!kv_->done(p.ticket)) {
      ++it;
      continue;
    }
    const size_t w = config_.width;
    for (size_t r = 0; r < config_.replicas.size(); ++r) {
      if (!p.asked[r]) continue;
      std::vector<float> rows;
      if (p.whole) {
        rows = std::move(p.values);  // the only replica asking: its keys in its order
      } else {
        rows.resize(p.places[r].size() * w);
        for (size_t j = 0; j < p.places[r].size(); ++j)
          std::copy_n(&p.values[size_t{p.places[r][j]} * w], w, &rows[j * w]);
      }
      out.push_back({config_.replicas[r],
                     PullReply{{config_.id, p.asked[r]->header.request_id, kv_->map().version()},
                               p.min_clock,
                               FloatBuffer(std::move(rows))}});
    }
    it = pulls_.erase(it);
  }
}

void AggregatorCore::on_dense(const PsMessage& message, Outbox& out) {
  const NodeId from = std::visit([](const auto& m) { return m.header.sender; }, message);
  Status s;
  if (!dense_)
    s = Status::internal(fmt::format(
        "aggregator {}: a dense all-reduce message from node {} for a model without dense layers",
        config_.id, from));
  else if (auto* reduce = std::get_if<DenseReduce>(&message))
    s = dense_->on_reduce(*reduce, kv_->map().version(), out);
  else
    s = dense_->on_broadcast(std::get<DenseBroadcast>(message), kv_->map().version(), out);
  if (!s.ok()) return refuse_dense(from, std::move(s));
  stats_.dense_steps = dense_->steps_reduced();
}

void AggregatorCore::refuse_dense(NodeId sender, Status s) {
  // A replica of this node breaking the protocol is a bug: stop. Another aggregator's message
  // came over the wire from a listed member: drop it (the tree changed nothing) and count it.
  if (replica_index_.count(sender)) return fail(std::move(s));
  ++stats_.dense_refused;
  last_refusal_ = std::move(s);
}

void AggregatorCore::flush(Outbox& out) {
  while (!done_sent_) {
    // Step next_step_ is ready when every replica has either sent it or finished before it.
    bool ready = true, any = false;
    for (size_t r = 0; r < config_.replicas.size(); ++r) {
      if (replica_clock_[r] > next_step_)
        any = true;
      else if (!replica_done_[r])
        ready = false;
    }
    if (!ready) return;
    if (!any) {  // every replica has finished: nothing more will come
      done_sent_ = true;
      kv_->finish(out);
      return;
    }
    auto node = pending_.extract(next_step_);
    std::vector<const SparseGrads*> inputs;
    for (auto& c : node.mapped())
      if (c) inputs.push_back(&*c);
    reducer_->sum(inputs, config_.width, sum_);
    const uint64_t sent = kv_->messages_sent(), bytes = kv_->push_bytes();
    push_tickets_.push_back(kv_->push(sum_.keys, sum_.values, next_step_ + 1, out));
    stats_.push_messages += kv_->messages_sent() - sent;
    stats_.push_bytes += kv_->push_bytes() - bytes;
    ++stats_.steps_pushed;
    ++next_step_;
  }
}

void AggregatorCore::on_shards_restarted(const std::vector<NodeId>& nodes, Outbox& out) {
  for (NodeId n : nodes)
    for (uint32_t s = 0; s < config_.shard_nodes.size(); ++s)
      if (config_.shard_nodes[s] == n) kv_->resync(s, out);
}

}  // namespace colony
