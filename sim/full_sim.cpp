// Full numerics: the real shard, worker and aggregator cores on the virtual clock.
//
// How the cores are driven mirrors actors/embedded_cluster.cpp: a message is handed to the
// core's on_message, a worker is fed batches while it wants them, and the Outbox is carried
// out. Here "carried out" means: leave when the core's modelled compute is done (a core is a
// FIFO server, like an actor's mailbox), cross the modelled network, arrive later.
//
// Membership, as in actors/daemon.cpp: the real CoordinatorCore runs on a host of its own (not in
// colocated runs: the embedded cluster has none). Every host is a member: it joins, gets its
// Welcome (the cores are built at the nodes it numbers) and Start, heartbeats; the coordinator's
// timers are events, and its effects (ClockAdvance to the shards for a lost worker, NodesLost,
// the end of the job) are carried out here. A host silent past the heartbeat timeout is lost for
// good; a shorter outage recovers by replay as below.
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
#include <optional>
#include <unordered_map>

#include "common/hash.h"
#include "data/generator.h"
#include "gpu/reduce.h"
#include "ps/coordinator_core.h"
#include "ps/shard_core.h"
#include "sim/simulator.h"
#include "worker/aggregator_core.h"
#include "worker/wiring.h"
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
                              if constexpr (std::is_same_v<T, PullRequest>)
                                return 8 * x.keys.size();
                              else if constexpr (std::is_same_v<T, PullReply>)
                                return 4 * x.values.size();
                              else if constexpr (std::is_same_v<T, PushRequest>)
                                return 8 * x.keys.size() + 4 * x.grads.size();
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

enum class Role : uint8_t { shard, worker, aggregator };

struct Host {
  bool down = false;
  VirtualNanos down_since = 0;
  double slow = 1.0;
  VirtualNanos disk_full_until = 0;
  std::vector<std::pair<uint32_t, PsMessage>> held_in;  // (core, message) arrived while down
  std::vector<std::pair<uint32_t, Outgoing>> held_out;  // (core, message) not sent before the crash
  std::vector<VirtualNanos> cpu_free;        // when each CPU of the host's pool is next free
  std::vector<ControlMessage> held_control;  // control messages arrived while down
  std::vector<bool>
      lost;  // by node: NodesLost named it, so this host's transport drops messages to it
  bool exited = false;  // its member process ended (lost the coordinator, or was refused)
};

// The member side of a simulated host (the loop of `colony ps` / `colony worker` in
// actors/daemon.cpp, which is driver code, not a core): join, answer the Welcome with Ready,
// heartbeat, start the workers on Start, report MemberDone, leave when the coordinator is silent.
struct Member {
  bool welcomed = false;
  bool started = false;
  std::optional<MemberDone> done;  // sent
  uint32_t index = 0;              // in the Welcome's member list
  VirtualNanos last_heard = 0;     // the last control message from the coordinator
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
    if (push)
      clock = push->clock;
    else if (auto* c = std::get_if<ClockAdvance>(&m))
      clock = c->clock;
    else
      return;
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
      : o_(o),
        rng_(hash_combine(o.seed, 0x51a)),
        net_(o.network, o.colocate ? 1 : o.nodes + o.ps + 1),
        generator_(o.generator ? o.generator
                               : std::make_shared<const Generator>(GeneratorConfig{o.seed, 1.0})) {}

  Expected<SimResult> run(const std::function<void(double)>& progress);

