// Full numerics: the real shard, worker and aggregator cores on the virtual clock.
//
// How the cores are driven mirrors actors/embedded_cluster.cpp: a message is handed to the
// core's on_message, a worker is fed batches while it wants them, and the Outbox is carried
// out. Here "carried out" means: leave when the core's modelled compute is done (a core is a
// FIFO server, like an actor's mailbox), cross the modelled network, arrive later.
//
// Faults, as the transport and process layer see them:
//   - crash: the host's cores stop; messages to it wait in the senders' transports (ZeroMQ
//     queues and reconnects) and arrive after restart; what the host had computed but not yet
//     sent is recomputed (one step's time) and sent after restart. Every core on the host
//     restarts as a fresh core that replays its log of handled messages (for a shard the log
//     stands for the durable push log the design promises; for workers and aggregators, for the
//     checkpoint of their state; the daemons have neither yet). A replay that does not reach
//     the core's state before the crash is reported: the cores must be deterministic.
//   - partition: messages between the sides wait until it heals (the transport retries).
//   - lossy: a dropped message is re-sent after the RTO; a duplicate arrives again shortly
//     after the original (only towards shards, whose pushes are idempotent: the aggregator's
//     and worker's are not, see docs/simulation.md); reorder adds jitter, but each pair of cores
//     keeps FIFO order as one connection does.
//   - disk_full: a shard cannot log, so pushes and clock advances to it wait until it clears.
#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "common/hash.h"
#include "gpu/reduce.h"
#include "ps/shard_core.h"
#include "sim/simulator.h"
#include "worker/aggregator_core.h"
#include "worker/generator.h"
#include "worker/worker_core.h"

namespace colony::sim::detail {

namespace {

constexpr uint64_t header_bytes = 64;
constexpr size_t timeline_events_max = 500'000;
constexpr int drops_max = 16;  // re-sends of one message before the model gives up dropping it

uint64_t message_bytes(const PsMessage& m) {
  return header_bytes + std::visit(
                            [](const auto& x) -> uint64_t {
                              using T = std::decay_t<decltype(x)>;
                              if constexpr (std::is_same_v<T, PullRequest>) return 8 * x.keys.size();
                              else if constexpr (std::is_same_v<T, PullReply>) return 4 * x.values.size();
                              else if constexpr (std::is_same_v<T, PushRequest>)
                                return 8 * x.keys.size() + 4 * x.grads.size();
                              else if constexpr (std::is_same_v<T, PsError>) return x.message.size();
                              else return 0;
                            },
                            m);
}

const MessageHeader& header_of(const PsMessage& m) {
  return std::visit([](const auto& x) -> const MessageHeader& { return x.header; }, m);
}

enum class Role : uint8_t { shard, worker, aggregator };

struct Host {
  bool down = false;
  VirtualNanos down_since = 0;
  double slow = 1.0;
  VirtualNanos disk_full_until = 0;
  std::vector<std::pair<uint32_t, PsMessage>> held_in;   // (core, message) arrived while down
  std::vector<std::pair<uint32_t, Outgoing>> held_out;   // (core, message) not sent before the crash
  std::vector<VirtualNanos> cpu_free;  // when each CPU of the host's pool is next free
};

// What the invariant checker believes a shard holds, rebuilt from the same inputs as the core.
struct ShardShadow {
  std::unordered_map<NodeId, uint32_t> clocks;
  std::unordered_map<uint64_t, uint32_t> versions;  // pushes applied per key
  void reset(const std::vector<NodeId>& senders) {
    clocks.clear();
    versions.clear();
    for (NodeId s : senders) clocks[s] = 0;
  }
  uint32_t min_clock() const {
    uint32_t m = clock_done;
    for (const auto& [s, c] : clocks) m = std::min(m, c);
    return m;
  }
  // Applies a push or clock advance by the protocol's rule (next clock, or clock_done).
  void apply(const PsMessage& m) {
    uint32_t clock = 0;
    const PushRequest* push = std::get_if<PushRequest>(&m);
    if (push) clock = push->clock;
    else if (auto* c = std::get_if<ClockAdvance>(&m)) clock = c->clock;
    else return;
    auto it = clocks.find(header_of(m).sender);
    if (it == clocks.end() || clock <= it->second) return;
    if (clock != clock_done && clock != it->second + 1) return;
    it->second = clock;
    if (push)
      for (uint64_t k : push->keys) ++versions[k];
  }
};

struct Core {
  Role role = Role::worker;
  uint32_t host = 0, tid = 0, index = 0;  // index: shard index or global worker index
  std::unique_ptr<ShardCore> shard;
  std::unique_ptr<WorkerCore> worker;
  std::unique_ptr<AggregatorCore> aggregator;
  ShardConfig shard_config;
  WorkerConfig worker_config;
  AggregatorConfig aggregator_config;
  std::vector<PsMessage> log;  // every message handled, in order (replayed after a crash)
  VirtualNanos busy_until = 0;
  uint32_t batches = 0;
  bool feeding_done = false;
  bool done = false;
  VirtualNanos compute_ns = 0;
  std::vector<VirtualNanos> step_ends;
  std::unordered_map<uint64_t, uint32_t> seen_versions;  // workers: key -> last version read
};

struct Partition {
  std::vector<bool> a, b;  // by host
  VirtualNanos heal_at;
};

struct Lossy {
  double drop, duplicate, reorder;
  VirtualNanos end;
};

struct Flight {
  uint32_t from;
  Outgoing message;
  VirtualNanos sent_at;
};

class FullSim {
 public:
  explicit FullSim(const SimOptions& o)
      : o_(o), rng_(hash_combine(o.seed, 0x51a)), net_(o.network, o.colocate ? 1 : o.nodes + o.ps),
        generator_(o.generator ? o.generator : std::make_shared<const Generator>(GeneratorConfig{o.seed, 1.0})) {}

