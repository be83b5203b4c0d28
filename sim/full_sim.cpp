// Full numerics: the real cores on the virtual clock (see sim/full_sim.h for the rooms).
//
// How the cores are driven mirrors actors/embedded_cluster.cpp: a message is handed to the
// core's on_message, a worker is fed batches while it wants them, and the Outbox is carried
// out. Here "carried out" means: leave when the core's modelled compute is done (a core is a
// FIFO server, like an actor's mailbox), cross the modelled network, arrive later.
#include <algorithm>
#include <cmath>

#include "gpu/reduce.h"
#include "sim/full_sim.h"
#include "worker/wiring.h"

namespace colony::sim::detail {

namespace {
constexpr size_t timeline_events_max = 500'000;
}  // namespace

FullSim::FullSim(const SimOptions& o)
    : o_(o),
      rng_(hash_combine(o.seed, 0x51a)),
      net_(o.network, o.colocate ? 1 : o.nodes + o.ps + 1),
      generator_(o.generator ? o.generator
                             : std::make_shared<const Generator>(GeneratorConfig{o.seed, 1.0})) {}

void FullSim::periodic(VirtualNanos at, EventQueue::Action action) {
  ++periodic_pending_;
  q_.schedule(at, [this, action = std::move(action)] {
    --periodic_pending_;
    action();
  });
}

VirtualNanos FullSim::step_ns(const Core& c) {
  double f = hosts_[c.host].slow;
  if (o_.compute.jitter > 0) {
    const double s = std::sqrt(std::log(1 + o_.compute.jitter * o_.compute.jitter));
    const double u1 = std::max(rng_.uniform(), 1e-12), u2 = rng_.uniform();
    const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
    f *= std::exp(s * z - s * s / 2);
  }
  return static_cast<VirtualNanos>(double(step_ns_) * f);
}

void FullSim::violation(std::string v) {
  constexpr size_t violations_max = 100;  // the rest would repeat the first ones
  if (result_.invariant_violations.size() < violations_max)
    result_.invariant_violations.push_back(std::move(v));
}

void FullSim::timeline(std::string name, const char* cat, uint32_t host, uint32_t tid,
                       VirtualNanos start, VirtualNanos duration) {
  if (!o_.record_timeline) return;
  if (result_.timeline.size() >= timeline_events_max) {
    result_.timeline_truncated = true;
    return;
  }
  result_.timeline.push_back(
      {std::move(name), cat, host < o_.nodes ? "worker" : "ps", host, tid, start, duration});
}

MemberInfo FullSim::member_info(uint32_t host) const {
  const bool ps = host >= o_.nodes;
  MemberInfo m{ps ? MemberRole::ps : MemberRole::worker, endpoint(host), "",
               ps ? 1 : o_.gpus_per_node, "sim"};
  m.durable = ps && (o_.durable_ps || o_.replicas > 1);
  if (coordinated_) m.public_key = key_of(host);
  return m;
}

std::vector<MemberInfo> FullSim::members() const {
  std::vector<MemberInfo> members;
  for (uint32_t s = 0; s < o_.ps; ++s) members.push_back(member_info(o_.nodes + s));
  for (uint32_t n = 0; n < o_.nodes; ++n) members.push_back(member_info(n));
  return members;
}

JobSpec FullSim::job() const {
  JobSpec j = job_with_model(JobSpec{}, o_.model);
  j.optimizer = default_optimizer_config(OptimizerKind::ftrl);
  j.seed = o_.seed;
  j.batch = o_.batch;
  j.consistency = o_.consistency;
  j.hierarchical = o_.push == PushKind::hierarchical;
  j.formats.wire = o_.wire_format;
  j.formats.push = o_.push_format;
  return j;
}

Status FullSim::plan(const Welcome& welcome) {
  auto layout = ClusterLayout::make(welcome);
  if (!layout) return layout.status();
  layout_.emplace(std::move(layout.value()));
  const JobSpec& job = welcome.job;
  workers_ = o_.nodes * o_.gpus_per_node;
  aggregators_ = job.hierarchical ? o_.nodes : 0;
  const uint32_t nodes = o_.ps + workers_ + aggregators_;
  cores_.resize(nodes);
  shard_configs_.resize(nodes);
  worker_configs_.resize(nodes);
  aggregator_configs_.resize(nodes);
  durable_.resize(o_.ps);
  shadows_.resize(o_.ps);
  acked_commits_.assign(o_.ps, 0);
  const uint32_t backups = o_.replicas - 1;
  backups_.resize(size_t{o_.ps} * backups);
  replica_sets_.assign(o_.ps, {});
  primary_rows_at_.assign(o_.ps, 0);
  acked_clocks_.assign(o_.ps, {});
  const std::vector<NodeId> senders = layout_->shard_senders();
  for (uint32_t i = 0; i < layout_->members().size(); ++i) {
    const MemberInfo& m = layout_->members()[i];
    const uint32_t host = o_.colocate ? 0 : host_of_endpoint(m.endpoint);
    if (m.role == MemberRole::ps) {
      for (NodeId s = m.first_node; s < m.first_node + m.count; ++s) {
        Core& c = cores_[s];
        c.role = Role::shard;
        c.host = host;
        c.index = s;
        ShardConfig& sc = shard_configs_[s];
        sc = shard_config(job, *layout_, s);
        sc.fault_skip_consistency_gate = skip_gate_;
        sc.fault_skip_resync = skip_resync_;
        auto row_floats = ShardCore::row_floats(sc);
        if (!row_floats) return row_floats.status();
        durable_[s] = std::make_shared<DurableRows>(*row_floats);
        shadows_[s].reset(senders);
        for (uint32_t r = 1; r <= backups; ++r) {
          const uint32_t slot = s * backups + r - 1;
          backups_[slot].shard = s;
          backups_[slot].host = o_.nodes + (s + r) % o_.ps;
          replica_sets_[s].push_back(slot);
        }
      }
      continue;
    }
    for (uint32_t g = 0; g < m.count; ++g) {
      Core& c = cores_[m.first_node + g];
      c.role = Role::worker;
      c.host = host;
      c.tid = g;
      c.index = m.first_node + g - o_.ps;  // replica i of W trains on batches i, i + W, ...
      worker_configs_[m.first_node + g] = worker_config(job, *layout_, m.first_node + g);
    }
    if (!m.has_aggregator) continue;
    Core& c = cores_[m.aggregator];
    c.role = Role::aggregator;
    c.host = host;
    c.tid = m.count;
    c.index = m.aggregator;
    aggregator_configs_[m.aggregator] = aggregator_config(job, *layout_, i);
  }
  return Status();
}

Status FullSim::build_host(uint32_t host, bool resume) {
  for (uint32_t n = 0; n < cores_.size(); ++n) {
    Core& c = cores_[n];
    if (c.host != host) continue;
    if (c.done) --finished_;  // a new process starts its cores over (before the start only)
    const Role role = c.role;
    const uint32_t tid = c.tid, index = c.index, generation = c.generation;
    c = Core{};
    c.generation = generation + 1;
    c.role = role;
    c.host = host;
    c.tid = tid;
    c.index = index;
    c.busy_until = now();
    if (role == Role::shard && o_.replicas > 1 && resume) {
      if (Status s = promote(n); !s.ok()) return s;
    } else if (role == Role::shard) {
      // Replicated shards keep their rows in memory: a store that gives no clocks back.
      auto core = ShardCore::make(shard_configs_[n],
                                  open_sim_store(durable_[n], forget_clocks_ || o_.replicas > 1));
      if (!core) return core.status();
      c.shard = std::move(core.value());
      if (o_.replicas > 1) {
        auto primary = ShardPrimary::make(*c.shard, static_cast<uint32_t>(replica_sets_[n].size()),
                                          replication_faults_);
        if (!primary) return primary.status();
        c.primary = std::move(primary.value());
      }
      if (resume) {
        c.shard->begin_resync();
        shadows_[n].restart(durable_[n]->clocks());
      }
    } else if (role == Role::worker) {
      auto core = WorkerCore::make(worker_configs_[n]);
      if (!core) return core.status();
      c.worker = std::move(core.value());
    } else {
      auto core = AggregatorCore::make(aggregator_configs_[n], make_cpu_reducer());
      if (!core) return core.status();
      c.aggregator = std::move(core.value());
    }
  }
  // The backups this host keeps, built anew before the start; a process that resumes has none
  // (its primaries were told they were lost).
  for (Backup& b : backups_) {
    if (b.host != host || resume) continue;
    b.rows = std::make_shared<DurableRows>(durable_[b.shard]->row_floats());
    auto core = ShardCore::make(shard_configs_[b.shard], open_sim_store(b.rows, true));
    if (!core) return core.status();
    auto backup = ShardBackup::make(std::move(core.value()), replication_faults_);
    if (!backup) return backup.status();
    b.core = std::move(backup.value());
    ++b.generation;
    b.busy_until = now();
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
      if (o_.model.deep())
        generator_->append_criteo_features(row, batch);
      else
        generator_->append_features(row, batch);
    }
    ++c.batches;
    w.add_batch(std::move(batch), out);
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
    ShardShadow& shadow = shadows_[c.index];
    const auto held = push ? shadow.clocks.find(push->header.sender) : shadow.clocks.end();
    const bool sender_done = held != shadow.clocks.end() && held->second == clock_done &&
                             (!shadow.resyncing || shadow.resynced[push->header.sender]);
    if (push && push->keys_of_pull != 0) {
      // A push that leaves its keys out: the shadow applies the keys the shard takes it for, or
      // nothing when the shard will refuse or drop it for its keys.
      if (const std::vector<uint64_t>* keys = c.shard->push_keys(*push)) {
        PushRequest keyed = *push;
        keyed.keys = *keys;
        shadow.apply(keyed);
      }
    } else {
      shadow.apply(m);
    }
    const ShardStats before = c.shard->stats();
    std::vector<ReplicaForward> forwards;
    if (c.primary) {
      // Released only once the backups have it: the clock its acknowledgement will stand for.
      if (push && !push->more)
        unacked_pushes_[hash_combine(hash_combine(c.index, push->header.sender),
                                     push->header.request_id)] = push->clock;
      c.primary->on_message(m, out, forwards, duplicate);
    } else {
      c.shard->on_message(m, out);
    }
    const ShardStats& after = c.shard->stats();
    if (sender_done && after.pushes_applied > before.pushes_applied)
      violation(fmt::format(
          "shard {} applied a push of node {} (clock {}) at t={:.6f}s after that sender was done "
          "or declared lost",
          c.index, push->header.sender, push->clock, double(now()) / 1e9));
    const uint64_t rows =
        after.rows_pulled + after.rows_pushed - before.rows_pulled - before.rows_pushed;
    cost = static_cast<VirtualNanos>(double(rows) * o_.compute.shard_ns_per_row);
    check_shard_output(c, &m, out);
    if (duplicate && !c.primary) out.clear();
    replicate(c.index, forwards, start + cost);
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
  } else {
    const uint64_t contributions = c.aggregator->stats().contributions;
    c.aggregator->on_message(m, out);
    // A replica's push it took: the rows it sums.
    const auto* push = std::get_if<PushRequest>(&m);
    const uint64_t rows = push && c.aggregator->stats().contributions > contributions
                              ? push->grads.size() / o_.model.width()
                              : 0;
    cost = static_cast<VirtualNanos>(double(rows) * o_.compute.aggregator_ns_per_row);
  }
  c.busy_until = start + cost;
  if (cpu != cpus.end()) *cpu = c.busy_until;
  emit(to, out, c.busy_until);
  mark_done(c);
}

