// The simulated transport: ps and control messages cross the modelled network (sim/network.h).
//
// Faults, as the transport sees them:
//   - crash: the host's process is gone (sim_members.cpp); messages to it are lost, and so is
//     what it had not sent yet.
//   - partition: messages between the sides wait until it heals (the transport retries).
//   - lossy: a dropped message is re-sent after the RTO; a duplicate arrives again shortly
//     after the original (only towards shards, whose pushes are idempotent: the aggregator's
//     and worker's are not, see docs/simulation.md); reorder adds jitter, but each pair of cores
//     keeps FIFO order as one connection does.
//   - disk_full: a shard cannot write, so every message to it waits, in order, until it clears.
// Every ps message passes ClusterLayout::check_ps_message against the host that sent it before
// a core sees it, as the receiving bridge checks the sender's CURVE key.
#include <algorithm>

#include "sim/full_sim.h"

namespace colony::sim::detail {

namespace {

constexpr int drops_max = 16;     // re-sends of one message before the model gives up dropping it
constexpr size_t sent_kept = 32;  // control messages kept per host for replays

// The bytes of `values` floats in `format`, with `scales` (int8: one a row), as the wire codec
// packs them.
uint64_t values_bytes(ValueFormat format, size_t values, size_t scales) {
  switch (format) {
    case ValueFormat::bf16:
    case ValueFormat::fp16:
      return 2 * uint64_t{values};
    case ValueFormat::int8:
      return uint64_t{values} + 4 * uint64_t{scales};
    case ValueFormat::fp32:
      break;
  }
  return 4 * uint64_t{values};
}

uint64_t message_bytes(const PsMessage& m) {
  return header_bytes +
         std::visit(
             [](const auto& x) -> uint64_t {
               using T = std::decay_t<decltype(x)>;
               if constexpr (std::is_same_v<T, PullRequest> || std::is_same_v<T, PullHint>)
                 return 8 * x.keys.size();
               else if constexpr (std::is_same_v<T, PullReply>)
                 return values_bytes(x.format, x.values.size(), x.scales.size());
               else if constexpr (std::is_same_v<T, PushRequest>)
                 return 8 * x.keys.size() + values_bytes(x.format, x.grads.size(), x.scales.size());
               else if constexpr (std::is_same_v<T, DenseReduce> ||
                                  std::is_same_v<T, DenseBroadcast>)
                 return 4 * x.values.size();
               else if constexpr (std::is_same_v<T, PsError>)
                 return x.message.size();
               else
                 return 0;
             },
             m);
}

const MessageHeader& header_of(const PsMessage& m) {
  return std::visit([](const auto& x) -> const MessageHeader& { return x.header; }, m);
}

uint64_t control_bytes(const ControlMessage& m) {
  // A header, plus the layout in a Welcome (an endpoint and a key per member, about 128 bytes).
  const auto* w = std::get_if<Welcome>(&m.body);
  return header_bytes + (w ? 128 * w->members.size() : 0);
}

}  // namespace

uint32_t FullSim::host_of_endpoint(const std::string& e) const {
  const uint32_t host = static_cast<uint32_t>(std::stoul(e.substr(e.rfind('/') + 1)));
  COLONY_ASSERT(endpoint(host) == e && host < coordinator_host_, "not a member endpoint: {}", e);
  return host;
}

uint32_t FullSim::host_of(const HostRef& h) const {
  if (o_.colocate) return 0;
  if (h.coordinator) return coordinator_host_;
  return h.shard ? o_.nodes + h.index : h.index;
}

VirtualNanos FullSim::healed_at(uint32_t a, uint32_t b) const {
  VirtualNanos t = now();
  for (const Partition& p : partitions_)
    if (p.heal_at > now() && ((p.a[a] && p.b[b]) || (p.b[a] && p.a[b]))) t = std::max(t, p.heal_at);
  return t;
}

void FullSim::control(uint32_t from_host, uint32_t to_host, ControlMessage m) {
  if (hosts_[from_host].exited || hosts_[from_host].down) return;  // no process to send it
  const bool heartbeat = std::holds_alternative<Heartbeat>(m.body);
  if (const VirtualNanos heal = healed_at(from_host, to_host); heal > now()) {
    // The transport retries after the heal; the sender's link stays free meanwhile.
    auto retry = [this, from_host, to_host, m = std::move(m)]() mutable {
      control(from_host, to_host, std::move(m));
    };
    if (heartbeat)
      periodic(heal, std::move(retry));
    else
      q_.schedule(heal, std::move(retry));
    return;
  }
  // The receiving transport knows the sender's key (the ZAP user id): members have their own,
  // the coordinator's is empty here (members take control only from it by construction).
  m.sender_key = from_host == coordinator_host_ ? std::string() : key_of(from_host);
  if (garble_control_) garble_control(from_host, to_host, m);
  std::vector<ControlMessage>& kept = sent_to_[to_host];
  kept.push_back(m);
  if (kept.size() > sent_kept) kept.erase(kept.begin());
  const uint64_t bytes = control_bytes(m);
  VirtualNanos arrival = net_.transfer(from_host, to_host, bytes, now());
  ++result_.messages;
  result_.bytes += bytes;
  // One connection per pair of hosts: FIFO. Keyed apart from the pairs of cores.
  VirtualNanos& last = pair_last_[hash_combine(0xc047201, (uint64_t{from_host} << 32) | to_host)];
  arrival = std::max(arrival, last);
  last = arrival;
  auto go = [this, to_host, m = std::move(m)]() mutable { deliver_control(to_host, std::move(m)); };
  if (heartbeat)
    periodic(arrival, std::move(go));
  else
    q_.schedule(arrival, std::move(go));
}

void FullSim::garble_control(uint32_t from_host, uint32_t to_host, const ControlMessage& m) {
  const uint64_t r = rng_.next() % 16;
  if (r >= 4) return;
  ControlMessage extra = m;
  bool garbled = false;
  if (r == 0) {
    // A duplicate of this message.
  } else if (r == 1) {
    // A replay of an older message this host was sent, from the same sender.
    const auto& kept = sent_to_[to_host];
    std::vector<const ControlMessage*> same;
    for (const ControlMessage& k : kept)
      if (k.sender_key == m.sender_key) same.push_back(&k);
    if (same.empty()) return;
    extra = *same[rng_.next() % same.size()];
  } else if (to_host != coordinator_host_) {
    // From the coordinator's key, a message no member may take: nodes outside the layout.
    const NodeId beyond = layout_ ? layout_->nodes() : 1u << 20;
    if (r == 2)
      extra.body = NodesLost{{beyond + static_cast<NodeId>(rng_.next() % 64)}, "garbled"};
    else
      extra.body = ShardsRestarted{{beyond + static_cast<NodeId>(rng_.next() % 64)}};
    garbled = true;
  } else {
    // A member speaking for another: its own key, another member's index.
    const uint32_t members = static_cast<uint32_t>(coordinator_->members().size());
    if (members < 2 || m.from >= members) return;
    extra.from = (m.from + 1 + static_cast<uint32_t>(rng_.next() % (members - 1))) % members;
    garbled = true;
  }
  ++result_.control_faults;
  mix(0x9a4b1e, r);
  const VirtualNanos at =
      net_.transfer(from_host, to_host, control_bytes(extra), now()) + (r == 1 ? 1000 : 0);
  // Like heartbeats, extras do not keep a run going: one that only garbles is idle.
  periodic(at, [this, to_host, garbled, extra = std::move(extra)]() mutable {
    deliver_control(to_host, std::move(extra), garbled);
  });
}

void FullSim::deliver_control(uint32_t host, ControlMessage m, bool garbled) {
  Host& h = hosts_[host];
  mix(0xc0 + host, m.body.index());
  if (h.exited || h.down) return;  // no process there to take it
  if (host != coordinator_host_) {
    MemberHost& mh = members_[host];
    if (!mh.core) return;
    const uint64_t before = mh.core->bad_messages();
    const bool ended = mh.core->phase() == MemberPhase::ended;
    MemberEffects fx;
    mh.core->on_message(m, now_ms(), fx);
    if (garbled && !ended && mh.core->bad_messages() == before)
      violation(fmt::format("the member on host {} took a garbled {} at t={:.6f}s", host,
                            m.body.index(), double(now()) / 1e9));
    return member_effects(host, fx);
  }
  if (job_over_) return;
  const uint64_t before = coordinator_->totals().counters.bad_messages;
  CoordinatorEffects fx;
  coordinator_->on_message(m, now_ms(), fx);
  if (garbled && coordinator_->totals().counters.bad_messages == before)
    violation(fmt::format(
        "the coordinator took a message of kind {} in member {}'s name from {}'s key at t={:.6f}s",
        m.body.index(), m.from, m.sender_key, double(now()) / 1e9));
  coordinator_effects(fx);
}

void FullSim::emit(uint32_t from, Outbox& out, VirtualNanos at) {
  for (Outgoing& o : out) {
    uint32_t id;
    if (!free_flights_.empty()) {
      id = free_flights_.back();
      free_flights_.pop_back();
    } else {
      id = static_cast<uint32_t>(flights_.size());
      flights_.emplace_back();
    }
    const uint32_t generation =
        coordinated_ && from == coordinator_node_ ? 0 : cores_[from].generation;
    flights_[id] = Flight{from, std::move(o), at, generation};
    q_.schedule(at, [this, id] { send(id); });
  }
  out.clear();
}

void FullSim::send(uint32_t id) {
  const uint32_t hf = host_of_node(flights_[id]->from), to = flights_[id]->message.to;
  // The coordinator node only pulls to evaluate, which the simulator does not: nothing is sent to
  // it. A core whose process died sends nothing more.
  const uint32_t from = flights_[id]->from;
  const bool from_core = !(coordinated_ && from == coordinator_node_);
  const bool from_dead =
      from_core && (!cores_[from].live() || cores_[from].generation != flights_[id]->generation);
  const bool dropped = hosts_[hf].exited || hosts_[hf].down || from_dead ||
                       (coordinated_ && (to == coordinator_node_ || hosts_[hf].lost[to]));
  if (!dropped) {
    // Held by a partition: the transport retries after the heal. The message does not take the
    // sender's links meanwhile (the network must see transfers in time order).
    if (const VirtualNanos heal = healed_at(hf, cores_[to].host); heal > now()) {
      q_.schedule(heal, [this, id] { send(id); });
      return;
    }
  }
  Flight f = std::move(*flights_[id]);
  flights_[id].reset();
  free_flights_.push_back(id);
  if (dropped) return;  // the process has ended, or NodesLost named the receiver: dropped
  const uint32_t ht = cores_[to].host;
  const uint64_t bytes = message_bytes(f.message.message);
  VirtualNanos arrival = net_.transfer(hf, ht, bytes, now());
  ++result_.messages;
  result_.bytes += bytes;
  double drop = 0, dup = 0, reorder = 0;
  for (const Lossy& l : lossy_) {
    drop = std::max(drop, l.drop);
    dup = std::max(dup, l.duplicate);
    reorder = std::max(reorder, l.reorder);
  }
  for (int i = 0; i < drops_max && drop > 0 && rng_.uniform() < drop; ++i)
    arrival += static_cast<VirtualNanos>(o_.rto_s * 1e9);
  if (reorder > 0 && rng_.uniform() < reorder)
    arrival += static_cast<VirtualNanos>(rng_.uniform() * 1e6);
  const uint64_t pair = (uint64_t{f.from} << 32) | to;
  VirtualNanos& last = pair_last_[pair];
  arrival = std::max(arrival, last);
  last = arrival;
  if (std::holds_alternative<PushRequest>(f.message.message) ||
      std::holds_alternative<PullReply>(f.message.message))
    timeline(std::holds_alternative<PushRequest>(f.message.message) ? "push" : "pull reply",
             "network", hf, cores_[f.from].tid, f.sent_at, arrival - f.sent_at);
  if (forge_ps_ && coordinated_ && hf != coordinator_host_) forge_ps(hf, f.message.message, to);
  if (dup > 0 && cores_[to].role == Role::shard && rng_.uniform() < dup) {
    PsMessage copy = f.message.message;
    q_.schedule(arrival + 1000, [this, to, copy = std::move(copy)]() mutable {
      deliver(to, std::move(copy), true);
    });
  }
  q_.schedule(arrival, [this, to, m = std::move(f.message.message)]() mutable {
    deliver(to, std::move(m));
  });
}

void FullSim::forge_ps(uint32_t from_host, const PsMessage& m, NodeId to) {
  if (rng_.next() % 64 != 0 || !layout_) return;
  // The same message, in the name of a node of another member (or of a node that does not
  // exist), sent with this host's key.
  PsMessage forged = m;
  const uint32_t nodes = layout_->nodes();
  NodeId as = static_cast<NodeId>(rng_.next() % (nodes + 2));
  std::visit([&](auto& x) { x.header.sender = as; }, forged);
  if (auto* pull = std::get_if<PullRequest>(&forged)) pull->writer = as;
  const auto owner = as < nodes ? layout_->owner(as) : std::nullopt;
  if (owner && layout_->members()[*owner].endpoint == endpoint(from_host)) return;  // its own
  ++result_.ps_forged;
  mix(0xf0e6ed, as);
  const auto origin = layout_->member_of_key(key_of(from_host));
  Status verdict = layout_->check_ps_message(
      forged, to, origin ? MessageOrigin::of_member(*origin) : MessageOrigin{});
  if (verdict.ok())
    violation(fmt::format("a ps message in node {}'s name from host {}'s key passed the check", as,
                          from_host));
  else
    ++result_.bad_messages;  // the bridge drops and counts it; no core sees it
}

void FullSim::deliver(uint32_t to, PsMessage m, bool duplicate) {
  Core& c = cores_[to];
  Host& h = hosts_[c.host];
  mix(to, (uint64_t{header_of(m).sender} << 8) | m.index());
  // No process, or one that has not built its cores yet: the bridge has no route, drops it.
  if (h.exited || h.down || !c.live()) return;
  if (c.role == Role::shard && h.disk_full_until > now()) {
    // The shard's actor blocks on its first write: everything after waits, in order (a
    // restarted shard needs a sender's resync before the pulls it re-sends). What waits is lost
    // if the process dies meanwhile.
    const uint32_t generation = c.generation;
    q_.schedule(h.disk_full_until, [this, to, duplicate, generation, m = std::move(m)]() mutable {
      if (cores_[to].generation == generation) deliver(to, std::move(m), duplicate);
    });
    return;
  }
  process(to, std::move(m), duplicate);
}

void FullSim::inject(const FaultEvent& e) {
  ++result_.failures_injected;
  mix(0xfa, static_cast<uint64_t>(e.kind));
  const VirtualNanos end = now() + static_cast<VirtualNanos>(e.duration_s * 1e9);
  last_heal_ = std::max(last_heal_, end);
  switch (e.kind) {
    case FaultKind::crash: {
      const uint32_t host = host_of(e.hosts[0]);
      crash(host);
      q_.schedule(end, [this, host] { restart(host); });
      break;
    }
    case FaultKind::partition: {
      Partition p{std::vector<bool>(hosts_.size()), std::vector<bool>(hosts_.size()), end};
      for (const HostRef& h : e.hosts) p.a[host_of(h)] = true;
      for (const HostRef& h : e.side_b) p.b[host_of(h)] = true;
      partitions_.push_back(std::move(p));
      timeline("partition", "fault", host_of(e.hosts[0]), 0, now(), end - now());
      break;
    }
    case FaultKind::clog: {
      const uint32_t host = host_of(e.hosts[0]);
      net_.set_clog(host, e.factor);
      timeline("clogged link", "fault", host, 0, now(), end - now());
      q_.schedule(end, [this, host] { net_.set_clog(host, 1.0); });
      break;
    }
    case FaultKind::slow: {
      const uint32_t host = host_of(e.hosts[0]);
      hosts_[host].slow = e.factor;
      timeline("slow", "fault", host, 0, now(), end - now());
      q_.schedule(end, [this, host] { hosts_[host].slow = 1.0; });
      break;
    }
    case FaultKind::lossy:
      lossy_.push_back({e.drop, e.duplicate, e.reorder, end});
      q_.schedule(end, [this, end] {
        std::erase_if(lossy_, [&](const Lossy& l) { return l.end <= end; });
      });
      break;
    case FaultKind::stop: {
      const uint32_t host = host_of(e.hosts[0]);
      stop(host, end);
      break;
    }
    case FaultKind::disk_full: {
      const uint32_t host = host_of(e.hosts[0]);
      hosts_[host].disk_full_until = std::max(hosts_[host].disk_full_until, end);
      timeline("disk full", "fault", host, 0, now(), end - now());
      break;
    }
  }
}

}  // namespace colony::sim::detail