  Expected<SimResult> run(const std::function<void(double)>& progress);

 private:
  VirtualNanos now() const { return q_.now(); }
  void mix(uint64_t a, uint64_t b) { hash_ = hash_combine(hash_, hash_combine(uint64_t(now()), hash_combine(a, b))); }
  Status build();
  void feed(Core& c, Outbox& out);
  // `duplicate`: a copy the network made; the shard handles it, its replies are not sent (the
  // receiving transport answers one copy per request id).
  void deliver(uint32_t to, PsMessage m, bool duplicate = false);
  void process(uint32_t to, PsMessage m, bool duplicate = false);
  void emit(uint32_t from, Outbox& out, VirtualNanos at);
  void send(uint32_t flight);
  // When no partition separates the two hosts any more (now() when none does now).
  VirtualNanos healed_at(uint32_t a, uint32_t b) const {
    VirtualNanos t = now();
    for (const Partition& p : partitions_)
      if (p.heal_at > now() && ((p.a[a] && p.b[b]) || (p.b[a] && p.a[b]))) t = std::max(t, p.heal_at);
    return t;
  }
  void check_shard_output(Core& c, const PsMessage& in, const Outbox& out);
  void inject(const FaultEvent& e);
  void crash(uint32_t host);
  void restart(uint32_t host);
  void rebuild_shard(Core& c);
  // Rebuilds a worker or aggregator by replaying its log into a fresh core; a replay that does
  // not reach the state the core had is a violation (the cores must be deterministic).
  void rebuild_client(Core& c);
  uint32_t host_of(const HostRef& h) const {
    if (o_.colocate) return 0;
    return h.shard ? o_.nodes + h.index : h.index;
  }
  VirtualNanos step_ns(const Core& c) {
    double f = hosts_[c.host].slow;
    if (o_.compute.jitter > 0) {
      const double s = std::sqrt(std::log(1 + o_.compute.jitter * o_.compute.jitter));
      const double u1 = std::max(rng_.uniform(), 1e-12), u2 = rng_.uniform();
      const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
      f *= std::exp(s * z - s * s / 2);
    }
    return static_cast<VirtualNanos>(double(step_ns_) * f);
  }
  void violation(std::string v) {
    constexpr size_t violations_max = 100;  // the rest would repeat the first ones
    if (result_.invariant_violations.size() < violations_max) result_.invariant_violations.push_back(std::move(v));
  }
  void timeline(std::string name, const char* cat, uint32_t host, uint32_t tid, VirtualNanos start,
                VirtualNanos duration) {
    if (!o_.record_timeline) return;
    if (result_.timeline.size() >= timeline_events_max) {
      result_.timeline_truncated = true;
      return;
    }
    result_.timeline.push_back({std::move(name), cat, host, tid, start, duration});
  }
  bool all_done() const { return finished_ == workers_ + aggregators_; }

