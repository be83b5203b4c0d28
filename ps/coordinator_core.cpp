#include "ps/coordinator_core.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "ps/cluster_layout.h"

namespace colony {

const char* to_string(MemberRole role) {
  return role == MemberRole::ps ? "ps" : "worker";
}

namespace {
std::string plural(uint32_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}
constexpr uint64_t reject_log_interval_ms = 60'000;
}  // namespace

void CoordinatorCore::reject(const std::string& why, uint64_t now_ms, CoordinatorEffects& out) {
  ++totals_.counters.bad_messages;
  ++rejects_unlogged_;
  if (now_ms < next_reject_log_ms_) return;
  out.log.push_back(fmt::format(
      "dropped a control message: {} ({} dropped since the last such line; logged at most "
      "once a minute)",
      why, rejects_unlogged_));
  rejects_unlogged_ = 0;
  next_reject_log_ms_ = now_ms + reject_log_interval_ms;
}

Expected<CoordinatorCore> CoordinatorCore::make(const CoordinatorConfig& config, uint64_t now_ms) {
  if (config.shards == 0) return Status::invalid_input("--shards must be at least 1");
  if (config.workers == 0) return Status::invalid_input("--workers must be at least 1");
  if (config.heartbeat_ms == 0) return Status::invalid_input("--heartbeat-ms must be at least 1");
  if (config.heartbeat_timeout_ms <= config.heartbeat_ms)
    return Status::invalid_input(
        fmt::format("--heartbeat-timeout-ms {} must be above --heartbeat-ms {}",
                    config.heartbeat_timeout_ms, config.heartbeat_ms));
  if (config.notice_ms == 0)
    return Status::invalid_input("the notice interval must be at least 1 ms");
  return CoordinatorCore(config, now_ms);
}

CoordinatorCore::CoordinatorCore(const CoordinatorConfig& config, uint64_t now_ms)
    : config_(config) {
  config_.map.shards = config.shards;
  join_deadline_ms_ = now_ms + config.join_timeout_ms;
  next_notice_ms_ = now_ms + config.notice_ms;
  next_heartbeat_ms_ = now_ms + config.heartbeat_ms;
}

uint32_t CoordinatorCore::joined(MemberRole role) const {
  uint32_t n = 0;
  for (const MemberInfo& m : members_)
    if (m.role == role) n += m.count;
  return n;
}

std::string CoordinatorCore::waiting_for() const {
  std::string joined_list;
  for (const MemberInfo& m : members_)
    joined_list +=
        fmt::format("{}{} {}", joined_list.empty() ? "" : ", ", to_string(m.role), m.endpoint);
  return fmt::format("{}/{} shards and {}/{} worker replicas have joined{}{}",
                     joined(MemberRole::ps), config_.shards, joined(MemberRole::worker),
                     config_.workers, members_.empty() ? "" : " (",
                     members_.empty() ? "" : joined_list + ")");
}

void CoordinatorCore::on_message(const ControlMessage& message, uint64_t now_ms,
                                 CoordinatorEffects& out) {
  if (phase_ == CoordinatorPhase::ended) return;
  if (auto* join = std::get_if<Join>(&message.body))
    return on_join(*join, message.sender_key, now_ms, out);
  const uint32_t i = message.from;
  if (i >= members_.size() || phase_ == CoordinatorPhase::joining)
    return reject(
        fmt::format("a message of kind {} from unknown member {}", message.body.index(), i), now_ms,
        out);
  if (message.sender_key != members_[i].public_key)
    return reject(
        fmt::format("a message of kind {} in the name of member {}, sent with another key",
                    message.body.index(), i),
        now_ms, out);
  MemberState& st = state_[i];
  const MemberInfo& m = members_[i];
  // What a process this member's current one replaced sent, read after the new one joined (a
  // restart at once): it says nothing of the new one, and is ignored, up to its Leave, the last
  // it sends. Any other incarnation's is a lie.
  if (message.incarnation != 0 && message.incarnation != m.incarnation) {
    if (!replaced(i, message.incarnation))
      return reject(fmt::format("a message of kind {} from member {} in the name of incarnation "
                                "{}, neither its current one nor one before it",
                                message.body.index(), i, message.incarnation),
                    now_ms, out);
    const auto* leave = std::get_if<Leave>(&message.body);
    if (leave) std::erase(st.past_incarnations, message.incarnation);
    return out.log.push_back(
        fmt::format("member {} at {}: {} from incarnation {}, not the one that joined last: "
                    "ignored",
                    i, m.endpoint,
                    leave ? fmt::format("a Leave ({})", leave->reason)
                          : fmt::format("a message of kind {}", message.body.index()),
                    message.incarnation));
  }
  // Declared lost: what it still says does not count. But a member busy past the heartbeat
  // timeout (a ps writing a large cache to disk as it drains) may still leave: its first Leave
  // is taken for what it is, and changes nothing; unless it is the error of a durable ps the job
  // waits for (its store could not be written as it drained): that one would fail again.
  if (auto* leave = std::get_if<Leave>(&message.body); leave && st.gone && !st.left) {
    st.left = true;
    if (st.awaiting_rejoin && !leave->drained)
      return fail(fmt::format("ps member {} at {} left ({}) after it was declared lost: its "
                              "store may not hold what it acknowledged",
                              i, m.endpoint, leave->reason),
                  out);
    out.log.push_back(fmt::format("member {} at {} left ({}) after it was declared lost", i,
                                  m.endpoint, leave->reason));
    return;
  }
  if (st.gone)
    return reject(
        fmt::format("a message of kind {} from member {}, which is lost", message.body.index(), i),
        now_ms, out);
  const bool from_member = std::holds_alternative<Heartbeat>(message.body) ||
                           std::holds_alternative<Ready>(message.body) ||
                           std::holds_alternative<MemberDone>(message.body) ||
                           std::holds_alternative<ShardSummary>(message.body) ||
                           std::holds_alternative<Leave>(message.body) ||
                           std::holds_alternative<ShardsCheckpointed>(message.body) ||
                           std::holds_alternative<DenseCheckpointed>(message.body) ||
                           std::holds_alternative<DenseStart>(message.body) ||
                           std::holds_alternative<Promoted>(message.body) ||
                           std::holds_alternative<Applied>(message.body) ||
                           std::holds_alternative<BackupsCopied>(message.body);
  if (!from_member)
    return reject(
        fmt::format("a message of kind {} from member {}: only the coordinator sends that",
                    message.body.index(), i),
        now_ms, out);
  if (auto* hb = std::get_if<Heartbeat>(&message.body); hb && hb->load)
    if (std::string lie = load_refused(i, *hb->load); !lie.empty())
      return reject(fmt::format("a heartbeat from member {}: {}", i, lie), now_ms, out);
  st.last_heard_ms = now_ms;
  if (auto* hb = std::get_if<Heartbeat>(&message.body)) {
    if (!st.finished) st.samples = hb->samples;
    if (hb->load) take_load(i, *hb->load, now_ms);
  } else if (std::holds_alternative<Ready>(message.body)) {
    if (st.rejoining && st.rebackup) {
      // Its Welcome says how the cluster was: a change since (a loss, a move) never reached it.
      if (st.welcome_epoch != membership_epoch_) {
        const std::string why = "the cluster changed while it built its backups: start it again";
        out.control.push_back(
            {m.endpoint, m.public_key, {control_from_coordinator, Shutdown{why}}, true});
        return lose(i, why, now_ms, out);
      }
      // It built its backups, empty: every ps member takes the placements, and the primaries
      // of the placed backups send them their copies.
      st.rejoining = false;
      st.ready = true;
      const std::vector<NodePlacement>& placed = copying_[i];
      std::vector<NodeId> nodes;
      for (const NodePlacement& p : placed) nodes.push_back(p.node);
      out.log.push_back(fmt::format(
          "ps member {} is ready to hold backup nodes {}: their primaries send the copies", i,
          fmt::join(nodes, ", ")));
      const uint64_t epoch = ++membership_epoch_;
      for (uint32_t j = 0; j < members_.size(); ++j)
        if (j != i && !state_[j].gone && !rebuilding(j))
          out.control.push_back({members_[j].endpoint,
                                 members_[j].public_key,
                                 {control_from_coordinator, BackupsPlaced{placed, epoch}}});
      out.placed.insert(out.placed.end(), placed.begin(), placed.end());
      return welcome_rebackups(out);
    }
    if (st.rejoining) {
      st.rejoining = false;
      st.ready = true;
      ++totals_.ps_restarts;
      std::vector<NodeId> nodes;
      for (NodeId n = m.first_node; n < m.first_node + m.count; ++n) nodes.push_back(n);
      out.log.push_back(
          fmt::format("ps member {} has resumed shards {}..{}: the workers re-send what it lost", i,
                      m.first_node, m.first_node + m.count - 1));
      resync_gone_workers(nodes, out);
      const uint64_t epoch = ++membership_epoch_;
      for (size_t w = 0; w < members_.size(); ++w)
        if (members_[w].role == MemberRole::worker && !state_[w].gone)
          out.control.push_back({members_[w].endpoint,
                                 members_[w].public_key,
                                 {control_from_coordinator, ShardsRestarted{nodes, epoch}}});
      return;
    }
    if (phase_ != CoordinatorPhase::starting || st.ready) return;
    st.ready = true;
    if (std::all_of(state_.begin(), state_.end(), [](const MemberState& s) { return s.ready; }))
      start_training(out);
  } else if (auto* done = std::get_if<MemberDone>(&message.body)) {
    if (m.role != MemberRole::worker || st.finished) return;
    st.finished = true;
    st.samples = done->counters.samples;
    totals_.counters += done->counters;
    totals_.read_from_cache = totals_.read_from_cache && done->read_from_cache;
    if (!done->error.empty())
      return fail(fmt::format("worker member {} at {} failed: {}", i, m.endpoint, done->error),
                  out);
    // A shard that restarted or failed over waits for each sender's resync. This member may have
    // exited before it took the ShardsRestarted or ShardsMoved, sent while it was not yet known
    // to have finished: resynced as done on its behalf (a finished sender's resync changes
    // nothing else, so a second one is harmless).
    if (!shards_resynced_.empty())
      resync_as_done(m, {shards_resynced_.begin(), shards_resynced_.end()}, out);
    if (done->drained) {
      ++totals_.workers_drained;
      out.log.push_back(
          fmt::format("worker member {} at {} stopped early (SIGTERM) after {} samples", i,
                      m.endpoint, done->counters.samples));
    } else {
      out.log.push_back(fmt::format("worker member {} at {} finished: {} samples", i, m.endpoint,
                                    done->counters.samples));
    }
    maybe_trained(now_ms, out);
  } else if (auto* summary = std::get_if<ShardSummary>(&message.body)) {
    if (m.role != MemberRole::ps || !st.summary_pending) return;
    st.summary_pending = false;
    totals_.shards += *summary;
    totals_.counters.bad_messages += summary->bad_messages;
    totals_.counters.cpu_seconds += summary->cpu_seconds;
    ++totals_.shard_summaries;
  } else if (auto* c = std::get_if<ShardsCheckpointed>(&message.body)) {
    if (m.role != MemberRole::ps)
      return reject(fmt::format("a checkpoint report from worker member {}", i), now_ms, out);
    on_checkpointed(i, *c, now_ms, out);
  } else if (auto* d = std::get_if<DenseCheckpointed>(&message.body)) {
    on_dense_checkpointed(i, std::move(d->state), now_ms, out);
  } else if (auto* d = std::get_if<DenseStart>(&message.body)) {
    on_dense_start(i, std::move(d->state), now_ms, out);
  } else if (auto* p = std::get_if<Promoted>(&message.body)) {
    // One answer to each ShardsMoved this member was sent (two losses may overlap).
    auto [first, last] = promoting_.equal_range(i);
    auto asked = std::find_if(first, last, [&](const auto& e) { return e.second == p->shards; });
    if (m.role != MemberRole::ps || asked == last)
      return reject(fmt::format("a Promoted from member {} naming shards it was not sent", i),
                    now_ms, out);
    promoting_.erase(asked);
    on_promoted(i, *p, out);
  } else if (auto* a = std::get_if<Applied>(&message.body)) {
    on_applied(i, *a, now_ms, out);
  } else if (auto* c = std::get_if<BackupsCopied>(&message.body)) {
    on_backups_copied(i, *c, now_ms, out);
  } else if (auto* leave = std::get_if<Leave>(&message.body)) {
    st.gone = true;
    st.left = true;
    // Under replication a ps that leaves while training runs (SIGTERM, after its shards
    // drained) hands its shards to their backups, as a lost one does, without the wait for its
    // heartbeats to stop.
    if (m.role == MemberRole::ps && config_.job.replicas > 1 && phase_ == CoordinatorPhase::running)
      return fail_over(i, fmt::format("left ({})", leave->reason), now_ms, out);
    // A ps whose shards keep their rows on disk, stopped while training runs (a supervisor's
    // restart, a rolling upgrade) once they drained to its store: waited for to start again over
    // it, as a lost one is. One that left on an error (a store it could not build or write) ends
    // the job: it would fail again.
    if (m.role == MemberRole::ps && m.durable && leave->drained && config_.job.replicas == 1 &&
        phase_ == CoordinatorPhase::running)
      return lose(i, fmt::format("left ({})", leave->reason), now_ms, out);
    if (m.role == MemberRole::ps)
      return fail(fmt::format("ps member {} at {} left ({}): its shards are gone{}", i, m.endpoint,
                              leave->reason,
                              config_.job.replicas > 1
                                  ? " (its shards' backups take over only while training runs)"
                                  : ""),
                  out);
    if (!st.finished) lose(i, "left: " + leave->reason, now_ms, out);
  }
}

void CoordinatorCore::on_join(const Join& j, const std::string& sender_key, uint64_t now_ms,
                              CoordinatorEffects& out) {
  const MemberInfo& m = j.member;
  // A join speaks for the key it came with, and only in that key's role.
  if (m.public_key != sender_key)
    return reject(fmt::format("a {} join from {} naming a key other than the one it came with",
                              to_string(m.role), m.endpoint),
                  now_ms, out);
  auto refuse = [&](std::string why) {
    ++totals_.counters.bad_messages;
    out.log.push_back(
        fmt::format("refused a {} joining from {}: {}", to_string(m.role), m.endpoint, why));
    out.control.push_back(
        {m.endpoint, m.public_key, {control_from_coordinator, Refuse{std::move(why)}}, true});
  };
  if (!config_.key_roles.empty()) {
    auto it = config_.key_roles.find(sender_key);
    if (it == config_.key_roles.end())
      return refuse("its key may not join (it is not a member's key)");
    if (it->second && *it->second != m.role)
      return refuse(fmt::format("its key is a {} key", to_string(*it->second)));
  }
  for (uint32_t i = 0; i < members_.size(); ++i) {
    // With keys, a member is its key; on an --insecure cluster, its endpoint.
    const bool same = sender_key.empty() ? members_[i].endpoint == m.endpoint
                                         : members_[i].public_key == sender_key;
    if (!same) {
      if (members_[i].endpoint == m.endpoint)
        return refuse(fmt::format("member {} listens at that endpoint", i));
      continue;
    }
    if (m.role != members_[i].role || m.count != members_[i].count ||
        m.endpoint != members_[i].endpoint)
      return refuse(fmt::format("its key belongs to member {}, a {} at {} hosting {}", i,
                                to_string(members_[i].role), members_[i].endpoint,
                                members_[i].count));
    return rejoin(i, m, now_ms, out);
  }
  if (phase_ != CoordinatorPhase::joining)
    return refuse("the cluster is complete and the job has started");
  const uint32_t want = m.role == MemberRole::ps ? config_.shards : config_.workers;
  const uint32_t have = joined(m.role);
  if (have + m.count > want)
    return refuse(fmt::format("it would host {} but only {} more {} expected",
                              plural(m.count, m.role == MemberRole::ps ? "shard" : "replica"),
                              want - have,
                              m.role == MemberRole::ps ? "shards are" : "replicas are"));
  members_.push_back(m);
  state_.push_back(MemberState{now_ms, 0, false, false, false});
  out.log.push_back(fmt::format("{} joined from {} with {}: {}", to_string(m.role), m.endpoint,
                                plural(m.count, m.role == MemberRole::ps ? "shard" : "replica"),
                                waiting_for()));
  out.control.push_back(
      {m.endpoint, m.public_key, {control_from_coordinator, Joined{waiting_for()}}});
  if (joined(MemberRole::ps) == config_.shards && joined(MemberRole::worker) == config_.workers) {
    for (MemberState& s : state_) {
      s.last_heard_ms = now_ms;
      s.ready_deadline_ms = now_ms + config_.join_timeout_ms;
    }
    welcome(out);
  }
}

bool CoordinatorCore::pending_checkpoint_step(uint32_t step) const {
  const uint32_t every = config_.job.checkpoint_every;
  return every && step && step % every == 0 &&
         !(step <= totals_.last_checkpoint_step && totals_.checkpoints > 0);
}

bool CoordinatorCore::replaced(uint32_t i, uint64_t incarnation) const {
  const std::vector<uint64_t>& past = state_[i].past_incarnations;
  return std::find(past.begin(), past.end(), incarnation) != past.end();
}

void CoordinatorCore::on_checkpointed(uint32_t i, const ShardsCheckpointed& c, uint64_t now_ms,
                                      CoordinatorEffects& out) {
  if (!pending_checkpoint_step(c.step))
    return reject(
        fmt::format("ps member {} reported a checkpoint of step {}: not a pending "
                    "checkpoint step (every {}, the last complete {})",
                    i, c.step, config_.job.checkpoint_every, totals_.last_checkpoint_step),
        now_ms, out);
  for (const ShardCheckpoint& s : c.shards) {
    if (s.shard >= layout_->shards() || layout_->owner(s.shard) != i)
      return reject(
          fmt::format("ps member {} reported a checkpoint of shard {}, which it does not host", i,
                      s.shard),
          now_ms, out);
    // Where every member's manifest will say the shard's copy is (CheckpointComplete).
    if (s.dir != fmt::format("shard-{}", s.shard))
      return reject(fmt::format("ps member {} reported shard {}'s checkpoint in folder \"{}\", "
                                "not shard-{}",
                                i, s.shard, s.dir, s.shard),
                    now_ms, out);
  }
  auto& step = checkpoints_pending_[c.step];
  for (const ShardCheckpoint& s : c.shards) step[s.shard] = s;
  if (checkpoints_pending_.size() > checkpoint_steps_pending_max) {
    out.log.push_back(
        fmt::format("gave up on the checkpoint of step {}: not every shard reported it",
                    checkpoints_pending_.begin()->first));
    checkpoints_pending_.erase(checkpoints_pending_.begin());
  }
  maybe_complete(c.step, out);
}

std::string CoordinatorCore::dense_mismatch(const DenseState& state) const {
  if (config_.dense_shape.empty()) return "the job's model has no dense layers";
  if (state.shape != config_.dense_shape)
    return fmt::format("dense layers \"{}\", not the job's \"{}\"", state.shape,
                       config_.dense_shape);
  if (state.params.size() != config_.dense_params)
    return fmt::format("{} dense parameters, not the job's {}", state.params.size(),
                       config_.dense_params);
  if (!std::all_of(state.params.begin(), state.params.end(),
                   [](float x) { return std::isfinite(x); }))
    return "dense parameters that are not finite";
  return {};
}

uint32_t CoordinatorCore::first_replica_member() const {
  uint32_t first = control_from_unknown;
  for (uint32_t i = 0; i < members_.size(); ++i)
    if (members_[i].role == MemberRole::worker &&
        (first == control_from_unknown || members_[i].first_node < members_[first].first_node))
      first = i;
  return first;
}

void CoordinatorCore::on_dense_checkpointed(uint32_t i, DenseState state, uint64_t now_ms,
                                            CoordinatorEffects& out) {
  const uint32_t every = config_.job.checkpoint_every;
  if (i != first_replica_member())
    return reject(fmt::format("dense layers of a checkpoint from member {}, which does not host "
                              "the first worker replica",
                              i),
                  now_ms, out);
  if (!every) return reject("dense layers of a checkpoint: the job takes none", now_ms, out);
  if (!pending_checkpoint_step(state.step))
    return reject(fmt::format("dense layers of step {}: not a pending checkpoint step (every {}, "
                              "the last complete {})",
                              state.step, every, totals_.last_checkpoint_step),
                  now_ms, out);
  if (std::string why = dense_mismatch(state); !why.empty())
    return reject(fmt::format("dense layers of a checkpoint from member {}: {}", i, why), now_ms,
                  out);
  const uint32_t step = state.step;
  dense_pending_[step] = std::move(state);
  if (dense_pending_.size() > checkpoint_steps_pending_max)
    dense_pending_.erase(dense_pending_.begin());
  maybe_complete(step, out);
}

void CoordinatorCore::maybe_complete(uint32_t step, CoordinatorEffects& out) {
  auto done = checkpoints_pending_.find(step);
  if (done == checkpoints_pending_.end() || done->second.size() < config_.shards) return;
  auto dense = dense_pending_.find(step);
  const bool deep = !config_.dense_shape.empty();
  if (deep && dense == dense_pending_.end()) return;
  CheckpointComplete complete{step, {}};
  for (auto& [shard, copy] : done->second) complete.shards.push_back(copy);
  if (deep) complete.dense = std::move(dense->second);
  checkpoints_pending_.erase(checkpoints_pending_.begin(), std::next(done));
  dense_pending_.erase(dense_pending_.begin(), dense_pending_.upper_bound(step));
  ++totals_.checkpoints;
  totals_.last_checkpoint_step = step;
  out.log.push_back(fmt::format("checkpoint of step {} complete: every shard has its copy{}", step,
                                deep ? ", and the dense layers are in" : ""));
  for (size_t p = 0; p < members_.size(); ++p)
    if (members_[p].role == MemberRole::ps && !state_[p].gone)
      out.control.push_back(
          {members_[p].endpoint, members_[p].public_key, {control_from_coordinator, complete}});
}

void CoordinatorCore::on_dense_start(uint32_t i, DenseState state, uint64_t now_ms,
                                     CoordinatorEffects& out) {
  if (members_[i].role != MemberRole::ps || phase_ != CoordinatorPhase::starting || state_[i].ready)
    return reject(fmt::format("dense layers to start from, from member {}: only a ps member "
                              "sends them, before it is ready",
                              i),
                  now_ms, out);
  if (std::string why = dense_mismatch(state); !why.empty())
    return fail(fmt::format("ps member {} at {} resumed from {}: start it from a checkpoint of "
                            "this job",
                            i, members_[i].endpoint, why),
                out);
  dense_starts_[i] = std::move(state);
}

void CoordinatorCore::start_training(CoordinatorEffects& out) {
  // The dense layers to start from: those every ps member resumed from, or none.
  std::optional<uint32_t> with, without;
  for (uint32_t p = 0; p < members_.size(); ++p) {
    if (members_[p].role != MemberRole::ps) continue;
    auto it = dense_starts_.find(p);
    if (it == dense_starts_.end()) {
      if (!without) without = p;
      continue;
    }
    if (!with) {
      with = p;
      continue;
    }
    const DenseState& a = dense_starts_.at(*with);
    if (!(it->second == a))
      return fail(fmt::format("ps members {} and {} resumed from different dense layers (of step "
                              "{} and of step {}): give every ps the same --resume-from",
                              *with, p, a.step, it->second.step),
                  out);
  }
  if (with && without)
    return fail(fmt::format("ps member {} resumed from a checkpoint's dense layers (step {}) and "
                            "ps member {} from none: give every ps the same --resume-from",
                            *with, dense_starts_.at(*with).step, *without),
                out);
  phase_ = CoordinatorPhase::running;
  out.log.push_back(fmt::format(
      "all {} members are ready: training starts{}", members_.size(),
      with ? fmt::format(" from the dense layers of step {}", dense_starts_.at(*with).step)
           : std::string()));
  for (size_t w = 0; w < members_.size(); ++w) {
    if (members_[w].role != MemberRole::worker) continue;
    if (with)
      out.control.push_back({members_[w].endpoint,
                             members_[w].public_key,
                             {control_from_coordinator, DenseStart{dense_starts_.at(*with)}}});
    out.control.push_back(
        {members_[w].endpoint, members_[w].public_key, {control_from_coordinator, Start{}}});
  }
  dense_starts_.clear();
}

// A join from known member i: a retry of its join, or (another incarnation) the member restarted.
void CoordinatorCore::rejoin(uint32_t i, const MemberInfo& m, uint64_t now_ms,
                             CoordinatorEffects& out) {
  MemberState& st = state_[i];
  // A Join a replaced process sent again (it retries until answered), read after its successor's:
  // it says nothing of the process that runs now.
  if (replaced(i, m.incarnation))
    return out.log.push_back(fmt::format(
        "member {} at {}: a Join from incarnation {}, a process replaced since: ignored", i,
        m.endpoint, m.incarnation));
  const bool restarted = m.incarnation != members_[i].incarnation;
  if (!restarted && !st.awaiting_rejoin) {
    // A retry: its Welcome, if due, is on its way. It does not count as a sign of life.
    if (phase_ == CoordinatorPhase::joining)
      out.control.push_back(
          {m.endpoint, m.public_key, {control_from_coordinator, Joined{waiting_for()}}});
    return;
  }
  if (phase_ == CoordinatorPhase::joining || phase_ == CoordinatorPhase::starting) {
    // Nothing has trained yet: the new process takes the old one's place and builds afresh.
    replace_incarnation(i, m.incarnation);
    dense_starts_.erase(i);  // the new process sends its own, if it resumes from any
    members_[i].durable = m.durable;
    members_[i].data = m.data;
    members_[i].resumed_from = m.resumed_from;
    if (phase_ == CoordinatorPhase::starting)
      if (std::string differ = resume_steps_differ(); !differ.empty()) return fail(differ, out);
    st.last_heard_ms = now_ms;
    out.log.push_back(fmt::format("{} member {} at {} restarted before the start",
                                  to_string(m.role), i, m.endpoint));
    if (phase_ == CoordinatorPhase::joining) {
      out.control.push_back(
          {m.endpoint, m.public_key, {control_from_coordinator, Joined{waiting_for()}}});
      return;
    }
    st.ready = false;
    st.ready_deadline_ms = now_ms + config_.join_timeout_ms;
    out.control.push_back({m.endpoint, m.public_key, {control_from_coordinator, welcome_for(i)}});
    return;
  }
  if (m.role == MemberRole::worker && st.finished) {
    // Its part of the job is done (MemberDone came): restarted by a supervisor, it is not lost,
    // and has nothing left to train.
    replace_incarnation(i, m.incarnation);
    out.log.push_back(fmt::format(
        "worker member {} at {} restarted after it finished: told to stop", i, m.endpoint));
    out.control.push_back(
        {m.endpoint,
         m.public_key,
         {control_from_coordinator, Refuse{"this worker member has already finished its part"}},
         true});
    return;
  }
  if (!st.gone) lose(i, "it restarted (a new incarnation joined)", now_ms, out);
  if (phase_ == CoordinatorPhase::ended) return;
  // Replicated, its shards failed over: it comes back to hold backups.
  if (m.role == MemberRole::ps && config_.job.replicas > 1 && phase_ == CoordinatorPhase::running)
    return rebackup(i, m, now_ms, out);
  if (!st.awaiting_rejoin || !m.durable) {
    ++totals_.counters.bad_messages;
    // Replicated, training is over: there is nothing left to hold backups for.
    const std::string why = m.role == MemberRole::ps && config_.job.replicas > 1
                                ? "its shards failed over to other members, and training is over"
                                : "only a ps with durable shards resumes";
    out.log.push_back(
        fmt::format("refused member {} at {} after its restart: {}", i, m.endpoint, why));
    out.control.push_back({m.endpoint,
                           m.public_key,
                           {control_from_coordinator, Refuse{"this member was lost; " + why}},
                           true});
    return;
  }
  readmit(i, m.incarnation, now_ms);
  st.awaiting_rejoin = false;
  Welcome w = welcome_for(i);
  w.resume = true;
  out.log.push_back(fmt::format(
      "ps member {} is back from {}: sent it the layout to resume its shards", i, m.endpoint));
  out.control.push_back({m.endpoint, m.public_key, {control_from_coordinator, std::move(w)}});
}

void CoordinatorCore::rebackup(uint32_t i, const MemberInfo& m, uint64_t now_ms,
                               CoordinatorEffects& out) {
  // Its wait for the failovers under way counts against the time it has to be ready.
  readmit(i, m.incarnation, now_ms);
  state_[i].rebackup = true;
  state_[i].rebackup_waiting = true;
  out.log.push_back(
      fmt::format("ps member {} is back from {}: it will hold backups", i, m.endpoint));
  welcome_rebackups(out);
}

void CoordinatorCore::welcome_rebackups(CoordinatorEffects& out) {
  if (phase_ != CoordinatorPhase::running || !failovers_.empty()) return;
  for (uint32_t i = 0; i < members_.size(); ++i) {
    MemberState& st = state_[i];
    if (st.rebackup && st.rejoining && !st.rebackup_waiting && !st.gone) return;  // not ready
  }
  for (uint32_t i = 0; i < members_.size(); ++i) {
    MemberState& st = state_[i];
    if (!st.rebackup_waiting || st.gone) continue;
    st.rebackup_waiting = false;
    std::vector<NodePlacement> placed;
    for (NodeId s = 0; s < layout_->shards(); ++s)
      for (NodeId b : layout_->backups_of(s)) {
        const std::vector<NodeId>& live = live_backups_[s];
        const bool copying = std::any_of(copying_.begin(), copying_.end(), [&](const auto& e) {
          return std::any_of(e.second.begin(), e.second.end(),
                             [&](const NodePlacement& p) { return p.node == b; });
        });
        if (std::find(live.begin(), live.end(), b) != live.end() || copying) continue;
        if (layout_->place_backup(b, i).ok()) placed.push_back({b, i});
      }
    if (placed.empty()) {
      // Every shard has its K replicas, or none can take one here: nothing for it to hold.
      st.gone = true;
      st.rejoining = false;
      st.rebackup = false;
      const std::string why = "every shard's replicas are held by other members";
      out.log.push_back(
          fmt::format("refused ps member {} at {}: {}", i, members_[i].endpoint, why));
      out.control.push_back({members_[i].endpoint,
                             members_[i].public_key,
                             {control_from_coordinator, Refuse{why}},
                             true});
      continue;
    }
    placed_.insert(placed_.end(), placed.begin(), placed.end());
    copying_[i] = placed;
    st.welcome_epoch = membership_epoch_;
    Welcome w = welcome_for(i);
    w.backups_only = true;
    w.placed = placed_;
    std::vector<NodeId> nodes;
    for (const NodePlacement& p : placed) nodes.push_back(p.node);
    out.log.push_back(fmt::format("ps member {}: sent it the layout to hold backup nodes {}", i,
                                  fmt::join(nodes, ", ")));
    out.control.push_back(
        {members_[i].endpoint, members_[i].public_key, {control_from_coordinator, std::move(w)}});
    return;  // one at a time: the next once this one is Ready
  }
}

void CoordinatorCore::on_backups_copied(uint32_t i, const BackupsCopied& c, uint64_t now_ms,
                                        CoordinatorEffects& out) {
  auto it = copying_.find(i);
  // Only from a member that built its backups (Ready): before, nothing was copied to them.
  if (it == copying_.end() || c.backups.empty() || rebuilding(i))
    return reject(fmt::format("a BackupsCopied from member {}, which is not taking copies", i),
                  now_ms, out);
  for (NodeId b : c.backups) {
    const bool pending = std::any_of(it->second.begin(), it->second.end(),
                                     [&](const NodePlacement& p) { return p.node == b; });
    if (!pending || std::count(c.backups.begin(), c.backups.end(), b) > 1)
      return reject(fmt::format("a BackupsCopied from member {} naming node {}, which is no "
                                "backup being copied to it",
                                i, b),
                    now_ms, out);
  }
  for (NodeId b : c.backups) {
    std::erase_if(it->second, [&](const NodePlacement& p) { return p.node == b; });
    const uint32_t s = *layout_->shard_of_backup(b);
    std::vector<NodeId>& live = live_backups_[s];
    live.insert(std::upper_bound(live.begin(), live.end(), b), b);
    ++totals_.backups_added;
    out.log.push_back(
        fmt::format("shard {}: backup node {} on ps member {} has its copy ({} of {} "
                    "replicas live)",
                    s, b, i, live.size() + 1, config_.job.replicas));
  }
  if (it->second.empty()) copying_.erase(it);
}

void CoordinatorCore::readmit(uint32_t i, uint64_t incarnation, uint64_t now_ms) {
  replace_incarnation(i, incarnation);
  MemberState& st = state_[i];
  st.gone = false;
  st.left = false;
  st.rejoining = true;
  st.ready = false;
  st.last_heard_ms = now_ms;
  st.ready_deadline_ms = now_ms + config_.join_timeout_ms;
}

void CoordinatorCore::replace_incarnation(uint32_t i, uint64_t incarnation) {
  // The old process's messages may still come, unless its Leave already has.
  MemberState& st = state_[i];
  if (!st.left) {
    if (st.past_incarnations.size() == past_incarnations_max)
      st.past_incarnations.erase(st.past_incarnations.begin());
    st.past_incarnations.push_back(members_[i].incarnation);
  }
  members_[i].incarnation = incarnation;
}

void CoordinatorCore::welcome(CoordinatorEffects& out) {
  coordinator_node_ = assign_nodes(members_, config_.job.hierarchical);
  bool same_data = true;
  const MemberInfo* first_worker = nullptr;
  for (const MemberInfo& m : members_) {
    if (m.role != MemberRole::worker) continue;
    if (!first_worker)
      first_worker = &m;
    else if (m.data != first_worker->data)
      same_data = false;
  }
  phase_ = CoordinatorPhase::starting;
  same_data_ = same_data;
  if (std::string differ = resume_steps_differ(); !differ.empty()) return fail(differ, out);
  // What every member will check of the layout (more replicas of a shard than ps members, ...)
  // is said here, once, rather than by each member refusing its Welcome.
  auto layout = ClusterLayout::make(welcome_for(0));
  if (!layout) return fail("the members joined make no layout: " + layout.status().message(), out);
  layout_.emplace(std::move(layout.value()));
  live_backups_.clear();
  for (NodeId sh = 0; sh < layout_->shards(); ++sh)
    live_backups_.push_back(layout_->backups_of(sh));
  for (uint32_t i = 0; i < members_.size(); ++i)
    out.control.push_back(
        {members_[i].endpoint, members_[i].public_key, {control_from_coordinator, welcome_for(i)}});
  out.log.push_back(fmt::format(
      "every member has joined ({} shards, {} worker replicas{}): sent the layout", config_.shards,
      config_.workers,
      same_data ? ", one training file split among them" : ", each member its own file"));
}

std::string CoordinatorCore::resume_steps_differ() const {
  const MemberInfo* first = nullptr;
  for (const MemberInfo& m : members_) {
    if (m.role != MemberRole::ps) continue;
    if (!first) {
      first = &m;
    } else if (m.resumed_from != first->resumed_from) {
      auto from = [](const MemberInfo& x) {
        return x.resumed_from ? fmt::format("the checkpoint of step {}", x.resumed_from)
                              : std::string("no checkpoint");
      };
      return fmt::format(
          "the ps at {} starts from {} and the ps at {} from {}: every ps of a "
          "job must resume from the same step (--resume-from)",
          first->endpoint, from(*first), m.endpoint, from(m));
    }
  }
  return "";
}

Welcome CoordinatorCore::welcome_for(uint32_t i) const {
  Welcome w;
  w.you = i;
  w.members = members_;
  w.job = config_.job;
  w.map = config_.map;
  w.coordinator_node = coordinator_node_;
  w.workers_total = config_.workers;
  w.split_data = same_data_;
  w.heartbeat_ms = config_.heartbeat_ms;
  w.heartbeat_timeout_ms = config_.heartbeat_timeout_ms;
  return w;
}

void CoordinatorCore::lose(uint32_t i, const std::string& why, uint64_t now_ms,
                           CoordinatorEffects& out) {
  MemberState& st = state_[i];
  const MemberInfo& m = members_[i];
  st.gone = true;
  // A replicated shard's backups do not follow a primary that restarts from its store (their
  // forwards start over); promoting one in its place is not in this version (docs/storage.md).
  if (m.role == MemberRole::ps && m.durable && phase_ == CoordinatorPhase::running &&
      config_.job.replicas == 1) {
    st.awaiting_rejoin = true;
    st.rejoin_deadline_ms = now_ms + config_.join_timeout_ms;
    std::vector<NodeId> nodes;
    for (NodeId n = m.first_node; n < m.first_node + m.count; ++n) nodes.push_back(n);
    const std::string reason =
        fmt::format("ps member {} at {} (shards {}..{}) was lost: {}", i, m.endpoint, m.first_node,
                    m.first_node + m.count - 1, why);
    out.log.push_back(
        reason +
        fmt::format("; its rows are on disk: waiting up to {} s for it to restart with the "
                    "same --listen and --store",
                    config_.join_timeout_ms / 1000));
    send_all(NodesLost{nodes, reason, ++membership_epoch_}, out);
    return;
  }
  if (m.role == MemberRole::ps && config_.job.replicas > 1 && phase_ == CoordinatorPhase::running)
    return fail_over(i, "was lost: " + why, now_ms, out);
  if (m.role == MemberRole::ps)
    return fail(
        fmt::format(
            "lost ps member {} at {} (shards {}..{}): {}{}", i, m.endpoint, m.first_node,
            m.first_node + m.count - 1, why,
            config_.job.replicas > 1 ? " (a backup is promoted only while training runs)" : ""),
        out);
  if (phase_ == CoordinatorPhase::starting || config_.require_all_workers)
    return fail(fmt::format("lost worker member {} at {}: {}{}", i, m.endpoint, why,
                            config_.require_all_workers ? " (--require-all-workers is set)"
                                                        : " (before training started)"),
                out);
  ++totals_.workers_lost;
  // Its senders will push nothing more: tell every shard they are done, so the consistency gate
  // stops waiting for them. A push of theirs still in flight arrives as a duplicate (its clock is
  // not above clock_done) and is acknowledged without being applied. Sent as a resync, so that
  // a shard restarted over its durable store and waiting for every sender's resync takes it too
  // (found by the simulator: a worker lost while a ps resumed left its shards waiting).
  std::vector<NodeId> senders, nodes;
  for (NodeId n = m.first_node; n < m.first_node + m.count; ++n) nodes.push_back(n);
  if (m.has_aggregator) {
    senders.push_back(m.aggregator);
    nodes.push_back(m.aggregator);
  } else {
    senders = nodes;
  }
  for (NodeId sender : senders)
    for (NodeId shard = 0; shard < config_.shards; ++shard)
      out.ps.push_back(
          {shard, ClockAdvance{{sender, 0, config_.map.version}, clock_done, /*resync=*/true}});
  const std::string reason = fmt::format("worker member {} at {} was lost: {}", i, m.endpoint, why);
  out.log.push_back(reason + "; the job goes on without its replicas (nodes " +
                    fmt::format("{}..{})", m.first_node, m.first_node + m.count - 1));
  send_all(NodesLost{nodes, reason, ++membership_epoch_}, out);
  maybe_trained(now_ms, out);
}

void CoordinatorCore::fail_over(uint32_t i, const std::string& what, uint64_t now_ms,
                                CoordinatorEffects& out) {
  const MemberInfo& m = members_[i];
  // The shards it served (its own, any it took over, and any chosen to move to it), each to fail
  // over; the backups it held, gone; the failovers that waited on it, to move on.
  std::vector<NodeId> lost, restart, waiting;
  for (NodeId s = 0; s < layout_->shards(); ++s) {
    std::vector<NodeId>& live = live_backups_[s];
    const auto held = std::stable_partition(live.begin(), live.end(),
                                            [&](NodeId b) { return *layout_->owner(b) != i; });
    lost.insert(lost.end(), held, live.end());
    live.erase(held, live.end());
    if (*layout_->owner(s) == i) {
      lost.push_back(s);
      restart.push_back(s);
    } else if (auto f = failovers_.find(s); f != failovers_.end()) {
      // Its answers will not come: the failover goes on without them, with a fresh wait if it
      // waited on any (only then: a failover stuck on a live member ends at its own deadline).
      ShardFailover& w = f->second;
      size_t answers = 0;  // those it still waited for
      std::erase_if(w.applied, [&](const auto& e) {
        const bool its = *layout_->owner(e.first) == i;
        answers += its && !e.second;
        return its;
      });
      const size_t moves = w.moving.erase(i);
      if ((w.stage == ShardFailover::Stage::asking && answers > 0) ||
          (w.stage == ShardFailover::Stage::moving && moves > 0))
        w.deadline_ms = now_ms + config_.join_timeout_ms;
      waiting.push_back(s);
    }
  }
  questions_.erase(i);
  promoting_.erase(i);
  // Copies under way to it, or from the shards it served, never complete: those backups are lost.
  for (auto c = copying_.begin(); c != copying_.end();) {
    std::erase_if(c->second, [&](const NodePlacement& p) {
      const bool gone = c->first == i || layout_->owner(*layout_->shard_of_backup(p.node)) == i;
      if (gone) lost.push_back(p.node);
      return gone;
    });
    c = c->second.empty() ? copying_.erase(c) : std::next(c);
  }
  std::sort(lost.begin(), lost.end());
  const std::string reason = fmt::format("ps member {} at {} {}", i, m.endpoint, what);
  // Once promoted: each shard it served has a backup fewer (the one promoted).
  size_t unbacked = 0;
  for (NodeId s = 0; s < layout_->shards(); ++s)
    unbacked += live_backups_[s].size() <= size_t(std::count(restart.begin(), restart.end(), s));
  out.log.push_back(fmt::format(
      "{}; failover: its shards' backups are promoted (replicated:{}), and {} shard{} on "
      "without a backup",
      reason, config_.job.replicas, unbacked, unbacked == 1 ? " goes" : "s go"));
  // Nothing goes to its nodes until their new members serve them (ShardsMoved), the members
  // take nothing more in the name of its shards (their backups' progress stops where it is,
  // before they are asked for it), and the primaries whose backups it held stop waiting for them.
  const uint64_t lost_epoch = ++membership_epoch_;
  send_all(NodesLost{lost, reason, lost_epoch}, out);
  // A shard with one live backup goes to it at once, in one ShardsMoved with the others its
  // member takes (replicated:2); one with more asks them first.
  std::map<uint32_t, std::vector<NodeId>> at_once;  // member -> shards
  for (NodeId s : restart) {
    if (live_backups_[s].empty())
      return fail(fmt::format("ps member {} at {} {}; it served shard {}, whose other replica{} "
                              "gone too: its rows are lost",
                              i, m.endpoint, what, s, config_.job.replicas > 2 ? "s are" : " is"),
                  out);
    if (live_backups_[s].size() > 1)
      start_failover(s, lost_epoch, out);
    else
      failovers_[s] = ShardFailover{++failover_rounds_};
    failovers_[s].deadline_ms = now_ms + config_.join_timeout_ms;
    if (live_backups_[s].size() == 1) at_once[choose(s, live_backups_[s].front())].push_back(s);
  }
  for (auto& [host, shards] : at_once) promote_chosen(host, std::move(shards), out);
  for (NodeId s : waiting) advance_failover(s, out);
  welcome_rebackups(out);  // one waiting behind a member that was lost while it rebuilt
}

void CoordinatorCore::start_failover(NodeId s, uint64_t lost_epoch, CoordinatorEffects& out) {
  const std::vector<NodeId>& live = live_backups_[s];
  ShardFailover& f = failovers_[s];
  f = ShardFailover{++failover_rounds_};
  for (NodeId b : live) f.applied[b] = std::nullopt;
  std::map<uint32_t, std::vector<NodeId>> by_member;
  for (NodeId b : live) by_member[*layout_->owner(b)].push_back(b);
  for (auto& [member, backups] : by_member) ask_applied(s, std::move(backups), lost_epoch, out);
}

void CoordinatorCore::ask_applied(NodeId s, std::vector<NodeId> backups, uint64_t after_epoch,
                                  CoordinatorEffects& out) {
  const uint32_t member = *layout_->owner(backups.front());
  questions_[member].push_back({s, failovers_.at(s).round, backups, after_epoch});
  out.control.push_back({members_[member].endpoint,
                         members_[member].public_key,
                         {control_from_coordinator, ReportApplied{std::move(backups)}}});
}

void CoordinatorCore::on_applied(uint32_t i, const Applied& a, uint64_t now_ms,
                                 CoordinatorEffects& out) {
  auto q = questions_.find(i);
  if (q == questions_.end() || q->second.empty() || q->second.front().backups != a.backups ||
      a.applied.size() != a.backups.size())
    return reject(fmt::format("an Applied from member {} for backups {} it was not asked about", i,
                              fmt::join(a.backups, ", ")),
                  now_ms, out);
  const Question asked = std::move(q->second.front());
  q->second.pop_front();
  auto f = failovers_.find(asked.shard);
  if (f == failovers_.end() || f->second.round != asked.round) return;  // an earlier attempt's
  // Its detach (NodesLost), or the move it confirms (ShardsMoved), never reached it: its backup
  // could take the lost primary's forwards after answering, or refuse the new one's. A control
  // message that cannot be sent is dropped (the driver logs it); the job cannot go on safely.
  if (a.epoch < asked.after_epoch)
    return fail(
        fmt::format("shard {}: ps member {} at {} answered how far its backups applied "
                    "before it took the {} sent to it (epoch {} of {}): a control message "
                    "to it was lost",
                    asked.shard, i, members_[i].endpoint,
                    f->second.stage == ShardFailover::Stage::asking ? "NodesLost" : "ShardsMoved",
                    a.epoch, asked.after_epoch),
        out);
  if (f->second.stage == ShardFailover::Stage::asking) {
    for (size_t j = 0; j < a.backups.size(); ++j)
      if (auto e = f->second.applied.find(a.backups[j]); e != f->second.applied.end())
        e->second = a.applied[j];
  } else if (f->second.stage == ShardFailover::Stage::moving) {
    // It took the move: it follows the chosen one from now on.
    f->second.moving.erase(i);
    f->second.moved.insert(i);
  }
  advance_failover(asked.shard, out);
}

void CoordinatorCore::advance_failover(NodeId s, CoordinatorEffects& out) {
  auto it = failovers_.find(s);
  if (it == failovers_.end()) return;
  ShardFailover& f = it->second;
  if (f.stage == ShardFailover::Stage::asking) {
    if (f.applied.empty())
      return fail(fmt::format("shard {}: every replica was lost during its failover", s), out);
    std::optional<std::pair<uint64_t, NodeId>> best;
    std::vector<std::string> answers;
    for (const auto& [b, applied] : f.applied) {
      if (!applied) return;  // an answer yet to come
      // The most advanced; of equals, the first in layout order.
      if (!best || *applied > best->first) best = std::pair{*applied, b};
      answers.push_back(fmt::format("node {} {}", b, *applied));
    }
    out.log.push_back(fmt::format("shard {}: forwards its backups applied: {}; promoting node {}",
                                  s, fmt::join(answers, ", "), best->second));
    return decide(s, best->second, out);
  }
  if (f.stage == ShardFailover::Stage::moving && f.moving.empty())
    promote_chosen(*layout_->owner(f.chosen), {s}, out);
}

uint32_t CoordinatorCore::choose(NodeId s, NodeId chosen) {
  failovers_.at(s).chosen = chosen;
  const uint32_t host = *layout_->owner(chosen);
  std::vector<NodeId>& live = live_backups_[s];
  live.erase(std::find(live.begin(), live.end(), chosen));  // spent on the promotion
  const Status moved = layout_->move_shard(s, host);
  COLONY_ASSERT(moved.ok(), "the coordinator's own failover: {}", moved.message());
  placed_.push_back({s, host});
  return host;
}

void CoordinatorCore::decide(NodeId s, NodeId chosen, CoordinatorEffects& out) {
  const uint32_t host = choose(s, chosen);
  ShardFailover& f = failovers_.at(s);
  // The members holding the other backups take the move first, so that they take the new
  // primary's forwards from the first: a ReportApplied after each ShardsMoved on the same link
  // is answered once the move is taken.
  f.stage = ShardFailover::Stage::moving;
  std::map<uint32_t, std::vector<NodeId>> by_member;
  for (NodeId b : live_backups_[s]) by_member[*layout_->owner(b)].push_back(b);
  for (auto& [member, backups] : by_member) {
    const uint64_t epoch = ++membership_epoch_;
    out.control.push_back({members_[member].endpoint,
                           members_[member].public_key,
                           {control_from_coordinator, ShardsMoved{{s}, host, epoch}}});
    ask_applied(s, std::move(backups), epoch, out);
    f.moving.insert(member);
  }
  advance_failover(s, out);
}

void CoordinatorCore::promote_chosen(uint32_t host, std::vector<NodeId> shards,
                                     CoordinatorEffects& out) {
  std::vector<NodeId> backups;
  for (NodeId s : shards) {
    failovers_.at(s).stage = ShardFailover::Stage::promoting;
    backups.insert(backups.end(), live_backups_[s].begin(), live_backups_[s].end());
  }
  promoting_.emplace(host, shards);
  out.control.push_back({members_[host].endpoint,
                         members_[host].public_key,
                         {control_from_coordinator,
                          ShardsMoved{std::move(shards), host, ++membership_epoch_, backups}}});
}

void CoordinatorCore::on_promoted(uint32_t i, const Promoted& p, CoordinatorEffects& out) {
  ++totals_.failovers;
  // Members holding other backups took the move before the promotion (every one of the shards').
  std::set<uint32_t> told;
  for (size_t k = 0; k < p.shards.size(); ++k) {
    auto f = failovers_.find(p.shards[k]);
    const std::set<uint32_t> moved = f == failovers_.end() ? std::set<uint32_t>{} : f->second.moved;
    if (k == 0)
      told = moved;
    else
      std::erase_if(told, [&](uint32_t w) { return moved.count(w) == 0; });
    if (f != failovers_.end()) failovers_.erase(f);
  }
  out.log.push_back(fmt::format(
      "ps member {} serves shards {} now: the clients re-send what the lost primary had not "
      "acknowledged",
      i, fmt::join(p.shards, ", ")));
  resync_gone_workers(p.shards, out);
  const uint64_t epoch = ++membership_epoch_;
  for (uint32_t w = 0; w < members_.size(); ++w)
    if (w != i && !state_[w].gone && !rebuilding(w) && told.count(w) == 0)
      out.control.push_back({members_[w].endpoint,
                             members_[w].public_key,
                             {control_from_coordinator, ShardsMoved{p.shards, i, epoch}}});
  // This coordinator's own messages to the shards (evaluation pulls) go there too.
  out.moved.push_back(ShardsMoved{p.shards, i, epoch});
  welcome_rebackups(out);  // a member waiting for the failover to hold backups
}

void CoordinatorCore::resync_gone_workers(const std::vector<NodeId>& shards,
                                          CoordinatorEffects& out) {
  // Worker members that are gone (lost, or finished and exited) will never resync: resync
  // their senders as done on their behalf, or the shards would wait for them.
  shards_resynced_.insert(shards.begin(), shards.end());
  for (size_t w = 0; w < members_.size(); ++w)
    if (members_[w].role == MemberRole::worker && (state_[w].gone || state_[w].finished))
      resync_as_done(members_[w], shards, out);
}

void CoordinatorCore::resync_as_done(const MemberInfo& wm, const std::vector<NodeId>& shards,
                                     CoordinatorEffects& out) {
  std::vector<NodeId> senders;
  if (wm.has_aggregator)
    senders.push_back(wm.aggregator);
  else
    for (NodeId n = wm.first_node; n < wm.first_node + wm.count; ++n) senders.push_back(n);
  for (NodeId sender : senders)
    for (NodeId shard : shards)
      out.ps.push_back({shard, ClockAdvance{{sender, 0, config_.map.version}, clock_done, true}});
}

void CoordinatorCore::maybe_trained(uint64_t now_ms, CoordinatorEffects& out) {
  if (phase_ != CoordinatorPhase::running) return;
  bool all = true, any_finished = false;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].role != MemberRole::worker) continue;
    if (state_[i].finished)
      any_finished = true;
    else if (!state_[i].gone)
      all = false;
  }
  if (!all) return;
  if (!any_finished) return fail("every worker member was lost", out);
  phase_ = CoordinatorPhase::trained;
  out.training_done = true;
  out.log.push_back(fmt::format("training done: {} samples", totals_.counters.samples));
  // A ps back to hold backups that is not ready yet has nothing left to hold them for.
  for (uint32_t i = 0; i < members_.size(); ++i) {
    if (!rebuilding(i) || state_[i].gone) continue;
    state_[i].gone = true;
    state_[i].rejoining = state_[i].rebackup = state_[i].rebackup_waiting = false;
    copying_.erase(i);
    const std::string why = "training is over: there are no backups left to hold";
    out.log.push_back(fmt::format("ps member {} at {}: {}", i, members_[i].endpoint, why));
    out.control.push_back({members_[i].endpoint,
                           members_[i].public_key,
                           {control_from_coordinator, Refuse{why}},
                           true});
  }
  for (const auto& [i, nodes] : copying_) {
    if (nodes.empty() || state_[i].gone) continue;
    totals_.backups_copying += static_cast<uint32_t>(nodes.size());
    std::vector<NodeId> ids;
    for (const NodePlacement& p : nodes) ids.push_back(p.node);
    out.log.push_back(fmt::format(
        "backup nodes {} on ps member {} were still taking their copies: the replicas' rows are "
        "not compared",
        fmt::join(ids, ", "), i));
  }
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].role != MemberRole::ps || state_[i].gone) continue;
    state_[i].summary_pending = true;
    out.control.push_back({members_[i].endpoint,
                           members_[i].public_key,
                           {control_from_coordinator, ShardSummaryRequest{}}});
  }
  summary_deadline_ms_ = now_ms + config_.heartbeat_timeout_ms;
}

