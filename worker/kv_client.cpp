#include "worker/kv_client.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "common/bf16.h"
#include "common/fp16.h"
#include "common/hash.h"
#include "common/int8.h"

namespace colony {

Expected<std::unique_ptr<KvClient>> KvClient::make(const Options& options) {
  if (options.width == 0) return Status::invalid_input("row width must be at least 1");
  auto map = ShardMap::make(options.map);
  if (!map) return map.status();
  if (options.shard_nodes.size() != map->shards())
    return Status::invalid_input(fmt::format("{} shard nodes given for a map of {} shards",
                                             options.shard_nodes.size(), map->shards()));
  if (options.part_bytes < part_bytes_min || options.part_bytes > part_bytes_max)
    return Status::invalid_input(fmt::format("a message part of {} bytes: it must be {} to {}",
                                             options.part_bytes, part_bytes_min, part_bytes_max));
  if (options.error_feedback_rows > error_feedback_rows_max)
    return Status::invalid_input(fmt::format("error feedback for {} rows: at most {}",
                                             options.error_feedback_rows, error_feedback_rows_max));
  return std::unique_ptr<KvClient>(new KvClient(options, std::move(map.value())));
}

KvClient::KvClient(const Options& options, ShardMap map)
    : options_(options),
      map_(std::move(map)),
      sent_(map_.shards()),
      last_clock_(map_.shards(), 0),
      acked_push_(map_.shards(), 0),
      clock_requests_(map_.shards()) {}

void KvClient::send_clock(uint32_t shard, uint32_t clock, Outbox& out, bool resync,
                          uint32_t acked_push) {
  const uint64_t id = next_request_++;
  std::deque<uint64_t>& ids = clock_requests_[shard];
  if (ids.size() == clock_requests_max) ids.pop_front();
  ids.push_back(id);
  out.push_back({options_.shard_nodes[shard],
                 ClockAdvance{{options_.id, id, map_.version()}, clock, resync, acked_push}});
}

void KvClient::log_sent(uint32_t shard, Sent sent) {
  last_clock_[shard] = sent.clock;
  // Only what follows an unacknowledged push needs keeping: a resync's clock covers the rest.
  if (!options_.keep_for_resync || (!sent.is_push && sent_[shard].empty())) return;
  sent_[shard].push_back(std::move(sent));
}

void KvClient::fail(Status s) {
  if (error_.ok()) error_ = std::move(s);
}

KvClient::Ticket KvClient::pull(std::span<const uint64_t> keys, uint32_t clock, NodeId writer,
                                std::span<float> values, Outbox& out, uint32_t* min_clock) {
  COLONY_ASSERT(values.size() == keys.size() * options_.width, "values={} keys={} width={}",
                values.size(), keys.size(), options_.width);
  const Ticket t = next_ticket_++;
  if (keys.empty() || !error_.ok()) return t;  // nothing to wait for (or nothing more will come)
  Open& open = open_[t];
  open.is_pull = true;
  open.keys.assign(keys.begin(), keys.end());
  open.clock = clock;
  open.writer = writer;
  open.values = values;
  open.min_clock = min_clock;
  send_pulls(t, open, out);
  return t;
}

void KvClient::send_pulls(Ticket ticket, Open& open, Outbox& out) {
  const uint32_t shards = map_.shards();
  open.positions.assign(shards, {});
  open.answered.assign(shards, {});
  for (uint32_t i = 0; i < open.keys.size(); ++i)
    open.positions[map_.shard_of(open.keys[i])].push_back(i);
  open.pending = 0;
  const size_t part = part_keys(options_.part_bytes, options_.width, options_.pull_format);
  for (uint32_t shard = 0; shard < shards; ++shard) {
    const uint32_t n = open.positions[shard].size();
    for (uint32_t first = 0; first < n; first += part) {
      send_pull(ticket, open, shard, first, std::min<uint32_t>(part, n - first), out);
      ++open.pending;
    }
  }
}

void KvClient::send_pull(Ticket ticket, const Open& open, uint32_t shard, uint32_t first,
                         uint32_t count, Outbox& out) {
  PullRequest p{{options_.id, next_request_++, map_.version()}, open.clock, open.writer, {}};
  p.keys.reserve(count);
  const auto& pos = open.positions[shard];
  for (uint32_t j = first; j < first + count; ++j) p.keys.push_back(open.keys[pos[j]]);
  requests_[p.header.request_id] = {ticket, shard, first, count};
  ++messages_sent_;
  pull_bytes_ += p.keys.size() * sizeof(uint64_t);
  out.push_back({options_.shard_nodes[shard], std::move(p)});
}

float* KvClient::residual_of(uint64_t key) {
  if (options_.error_feedback_rows == 0) return nullptr;
  uint64_t slot = residual_slot_.get(key);
  if (slot == KeyIndex::missing) {
    if (residual_slot_.size() >= options_.error_feedback_rows)
      return nullptr;  // full: this row rounds stochastically
    slot = residual_slot_.size();
    residual_slot_.insert(key, slot);
    residuals_.resize(residuals_.size() + options_.width, 0.0f);
  }
  return &residuals_[slot * options_.width];
}

float KvClient::round_push_row(uint64_t key, uint64_t step, std::span<float> row) {
  const ValueFormat format = options_.push_format;
  if (float* residual = residual_of(key)) {
    // Error feedback: what this push should carry is the gradient and what earlier rounding
    // held back; it goes to the nearest value of the format, and the difference waits for the
    // next push of the row.
    for (size_t j = 0; j < row.size(); ++j) {
      row[j] += residual[j];
      residual[j] = row[j];
    }
    float scale = 0.0f;
    if (format == ValueFormat::int8) scale = round_int8_row(row);
    for (float& v : row) {
      if (format == ValueFormat::bf16) v = round_bf16(v);
      if (format == ValueFormat::fp16) v = round_fp16(v);
    }
    for (size_t j = 0; j < row.size(); ++j) {
      residual[j] -= row[j];
      // A value past fp16's range saturates: keeping what it lost would only grow.
      if (format == ValueFormat::fp16 && std::abs(row[j]) == fp16_max) residual[j] = 0.0f;
    }
    return scale;
  }
  if (format == ValueFormat::int8)
    // The row to its scale's codes, stochastically.
    return round_int8_row_stochastic(row, [&](size_t j) {
      // 64 random bits for two values
      const uint64_t bits = mix64(key ^ step ^ ((j / 2) * 0x9e3779b97f4a7c15ULL));
      return static_cast<uint32_t>(j % 2 ? bits >> 32 : bits);
    });
  if (format == ValueFormat::fp16) {
    for (size_t j = 0; j < row.size(); j += 2) {
      // 64 random bits for two values
      const uint64_t bits = mix64(key ^ step ^ (j * 0x9e3779b97f4a7c15ULL));
      for (size_t i = j; i < std::min(j + 2, row.size()); ++i)
        row[i] = round_fp16_stochastic(row[i], static_cast<uint32_t>(i == j ? bits : bits >> 32));
    }
    return 0.0f;
  }
  COLONY_ASSERT(format == ValueFormat::bf16, "push format {}", int(format));
  uint64_t bits = 0;
  for (size_t j = 0; j < row.size(); ++j) {
    if (j % 4 == 0) bits = mix64(key ^ step ^ (j * 0x9e3779b97f4a7c15ULL));
    row[j] = round_bf16_stochastic(row[j], static_cast<uint32_t>(bits));
    bits >>= 16;
  }
  return 0.0f;
}

KvClient::Ticket KvClient::push(std::span<const uint64_t> keys, std::span<const float> grads,
                                uint32_t clock, Outbox& out) {
  const size_t width = options_.width;
  COLONY_ASSERT(grads.size() == keys.size() * width, "grads={} keys={} width={}", grads.size(),
                keys.size(), width);
  const Ticket t = next_ticket_++;
  if (!error_.ok()) return t;
  const uint32_t shards = map_.shards();
  scratch_.resize(shards);
  for (auto& s : scratch_) s.clear();
  for (uint32_t i = 0; i < keys.size(); ++i) scratch_[map_.shard_of(keys[i])].push_back(i);
  Open* open = nullptr;
  const std::shared_ptr<const Pulled> pulled = pulled_for(keys, clock);
  // Pulls of this step and before have had their push (pushes go in clock order).
  std::erase_if(pulled_, [&](const auto& p) {
    if (p->clock >= clock) return false;
    pulled_keys_ -= p->keys.size();
    return true;
  });
  const size_t row = row_bytes(options_.push_format, width);
  for (uint32_t shard = 0; shard < shards; ++shard) {
    const auto& pos = scratch_[shard];
    ++messages_sent_;
    if (pos.empty()) {
      log_sent(shard, Sent{clock, false, false, 0, 0, {}});
      send_clock(shard, clock, out);
      continue;
    }
    // The parts: aligned with the pull's answered parts, leaving the keys out, where the pull
    // covers the shard's keys, the shard kept all of it (answered_pulls_max parts and
    // answered_rows_default keys: ps/protocol.h) and each part would fit part_bytes with its keys
    // (as the shard's forwards to its backups carry it); else of at most `part` keys.
    const size_t part = part_keys(options_.part_bytes, width, options_.push_format);
    std::vector<Part> parts;
    if (pulled && pulled->parts[shard].size() <= answered_pulls_max) {
      size_t covered = 0;
      bool fit = true;
      for (const Part& q : pulled->parts[shard]) {
        covered += q.count;
        fit = fit && q.count <= part;
      }
      if (fit && covered == pos.size() && covered <= answered_rows_default)
        parts = pulled->parts[shard];
    }
    const bool elide = !parts.empty();
    if (!elide) {
      for (size_t first = 0; first < pos.size(); first += part)
        parts.push_back({0, uint32_t(first), uint32_t(std::min(part, pos.size() - first))});
    }
    if (!open) open = &open_[t];
    Elided* elided = elide ? &(open->elided[shard] = Elided{pulled, {}}) : nullptr;
    Sent sent{clock, true, false, 0, t, {}};
    const uint64_t step = mix64((uint64_t{options_.id} << 32) | clock);
    for (size_t n = 0; n < parts.size(); ++n) {
      const size_t first = parts[n].first, count = parts[n].count;
      PushRequest p{{options_.id, next_request_++, map_.version()}, clock, {}, {}};
      p.more = n + 1 < parts.size();
      p.keys_of_pull = parts[n].request_id;  // 0 unless elided
      // Left out or not, the keys as they would travel (for a resync, and to round by).
      std::vector<uint64_t> these_keys;
      these_keys.reserve(count);
      auto g = std::make_shared<std::vector<float>>();
      g->reserve(count * width);  // appended below: no zero-fill pass first
      p.format = options_.push_format;
      if (p.format == ValueFormat::int8) p.scales.resize(count);
      for (size_t k = 0; k < count; ++k) {
        const size_t i = pos[first + k];
        these_keys.push_back(keys[i]);
        g->insert(g->end(), &grads[i * width], &grads[i * width] + width);
        if (p.format == ValueFormat::fp32) continue;
        const float scale = round_push_row(keys[i], step, {g->data() + k * width, width});
        if (p.format == ValueFormat::int8) p.scales[k] = scale;
      }
      // Shared, so that the copies kept below cost no copy of the gradients.
      p.grads = FloatBuffer::view(g, g->data(), g->size());
      if (!elide) p.keys = these_keys;
      push_bytes_ += count * ((elide ? 0 : sizeof(uint64_t)) + row);
      ++open->pending;
      requests_[p.header.request_id] = {t, shard};
      if (!p.more) sent.request_id = p.header.request_id;
      if (options_.keep_for_resync) {  // a restarted shard knows no pull: the keys go along
        PushRequest keyed = p;
        keyed.keys = std::move(these_keys);
        keyed.keys_of_pull = 0;
        sent.parts.push_back(std::move(keyed));
      }
      if (elided) elided->parts.push_back(p);
      if (n > 0) ++messages_sent_;
      out.push_back({options_.shard_nodes[shard], std::move(p)});
    }
    if (options_.keep_for_resync)
      log_sent(shard, std::move(sent));
    else
      last_clock_[shard] = clock;
  }
  return t;
}

void KvClient::hint(std::span<const uint64_t> keys, Outbox& out) {
  std::vector<std::vector<uint64_t>> by_shard(options_.shard_nodes.size());
  for (uint64_t k : keys) by_shard[map_.shard_of(k)].push_back(k);
  const size_t per_part = std::max<size_t>(1, options_.part_bytes / sizeof(uint64_t));
  for (uint32_t shard = 0; shard < by_shard.size(); ++shard) {
    const std::vector<uint64_t>& ks = by_shard[shard];
    for (size_t first = 0; first < ks.size(); first += per_part) {
      const size_t n = std::min(per_part, ks.size() - first);
      out.push_back({options_.shard_nodes[shard],
                     PullHint{{options_.id, next_request_++, map_.version()},
                              std::vector<uint64_t>(ks.begin() + first, ks.begin() + first + n)}});
      ++hint_messages_;
    }
  }
}

void KvClient::finish(Outbox& out) {
  for (uint32_t shard = 0; shard < options_.shard_nodes.size(); ++shard) {
    log_sent(shard, Sent{clock_done, false, false, 0, 0, {}});
    send_clock(shard, clock_done, out);
  }
}

bool KvClient::resync(uint32_t shard, Outbox& out) {
  // Told that a shard restarted which cannot have (not durable, or not ours): nothing to re-send.
  if (!options_.keep_for_resync || shard >= sent_.size()) {
    ++replies_dropped_;
    return false;
  }
  const NodeId node = options_.shard_nodes[shard];
  auto& log = sent_[shard];
  const uint32_t base = log.empty() ? last_clock_[shard] : log.front().clock - 1;
  send_clock(shard, base, out, /*resync=*/true, acked_push_[shard]);
  // The restarted shard knows none of the pulls it answered before: no push to it leaves its
  // keys out on their account (the pulls answered whole are forgotten; a restart is rare).
  for (auto& [ticket, open] : open_) {
    open.elided.erase(shard);
    if (open.is_pull) open.answered[shard].clear();
  }
  pulled_.clear();
  pulled_keys_ = 0;
  for (Sent& s : log) {
    // A clock advance, or an applied push: a clock advance keeps the sequence without applying
    // it twice.
    if (!s.is_push || s.acked) {
      send_clock(shard, s.clock, out);
      continue;
    }
    // Every part again, under fresh request ids: the parts acknowledged before were kept by
    // the shard that restarted, and lost with it. The ticket waits for the new parts' acks.
    auto open = open_.find(s.ticket);
    COLONY_ASSERT(open != open_.end(), "an unacknowledged push of step {} has no ticket", s.clock);
    open->second.pending -= std::erase_if(requests_, [&](const auto& r) {
      return r.second.ticket == s.ticket && r.second.shard == shard;
    });
    for (PushRequest& p : s.parts) {
      p.header.request_id = next_request_++;
      requests_[p.header.request_id] = {s.ticket, shard};
      ++open->second.pending;
      ++messages_sent_;
      out.push_back({node, p});
    }
    s.request_id = s.parts.back().header.request_id;
    ++pushes_resent_;
  }
  // The shard's part of every unanswered pull (each part of it), under fresh request ids.
  std::vector<std::pair<uint64_t, Request>> pulls;
  for (const auto& [request, r] : requests_) {
    if (r.shard != shard) continue;
    auto it = open_.find(r.ticket);
    if (it != open_.end() && it->second.is_pull) pulls.emplace_back(request, r);
  }
  std::sort(pulls.begin(), pulls.end(),  // oldest first, as they were sent
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [request, r] : pulls) {
    requests_.erase(request);
    send_pull(r.ticket, open_.at(r.ticket), shard, r.first, r.count, out);
  }
  return true;
}

std::shared_ptr<const KvClient::Pulled> KvClient::pulled_for(std::span<const uint64_t> keys,
                                                             uint32_t clock) const {
  for (auto it = pulled_.rbegin(); it != pulled_.rend(); ++it) {
    const Pulled& p = **it;
    if (p.clock + 1 == clock && p.map_version == map_.version() &&
        std::equal(keys.begin(), keys.end(), p.keys.begin(), p.keys.end()))
      return *it;
  }
  return nullptr;
}

void KvClient::resend_with_keys(Ticket ticket, Open& open, uint32_t shard, Outbox& out) {
  Elided elided = std::move(open.elided.at(shard));
  open.elided.erase(shard);
  // The shard dropped the push's other parts, answered or not: all of them go again.
  open.pending -= std::erase_if(requests_, [&](const auto& r) {
    return r.second.ticket == ticket && r.second.shard == shard;
  });
  const auto& pos = elided.pull->positions[shard];
  const auto& parts = elided.pull->parts[shard];
  COLONY_ASSERT(parts.size() == elided.parts.size(), "{} parts sent for a pull of {}",
                elided.parts.size(), parts.size());
  uint64_t last = 0;
  for (size_t n = 0; n < parts.size(); ++n) {
    PushRequest p = std::move(elided.parts[n]);
    p.keys_of_pull = 0;
    p.keys.reserve(parts[n].count);
    for (uint32_t j = parts[n].first; j < parts[n].first + parts[n].count; ++j)
      p.keys.push_back(elided.pull->keys[pos[j]]);
    p.header.request_id = last = next_request_++;
    requests_[last] = {ticket, shard};
    ++open.pending;
    ++messages_sent_;
    push_bytes_ += p.keys.size() * sizeof(uint64_t) +
                   p.keys.size() * row_bytes(options_.push_format, options_.width);
    out.push_back({options_.shard_nodes[shard], std::move(p)});
  }
  if (options_.keep_for_resync)
    for (Sent& s : sent_[shard])
      if (s.is_push && s.ticket == ticket) s.request_id = last;
  ++pushes_keyed_again_;
}

void KvClient::on_message(const PsMessage& message, Outbox& out) {
  if (!error_.ok()) return;
  // The (ticket, shard) a reply answers, taken off the open requests; {0, 0} (no ticket) when
  // it answers none, comes from another node than the shard asked (a lie, or a mistake), or
  // answers a request of the other kind (`pull`: whether a pull is expected); the request
  // then stays open.
  const NodeId from = std::visit([](const auto& m) { return m.header.sender; }, message);
  auto find = [&](uint64_t request, std::optional<bool> pull = std::nullopt) -> Request {
    auto it = requests_.find(request);
    if (it == requests_.end()) return {};
    const Request r = it->second;
    if (options_.shard_nodes[r.shard] != from) return {};
    if (pull) {
      auto o = open_.find(r.ticket);
      if (o != open_.end() && o->second.is_pull != *pull) return {};
    }
    requests_.erase(it);
    // The shard took every ClockAdvance sent to it before this request.
    std::deque<uint64_t>& clocks = clock_requests_[r.shard];
    while (!clocks.empty() && clocks.front() < request) clocks.pop_front();
    return r;
  };
  if (auto* reply = std::get_if<PullReply>(&message)) {
    const Request r = find(reply->header.request_id, true);
    auto it = open_.find(r.ticket);
    if (it == open_.end()) {  // a reply to a pull re-sent since, or to no pull
      ++replies_dropped_;
      return;
    }
    Open& open = it->second;
    const uint32_t* pos = open.positions[r.shard].data() + r.first;
    const size_t width = options_.width;
    if (reply->values.size() != size_t{r.count} * width)
      return fail(Status::internal(
          fmt::format("shard node {} answered {} floats for {} keys of width {}",
                      reply->header.sender, reply->values.size(), r.count, width)));
    for (size_t j = 0; j < r.count; ++j)
      std::memcpy(&open.values[size_t{pos[j]} * width], &reply->values[j * width],
                  width * sizeof(float));
    pull_bytes_ += r.count * row_bytes(reply->format, width);
    if (open.min_clock) *open.min_clock = std::min(*open.min_clock, reply->min_clock);
    open.answered[r.shard].push_back({reply->header.request_id, r.first, r.count});
    if (--open.pending == 0) {
      // Answered whole: kept for the push of the same keys to leave them out.
      auto pulled = std::make_shared<Pulled>();
      pulled->clock = open.clock;
      pulled->map_version = map_.version();
      pulled->keys = std::move(open.keys);
      pulled->positions = std::move(open.positions);
      pulled->parts = std::move(open.answered);
      for (auto& parts : pulled->parts)
        std::sort(parts.begin(), parts.end(),
                  [](const Part& a, const Part& b) { return a.first < b.first; });
      open_.erase(it);
      pulled_keys_ += pulled->keys.size();
      pulled_.push_back(std::move(pulled));
      while (pulled_.size() > pulled_max || pulled_keys_ > pulled_keys_max) {
        pulled_keys_ -= pulled_.front()->keys.size();
        pulled_.pop_front();
      }
    }
  } else if (auto* ack = std::get_if<PushAck>(&message)) {
    const auto [ticket, shard, first, count] = find(ack->header.request_id, false);
    if (options_.keep_for_resync && ticket != 0) {
      auto& log = sent_[shard];
      for (Sent& s : log)
        if (s.is_push && s.request_id == ack->header.request_id) {
          s.acked = true;
          acked_push_[shard] = std::max(acked_push_[shard], s.clock);
        }
      while (!log.empty() && (!log.front().is_push || log.front().acked)) log.pop_front();
    }
    auto it = open_.find(ticket);
    if (it == open_.end()) {  // a duplicate, or an ack of no push
      ++replies_dropped_;
      return;
    }
    if (--it->second.pending == 0) open_.erase(it);
  } else if (auto* update = std::get_if<ShardMapUpdate>(&message)) {
    // Not a structured binding: clang before 16 cannot capture one in the lambda below.
    const Ticket ticket = find(update->header.request_id).ticket;
    auto it = open_.find(ticket);
    if (it == open_.end()) {
      ++replies_dropped_;
      return;
    }
    if (!it->second.is_pull)
      return fail(
          Status::internal("the shard map changed while a push was in flight; pushes are not "
                           "re-routed in this version"));
    if (update->version > map_.version()) {
      auto map =
          ShardMap::make({update->version, update->shards, update->vnodes_per_shard, update->seed});
      if (!map) return fail(map.status());
      if (map->shards() != options_.shard_nodes.size())
        return fail(Status::internal(
            fmt::format("new shard map has {} shards; this client knows {} shard nodes",
                        map->shards(), options_.shard_nodes.size())));
      map_ = std::move(map.value());
    }
    // Re-send all of the ticket's pulls under the current map; replies to the old ones are
    // recognised by their request ids and ignored.
    std::erase_if(requests_, [&](const auto& r) { return r.second.ticket == ticket; });
    ++retries_;
    send_pulls(ticket, it->second, out);
  } else if (auto* err = std::get_if<PsError>(&message)) {
    // Only the shard a request went to may refuse it.
    const Request r = find(err->header.request_id);
    auto it = open_.find(r.ticket);
    if (it == open_.end()) {
      // A ClockAdvance refused (it skips steps, came amid a push in parts, or from no sender of
      // the shard): this client's clock there would stay behind, and the job wait for it.
      for (uint32_t shard = 0; shard < options_.shard_nodes.size(); ++shard)
        if (options_.shard_nodes[shard] == from &&
            std::binary_search(clock_requests_[shard].begin(), clock_requests_[shard].end(),
                               err->header.request_id))
          return fail(
              Status::internal(fmt::format("node {} refused the clock advance of request {}: {}",
                                           from, err->header.request_id, err->message)));
      ++replies_dropped_;
      return;
    }
    // A part that left its keys out, which the shard did not know: the push again, with them.
    if (err->code == PsErrorCode::keys_unknown && !it->second.is_pull &&
        it->second.elided.contains(r.shard)) {
      --it->second.pending;  // the refused part's reply came
      return resend_with_keys(r.ticket, it->second, r.shard, out);
    }
    fail(Status::internal(fmt::format("node {} refused request {}: {}", err->header.sender,
                                      err->header.request_id, err->message)));
  } else {
    ++replies_dropped_;  // a request sent to a client: a peer's mistake (or a lie), dropped
  }
}

}  // namespace colony