  const SimOptions& o_;
  SplitMix64 rng_;
  EventQueue q_;
  Network net_;
  std::shared_ptr<const Generator> generator_;
  ShardMapSpec map_;
  std::vector<Core> cores_;
  std::vector<Host> hosts_;
  std::vector<ShardShadow> shadows_;
  std::vector<std::unordered_map<NodeId, uint32_t>> acked_;  // per shard: sender -> acked clock
  struct PendingPull {
    uint32_t clock;
    std::vector<uint64_t> keys;
    VirtualNanos arrived;
  };
  std::unordered_map<uint64_t, PendingPull> pending_pulls_;  // by (shard, sender, request)
  // Per (worker, step): the longest any of its pulls was held by a shard's gate.
  std::unordered_map<uint64_t, VirtualNanos> step_gate_wait_;
  std::unordered_map<uint64_t, VirtualNanos> pair_last_;
  std::vector<std::optional<Flight>> flights_;
  std::vector<uint32_t> free_flights_;
  std::vector<Partition> partitions_;
  std::vector<Lossy> lossy_;
  uint32_t workers_ = 0, aggregators_ = 0, finished_ = 0;
  VirtualNanos step_ns_ = 0;
  VirtualNanos last_heal_ = 0;
  VirtualNanos lost_ns_ = 0;
  bool skip_gate_ = false, lose_log_tail_ = false;
  // Cores keep their logs only when the trace can crash them: a log holds every message a core
  // handled, rows and gradients included.
  bool logging_ = false;
  uint64_t hash_ = 0;
  SimResult result_;
};

Status FullSim::build() {
  for (const std::string& s : result_.sites_enabled) {
    skip_gate_ |= s == "skip_ssp_gate";
    lose_log_tail_ |= s == "lose_log_tail";
  }
  map_.shards = o_.ps;
  map_.seed = o_.seed;
  map_.vnodes_per_shard = 256;
  const bool hier = o_.push == PushKind::hierarchical;
  workers_ = o_.nodes * o_.gpus_per_node;
  aggregators_ = hier ? o_.nodes : 0;
  const NodeId first_worker = o_.ps, first_aggregator = o_.ps + workers_;
  std::vector<NodeId> shard_nodes(o_.ps), senders;
  for (uint32_t s = 0; s < o_.ps; ++s) shard_nodes[s] = s;
  for (uint32_t i = 0; i < (hier ? aggregators_ : workers_); ++i)
    senders.push_back((hier ? first_aggregator : first_worker) + i);
  const size_t width = o_.model.width();
  hosts_.resize(o_.colocate ? 1 : o_.nodes + o_.ps);
  for (Host& h : hosts_) h.cpu_free.assign(o_.cpus_per_host, 0);
  cores_.resize(o_.ps + workers_ + aggregators_);
  shadows_.resize(o_.ps);
  acked_.resize(o_.ps);
  for (uint32_t s = 0; s < o_.ps; ++s) {
    Core& c = cores_[s];
    c.role = Role::shard;
    c.host = o_.colocate ? 0 : o_.nodes + s;
    c.index = s;
    ShardConfig& sc = c.shard_config;
    sc.id = s;
    sc.shard_index = s;
    sc.width = width;
    sc.optimizer = default_optimizer_config(OptimizerKind::ftrl);
    sc.init = RowInit{o_.seed, 1, 0.01f};
    sc.consistency = o_.consistency;
    sc.senders = senders;
    sc.map = map_;
    sc.fault_skip_consistency_gate = skip_gate_;
    auto core = ShardCore::make(sc);
    if (!core) return core.status();
    c.shard = std::move(core.value());
    shadows_[s].reset(senders);
  }
  for (uint32_t w = 0; w < workers_; ++w) {
    Core& c = cores_[first_worker + w];
    c.role = Role::worker;
    c.host = o_.colocate ? 0 : w / o_.gpus_per_node;
    c.tid = w % o_.gpus_per_node;
    c.index = w;
    WorkerConfig& wc = c.worker_config;
    wc.id = first_worker + w;
    wc.model = o_.model;
    wc.map = map_;
    wc.shard_nodes = shard_nodes;
    if (hier) wc.aggregator = first_aggregator + c.host;
    auto core = WorkerCore::make(wc);
    if (!core) return core.status();
    c.worker = std::move(core.value());
  }
  for (uint32_t a = 0; a < aggregators_; ++a) {
    Core& c = cores_[first_aggregator + a];
    c.role = Role::aggregator;
    c.host = o_.colocate ? 0 : a;
    c.tid = o_.gpus_per_node;
    c.index = a;
    AggregatorConfig& ac = c.aggregator_config;
    ac.id = first_aggregator + a;
    ac.width = width;
    ac.map = map_;
    ac.shard_nodes = shard_nodes;
    for (uint32_t g = 0; g < o_.gpus_per_node; ++g) ac.replicas.push_back(first_worker + a * o_.gpus_per_node + g);
    auto core = AggregatorCore::make(ac, make_cpu_reducer());
    if (!core) return core.status();
    c.aggregator = std::move(core.value());
  }
  step_ns_ = static_cast<VirtualNanos>(std::llround(step_compute_seconds(o_.compute, o_.model, o_.batch) * 1e9));
  return Status();
}

void FullSim::feed(Core& c, Outbox& out) {
  WorkerCore& w = *c.worker;
  while (!c.feeding_done && w.error().ok() && w.wants_batch()) {
    if (c.batches >= o_.steps) {
      w.finish(out);
      c.feeding_done = true;
      break;
    }
    Batch batch;
    RawRow row;
    const uint64_t first = (uint64_t{c.batches} * workers_ + c.index) * o_.batch;
    for (uint64_t i = 0; i < o_.batch; ++i) {
      generator_->generate(Stream::train, first + i, row);
      generator_->append_features(row, batch);
    }
    ++c.batches;
    w.add_batch(std::move(batch), out);
  }
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
    flights_[id] = Flight{from, std::move(o), at};
    q_.schedule(at, [this, id] { send(id); });
  }
  out.clear();
}

void FullSim::send(uint32_t id) {
  const uint32_t hf = cores_[flights_[id]->from].host, to = flights_[id]->message.to, ht = cores_[to].host;
  if (!hosts_[hf].down) {
    // Held by a partition: the transport retries after the heal. The message does not take the
    // sender's links meanwhile (the network must see transfers in time order).
    if (const VirtualNanos heal = healed_at(hf, ht); heal > now()) {
      q_.schedule(heal, [this, id] { send(id); });
      return;
    }
  }
  Flight f = std::move(*flights_[id]);
  flights_[id].reset();
  free_flights_.push_back(id);
  if (hosts_[hf].down) {
    hosts_[hf].held_out.emplace_back(f.from, std::move(f.message));
    return;
  }
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
  if (reorder > 0 && rng_.uniform() < reorder) arrival += static_cast<VirtualNanos>(rng_.uniform() * 1e6);
  const uint64_t pair = (uint64_t{f.from} << 32) | to;
  VirtualNanos& last = pair_last_[pair];
  arrival = std::max(arrival, last);
  last = arrival;
  if (std::holds_alternative<PushRequest>(f.message.message) || std::holds_alternative<PullReply>(f.message.message))
    timeline(std::holds_alternative<PushRequest>(f.message.message) ? "push" : "pull reply", "network", hf,
             cores_[f.from].tid, f.sent_at, arrival - f.sent_at);
  if (dup > 0 && cores_[to].role == Role::shard && rng_.uniform() < dup) {
    PsMessage copy = f.message.message;
    q_.schedule(arrival + 1000, [this, to, copy = std::move(copy)]() mutable { deliver(to, std::move(copy), true); });
  }
  q_.schedule(arrival, [this, to, m = std::move(f.message.message)]() mutable { deliver(to, std::move(m)); });
}

void FullSim::deliver(uint32_t to, PsMessage m, bool duplicate) {
  Core& c = cores_[to];
  Host& h = hosts_[c.host];
  mix(to, (uint64_t{header_of(m).sender} << 8) | m.index());
  if (h.down) {
    if (!duplicate) h.held_in.emplace_back(to, std::move(m));
    return;
  }
  if (c.role == Role::shard && h.disk_full_until > now() &&
      (std::holds_alternative<PushRequest>(m) || std::holds_alternative<ClockAdvance>(m))) {
    q_.schedule(h.disk_full_until,
                [this, to, duplicate, m = std::move(m)]() mutable { deliver(to, std::move(m), duplicate); });
    return;
  }
  process(to, std::move(m), duplicate);
}

void FullSim::check_shard_output(Core& c, const PsMessage& in, const Outbox& out) {
  const ShardShadow& shadow = shadows_[c.index];
  for (const Outgoing& o : out) {
    if (auto* reply = std::get_if<PullReply>(&o.message)) {
      const uint64_t key = hash_combine(hash_combine(c.index, o.to), reply->header.request_id);
      auto it = pending_pulls_.find(key);
      if (it == pending_pulls_.end()) continue;  // a duplicated pull answered again: checked once
      const uint32_t clock = it->second.clock;
      // Only the part of the hold the worker spent idle counts: a pipelined pull waits at the
      // shard for the worker's own push while the worker is still computing.
      const VirtualNanos idle_from = std::max(it->second.arrived, cores_[o.to].busy_until);
      VirtualNanos& waited = step_gate_wait_[(uint64_t{o.to} << 32) | clock];
      waited = std::max(waited, now() - std::min(now(), idle_from));
      const uint32_t min = shadow.min_clock();
      if (!o_.consistency.allows(clock, min))
        violation(fmt::format("ssp bound exceeded: shard {} answered node {}'s pull for step {} at t={:.6f}s "
                              "while the slowest sender was at clock {} ({})",
                              c.index, o.to, clock, double(now()) / 1e9, min, to_string(o_.consistency)));
      auto& seen = cores_[o.to].seen_versions;
      for (uint64_t k : it->second.keys) {
        auto v = shadow.versions.find(k);
        const uint32_t version = v == shadow.versions.end() ? 0 : v->second;
        uint32_t& last = seen[k];
        if (version < last)
          violation(fmt::format("version went backwards: key {:#x} on shard {} read by node {} at version {} "
                                "after {} (t={:.6f}s)",
                                k, c.index, o.to, version, last, double(now()) / 1e9));
        last = std::max(last, version);
      }
      pending_pulls_.erase(it);
    } else if (std::holds_alternative<PushAck>(o.message)) {
      if (auto* push = std::get_if<PushRequest>(&in)) {
        uint32_t& acked = acked_[c.index][o.to];
        acked = std::max(acked, push->clock);
      }
    } else if (auto* err = std::get_if<PsError>(&o.message)) {
      violation(fmt::format("shard {} refused a request of node {} at t={:.6f}s: {}", c.index, o.to,
                            double(now()) / 1e9, err->message));
    }
  }
}

void FullSim::process(uint32_t to, PsMessage m, bool duplicate) {
  Core& c = cores_[to];
  VirtualNanos start = std::max(now(), c.busy_until);
  // With a CPU pool the core also waits for the host's earliest free CPU, and holds it.
  std::vector<VirtualNanos>& cpus = hosts_[c.host].cpu_free;
  auto cpu = std::min_element(cpus.begin(), cpus.end());
  if (cpu != cpus.end()) start = std::max(start, *cpu);
  Outbox out;
  VirtualNanos cost = 0;
  if (c.role == Role::shard) {
    if (auto* pull = std::get_if<PullRequest>(&m))
      pending_pulls_[hash_combine(hash_combine(c.index, pull->header.sender), pull->header.request_id)] = {
          pull->clock, pull->keys, now()};
    shadows_[c.index].apply(m);
    const ShardStats before = c.shard->stats();
    c.shard->on_message(m, out);
    const ShardStats& after = c.shard->stats();
    const uint64_t rows = after.rows_pulled + after.rows_pushed - before.rows_pulled - before.rows_pushed;
    cost = static_cast<VirtualNanos>(double(rows) * o_.compute.shard_ns_per_row);
    check_shard_output(c, m, out);
    if (logging_) c.log.push_back(std::move(m));
    if (duplicate) out.clear();
  } else if (c.role == Role::worker) {
    const uint64_t steps = c.worker->stats().steps;
    c.worker->on_message(m, out);
    for (uint64_t s = steps; s < c.worker->stats().steps; ++s) {
      const VirtualNanos d = step_ns(c);
      timeline(fmt::format("step {}", s), "compute", c.host, c.tid, start + cost, d);
      cost += d;
      c.compute_ns += d;
      c.step_ends.push_back(start + cost);
    }
    feed(c, out);
    if (logging_) c.log.push_back(std::move(m));
  } else {
    const uint64_t contributions = c.aggregator->stats().contributions;
    c.aggregator->on_message(m, out);
    if (logging_) c.log.push_back(std::move(m));
    const uint64_t rows = (c.aggregator->stats().contributions - contributions) * o_.batch;
    cost = static_cast<VirtualNanos>(double(rows) * o_.compute.aggregator_ns_per_row);
  }
  c.busy_until = start + cost;
  if (cpu != cpus.end()) *cpu = c.busy_until;
  if (!c.done) {
    const bool done = c.role == Role::worker ? c.worker->done()
                      : c.role == Role::aggregator ? c.aggregator->done()
                                                   : false;
    if (done) {
      c.done = true;
      ++finished_;
      result_.simulated_seconds = std::max(result_.simulated_seconds, double(c.busy_until) / 1e9);
    }
  }
  emit(to, out, c.busy_until);
}

void FullSim::rebuild_shard(Core& c) {
  auto core = ShardCore::make(c.shard_config);
  COLONY_ASSERT(core.ok(), "rebuilding shard {}: {}", c.index, core.status().message());
  c.shard = std::move(core.value());
  size_t keep = c.log.size();
  if (lose_log_tail_ && keep > 0) keep -= std::min<size_t>(keep, 1 + rng_.next() % 4);
  c.log.resize(keep);
  shadows_[c.index].reset(c.shard_config.senders);
  Outbox discard;
  uint64_t rows = 0;
  for (const PsMessage& m : c.log) {
    shadows_[c.index].apply(m);
    c.shard->on_message(m, discard);
    discard.clear();
  }
  rows = c.shard->stats().rows_pulled + c.shard->stats().rows_pushed;
  c.busy_until = now() + static_cast<VirtualNanos>(double(rows) * o_.compute.shard_ns_per_row);
  for (const auto& [sender, acked] : acked_[c.index]) {
    const uint32_t held = shadows_[c.index].clocks[sender];
    if (held < acked)
      violation(fmt::format("acknowledged push lost: shard {} restarted at t={:.6f}s holding node {}'s clock {} "
                            "but had acknowledged clock {}",
                            c.index, double(now()) / 1e9, sender, held, acked));
  }
}

void FullSim::rebuild_client(Core& c) {
  Outbox discard;
  if (c.role == Role::worker) {
    const uint32_t clock = c.worker->clock();
    const uint64_t steps = c.worker->stats().steps, batches = c.batches;
    auto core = WorkerCore::make(c.worker_config);
    COLONY_ASSERT(core.ok(), "rebuilding worker {}: {}", c.index, core.status().message());
    c.worker = std::move(core.value());
    c.batches = 0;
    c.feeding_done = false;
    feed(c, discard);
    for (const PsMessage& m : c.log) {
      discard.clear();
      c.worker->on_message(m, discard);
      feed(c, discard);
    }
    if (c.worker->clock() != clock || c.worker->stats().steps != steps || c.batches != batches)
      violation(fmt::format("replay diverged: worker {} on node {} rebuilt at clock {} ({} steps, {} batches), "
                            "had clock {} ({} steps, {} batches)",
                            c.tid, c.host, c.worker->clock(), c.worker->stats().steps, c.batches, clock, steps,
                            batches));
  } else {
    const uint64_t pushed = c.aggregator->stats().steps_pushed;
    auto core = AggregatorCore::make(c.aggregator_config, make_cpu_reducer());
    COLONY_ASSERT(core.ok(), "rebuilding aggregator {}: {}", c.index, core.status().message());
    c.aggregator = std::move(core.value());
    for (const PsMessage& m : c.log) {
      discard.clear();
      c.aggregator->on_message(m, discard);
    }
    if (c.aggregator->stats().steps_pushed != pushed)
      violation(fmt::format("replay diverged: aggregator of node {} rebuilt having pushed {} steps, had {}", c.host,
                            c.aggregator->stats().steps_pushed, pushed));
  }
}

void FullSim::crash(uint32_t host) {
  Host& h = hosts_[host];
  if (h.down) return;
  h.down = true;
  h.down_since = now();
  mix(0xc4a54, host);
  timeline("crash", "fault", host, 0, now(), -1);
}

void FullSim::restart(uint32_t host) {
  Host& h = hosts_[host];
  if (!h.down) return;
  h.down = false;
  mix(0x4e57a47, host);
  timeline("restart", "fault", host, 0, now(), -1);
  VirtualNanos resend_at = now();
  for (Core& c : cores_) {
    if (c.host != host) continue;
    if (c.role == Role::shard) rebuild_shard(c);
    else rebuild_client(c);
    if (c.role == Role::worker && !c.done) {
      // The step being computed at the crash is computed again.
      const VirtualNanos redo = std::max<VirtualNanos>(0, std::min(c.busy_until, h.down_since + step_ns_) - h.down_since);
      lost_ns_ += now() - h.down_since + redo;
      c.busy_until = std::max(c.busy_until, now() + redo);
      resend_at = std::max(resend_at, c.busy_until);
    }
    c.busy_until = std::max(c.busy_until, now());
  }
  // What the host had produced before the crash leaves first: replies to the held messages
  // are newer, and each pair of cores keeps FIFO order.
  auto held_out = std::move(h.held_out);
  h.held_out.clear();
  for (auto& [core, o] : held_out) {
    Outbox one;
    one.push_back(std::move(o));
    Core& c = cores_[core];
    c.busy_until = std::max(resend_at, c.busy_until);
    emit(core, one, c.busy_until);
  }
  auto held_in = std::move(h.held_in);
  h.held_in.clear();
  for (auto& [core, m] : held_in) deliver(core, std::move(m));
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
      q_.schedule(end, [this, end] { std::erase_if(lossy_, [&](const Lossy& l) { return l.end <= end; }); });
      break;
    case FaultKind::disk_full: {
      const uint32_t host = host_of(e.hosts[0]);
      hosts_[host].disk_full_until = std::max(hosts_[host].disk_full_until, end);
      timeline("disk full", "fault", host, 0, now(), end - now());
      break;
    }
  }
}