 private:
  VirtualNanos now() const { return q_.now(); }
  void mix(uint64_t a, uint64_t b) {
    hash_ = hash_combine(hash_, hash_combine(uint64_t(now()), hash_combine(a, b)));
  }
  // Every member as it joins: one per ps host (one shard each), one per worker node.
  std::vector<MemberInfo> members() const;
  // The job every core is built from (the same as the coordinator core's, when there is one).
  JobSpec job() const;
  // Builds every core of the layout (a Welcome's), wired as worker/wiring.h says.
  Status build(const Welcome& welcome);
  static std::string endpoint(uint32_t host) { return fmt::format("sim://host/{}", host); }
  uint32_t host_of_endpoint(const std::string& e) const {
    const uint32_t host = static_cast<uint32_t>(std::stoul(e.substr(e.rfind('/') + 1)));
    COLONY_ASSERT(endpoint(host) == e && host < coordinator_host_, "not a member endpoint: {}", e);
    return host;
  }
  uint32_t host_of_node(NodeId n) const {
    return coordinated_ && n == coordinator_node_ ? coordinator_host_ : cores_[n].host;
  }
  // The coordinator and the members (not colocated runs).
  uint64_t now_ms() const { return static_cast<uint64_t>(now() / 1'000'000); }
  // When no partition separates the two hosts any more (now() when none does now).
  VirtualNanos healed_at(uint32_t a, uint32_t b) const {
    VirtualNanos t = now();
    for (const Partition& p : partitions_)
      if (p.heal_at > now() && ((p.a[a] && p.b[b]) || (p.b[a] && p.a[b])))
        t = std::max(t, p.heal_at);
    return t;
  }
  void control(uint32_t from_host, uint32_t to_host, ControlMessage m);
  void deliver_control(uint32_t host, ControlMessage m);
  void coordinator_effects(CoordinatorEffects& fx);
  void arm_coordinator();
  void member_join(uint32_t host);
  void member_on(uint32_t host, const ControlMessage& m);
  void member_heartbeat(uint32_t host);
  void member_maybe_done(uint32_t host);
  void member_exit(uint32_t host, const char* why);
  // The end-of-job invariant (see check_membership's comment).
  void check_membership();
  // A periodic event (timers, heartbeats): the run ends when nothing else is left for long.
  void periodic(VirtualNanos at, EventQueue::Action action) {
    ++periodic_pending_;
    q_.schedule(at, [this, action = std::move(action)] {
      --periodic_pending_;
      action();
    });
  }
  void feed(Core& c, Outbox& out);
  // `duplicate`: a copy the network made; the shard handles it, its replies are not sent (the
  // receiving transport answers one copy per request id).
  void deliver(uint32_t to, PsMessage m, bool duplicate = false);
  void process(uint32_t to, PsMessage m, bool duplicate = false);
  void emit(uint32_t from, Outbox& out, VirtualNanos at);
  void send(uint32_t flight);
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
    if (h.coordinator) return coordinator_host_;
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
    if (result_.invariant_violations.size() < violations_max)
      result_.invariant_violations.push_back(std::move(v));
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
  bool job_over() const { return coordinated_ ? job_over_ : all_done(); }
  // Whether the coordinator has declared the member on this host lost (or it left).
  bool member_gone(uint32_t host) const {
    return coordinated_ && members_[host].welcomed && coordinator_->gone(members_[host].index);
  }

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
  VirtualNanos overhead_ns_ = 0;  // a worker's CPU per step beyond its compute
  VirtualNanos last_heal_ = 0;
  VirtualNanos lost_ns_ = 0;
  bool skip_gate_ = false, lose_log_tail_ = false;
  // Coordinated runs (not --colocate: the embedded cluster has no coordinator): the real
  // coordinator core on a host of its own, after the ps hosts.
  bool coordinated_ = false;
  uint32_t coordinator_host_ = 0;
  NodeId coordinator_node_ = 0;
  std::optional<CoordinatorCore> coordinator_;
  std::vector<Member> members_;  // by host
  VirtualNanos coordinator_armed_at_ = -1;
  uint64_t coordinator_timer_ = 0;  // the generation of the armed timer event
  uint64_t periodic_pending_ = 0;
  bool job_over_ = false;
  Status build_status_;  // building the cores from the Welcome failed
  // Cores keep their logs only when the trace can crash them: a log holds every message a core
  // handled, rows and gradients included.
  bool logging_ = false;
  uint64_t hash_ = 0;
  SimResult result_;
};

