#include "ps/shard_core.h"

#include <algorithm>
#include <cstring>

namespace colony {

Expected<std::unique_ptr<ShardCore>> ShardCore::make(const ShardConfig& config,
                                                    std::unique_ptr<RowStore> store) {
  if (config.senders.empty()) return Status::invalid_input("a shard needs at least one sender");
  if (config.width == 0) return Status::invalid_input("row width must be at least 1");
  auto map = ShardMap::make(config.map);
  if (!map) return map.status();
  if (config.shard_index >= map->shards())
    return Status::invalid_input(fmt::format("shard index {} is outside a map of {} shards",
                                             config.shard_index, map->shards()));
  auto optimizer = make_optimizer(config.optimizer);
  if (!optimizer) return optimizer.status();
  const size_t row_floats = config.width + (*optimizer)->state_floats(config.width);
  if (!store) store = std::make_unique<MemoryRowStore>(row_floats);
  if (store->row_floats() != row_floats)
    return Status::invalid_input(fmt::format("the store keeps rows of {} floats; this shard needs {}",
                                             store->row_floats(), row_floats));
  return std::unique_ptr<ShardCore>(
      new ShardCore(config, std::move(optimizer.value()), std::move(map.value()), std::move(store)));
}

ShardCore::ShardCore(const ShardConfig& config, std::unique_ptr<Optimizer> optimizer, ShardMap map,
                     std::unique_ptr<RowStore> store)
    : config_(config),
      optimizer_(std::move(optimizer)),
      map_(std::move(map)),
      width_(config.width),
      state_(optimizer_->state_floats(width_)),
      store_(std::move(store)) {
  for (NodeId s : config.senders) clocks_[s] = 0;
}

void ShardCore::on_message(const PsMessage& message, Outbox& out) {
  if (auto* pull = std::get_if<PullRequest>(&message)) return on_pull(*pull, out);
  if (auto* push = std::get_if<PushRequest>(&message)) return on_push(*push, out);
  if (auto* clock = std::get_if<ClockAdvance>(&message)) return on_clock(*clock, out);
  // Replies are for workers; a shard receiving one is a routing bug in the driver.
  COLONY_ASSERT(false, "shard {} got a message of kind {}", config_.id, message.index());
}

bool ShardCore::stale(const MessageHeader& h, Outbox& out) {
  if (h.map_version == map_.version()) return false;
  const ShardMapSpec& s = map_.spec();
  ++stats_.stale_map_replies;
  out.push_back({h.sender, ShardMapUpdate{{config_.id, h.request_id, s.version}, s.version, s.shards,
                                          s.vnodes_per_shard, s.seed}});
  return true;
}

float* ShardCore::row(uint64_t key) {
  auto [r, inserted] = store_->find_or_insert(key);
  if (inserted) {
    init_row(key, config_.init, {r, width_});
    optimizer_->init_state({r, width_}, {r + width_, state_});
  }
  return r;
}

bool ShardCore::owns_all(const MessageHeader& h, const std::vector<uint64_t>& keys, Outbox& out) {
  for (uint64_t key : keys) {
    if (map_.shard_of(key) != config_.shard_index) {
      out.push_back({h.sender, PsError{{config_.id, h.request_id, map_.version()}, PsErrorCode::bad_request,
                                       fmt::format("key {:#x} does not belong to shard {}", key,
                                                   config_.shard_index)}});
      return false;
    }
  }
  return true;
}

void ShardCore::on_pull(const PullRequest& r, Outbox& out) {
  if (stale(r.header, out)) return;
  if (!owns_all(r.header, r.keys, out)) return;
  if (may_answer(r)) {
    answer(r, out);
  } else {
    ++stats_.pulls_deferred;
    waiting_.push_back(r);
  }
}

bool ShardCore::may_answer(const PullRequest& r) const {
  if (!config_.fault_skip_consistency_gate && !config_.consistency.allows(r.clock, min_clock_)) return false;
  // Read-my-writes, under every model (ASP included): a pull for step c also waits for the
  // puller's own writes of step c - 1 (BSP's bound implies it). A worker that pulls ahead of
  // its own push (pipelined pulls) would otherwise train on rows that miss its last step.
  auto it = clocks_.find(r.writer);
  return it == clocks_.end() || it->second >= r.clock;
}

namespace {
uint64_t hash_keys(const std::vector<uint64_t>& keys) {
  uint64_t h = keys.size();
  for (uint64_t k : keys) h = (h ^ k) * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  return h;
}
}  // namespace

void ShardCore::answer(const PullRequest& r, Outbox& out) {
  PullReply reply{{config_.id, r.header.request_id, map_.version()}, min_clock_, {}};
  const size_t n = r.keys.size();
  reply.values.reserve(n * width_);  // appended below: no zero-fill pass first
  if (!store_->stable_rows()) {
    for (uint64_t key : r.keys) {
      const float* p = row(key);
      reply.values.insert(reply.values.end(), p, p + width_);
    }
  } else {
    auto& recent = answered_[r.writer];
    if (recent.size() == answered_pulls_max) recent.pop_front();
    AnsweredPull& a = recent.emplace_back(AnsweredPull{r.clock, hash_keys(r.keys), {}});
    a.rows.resize(n);
    // Look every row up first, prefetching index slots a few keys ahead, then copy: the
    // lookups are cache misses on a large table, and this lets several be in flight at once.
    constexpr size_t ahead = 8;
    for (size_t i = 0; i < std::min(n, ahead); ++i) store_->prefetch(r.keys[i]);
    for (size_t i = 0; i < n; ++i) {
      if (i + ahead < n) store_->prefetch(r.keys[i + ahead]);
      a.rows[i] = row(r.keys[i]);
      __builtin_prefetch(a.rows[i]);
    }
    for (size_t i = 0; i < n; ++i) reply.values.insert(reply.values.end(), a.rows[i], a.rows[i] + width_);
  }
  ++stats_.pulls_answered;
  stats_.rows_pulled += r.keys.size();
  out.push_back({r.header.sender, std::move(reply)});
}

bool ShardCore::advance(const MessageHeader& h, uint32_t clock, bool& duplicate, Outbox& out) {
  duplicate = false;
  auto it = clocks_.find(h.sender);
  auto refuse = [&](PsErrorCode code, std::string why) {
    out.push_back({h.sender, PsError{{config_.id, h.request_id, map_.version()}, code, std::move(why)}});
    return false;
  };
  if (it == clocks_.end())
    return refuse(PsErrorCode::bad_request, fmt::format("node {} is not a sender of shard {}", h.sender,
                                                        config_.shard_index));
  uint32_t& current = it->second;
  if (clock <= current) {
    duplicate = true;
    return true;
  }
  if (clock != clock_done && clock != current + 1)
    return refuse(PsErrorCode::out_of_order,
                  fmt::format("clock {} from node {} skips steps (shard is at {})", clock, h.sender, current));
  current = clock;
  return true;
}

void ShardCore::on_push(const PushRequest& r, Outbox& out) {
  if (stale(r.header, out)) return;
  if (r.grads.size() != r.keys.size() * width_) {
    out.push_back({r.header.sender,
                   PsError{{config_.id, r.header.request_id, map_.version()}, PsErrorCode::bad_request,
                           fmt::format("push has {} keys but {} gradient floats (width {})",
                                       r.keys.size(), r.grads.size(), width_)}});
    return;
  }
  if (!owns_all(r.header, r.keys, out)) return;
  bool duplicate = false;
  if (!advance(r.header, r.clock, duplicate, out)) return;
  if (duplicate) {
    ++stats_.pushes_duplicate;
  } else {
    // The rows of this worker's pull for the same step, when the keys are the same.
    std::vector<float*>* rows = nullptr;
    auto it = store_->stable_rows() ? answered_.find(r.header.sender) : answered_.end();
    if (it != answered_.end()) {
      for (auto a = it->second.begin(); a != it->second.end(); ++a) {
        if (a->clock + 1 == r.clock && a->rows.size() == r.keys.size() && a->keys_hash == hash_keys(r.keys)) {
          rows = &a->rows;
          break;
        }
      }
    }
    for (size_t i = 0; i < r.keys.size(); ++i) {
      float* p = rows ? (*rows)[i] : row(r.keys[i]);
      optimizer_->apply({p, width_}, {p + width_, state_}, {&r.grads[i * width_], width_});
    }
    if (rows) ++stats_.pushes_reusing_pull_rows;
    ++stats_.pushes_applied;
    stats_.rows_pushed += r.keys.size();
  }
  out.push_back({r.header.sender, PushAck{{config_.id, r.header.request_id, map_.version()}}});
  release_waiting(out);
}

void ShardCore::on_clock(const ClockAdvance& r, Outbox& out) {
  if (stale(r.header, out)) return;
  bool duplicate = false;
  if (!advance(r.header, r.clock, duplicate, out)) return;
  release_waiting(out);
}

void ShardCore::release_waiting(Outbox& out) {
  uint32_t m = clock_done;
  for (const auto& [sender, clock] : clocks_) m = std::min(m, clock);
  min_clock_ = m;
  if (waiting_.empty()) return;
  // Answer, in arrival order, every waiting pull the clocks now allow.
  std::deque<PullRequest> still;
  for (PullRequest& r : waiting_) {
    if (may_answer(r)) answer(r, out);
    else still.push_back(std::move(r));
  }
  waiting_.swap(still);
}

void ShardCore::row_value(uint64_t key, std::span<float> out) const {
  COLONY_ASSERT(out.size() == width_, "out={} width={}", out.size(), width_);
  if (const float* r = store_->find(key)) std::copy(r, r + width_, out.begin());
  else init_row(key, config_.init, out);
}

}  // namespace colony