Expected<SimResult> FullSim::run(const std::function<void(double)>& progress) {
  result_.numerics = "full";
  result_.sites_enabled = enabled_sites(o_);
  if (Status s = build(); !s.ok()) return s;
  for (const FaultEvent& e : o_.trace.events) logging_ |= e.kind == FaultKind::crash;
  result_.step_seconds = double(step_ns_) / 1e9;
  for (const FaultEvent& e : o_.trace.events)
    q_.schedule(static_cast<VirtualNanos>(e.at_s * 1e9), [this, &e] { inject(e); });
  for (uint32_t i = 0; i < cores_.size(); ++i) {
    Core& c = cores_[i];
    if (c.role != Role::worker) continue;
    q_.schedule(0, [this, i] {
      Outbox out;
      feed(cores_[i], out);
      emit(i, out, now());
    });
  }
  uint64_t next_progress = 0;
  while (!all_done() && q_.executed() < o_.events_max && q_.run_next()) {
    if (progress && q_.executed() >= next_progress) {
      next_progress = q_.executed() + 100'000;
      uint64_t steps = 0;
      for (const Core& c : cores_)
        if (c.role == Role::worker) steps += c.worker->stats().steps;
      progress(double(steps) / double(uint64_t{workers_} * o_.steps));
    }
  }
  if (!all_done() && q_.executed() >= o_.events_max)
    violation(fmt::format("run stopped after {} events (the events bound) before every worker finished",
                          o_.events_max));
  if (!all_done()) result_.simulated_seconds = double(now()) / 1e9;
  const VirtualNanos end = static_cast<VirtualNanos>(result_.simulated_seconds * 1e9);
  const VirtualNanos bound =
      o_.progress_bound_s > 0 ? static_cast<VirtualNanos>(o_.progress_bound_s * 1e9)
                              : 50 * step_ns_ + static_cast<VirtualNanos>(8 * o_.rto_s * 1e9) + 50'000'000;
  VirtualNanos compute = 0;
  for (const Core& c : cores_) {
    if (c.role == Role::shard) continue;
    const Status& err = c.role == Role::worker ? c.worker->error() : c.aggregator->error();
    const char* what = c.role == Role::worker ? "worker" : "aggregator";
    if (!err.ok()) violation(fmt::format("{} on node {} failed: {}", what, c.host, err.message()));
    if (!c.done)
      violation(fmt::format("no progress: {} {} on node {} did not finish (clock {}) by t={:.6f}s", what,
                            c.role == Role::worker ? c.tid : 0, c.host,
                            c.role == Role::worker ? c.worker->clock() : 0, double(now()) / 1e9));
    if (c.role != Role::worker) continue;
    compute += c.compute_ns;
    result_.steps += c.worker->stats().steps;
    result_.samples += c.worker->stats().samples;
    // Progress after the last fault heals: no gap longer than the bound between the heal, each
    // completed step and the end.
    VirtualNanos prev = last_heal_;
    for (VirtualNanos t : c.step_ends) {
      if (t <= last_heal_) continue;
      if (t - prev > bound)
        violation(fmt::format("slow progress: worker {} on node {} went {:.3f}s without a step after the last "
                              "fault healed at {:.3f}s (bound {:.3f}s)",
                              c.tid, c.host, double(t - prev) / 1e9, double(last_heal_) / 1e9,
                              double(bound) / 1e9));
      prev = t;
    }
  }
  result_.events = q_.executed();
  const double worker_time = double(workers_) * double(end);
  if (end > 0) {
    result_.samples_per_sec_simulated = double(result_.samples) / (double(end) / 1e9);
    result_.comm_overhead_fraction = std::clamp(1.0 - double(compute) / worker_time, 0.0, 1.0);
    result_.effective_training_time_ratio =
        std::clamp(1.0 - double(lost_ns_) / worker_time, 0.0, 1.0);
  }
  VirtualNanos waited = 0;
  for (const auto& [step, w] : step_gate_wait_) waited += w;
  if (end > 0) result_.gate_wait_fraction = std::clamp(double(waited) / worker_time, 0.0, 1.0);
  result_.event_trace_hash = hash_combine(hash_, result_.events);
  return std::move(result_);
}

}  // namespace

Expected<SimResult> simulate_full(const SimOptions& options, const std::function<void(double)>& progress) {
  FullSim sim(options);
  return sim.run(progress);
}

}  // namespace colony::sim::detail