bool CoordinatorCore::summaries_pending() const {
  if (phase_ != CoordinatorPhase::trained) return false;
  return std::any_of(state_.begin(), state_.end(),
                     [](const MemberState& s) { return s.summary_pending && !s.gone; });
}

void CoordinatorCore::fail(const std::string& why, CoordinatorEffects& out) {
  if (phase_ == CoordinatorPhase::ended) return;
  out.log.push_back("the job failed: " + why);
  send_all(Shutdown{why}, out);
  phase_ = CoordinatorPhase::ended;
  out.failed = Status::internal(why);
}

void CoordinatorCore::finish(const std::string& error, CoordinatorEffects& out) {
  if (phase_ == CoordinatorPhase::ended) return;
  send_all(Shutdown{error}, out);
  phase_ = CoordinatorPhase::ended;
}

void CoordinatorCore::send_all(const ControlBody& body, CoordinatorEffects& out) {
  for (size_t i = 0; i < members_.size(); ++i)
    if (!state_[i].gone && !rebuilding(i))
      out.control.push_back(
          {members_[i].endpoint, members_[i].public_key, {control_from_coordinator, body}});
}

void CoordinatorCore::on_timer(uint64_t now_ms, CoordinatorEffects& out) {
  if (phase_ == CoordinatorPhase::ended) return;
  if (phase_ == CoordinatorPhase::joining) {
    if (now_ms >= join_deadline_ms_)
      return fail(fmt::format("gave up after {} s (--join-timeout): {}",
                              config_.join_timeout_ms / 1000, waiting_for()),
                  out);
    if (now_ms >= next_notice_ms_) {
      out.log.push_back("waiting for members: " + waiting_for());
      next_notice_ms_ = now_ms + config_.notice_ms;
    }
    return;
  }
  if (now_ms >= next_heartbeat_ms_) {
    send_all(Heartbeat{samples_reported()}, out);
    next_heartbeat_ms_ = now_ms + config_.heartbeat_ms;
  }
  if (summaries_pending() && now_ms >= summary_deadline_ms_) {
    for (uint32_t i = 0; i < members_.size(); ++i) {
      if (!state_[i].summary_pending) continue;
      state_[i].summary_pending = false;
      out.log.push_back(
          fmt::format("ps member {} at {} sent no shard summary within {} ms: the report's table "
                      "counts leave its shards out",
                      i, members_[i].endpoint, config_.heartbeat_timeout_ms));
    }
  }
  for (uint32_t i = 0; i < members_.size() && phase_ != CoordinatorPhase::ended; ++i) {
    const MemberState& st = state_[i];
    if (st.awaiting_rejoin && now_ms >= st.rejoin_deadline_ms)
      return fail(fmt::format("ps member {} at {} did not come back within {} s (--join-timeout)",
                              i, members_[i].endpoint, config_.join_timeout_ms / 1000),
                  out);
    if (st.gone || st.finished) continue;
    // A member builds its cores (opening stores can take a while) between its Welcome and its
    // Ready, sending nothing: it has until the join timeout. After that, heartbeats count.
    if (!st.ready) {
      if (now_ms > st.ready_deadline_ms)
        lose(i,
             fmt::format("not ready {} s after its welcome (--join-timeout)",
                         config_.join_timeout_ms / 1000),
             now_ms, out);
      continue;
    }
    if (now_ms > st.last_heard_ms + config_.heartbeat_timeout_ms)
      lose(
          i,
          fmt::format("no heartbeat for {} ms (--heartbeat-timeout-ms)", now_ms - st.last_heard_ms),
          now_ms, out);
  }
  // After the losses: a member lost while a failover waits on it is left out of it (fail_over),
  // which gives the failover a fresh wait.
  if (phase_ == CoordinatorPhase::ended) return;
  for (const auto& [s, f] : failovers_) {
    if (now_ms < f.deadline_ms) continue;
    std::string waits;
    if (f.stage == ShardFailover::Stage::asking)
      waits = "a backup's member never answered how far it applied";
    else if (f.stage == ShardFailover::Stage::moving)
      waits = fmt::format("ps member{} {} never confirmed {} the new primary",
                          f.moving.size() == 1 ? "" : "s", fmt::join(f.moving, ", "),
                          f.moving.size() == 1 ? "it follows" : "they follow");
    else
      waits =
          fmt::format("ps member {} never said it promoted its backup", *layout_->owner(f.chosen));
    return fail(
        fmt::format("shard {}: its failover did not complete within {} s (--join-timeout): {}", s,
                    config_.join_timeout_ms / 1000, waits),
        out);
  }
}