void FullSim::mark_done(Core& c) {
  if (c.done || c.role == Role::shard) return;
  const bool done = c.role == Role::worker ? c.worker->done() : c.aggregator->done();
  if (!done) return;
  c.done = true;
  ++finished_;
  result_.simulated_seconds = std::max(result_.simulated_seconds, double(c.busy_until) / 1e9);
  if (!coordinated_ || !members_[c.host].core) return;
  members_[c.host].trained |= host_trained(c.host);
  // The member core hears of it once the core's last messages have left.
  const uint32_t host = c.host;
  const NodeId node = static_cast<NodeId>(&c - cores_.data());
  const uint32_t incarnation = members_[host].incarnations;
  Status error = c.role == Role::worker ? c.worker->error() : c.aggregator->error();
  q_.schedule(c.busy_until, [this, host, node, incarnation, error = std::move(error)] {
    MemberHost& mh = members_[host];
    if (!mh.core || mh.incarnations != incarnation || hosts_[host].down) return;
    MemberEffects fx;
    mh.core->node_done(node, error, fx);
    member_effects(host, fx);
  });
}

Expected<SimResult> FullSim::run(const std::function<void(double)>& progress) {
  result_.numerics = "full";
  if (o_.colocate)
    for (const FaultEvent& e : o_.trace.events)
      if (e.kind == FaultKind::crash || e.kind == FaultKind::stop)
        return Status::invalid_input(fmt::format(
            "--colocate runs the embedded cluster, one process with no recovery: the trace "
            "{} it (drop the {} events, or simulate a cluster of daemons)",
            e.kind == FaultKind::crash ? "crashes" : "stops", to_string(e.kind)));
  result_.sites_enabled = enabled_sites(o_);
  for (const std::string& s : result_.sites_enabled) {
    skip_gate_ |= s == "skip_ssp_gate";
    lose_log_tail_ |= s == "lose_log_tail";
    forget_clocks_ |= s == "forget_clocks";
    skip_resync_ |= s == "skip_resync";
    garble_control_ |= s == "garble_control";
    forge_ps_ |= s == "forge_ps";
    replication_faults_.ack_before_backups |= s == "replica_ack_early";
    replication_faults_.promote_without_clocks |= s == "replica_forget_clocks";
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
  sent_to_.resize(hosts_.size());
  const size_t nodes = o_.ps + workers_ + (o_.push == PushKind::hierarchical ? o_.nodes : 0) + 1;
  for (Host& h : hosts_) {
    h.cpu_free.assign(o_.cpus_per_host, 0);
    if (coordinated_) h.lost.assign(nodes, false);
  }
  result_.step_seconds = double(step_ns_) / 1e9;
  for (const FaultEvent& e : o_.trace.events)
    q_.schedule(static_cast<VirtualNanos>(e.at_s * 1e9), [this, &e] { inject(e); });
  if (coordinated_) {
    // Every host's member process starts at time zero and joins; the cores are built from the
    // Welcome each member gets, and the workers start on its Start.
    CoordinatorConfig cc;
    cc.shards = o_.ps;
    cc.workers = workers_;
    cc.job = job();
    cc.map = map_;
    cc.heartbeat_ms = o_.heartbeat_ms;
    cc.heartbeat_timeout_ms = o_.heartbeat_timeout_ms;
    // As `colony coordinator`: a deep model's dense all-reduce needs every worker member.
    cc.require_all_workers = o_.model.deep();
    for (uint32_t h = 0; h < o_.nodes + o_.ps; ++h)
      cc.key_roles[key_of(h)] = h < o_.nodes ? MemberRole::worker : MemberRole::ps;
    auto core = CoordinatorCore::make(cc, 0);
    if (!core) return core.status();
    coordinator_.emplace(std::move(core.value()));
    members_.resize(o_.nodes + o_.ps);
    arm_coordinator();
    for (uint32_t h = 0; h < o_.nodes + o_.ps; ++h) q_.schedule(0, [this, h] { member_start(h); });
  } else {
    if (Status s = plan(plan_layout(members(), job(), map_)); !s.ok()) return s;
    if (Status s = build_host(0, false); !s.ok()) return s;
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
        if (c.role == Role::worker && c.worker) steps += c.worker->stats().steps;
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
  check_replicas();
  const VirtualNanos end = static_cast<VirtualNanos>(result_.simulated_seconds * 1e9);
  VirtualNanos compute = 0;
  check_end(compute);
  result_.events = q_.executed();
  const double worker_time = double(workers_) * double(end);
  VirtualNanos lost = 0;  // worker-time after a worker's process died
  for (const Core& c : cores_)
    if (c.role == Role::worker && c.dead) lost += std::max<VirtualNanos>(0, end - c.died_at);
  if (end > 0) {
    result_.samples_per_sec_simulated = double(result_.samples) / (double(end) / 1e9);
    result_.comm_overhead_fraction = std::clamp(1.0 - double(compute) / worker_time, 0.0, 1.0);
    result_.effective_training_time_ratio = std::clamp(1.0 - double(lost) / worker_time, 0.0, 1.0);
  }
  VirtualNanos waited = 0;
  for (const auto& [step, w] : step_gate_wait_) waited += w;
  if (end > 0) result_.gate_wait_fraction = std::clamp(double(waited) / worker_time, 0.0, 1.0);
  if (coordinated_) {
    result_.bad_messages += coordinator_->totals().counters.bad_messages;
    result_.ps_restarts = coordinator_->totals().ps_restarts;
    for (const MemberHost& m : members_)
      if (m.core) result_.bad_messages += m.core->bad_messages();
  }
  std::vector<VirtualNanos> step_ends;
  for (const Core& c : cores_)
    if (c.role == Role::worker)
      step_ends.insert(step_ends.end(), c.step_ends.begin(), c.step_ends.end());
  result_.ps_crash_recovery = throughput_recovery(std::move(step_ends), ps_crash_times(o_.trace),
                                                  std::max<uint64_t>(2, 20ull * workers_));
  result_.event_trace_hash = hash_combine(hash_, result_.events);
  return std::move(result_);
}

Expected<SimResult> simulate_full(const SimOptions& options,
                                  const std::function<void(double)>& progress) {
  FullSim sim(options);
  return sim.run(progress);
}

}  // namespace colony::sim::detail
