// Membership in the simulator, as in actors/coordinator_daemon.cpp and actors/member_daemon.cpp:
// the real CoordinatorCore runs on a host of its own (not in colocated runs: the embedded
// cluster has none), and every member host runs a MemberCore. Their timers are events, their
// effects are carried out here: control messages cross the network, cores are built from the
// Welcome a member takes, workers start on Start, lost nodes are no longer sent to, and clients
// resync with restarted shards.
//
// A crash kills the host's process: its member core and cores are gone, only a ps's durable
// rows survive (sim/sim_store.h). The restart starts a new process with a new incarnation,
// which joins again; the coordinator core decides what becomes of it (see sim/full_sim.h).
// A stop (SIGTERM) goes through the member core as in `colony ps`: the shards drain, the
// member leaves (Leave::drained) and exits; then the process is gone as after a crash, with its
// durable store whole, and a new one starts at the stop's end.
#include <algorithm>

#include "sim/full_sim.h"
#include "worker/counters.h"

namespace colony::sim::detail {

void FullSim::coordinator_effects(CoordinatorEffects& fx) {
  for (ControlOut& c : fx.control) {
    if (auto* w = std::get_if<Welcome>(&c.message.body); w && !layout_) {
      // Every member builds its cores from the same layout: it is planned here once, and each
      // member builds its own cores when it takes its Welcome.
      coordinator_node_ = w->coordinator_node;
      if (Status s = plan(*w); !s.ok()) {
        build_status_ = s;  // a core refused the options: run() returns it
        job_over_ = true;
        return;
      }
    }
    // As the coordinator daemon's bridge: no more messages to lost nodes, until they are back.
    if (auto* lost = std::get_if<NodesLost>(&c.message.body))
      for (NodeId n : lost->nodes) hosts_[coordinator_host_].lost[n] = true;
    if (auto* back = std::get_if<ShardsRestarted>(&c.message.body))
      for (NodeId n : back->nodes) hosts_[coordinator_host_].lost[n] = false;
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

void FullSim::member_start(uint32_t host) {
  MemberHost& mh = members_[host];
  if (hosts_[host].down) return;
  ++mh.incarnations;
  hosts_[host].exited = false;
  // Control messages of the last process are not replayed to or from the new one: a CURVE
  // session is the process's own.
  sent_to_[host].clear();
  mh.restart_at.reset();
  std::erase_if(sent_to_[coordinator_host_],
                [&](const ControlMessage& m) { return m.sender_key == key_of(host); });
  MemberConfig mc;
  mc.me = member_info(host);
  mc.me.incarnation = hash_combine(hash_combine(o_.seed, host), mh.incarnations) | 1;
  mc.join_timeout_ms = 60'000;
  mc.join_retry_ms = std::max<uint32_t>(1, o_.heartbeat_ms);
  mc.notice_ms = 60'000;
  mc.coordinator = "sim://coordinator";
  auto core = MemberCore::make(mc, now_ms());
  COLONY_ASSERT(core.ok(), "member of host {}: {}", host, core.status().message());
  mh.core.emplace(std::move(core.value()));
  mix(0x5747, host);
  MemberEffects fx;
  mh.core->start(now_ms(), fx);
  member_effects(host, fx);
}

void FullSim::fill_counters(uint32_t host, ControlBody& body) const {
  if (auto* h = std::get_if<Heartbeat>(&body)) {
    for (const Core& c : cores_)
      if (c.host == host && c.role == Role::worker && c.live())
        h->samples += c.worker->stats().samples;
  } else if (auto* d = std::get_if<MemberDone>(&body)) {
    std::vector<const WorkerCore*> replicas;
    std::vector<const AggregatorCore*> aggregators;
    for (const Core& c : cores_) {
      if (c.host != host || !c.live()) continue;
      if (c.role == Role::worker) replicas.push_back(c.worker.get());
      if (c.role == Role::aggregator) aggregators.push_back(c.aggregator.get());
    }
    const uint64_t own = d->counters.bad_messages;
    d->counters = core_counters(replicas, aggregators);
    d->counters.bad_messages = own;
  } else if (auto* s = std::get_if<ShardSummary>(&body)) {
    for (const Core& c : cores_) {
      if (c.host != host || c.role != Role::shard || !c.live()) continue;
      s->table_rows += c.shard->rows();
      s->table_bytes += c.shard->table_bytes();
      s->pulls_deferred += c.shard->stats().pulls_deferred;
      s->rows_not_admitted += c.shard->stats().rows_not_admitted;
      s->updates_dropped += c.shard->stats().updates_dropped;
      s->rows_evicted += c.shard->stats().rows_evicted;
      s->updates_not_finite += c.shard->stats().updates_not_finite;
    }
  }
}

void FullSim::member_effects(uint32_t host, MemberEffects& fx) {
  MemberHost& mh = members_[host];
  while (mh.core) {
    MemberEffects e = std::exchange(fx, MemberEffects{});
    if (e.build) {
      mh.index = mh.core->you();
      Status s = build_host(host, e.build->resume);
      if (!s.ok() && s.code() != Status::Code::not_found) {
        build_status_ = s;
        job_over_ = true;
        return;
      }
      // Shards taken from backups are Ready once their rows have crossed from the backups' hosts.
      VirtualNanos ready_at = now();
      for (const auto& [from, bytes] : std::exchange(copies_, {}))
        ready_at = std::max(ready_at,
                            replica_transfer(from, host, bytes,
                                             hash_combine(0xc09f, (uint64_t{from} << 32) | host)));
      for (uint32_t shard = 0; shard < o_.ps; ++shard)
        if (cores_[shard].host == host) primary_rows_at_[shard] = ready_at;
      if (s.ok() && ready_at > now()) {
        const uint32_t incarnation = mh.incarnations;
        q_.schedule(ready_at, [this, host, incarnation] {
          MemberHost& m = members_[host];
          if (!m.core || m.incarnations != incarnation || hosts_[host].down) return;
          MemberEffects later;
          m.core->built(Status(), now_ms(), later);
          member_effects(host, later);
        });
      } else {
        // A replicated shard none of whose replicas is left: the member says so and leaves.
        mh.core->built(s, now_ms(), fx);
      }
      if (s.ok()) rebuild_backups();
    }
    if (e.start)
      for (uint32_t i = 0; i < cores_.size(); ++i) {
        Core& c = cores_[i];
        if (c.role != Role::worker || c.host != host || !c.live()) continue;
        Outbox out;
        feed(c, out);
        emit(i, out, std::max(now(), c.busy_until));
      }
    for (NodeId n : e.lost) {
      hosts_[host].lost[n] = true;
      // A lost ps host kept backups: this host's primaries stop waiting for them.
      if (o_.replicas > 1 && n < o_.ps) backups_lost(host, cores_[n].host);
    }
    if (!e.lost.empty()) rebuild_backups();
    if (!e.restarted.empty()) {
      for (NodeId n : e.restarted) hosts_[host].lost[n] = false;
      for (uint32_t i = 0; i < cores_.size(); ++i) {
        Core& c = cores_[i];
        if (c.host != host || c.role == Role::shard || !c.live()) continue;
        Outbox out;
        if (c.role == Role::worker)
          c.worker->on_shards_restarted(e.restarted, out);
        else
          c.aggregator->on_shards_restarted(e.restarted, out);
        ++result_.resyncs;
        mix(0x4e5c, i);
        emit(i, out, std::max(now(), c.busy_until));
      }
      rebuild_backups();
    }
    if (e.drain) {
      // The shards (and backups) handle what they were sent, then the member leaves.
      const uint32_t incarnation = mh.incarnations;
      q_.schedule(host_idle_at(host), [this, host, incarnation] {
        MemberHost& m = members_[host];
        if (!m.core || m.incarnations != incarnation || hosts_[host].down) return;
        MemberEffects drained;
        m.core->drained(drained);
        member_effects(host, drained);
      });
    }
    const uint32_t incarnation = mh.incarnations;
    for (ControlBody& body : e.control) {
      fill_counters(host, body);
      ControlMessage m{
          mh.core->phase() == MemberPhase::joining ? control_from_unknown : mh.core->you(),
          std::move(body),
          {},
          mh.core->incarnation()};
      if (!std::holds_alternative<MemberDone>(m.body)) {
        control(host, coordinator_host_, std::move(m));
        continue;
      }
      // It leaves once the cores' last messages have.
      q_.schedule(host_idle_at(host), [this, host, incarnation, m = std::move(m)]() mutable {
        if (members_[host].incarnations == incarnation)
          control(host, coordinator_host_, std::move(m));
      });
    }
    if (e.exit) {
      if (mh.restart_at && !job_over_) {
        // It was stopped: the process is gone, and the supervisor starts it again.
        const VirtualNanos at = std::max(now(), *mh.restart_at);
        member_exit(host, e.exit->ok() ? std::string("stopped by SIGTERM") : e.exit->message());
        process_gone(host, /*crashed=*/false);
        q_.schedule(at, [this, host] { restart(host); });
        break;
      }
      member_exit(host, e.exit->ok() ? std::string("the job is over") : e.exit->message());
    }
    if (fx.empty()) break;
  }
  arm_member(host);
}

VirtualNanos FullSim::host_idle_at(uint32_t host) const {
  VirtualNanos at = now();
  for (const Core& c : cores_)
    if (c.host == host) at = std::max(at, c.busy_until);
  return at;
}

void FullSim::arm_member(uint32_t host) {
  MemberHost& mh = members_[host];
  if (!mh.core || mh.core->phase() == MemberPhase::ended) return;
  const uint64_t deadline = mh.core->next_deadline();
  if (deadline == UINT64_MAX) return;
  const VirtualNanos at = std::max(now(), static_cast<VirtualNanos>(deadline) * 1'000'000);
  if (at == mh.armed_at) return;
  mh.armed_at = at;
  const uint64_t generation = ++mh.timer;
  periodic(at, [this, host, generation] {
    MemberHost& mh = members_[host];
    if (generation != mh.timer || !mh.core || job_over_) return;
    mh.armed_at = -1;
    MemberEffects fx;
    mh.core->on_timer(now_ms(), fx);
    member_effects(host, fx);
  });
}

void FullSim::member_exit(uint32_t host, const std::string& why) {
  Host& h = hosts_[host];
  if (h.exited) return;
  h.exited = true;
  // Its process ended: so did the backups it kept (at the job's end they stay, for the checker).
  if (!job_over_) drop_backups_on(host);
  mix(0xe71, host);
  timeline(fmt::format("member exits ({})", why), "fault", host, 0, now(), -1);
}

void FullSim::crash(uint32_t host) {
  if (hosts_[host].down) return;
  mix(0xc4a54, host);
  timeline("crash", "fault", host, 0, now(), -1);
  process_gone(host, /*crashed=*/true);
}

void FullSim::stop(uint32_t host, VirtualNanos restart_at) {
  MemberHost& mh = members_[host];
  if (!coordinated_ || hosts_[host].down || hosts_[host].exited || !mh.core) return;
  mix(0x5709, host);
  timeline("SIGTERM", "fault", host, 0, now(), -1);
  mh.restart_at = restart_at;
  MemberEffects fx;
  mh.core->stop(fx);
  member_effects(host, fx);
}

void FullSim::process_gone(uint32_t host, bool crashed) {
  Host& h = hosts_[host];
  h.down = true;
  if (coordinated_) {
    MemberHost& mh = members_[host];
    if (mh.core) result_.bad_messages += mh.core->bad_messages();
    mh.core.reset();
    mh.restart_at.reset();
    ++mh.timer;
    mh.armed_at = -1;
  }
  for (uint32_t n = 0; n < cores_.size(); ++n) {
    Core& c = cores_[n];
    if (c.host != host || !c.live()) continue;
    c.dead = true;
    c.died_at = now();
    if (c.role != Role::shard) continue;
    // Its memory is gone (the primary first: it drives the core); its committed rows are not,
    // or with replication, its backups keep them.
    c.primary.reset();
    c.shard.reset();
    if (o_.replicas > 1) continue;
    if (crashed && lose_log_tail_) durable_[n]->lose_tail(1 + rng_.next() % 4);
    check_durable(n);
  }
  drop_backups_on(host);
}

void FullSim::restart(uint32_t host) {
  Host& h = hosts_[host];
  if (!h.down) return;
  h.down = false;
  h.exited = false;
  mix(0x4e57a47, host);
  timeline("restart", "fault", host, 0, now(), -1);
  std::fill(h.lost.begin(), h.lost.end(), false);  // a new process knows of no loss yet
  if (coordinated_) member_start(host);
}

}  // namespace colony::sim::detail