void CoordinatorCore::on_send_failed(uint32_t i, const ControlBody& body, uint64_t now_ms,
                                     CoordinatorEffects& out) {
  // A member not ready yet (building its cores, or welcomed back) has not acted on the layout:
  // it is left to its ready deadline.
  if (i >= members_.size() || state_[i].gone || state_[i].finished || !state_[i].ready ||
      state_[i].rejoining || phase_ == CoordinatorPhase::ended)
    return;
  const bool worker = members_[i].role == MemberRole::worker;
  const char* missed = nullptr;
  if (const auto* lost = std::get_if<NodesLost>(&body)) {
    // A ps needs it only to detach the shards and backups it names (replication); of workers'
    // nodes, it only stops answering them.
    const bool replicas = std::any_of(lost->nodes.begin(), lost->nodes.end(), [&](NodeId n) {
      return n < layout_->nodes() &&
             (layout_->role(n) == NodeRole::shard || layout_->role(n) == NodeRole::backup);
    });
    if (worker || (replicas && config_.job.replicas > 1)) missed = "NodesLost";
  } else if (std::holds_alternative<ShardsMoved>(body)) {
    missed = "ShardsMoved";
  } else if (std::holds_alternative<BackupsPlaced>(body)) {
    missed = "BackupsPlaced";
  } else if (worker && std::holds_alternative<ShardsRestarted>(body)) {
    missed = "ShardsRestarted";  // its clients would never resync with the restarted shards
  }
  if (!missed) return;
  lose(i,
       fmt::format("a {} could not be sent to it: it would act on a cluster that has moved on",
                   missed),
       now_ms, out);
}