std::vector<MemberInfo> FullSim::members() const {
  std::vector<MemberInfo> members;
  for (uint32_t s = 0; s < o_.ps; ++s)
    members.push_back({MemberRole::ps, endpoint(o_.nodes + s), "", 1, "sim"});
  for (uint32_t n = 0; n < o_.nodes; ++n)
    members.push_back({MemberRole::worker, endpoint(n), "", o_.gpus_per_node, "sim"});
  return members;
}

JobSpec FullSim::job() const {
  JobSpec j = job_with_model(JobSpec{}, o_.model);
  j.optimizer = default_optimizer_config(OptimizerKind::ftrl);
  j.seed = o_.seed;
  j.batch = o_.batch;
  j.consistency = o_.consistency;
  j.hierarchical = o_.push == PushKind::hierarchical;
  return j;
}

Status FullSim::build(const Welcome& welcome) {
  auto layout = ClusterLayout::make(welcome);
  if (!layout) return layout.status();
  const JobSpec& job = welcome.job;
  const bool hier = job.hierarchical;
  workers_ = o_.nodes * o_.gpus_per_node;
  aggregators_ = hier ? o_.nodes : 0;
  const std::vector<NodeId> senders = layout->shard_senders();
  cores_.resize(o_.ps + workers_ + aggregators_);
  shadows_.resize(o_.ps);
  acked_.resize(o_.ps);
  for (uint32_t i = 0; i < layout->members().size(); ++i) {
    const MemberInfo& m = layout->members()[i];
    const uint32_t host = o_.colocate ? 0 : host_of_endpoint(m.endpoint);
    if (m.role == MemberRole::ps) {
      for (NodeId s = m.first_node; s < m.first_node + m.count; ++s) {
        Core& c = cores_[s];
        c.role = Role::shard;
        c.host = host;
        c.index = s;
        c.shard_config = shard_config(job, *layout, s);
        c.shard_config.fault_skip_consistency_gate = skip_gate_;
        auto core = ShardCore::make(c.shard_config);
        if (!core) return core.status();
        c.shard = std::move(core.value());
        shadows_[s].reset(senders);
      }
      continue;
    }
    for (uint32_t g = 0; g < m.count; ++g) {
      Core& c = cores_[m.first_node + g];
      c.role = Role::worker;
      c.host = host;
      c.tid = g;
      c.index = m.first_node + g - o_.ps;  // replica i of W trains on batches i, i + W, ...
      c.worker_config = worker_config(job, *layout, m.first_node + g);
      auto core = WorkerCore::make(c.worker_config);
      if (!core) return core.status();
      c.worker = std::move(core.value());
    }
    if (!m.has_aggregator) continue;
    Core& c = cores_[m.aggregator];
    c.role = Role::aggregator;
    c.host = host;
    c.tid = m.count;
    c.index = m.aggregator;
    c.aggregator_config = aggregator_config(job, *layout, i);
    auto core = AggregatorCore::make(c.aggregator_config, make_cpu_reducer());
    if (!core) return core.status();
    c.aggregator = std::move(core.value());
  }
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

uint64_t control_bytes(const ControlMessage& m) {
  // A header, plus the layout in a Welcome (an endpoint and a key per member, about 128 bytes).
  const auto* w = std::get_if<Welcome>(&m.body);
  return header_bytes + (w ? 128 * w->members.size() : 0);
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

void FullSim::deliver_control(uint32_t host, ControlMessage m) {
  Host& h = hosts_[host];
  mix(0xc0 + host, m.body.index());
  if (h.exited) return;
  if (h.down) {
    h.held_control.push_back(std::move(m));
    return;
  }
  if (host != coordinator_host_) return member_on(host, m);
  if (job_over_) return;
  CoordinatorEffects fx;
  coordinator_->on_message(m, now_ms(), fx);
  coordinator_effects(fx);
}

void FullSim::coordinator_effects(CoordinatorEffects& fx) {
  for (ControlOut& c : fx.control) {
    if (auto* w = std::get_if<Welcome>(&c.message.body); w && cores_.empty()) {
      // Every member builds its cores from the same layout; they are built here once, before
      // any Welcome arrives (cores receive nothing before Start).
      coordinator_node_ = w->coordinator_node;
      if (Status s = build(*w); !s.ok()) {
        build_status_ = s;  // a core refused the options: run() returns it
        job_over_ = true;
        return;
      }
    }
    if (auto* lost = std::get_if<NodesLost>(&c.message.body))
      for (NodeId n : lost->nodes) hosts_[coordinator_host_].lost[n] = true;
    control(coordinator_host_, host_of_endpoint(c.endpoint), std::move(c.message));
  }
  emit(coordinator_node_, fx.ps, now());
  result_.workers_lost = coordinator_->totals().workers_lost;
  if (!fx.failed.ok()) {
    result_.job_error = fx.failed.message();
    job_over_ = true;
  }
  if (fx.training_done) {
    CoordinatorEffects end;
    coordinator_->finish("", end);  // Shutdown to every member: the run ends here
    job_over_ = true;
  }
  if (job_over_) {
    result_.simulated_seconds = double(now()) / 1e9;
    mix(0xe4d, fx.failed.ok());
    return;
  }
  arm_coordinator();
}

void FullSim::arm_coordinator() {
  const VirtualNanos at =
      std::max(now(), static_cast<VirtualNanos>(coordinator_->next_deadline()) * 1'000'000);
  if (at == coordinator_armed_at_) return;
  coordinator_armed_at_ = at;
  const uint64_t generation = ++coordinator_timer_;
  periodic(at, [this, generation] {
    if (generation != coordinator_timer_ || job_over_) return;
    coordinator_armed_at_ = -1;
    CoordinatorEffects fx;
    coordinator_->on_timer(now_ms(), fx);
    coordinator_effects(fx);
  });
}

void FullSim::member_join(uint32_t host) {
  if (members_[host].welcomed || hosts_[host].down) return;
  const bool ps = host >= o_.nodes;
  control(host, coordinator_host_,
          {control_from_unknown,
           Join{MemberInfo{ps ? MemberRole::ps : MemberRole::worker, endpoint(host), "",
                           ps ? 1 : o_.gpus_per_node, "sim"}}});
}

void FullSim::member_on(uint32_t host, const ControlMessage& m) {
  Member& me = members_[host];
  me.last_heard = now();
  if (auto* w = std::get_if<Welcome>(&m.body)) {
    if (me.welcomed) return;
    me.welcomed = true;
    me.index = w->you;
    control(host, coordinator_host_, {me.index, Ready{}});
    const uint32_t every_ms = w->heartbeat_ms;
    periodic(now() + VirtualNanos{every_ms} * 1'000'000, [this, host] { member_heartbeat(host); });
  } else if (std::holds_alternative<Start>(m.body)) {
    if (me.started) return;
    me.started = true;
    for (uint32_t i = 0; i < cores_.size(); ++i) {
      if (cores_[i].role != Role::worker || cores_[i].host != host) continue;
      Outbox out;
      feed(cores_[i], out);
      emit(i, out, std::max(now(), cores_[i].busy_until));
    }
  } else if (auto* lost = std::get_if<NodesLost>(&m.body)) {
    for (NodeId n : lost->nodes) hosts_[host].lost[n] = true;
  } else if (std::holds_alternative<Shutdown>(m.body) || std::holds_alternative<Refuse>(m.body)) {
    member_exit(host, "told to");
  }
}

void FullSim::member_heartbeat(uint32_t host) {
  if (hosts_[host].exited || job_over_) return;
  const VirtualNanos every = VirtualNanos{o_.heartbeat_ms} * 1'000'000;
  periodic(now() + every, [this, host] { member_heartbeat(host); });
  if (hosts_[host].down) return;
  Member& me = members_[host];
  if (now() > me.last_heard + VirtualNanos{o_.heartbeat_timeout_ms} * 1'000'000)
    return member_exit(host, "lost the coordinator");
  uint64_t samples = 0;
  for (const Core& c : cores_)
    if (c.host == host && c.role == Role::worker) samples += c.worker->stats().samples;
  control(host, coordinator_host_, {me.index, Heartbeat{samples}});
}

void FullSim::member_maybe_done(uint32_t host) {
  Member& me = members_[host];
  if (!coordinated_ || !me.started || me.done || host >= o_.nodes) return;
  MemberDone d;
  for (const Core& c : cores_) {
    if (c.host != host || c.role == Role::shard) continue;
    if (!c.done) return;
    if (c.role != Role::worker) continue;
    const WorkerStats& st = c.worker->stats();
    d.samples += st.samples;
    d.loss_sum += st.loss_sum;
    d.steps += st.steps;
    d.pull_messages += st.pull_messages;
    d.push_messages += st.push_messages;
    d.push_bytes += st.push_bytes;
    if (!c.worker->error().ok() && d.error.empty()) d.error = c.worker->error().message();
  }
  me.done = d;
  // It leaves once the cores' last messages have.
  VirtualNanos at = now();
  for (const Core& c : cores_)
    if (c.host == host) at = std::max(at, c.busy_until);
  q_.schedule(at, [this, host, d = std::move(d)]() mutable {
    control(host, coordinator_host_, {members_[host].index, std::move(d)});
  });
}

void FullSim::member_exit(uint32_t host, const char* why) {
  Host& h = hosts_[host];
  if (h.exited) return;
  h.exited = true;
  h.held_in.clear();
  h.held_out.clear();
  h.held_control.clear();
  mix(0xe71, host);
  timeline(fmt::format("member exits ({})", why), "fault", host, 0, now(), -1);
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
  const uint32_t hf = host_of_node(flights_[id]->from), to = flights_[id]->message.to;
  // The coordinator node only pulls to evaluate, which the simulator does not: nothing is sent to
  // it.
  const bool dropped =
      hosts_[hf].exited || (coordinated_ && (to == coordinator_node_ || hosts_[hf].lost[to]));
  if (!dropped && !hosts_[hf].down) {
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
  if (dropped) return;  // the member has ended, or NodesLost named the receiver: dropped
  const uint32_t ht = cores_[to].host;
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

void FullSim::deliver(uint32_t to, PsMessage m, bool duplicate) {
  Core& c = cores_[to];
  Host& h = hosts_[c.host];
  mix(to, (uint64_t{header_of(m).sender} << 8) | m.index());
  if (h.exited) return;
  if (h.down) {
    if (!duplicate) h.held_in.emplace_back(to, std::move(m));
    return;
  }
  if (c.role == Role::shard && h.disk_full_until > now() &&
      (std::holds_alternative<PushRequest>(m) || std::holds_alternative<ClockAdvance>(m))) {
    q_.schedule(h.disk_full_until, [this, to, duplicate, m = std::move(m)]() mutable {
      deliver(to, std::move(m), duplicate);
    });
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
        violation(fmt::format(
            "ssp bound exceeded: shard {} answered node {}'s pull for step {} at t={:.6f}s "
            "while the slowest sender was at clock {} ({})",
            c.index, o.to, clock, double(now()) / 1e9, min, to_string(o_.consistency)));
      auto& seen = cores_[o.to].seen_versions;
      for (uint64_t k : it->second.keys) {
        auto v = shadow.versions.find(k);
        const uint32_t version = v == shadow.versions.end() ? 0 : v->second;
        uint32_t& last = seen[k];
        if (version < last)
          violation(fmt::format(
              "version went backwards: key {:#x} on shard {} read by node {} at version {} "
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
      pending_pulls_[hash_combine(hash_combine(c.index, pull->header.sender),
                                  pull->header.request_id)] = {pull->clock, pull->keys, now()};
    // A sender the shard holds at clock_done (finished, or declared lost by the coordinator)
    // must have nothing applied from then on: what it still sends is a duplicate.
    const auto* push = std::get_if<PushRequest>(&m);
    const auto held =
        push ? shadows_[c.index].clocks.find(push->header.sender) : shadows_[c.index].clocks.end();
    const bool sender_done = held != shadows_[c.index].clocks.end() && held->second == clock_done;
    shadows_[c.index].apply(m);
    const ShardStats before = c.shard->stats();
    c.shard->on_message(m, out);
    const ShardStats& after = c.shard->stats();
    if (sender_done && after.pushes_applied > before.pushes_applied)
      violation(fmt::format(
          "shard {} applied a push of node {} (clock {}) at t={:.6f}s after that sender was done "
          "or declared lost",
          c.index, push->header.sender, push->clock, double(now()) / 1e9));
    const uint64_t rows =
        after.rows_pulled + after.rows_pushed - before.rows_pulled - before.rows_pushed;
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
      cost += d + overhead_ns_;
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
    const bool done = c.role == Role::worker       ? c.worker->done()
                      : c.role == Role::aggregator ? c.aggregator->done()
                                                   : false;
    if (done) {
      c.done = true;
      ++finished_;
      result_.simulated_seconds = std::max(result_.simulated_seconds, double(c.busy_until) / 1e9);
    }
  }
  emit(to, out, c.busy_until);
  if (c.done && c.role != Role::shard) member_maybe_done(c.host);
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
      violation(fmt::format(
          "acknowledged push lost: shard {} restarted at t={:.6f}s holding node {}'s clock {} "
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
    // A worker is fed from its start (Start from the coordinator), as the original was.
    const bool started = !coordinated_ || members_[c.host].started;
    if (started) feed(c, discard);
    for (const PsMessage& m : c.log) {
      discard.clear();
      c.worker->on_message(m, discard);
      if (started) feed(c, discard);
    }
    if (c.worker->clock() != clock || c.worker->stats().steps != steps || c.batches != batches)
      violation(fmt::format(
          "replay diverged: worker {} on node {} rebuilt at clock {} ({} steps, {} batches), "
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
      violation(fmt::format(
          "replay diverged: aggregator of node {} rebuilt having pushed {} steps, had {}", c.host,
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
  if (h.exited)
    return;  // its member had ended: a new process would be refused (the job has started)
  mix(0x4e57a47, host);
  timeline("restart", "fault", host, 0, now(), -1);
  VirtualNanos resend_at = now();
  for (Core& c : cores_) {
    if (c.host != host) continue;
    if (c.role == Role::shard)
      rebuild_shard(c);
    else
      rebuild_client(c);
    if (c.role == Role::worker && !c.done) {
      // The step being computed at the crash is computed again.
      const VirtualNanos redo =
          std::max<VirtualNanos>(0, std::min(c.busy_until, h.down_since + step_ns_) - h.down_since);
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
  if (!coordinated_) return;
  // The member process comes back with its session: it waits a whole timeout for the
  // coordinator, and joins if it had not been welcomed. Declared lost meanwhile, it hears nothing
  // more (the coordinator writes it off; the others drop what goes to its nodes) and leaves.
  members_[host].last_heard = now();
  member_join(host);
  // A Ready or MemberDone lost in the crash is sent again (the coordinator takes either once).
  if (members_[host].welcomed && !members_[host].started)
    control(host, coordinator_host_, {members_[host].index, Ready{}});
  if (members_[host].done)
    control(host, coordinator_host_, {members_[host].index, *members_[host].done});
  auto held_control = std::move(h.held_control);
  h.held_control.clear();
  for (ControlMessage& m : held_control) deliver_control(host, std::move(m));
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
    case FaultKind::disk_full: {
      const uint32_t host = host_of(e.hosts[0]);
      hosts_[host].disk_full_until = std::max(hosts_[host].disk_full_until, end);
      timeline("disk full", "fault", host, 0, now(), end - now());
      break;
    }
  }
}

void FullSim::check_membership() {
  // The job ends (training done) iff every worker member finished or was lost.
  bool all_finished_or_lost = true;
  for (uint32_t host = 0; host < o_.nodes; ++host) {
    bool finished = members_[host].started;
    for (const Core& c : cores_)
      if (c.host == host && c.role != Role::shard) finished &= c.done;
    if (finished || member_gone(host)) continue;
    all_finished_or_lost = false;
    if (job_over_ && result_.job_error.empty())
      violation(fmt::format(
          "the coordinator ended the job at t={:.6f}s while worker node {} had neither finished "
          "nor been lost",
          double(now()) / 1e9, host));
  }
  if (!job_over_ && all_finished_or_lost)
    violation(fmt::format(
        "every worker finished or was lost but the coordinator had not ended the job by t={:.6f}s",
        double(now()) / 1e9));
  result_.members = static_cast<uint32_t>(coordinator_->members().size());
}

Expected<SimResult> FullSim::run(const std::function<void(double)>& progress) {
  result_.numerics = "full";
  result_.sites_enabled = enabled_sites(o_);
  for (const std::string& s : result_.sites_enabled) {
    skip_gate_ |= s == "skip_ssp_gate";
    lose_log_tail_ |= s == "lose_log_tail";
  }
  map_.shards = o_.ps;
  map_.seed = o_.seed;
  map_.vnodes_per_shard = 256;
  workers_ = o_.nodes * o_.gpus_per_node;
  step_ns_ = static_cast<VirtualNanos>(
      std::llround(step_compute_seconds(o_.compute, o_.model, o_.batch) * 1e9));
  overhead_ns_ =
      static_cast<VirtualNanos>(std::llround(o_.compute.worker_ns_per_sample * o_.batch));
  coordinated_ = !o_.colocate;
  coordinator_host_ = o_.colocate ? 0 : o_.nodes + o_.ps;
  hosts_.resize(o_.colocate ? 1 : o_.nodes + o_.ps + 1);
  const size_t nodes = o_.ps + workers_ + (o_.push == PushKind::hierarchical ? o_.nodes : 0) + 1;
  for (Host& h : hosts_) {
    h.cpu_free.assign(o_.cpus_per_host, 0);
    if (coordinated_) h.lost.assign(nodes, false);
  }
  for (const FaultEvent& e : o_.trace.events) logging_ |= e.kind == FaultKind::crash;
  result_.step_seconds = double(step_ns_) / 1e9;
  for (const FaultEvent& e : o_.trace.events)
    q_.schedule(static_cast<VirtualNanos>(e.at_s * 1e9), [this, &e] { inject(e); });
  if (coordinated_) {
    // Every host joins the coordinator at time zero; the cores are built from its Welcome and
    // the workers start on its Start.
    CoordinatorConfig cc;
    cc.shards = o_.ps;
    cc.workers = workers_;
    cc.job = job();
    cc.map = map_;
    cc.heartbeat_ms = o_.heartbeat_ms;
    cc.heartbeat_timeout_ms = o_.heartbeat_timeout_ms;
    auto core = CoordinatorCore::make(cc, 0);
    if (!core) return core.status();
    coordinator_.emplace(std::move(core.value()));
    members_.resize(o_.nodes + o_.ps);
    arm_coordinator();
    for (uint32_t h = 0; h < o_.nodes + o_.ps; ++h) q_.schedule(0, [this, h] { member_join(h); });
  } else {
    if (Status s = build(plan_layout(members(), job(), map_)); !s.ok()) return s;
    for (uint32_t i = 0; i < cores_.size(); ++i) {
      if (cores_[i].role != Role::worker) continue;
      q_.schedule(0, [this, i] {
        Outbox out;
        feed(cores_[i], out);
        emit(i, out, now());
      });
    }
  }
  // With a coordinator, timers and heartbeats never stop: the run also ends (a deadlock) when
  // nothing else has happened for two heartbeat timeouts, by which time every loss it could
  // still declare has been declared.
  const VirtualNanos idle_max = 2 * VirtualNanos{o_.heartbeat_timeout_ms} * 1'000'000;
  VirtualNanos idle_since = -1;
  uint64_t next_progress = 0;
  while (!job_over() && q_.executed() < o_.events_max) {
    if (q_.pending() > periodic_pending_)
      idle_since = -1;
    else if (idle_since < 0)
      idle_since = now();
    else if (now() - idle_since > idle_max)
      break;
    if (!q_.run_next()) break;
    if (progress && q_.executed() >= next_progress) {
      next_progress = q_.executed() + 100'000;
      uint64_t steps = 0;
      for (const Core& c : cores_)
        if (c.role == Role::worker) steps += c.worker->stats().steps;
      progress(double(steps) / double(uint64_t{workers_} * o_.steps));
    }
  }
  if (!build_status_.ok()) return build_status_;
  if (!job_over() && q_.executed() >= o_.events_max)
    violation(
        fmt::format("run stopped after {} events (the events bound) before every worker finished",
                    o_.events_max));
  if (!job_over()) result_.simulated_seconds = double(now()) / 1e9;
  if (coordinated_) check_membership();
  const VirtualNanos end = static_cast<VirtualNanos>(result_.simulated_seconds * 1e9);
  const VirtualNanos bound =
      o_.progress_bound_s > 0
          ? static_cast<VirtualNanos>(o_.progress_bound_s * 1e9)
          : 50 * step_ns_ + static_cast<VirtualNanos>(8 * o_.rto_s * 1e9) + 50'000'000;
  VirtualNanos compute = 0;
  for (const Core& c : cores_) {
    if (c.role == Role::shard) continue;
    const Status& err = c.role == Role::worker ? c.worker->error() : c.aggregator->error();
    const char* what = c.role == Role::worker ? "worker" : "aggregator";
    if (!err.ok()) violation(fmt::format("{} on node {} failed: {}", what, c.host, err.message()));
    // A lost member's cores, or any core of a job the coordinator failed, need not finish.
    const bool excused = member_gone(c.host) || !result_.job_error.empty();
    if (!c.done && !excused)
      violation(fmt::format("no progress: {} {} on node {} did not finish (clock {}) by t={:.6f}s",
                            what, c.role == Role::worker ? c.tid : 0, c.host,
                            c.role == Role::worker ? c.worker->clock() : 0, double(now()) / 1e9));
    if (c.role != Role::worker) continue;
    compute += c.compute_ns;
    result_.steps += c.worker->stats().steps;
    result_.samples += c.worker->stats().samples;
    // Progress after the last fault heals: no gap longer than the bound between the heal, each
    // completed step and the end.
    VirtualNanos prev = last_heal_;
    for (VirtualNanos t : excused ? std::vector<VirtualNanos>{} : c.step_ends) {
      if (t <= last_heal_) continue;
      if (t - prev > bound)
        violation(fmt::format(
            "slow progress: worker {} on node {} went {:.3f}s without a step after the last "
            "fault healed at {:.3f}s (bound {:.3f}s)",
            c.tid, c.host, double(t - prev) / 1e9, double(last_heal_) / 1e9, double(bound) / 1e9));
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

Expected<SimResult> simulate_full(const SimOptions& options,
                                  const std::function<void(double)>& progress) {
  FullSim sim(options);
  return sim.run(progress);
}

}  // namespace colony::sim::detail
