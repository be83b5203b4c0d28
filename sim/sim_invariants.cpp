// The invariant checker of full numerics (docs/simulation.md, Invariants): what a shard holds by
// the checker's own count, and the checks on every shard's output, on every restart, on
// membership and at the end of the run.
#include <algorithm>

#include "sim/full_sim.h"

namespace colony::sim::detail {

void ShardShadow::reset(const std::vector<NodeId>& senders) {
  clocks.clear();
  versions.clear();
  resynced.clear();
  resyncing = false;
  for (NodeId s : senders) clocks[s] = 0;
}

void ShardShadow::restart(const std::map<uint64_t, uint32_t>& store_clocks) {
  committed = store_clocks;
  for (auto& [sender, clock] : clocks) clock = 0;
  resynced.clear();
  resyncing = true;
}

uint32_t ShardShadow::min_clock() const {
  uint32_t m = clock_done;
  for (const auto& [s, c] : clocks) m = std::min(m, c);
  return m;
}

void ShardShadow::apply(const PsMessage& m) {
  uint32_t clock = 0;
  const PushRequest* push = std::get_if<PushRequest>(&m);
  const ClockAdvance* advance = std::get_if<ClockAdvance>(&m);
  const NodeId sender = std::visit([](const auto& x) -> NodeId { return x.header.sender; }, m);
  auto it = clocks.find(sender);
  if (resyncing && it != clocks.end()) {
    // A restarted shard: a sender's first resync sets its clock; nothing else of it counts
    // before, and a later resync is an ordinary clock advance.
    if (advance && advance->resync && !resynced[sender]) {
      // The pushes its store committed are acknowledged as duplicates when they come again.
      auto c = committed.find(sender);
      it->second = std::max(advance->clock, c == committed.end() ? 0u : c->second);
      resynced[sender] = true;
      return;
    }
    if (!resynced[sender]) return;
  }
  if (push)
    clock = push->clock;
  else if (advance)
    clock = advance->clock;
  else
    return;
  if (it == clocks.end() || clock <= it->second) return;
  if (clock != clock_done && clock != it->second + 1) return;
  it->second = clock;
  if (push)
    for (uint64_t k : push->keys) ++versions[k];
}

void FullSim::check_shard_output(Core& c, const PsMessage* in, const Outbox& out) {
  check_applied_once(c.index);
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
    } else if (const auto* ack = std::get_if<PushAck>(&o.message)) {
      if (c.primary) {
        // Replicated: the clock of the push's last part, which every replica must now hold.
        const auto it =
            unacked_pushes_.find(hash_combine(hash_combine(c.index, o.to), ack->header.request_id));
        if (it != unacked_pushes_.end()) {
          uint32_t& acked = acked_clocks_[c.index][o.to];
          acked = std::max(acked, it->second);
          unacked_pushes_.erase(it);
        }
      } else if (in && std::holds_alternative<PushRequest>(*in)) {
        // Acknowledged: what the shard committed so far must survive a crash.
        acked_commits_[c.index] = durable_[c.index]->commits();
      }
    } else if (auto* err = std::get_if<PsError>(&o.message);
               err && err->code != PsErrorCode::keys_unknown) {
      // (A push that left out keys the shard does not hold is sent again with them: no error.)
      violation(fmt::format("shard {} refused a request of node {} at t={:.6f}s: {}", c.index, o.to,
                            double(now()) / 1e9, err->message));
    }
  }
}

void FullSim::check_applied_once(uint32_t shard) {
  for (auto [sender, clock] : durable_[shard]->take_applied_twice()) {
    ++result_.pushes_applied_twice;
    violation(fmt::format(
        "push applied twice: shard {} committed node {}'s step {} at t={:.6f}s, which its store "
        "already held",
        shard, sender, clock, double(now()) / 1e9));
  }
}

void FullSim::check_durable(uint32_t shard) {
  const uint64_t held = durable_[shard]->commits(), acked = acked_commits_[shard];
  if (held < acked) {
    result_.acked_commits_lost += acked - held;
    violation(fmt::format(
        "acknowledged push lost: shard {} crashed at t={:.6f}s with {} commits in its store "
        "but had acknowledged a push of commit {}",
        shard, double(now()) / 1e9, held, acked));
  }
  acked_commits_[shard] = std::min(acked, held);
}

bool FullSim::host_trained(uint32_t host) const {
  bool trained = members_[host].core && members_[host].core->started();
  for (const Core& c : cores_)
    if (c.host == host && c.role != Role::shard) trained &= c.done;
  return trained;
}

void FullSim::check_membership() {
  // The job ends (training done) iff every worker member finished or was lost. A member that
  // finished and crashed after has finished: its MemberDone may well have reached the
  // coordinator, which then ends the job without waiting to notice the crash.
  bool all_finished_or_lost = true;
  for (uint32_t host = 0; host < o_.nodes; ++host) {
    if (members_[host].trained || member_gone(host)) continue;
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

void FullSim::check_end(VirtualNanos& compute) {
  const VirtualNanos bound =
      o_.progress_bound_s > 0
          ? static_cast<VirtualNanos>(o_.progress_bound_s * 1e9)
          : 50 * step_ns_ + static_cast<VirtualNanos>(8 * o_.rto_s * 1e9) + 50'000'000;
  for (const Core& c : cores_) {
    if (c.role == Role::shard) continue;
    const char* what = c.role == Role::worker ? "worker" : "aggregator";
    // A lost member's cores, or any core of a job the coordinator failed, need not finish.
    const bool excused = member_gone(c.host) || !result_.job_error.empty();
    if (!c.worker && !c.aggregator) {
      if (!excused)
        violation(
            fmt::format("no progress: the {} {} on node {} was never built", what, c.tid, c.host));
      continue;
    }
    const Status& err = c.role == Role::worker ? c.worker->error() : c.aggregator->error();
    if (!err.ok()) violation(fmt::format("{} on node {} failed: {}", what, c.host, err.message()));
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
}

}  // namespace colony::sim::detail