uint64_t CoordinatorCore::next_deadline() const {
  if (phase_ == CoordinatorPhase::joining) return std::min(join_deadline_ms_, next_notice_ms_);
  uint64_t t = next_heartbeat_ms_;
  if (summaries_pending()) t = std::min(t, summary_deadline_ms_);
  for (const auto& [s, f] : failovers_) t = std::min(t, f.deadline_ms);
  for (size_t i = 0; i < members_.size(); ++i) {
    if (state_[i].awaiting_rejoin) t = std::min(t, state_[i].rejoin_deadline_ms);
    if (!state_[i].gone && !state_[i].finished)
      t = std::min(t, state_[i].ready ? state_[i].last_heard_ms + config_.heartbeat_timeout_ms + 1
                                      : state_[i].ready_deadline_ms + 1);
  }
  return t;
}

namespace {

// Why histogram counts cannot be a member's of `buckets` buckets; empty when they can.
std::string histogram_refused(const char* name, const LoadHistogram& h, size_t buckets) {
  if (h.counts.empty() && h.sum == 0.0) return "";
  if (h.counts.size() != buckets)
    return fmt::format("{} in {} buckets, not {}", name, h.counts.size(), buckets);
  if (!std::isfinite(h.sum) || h.sum < 0.0) return fmt::format("{} summing to {}", name, h.sum);
  return "";
}

bool went_down(const std::vector<uint64_t>& now, const std::vector<uint64_t>& before) {
  if (now.size() < before.size()) return true;  // counted, then nothing
  for (size_t k = 0; k < before.size(); ++k)
    if (now[k] < before[k]) return true;
  return false;
}

bool went_down(const LoadHistogram& now, const LoadHistogram& before) {
  return went_down(now.counts, before.counts) || now.sum < before.sum;
}

// total += now - before, bucket by bucket (before: the same incarnation's last, or none),
// saturating: a member that lied with huge counters and restarted cannot wrap a total back.
void add_growth(std::vector<uint64_t>& total, const std::vector<uint64_t>& now,
                const std::vector<uint64_t>* before) {
  if (total.size() < now.size()) total.resize(now.size());
  for (size_t k = 0; k < now.size(); ++k) {
    const uint64_t was = before && k < before->size() ? (*before)[k] : 0;
    const uint64_t grew = now[k] - was;
    total[k] = grew > UINT64_MAX - total[k] ? UINT64_MAX : total[k] + grew;
  }
}

// Whether a ps's load lists fewer shards than `before` did (a member serves more shards after a
// failover, never fewer), or counts fewer rows served or pulled on one of them.
bool shard_went_down(const MemberLoad& now, const MemberLoad& before) {
  if (now.rows_pulled.empty() && !before.rows_pulled.empty()) return true;
  for (size_t k = 0; k < before.shards.size(); ++k) {
    auto at = std::find(now.shards.begin(), now.shards.end(), before.shards[k]);
    if (at == now.shards.end()) return true;
    const size_t j = static_cast<size_t>(at - now.shards.begin());
    if (now.rows_served[j] < before.rows_served[k]) return true;
    if (!before.rows_pulled.empty() && now.rows_pulled[j] < before.rows_pulled[k]) return true;
  }
  return false;
}

// total[shard] += now - before, shard by shard, as add_growth.
void add_shard_growth(std::map<NodeId, uint64_t>& total, const std::vector<NodeId>& shards,
                      const std::vector<uint64_t>& now, const MemberLoad* before,
                      const std::vector<uint64_t> MemberLoad::*counter) {
  for (size_t k = 0; k < now.size(); ++k) {
    uint64_t was = 0;
    if (before) {
      const std::vector<uint64_t>& then = before->*counter;
      auto at = std::find(before->shards.begin(), before->shards.end(), shards[k]);
      const size_t j = static_cast<size_t>(at - before->shards.begin());
      if (at != before->shards.end() && j < then.size()) was = then[j];
    }
    uint64_t& t = total[shards[k]];
    const uint64_t grew = now[k] - was;
    t = grew > UINT64_MAX - t ? UINT64_MAX : t + grew;
  }
}

void add_growth(LoadHistogram& total, const LoadHistogram& now, const LoadHistogram* before) {
  add_growth(total.counts, now.counts, before ? &before->counts : nullptr);
  total.sum += now.sum - (before ? before->sum : 0.0);
}

void add_to(LoadHistogram& total, const LoadHistogram& h) {
  add_growth(total.counts, h.counts, nullptr);
  total.sum += h.sum;
}

}  // namespace

