#include "worker/kv_client.h"

#include <cstring>

namespace colony {

Expected<std::unique_ptr<KvClient>> KvClient::make(const Options& options) {
  if (options.width == 0) return Status::invalid_input("row width must be at least 1");
  auto map = ShardMap::make(options.map);
  if (!map) return map.status();
  if (options.shard_nodes.size() != map->shards())
    return Status::invalid_input(fmt::format("{} shard nodes given for a map of {} shards",
                                             options.shard_nodes.size(), map->shards()));
  return std::unique_ptr<KvClient>(new KvClient(options, std::move(map.value())));
}

KvClient::KvClient(const Options& options, ShardMap map) : options_(options), map_(std::move(map)) {}

void KvClient::fail(Status s) {
  if (error_.ok()) error_ = std::move(s);
}

KvClient::Ticket KvClient::pull(std::span<const uint64_t> keys, uint32_t clock, NodeId writer,
                                std::span<float> values, Outbox& out) {
  COLONY_ASSERT(values.size() == keys.size() * options_.width, "values={} keys={} width={}", values.size(),
                keys.size(), options_.width);
  const Ticket t = next_ticket_++;
  if (keys.empty() || !error_.ok()) return t;  // nothing to wait for (or nothing more will come)
  Open& open = open_[t];
  open.is_pull = true;
  open.keys.assign(keys.begin(), keys.end());
  open.clock = clock;
  open.writer = writer;
  open.values = values;
  send_pulls(t, open, out);
  return t;
}

void KvClient::send_pulls(Ticket ticket, Open& open, Outbox& out) {
  const uint32_t shards = map_.shards();
  open.positions.assign(shards, {});
  for (uint32_t i = 0; i < open.keys.size(); ++i) open.positions[map_.shard_of(open.keys[i])].push_back(i);
  open.pending = 0;
  for (uint32_t shard = 0; shard < shards; ++shard) {
    const auto& pos = open.positions[shard];
    if (pos.empty()) continue;
    PullRequest p{{options_.id, next_request_++, map_.version()}, open.clock, open.writer, {}};
    p.keys.reserve(pos.size());
    for (uint32_t i : pos) p.keys.push_back(open.keys[i]);
    requests_[p.header.request_id] = {ticket, shard};
    ++open.pending;
    ++messages_sent_;
    out.push_back({options_.shard_nodes[shard], std::move(p)});
  }
}

KvClient::Ticket KvClient::push(std::span<const uint64_t> keys, std::span<const float> grads, uint32_t clock,
                                Outbox& out) {
  const size_t width = options_.width;
  COLONY_ASSERT(grads.size() == keys.size() * width, "grads={} keys={} width={}", grads.size(), keys.size(), width);
  const Ticket t = next_ticket_++;
  if (!error_.ok()) return t;
  const uint32_t shards = map_.shards();
  scratch_.resize(shards);
  for (auto& s : scratch_) s.clear();
  for (uint32_t i = 0; i < keys.size(); ++i) scratch_[map_.shard_of(keys[i])].push_back(i);
  Open* open = nullptr;
  for (uint32_t shard = 0; shard < shards; ++shard) {
    const auto& pos = scratch_[shard];
    ++messages_sent_;
    if (pos.empty()) {
      out.push_back({options_.shard_nodes[shard], ClockAdvance{{options_.id, next_request_++, map_.version()}, clock}});
      continue;
    }
    PushRequest p{{options_.id, next_request_++, map_.version()}, clock, {}, {}};
    p.keys.reserve(pos.size());
    p.grads.reserve(pos.size() * width);  // appended below: no zero-fill pass first
    for (uint32_t i : pos) {
      p.keys.push_back(keys[i]);
      p.grads.insert(p.grads.end(), &grads[size_t{i} * width], &grads[size_t{i} * width] + width);
    }
    push_bytes_ += pos.size() * (sizeof(uint64_t) + width * sizeof(float));
    if (!open) open = &open_[t];
    ++open->pending;
    requests_[p.header.request_id] = {t, shard};
    out.push_back({options_.shard_nodes[shard], std::move(p)});
  }
  return t;
}

void KvClient::finish(Outbox& out) {
  for (NodeId shard : options_.shard_nodes)
    out.push_back({shard, ClockAdvance{{options_.id, next_request_++, map_.version()}, clock_done}});
}

void KvClient::on_message(const PsMessage& message, Outbox& out) {
  if (!error_.ok()) return;
  auto find = [&](uint64_t request) -> std::pair<Ticket, uint32_t> {
    auto it = requests_.find(request);
    if (it == requests_.end()) return {0, 0};
    auto r = it->second;
    requests_.erase(it);
    return r;
  };
  if (auto* reply = std::get_if<PullReply>(&message)) {
    const auto [ticket, shard] = find(reply->header.request_id);
    auto it = open_.find(ticket);
    if (it == open_.end()) return;  // a reply to a pull re-sent under a newer map
    Open& open = it->second;
    const auto& pos = open.positions[shard];
    const size_t width = options_.width;
    if (reply->values.size() != pos.size() * width)
      return fail(Status::internal(fmt::format("shard node {} answered {} floats for {} keys of width {}",
                                               reply->header.sender, reply->values.size(), pos.size(), width)));
    for (size_t j = 0; j < pos.size(); ++j)
      std::memcpy(&open.values[size_t{pos[j]} * width], &reply->values[j * width], width * sizeof(float));
    if (--open.pending == 0) open_.erase(it);
  } else if (auto* ack = std::get_if<PushAck>(&message)) {
    const auto [ticket, shard] = find(ack->header.request_id);
    auto it = open_.find(ticket);
    COLONY_ASSERT(it != open_.end() && !it->second.is_pull, "client {}: unexpected ack {}", options_.id,
                  ack->header.request_id);
    if (--it->second.pending == 0) open_.erase(it);
  } else if (auto* update = std::get_if<ShardMapUpdate>(&message)) {
    const auto [ticket, shard] = find(update->header.request_id);
    auto it = open_.find(ticket);
    if (it == open_.end()) return;
    if (!it->second.is_pull)
      return fail(Status::internal("the shard map changed while a push was in flight; pushes are not "
                                   "re-routed in this version"));
    if (update->version > map_.version()) {
      auto map = ShardMap::make({update->version, update->shards, update->vnodes_per_shard, update->seed});
      if (!map) return fail(map.status());
      if (map->shards() != options_.shard_nodes.size())
        return fail(Status::internal(fmt::format("new shard map has {} shards; this client knows {} shard nodes",
                                                 map->shards(), options_.shard_nodes.size())));
      map_ = std::move(map.value());
    }
    // Re-send all of the ticket's pulls under the current map; replies to the old ones are
    // recognised by their request ids and ignored.
    std::erase_if(requests_, [&](const auto& r) { return r.second.first == ticket; });
    ++retries_;
    send_pulls(ticket, it->second, out);
  } else if (auto* err = std::get_if<PsError>(&message)) {
    fail(Status::internal(fmt::format("node {} refused request {}: {}", err->header.sender,
                                      err->header.request_id, err->message)));
  } else {
    COLONY_ASSERT(false, "client {} got a message of kind {}", options_.id, message.index());
  }
}

}  // namespace colony