std::string CoordinatorCore::load_refused(uint32_t i, const MemberLoad& load) const {
  const MemberInfo& m = members_[i];
  if (m.role == MemberRole::worker) {
    if (load.busy_ns.size() != m.count || load.steps.size() != m.count)
      return fmt::format("busy times for {} and steps for {} replicas from a worker of {}",
                         load.busy_ns.size(), load.steps.size(), m.count);
    if (!load.rows_served.empty() || load.rows_memory_bytes || !load.rows_pulled.empty() ||
        !load.hot_keys.empty() || !load.shards.empty())
      return "shards, rows served, pulled or held, or hot keys, from a worker";
    for (std::string why :
         {histogram_refused("read staleness", load.staleness, load_staleness_buckets),
          histogram_refused("pull latency", load.pull_latency, load_latency_buckets),
          histogram_refused("push latency", load.push_latency, load_latency_buckets)})
      if (!why.empty()) return why;
  } else {
    // The shards it serves: those it was placed with, and any a failover moved to it (the
    // layout moves them when the coordinator asks it to promote its backups).
    if (load.shards.empty()) return "a ps load naming no shard";
    for (size_t k = 0; k < load.shards.size(); ++k) {
      const NodeId shard = load.shards[k];
      if (k > 0 && shard <= load.shards[k - 1])
        return fmt::format("shards {} and {}, out of node order", load.shards[k - 1], shard);
      const bool placed = shard >= m.first_node && shard < m.first_node + m.count;
      const bool serves =
          layout_ ? shard < layout_->shards() && layout_->owner(shard) == i : placed;
      if (!serves)
        return fmt::format("a load of shard {}, which member {} does not serve", shard, i);
    }
    const size_t count = load.shards.size();
    if (load.rows_served.size() != count)
      return fmt::format("rows served by {} shards from a ps listing {}", load.rows_served.size(),
                         count);
    const bool histograms = !load.staleness.counts.empty() || !load.pull_latency.counts.empty() ||
                            !load.push_latency.counts.empty();
    if (!load.busy_ns.empty() || !load.steps.empty() || histograms)
      return "busy times, steps or read and request histograms, from a ps";
    if (!load.rows_pulled.empty()) {
      if (load.rows_pulled.size() != count)
        return fmt::format("rows pulled from {} shards from a ps listing {}",
                           load.rows_pulled.size(), count);
      for (size_t k = 0; k < count; ++k)
        if (load.rows_pulled[k] > load.rows_served[k])
          return fmt::format("{} rows pulled from a shard that served {}", load.rows_pulled[k],
                             load.rows_served[k]);
    }
    if (!load.hot_keys.empty()) {
      if (!shard_map_) {
        auto map = ShardMap::make(config_.map);
        COLONY_ASSERT(map.ok(), "the job's shard map: {}", map.status().message());
        shard_map_ = std::make_shared<const ShardMap>(std::move(map.value()));
      }
      std::map<uint32_t, std::vector<uint64_t>> listed;  // by shard position
      for (const LoadHotKey& h : load.hot_keys) {
        if (h.shard >= count)
          return fmt::format("a hot key of shard {} from a ps listing {}", h.shard, count);
        const NodeId shard = load.shards[h.shard];
        if (shard_map_->shard_of(h.key) != shard)
          return fmt::format("hot key {} listed on shard {}, which does not hold it", h.key, shard);
        std::vector<uint64_t>& keys = listed[h.shard];
        if (std::find(keys.begin(), keys.end(), h.key) != keys.end())
          return fmt::format("hot key {} listed twice", h.key);
        if (keys.size() == load_hot_keys_per_shard_max)
          return fmt::format("over {} hot keys for shard {}", load_hot_keys_per_shard_max, shard);
        keys.push_back(h.key);
      }
    }
  }
  const MemberState& st = state_[i];
  if (!st.load || st.load_incarnation != m.incarnation) return "";
  if (went_down(load.busy_ns, st.load->busy_ns) || went_down(load.steps, st.load->steps) ||
      shard_went_down(load, *st.load) || went_down(load.staleness, st.load->staleness) ||
      went_down(load.pull_latency, st.load->pull_latency) ||
      went_down(load.push_latency, st.load->push_latency))
    return "counters below those of its last heartbeat";
  return "";
}

void CoordinatorCore::take_load(uint32_t i, const MemberLoad& load, uint64_t now_ms) {
  MemberState& st = state_[i];
  st.load_ms = now_ms;
  // A new incarnation counts from 0 again; what the old one counted stays in the totals.
  if (st.load_incarnation != members_[i].incarnation) st.load.reset();
  st.load_incarnation = members_[i].incarnation;
  const MemberLoad* before = st.load ? &*st.load : nullptr;
  add_growth(st.busy_ns_total, load.busy_ns, before ? &before->busy_ns : nullptr);
  add_growth(st.steps_total, load.steps, before ? &before->steps : nullptr);
  add_shard_growth(st.rows_served_total, load.shards, load.rows_served, before,
                   &MemberLoad::rows_served);
  add_shard_growth(st.rows_pulled_total, load.shards, load.rows_pulled, before,
                   &MemberLoad::rows_pulled);
  add_growth(st.staleness_total, load.staleness, before ? &before->staleness : nullptr);
  add_growth(st.pull_latency_total, load.pull_latency, before ? &before->pull_latency : nullptr);
  add_growth(st.push_latency_total, load.push_latency, before ? &before->push_latency : nullptr);
  st.load = load;
}

ClusterLoad CoordinatorCore::load() const {
  ClusterLoad l;
  if (phase_ == CoordinatorPhase::joining) return l;
  l.shard_rows.assign(config_.shards, 0);
  l.shard_rows_pulled.assign(config_.shards, 0);
  l.oldest_load_ms = UINT64_MAX;
  for (uint32_t i = 0; i < members_.size(); ++i) {
    const MemberInfo& m = members_[i];
    const MemberState& st = state_[i];
    if (!st.gone && !st.finished)
      l.oldest_load_ms = std::min(l.oldest_load_ms, st.load ? st.load_ms : 0);
    if (st.load) l.processes.push_back({i, st.load->rss_bytes, st.load->rows_memory_bytes});
    if (m.role == MemberRole::worker) {
      add_to(l.staleness, st.staleness_total);
      add_to(l.pull_latency, st.pull_latency_total);
      add_to(l.push_latency, st.push_latency_total);
    }
    if (m.role == MemberRole::worker) {
      const bool counted = st.load.has_value();  // the totals have the member's count
      for (uint32_t k = 0; k < m.count; ++k) {
        l.worker_nodes.push_back(m.first_node + k);
        l.worker_members.push_back(i);
        l.worker_busy_s.push_back(counted ? double(st.busy_ns_total[k]) * 1e-9 : 0.0);
        l.worker_steps.push_back(counted ? st.steps_total[k] : 0);
      }
      continue;
    }
    // A shard that failed over counts what each member that served it counted.
    auto add = [](uint64_t& sum, uint64_t rows) {  // saturating, as the totals are
      sum = rows > UINT64_MAX - sum ? UINT64_MAX : sum + rows;
    };
    for (const auto& [shard, rows] : st.rows_served_total) {
      COLONY_ASSERT(shard < l.shard_rows.size(), "shard node {} beyond {} shards", shard,
                    l.shard_rows.size());
      add(l.shard_rows[shard], rows);
    }
    for (const auto& [shard, rows] : st.rows_pulled_total) add(l.shard_rows_pulled[shard], rows);
    // A lost ps's shards are served by its next incarnation: the hot keys it listed last stay
    // until then, unless a failover moved the shard to another member.
    if (st.load)
      for (const LoadHotKey& h : st.load->hot_keys)
        if (const NodeId shard = st.load->shards[h.shard]; !layout_ || layout_->owner(shard) == i)
          l.hot_keys.push_back({shard, h.key, h.pulls});
  }
  std::stable_sort(l.hot_keys.begin(), l.hot_keys.end(),
                   [](const LoadHotKey& a, const LoadHotKey& b) { return a.shard < b.shard; });
  if (l.oldest_load_ms == UINT64_MAX) l.oldest_load_ms = 0;  // nobody training
  return l;
}

uint64_t CoordinatorCore::samples_reported() const {
  uint64_t n = 0;
  for (const MemberState& s : state_) n += s.samples;
  return n;
}

}  // namespace colony
