#include "ps/member_core.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace colony {

namespace {

constexpr uint64_t drop_log_every_ms = 60'000;

const char* kind_name(const ControlBody& b) {
  static constexpr const char* names[] = {"Join",
                                          "Welcome",
                                          "Ready",
                                          "Start",
                                          "Heartbeat",
                                          "MemberDone",
                                          "NodesLost",
                                          "Leave",
                                          "Shutdown",
                                          "Refuse",
                                          "Joined",
                                          "ShardsRestarted",
                                          "ShardSummaryRequest",
                                          "ShardSummary",
                                          "ShardsCheckpointed",
                                          "CheckpointComplete",
                                          "DenseCheckpointed",
                                          "DenseStart",
                                          "ShardsMoved",
                                          "Promoted",
                                          "ReportApplied",
                                          "Applied",
                                          "BackupsPlaced",
                                          "BackupsCopied"};
  static_assert(std::size(names) == std::variant_size_v<ControlBody>);
  return names[b.index()];
}

}  // namespace

Expected<MemberCore> MemberCore::make(const MemberConfig& config, uint64_t now_ms) {
  if (config.me.count == 0 || config.me.count > 4096)
    return Status::invalid_input(
        fmt::format("{} {} out of range 1..4096",
                    config.me.role == MemberRole::ps ? "--shards" : "--replicas", config.me.count));
  if (config.join_timeout_ms == 0 || config.join_retry_ms == 0 || config.notice_ms == 0)
    return Status::invalid_input("the join timeout, retry and notice intervals must be above 0");
  return MemberCore(config, now_ms);
}

MemberCore::MemberCore(const MemberConfig& config, uint64_t now_ms)
    : config_(config),
      start_ms_(now_ms),
      next_join_ms_(now_ms),
      next_notice_ms_(now_ms + config.notice_ms) {}

void MemberCore::send(ControlBody body, MemberEffects& out) {
  if (phase_ != MemberPhase::ended) out.control.push_back(std::move(body));
}

void MemberCore::end(Status status, MemberEffects& out) {
  if (phase_ == MemberPhase::ended) return;
  phase_ = MemberPhase::ended;
  out.exit = std::move(status);
}

void MemberCore::start(uint64_t now_ms, MemberEffects& out) {
  if (phase_ != MemberPhase::joining) return;
  on_timer(now_ms, out);
}

uint64_t MemberCore::next_deadline() const {
  switch (phase_) {
    case MemberPhase::joining:
      return std::min({acknowledged_ ? UINT64_MAX : next_join_ms_, next_notice_ms_,
                       start_ms_ + config_.join_timeout_ms});
    case MemberPhase::building:
      return UINT64_MAX;  // the driver calls built()
    case MemberPhase::serving:
      return std::min(next_heartbeat_ms_, last_heard_ms_ + welcome_.heartbeat_timeout_ms + 1);
    case MemberPhase::ended:
      break;
  }
  return UINT64_MAX;
}

void MemberCore::on_timer(uint64_t now_ms, MemberEffects& out) {
  if (phase_ == MemberPhase::joining) {
    if (now_ms - start_ms_ >= config_.join_timeout_ms) {
      const uint64_t s = config_.join_timeout_ms / 1000;
      return end(
          acknowledged_
              ? Status::internal(fmt::format(
                    "the cluster did not fill within {} s (--join-timeout): {}", s, join_status_))
              : Status::internal(fmt::format(
                    "no answer from the coordinator at {} within {} s (--join-timeout): "
                    "is it running and reachable from here, with the same --cluster-id, "
                    "and is this process's public key in its authorized_keys?",
                    config_.coordinator, s)),
          out);
    }
    if (!acknowledged_ && now_ms >= next_join_ms_) {
      send(Join{config_.me}, out);
      next_join_ms_ = now_ms + config_.join_retry_ms;
    }
    if (now_ms >= next_notice_ms_) {
      out.log.push_back(
          acknowledged_ ? fmt::format("joined; waiting for the cluster to fill: {}", join_status_)
                        : fmt::format("waiting for the coordinator at {} ({} s): no answer yet",
                                      config_.coordinator, (now_ms - start_ms_) / 1000));
      next_notice_ms_ = now_ms + config_.notice_ms;
    }
    return;
  }
  if (phase_ != MemberPhase::serving) return;
  if (now_ms > last_heard_ms_ + welcome_.heartbeat_timeout_ms)
    return end(Status::internal(fmt::format("lost the coordinator at {}: nothing heard for {} ms",
                                            config_.coordinator, now_ms - last_heard_ms_)),
               out);
  if (now_ms >= next_heartbeat_ms_) {
    send(Heartbeat{}, out);
    next_heartbeat_ms_ = now_ms + welcome_.heartbeat_ms;
  }
}

void MemberCore::on_message(const ControlMessage& m, uint64_t now_ms, MemberEffects& out) {
  switch (phase_) {
    case MemberPhase::joining:
      return on_joining(m, now_ms, out);
    case MemberPhase::building:
      // Cores are being built: the coordinator waits for Ready, and says nothing but Shutdown.
      if (auto* s = std::get_if<Shutdown>(&m.body))
        return end(s->error.empty()
                       ? Status()
                       : Status::internal("the coordinator ended the job: " + s->error),
                   out);
      if (std::holds_alternative<Heartbeat>(m.body) || std::holds_alternative<Welcome>(m.body))
        return;  // a heartbeat, or a resent Welcome: nothing to do yet
      return drop(
          Status::invalid_input(fmt::format("a {} while building the cores", kind_name(m.body))),
          now_ms, out);
    case MemberPhase::serving:
      return on_serving(m, now_ms, out);
    case MemberPhase::ended:
      return;
  }
}

void MemberCore::on_joining(const ControlMessage& m, uint64_t now_ms, MemberEffects& out) {
  if (auto* j = std::get_if<Joined>(&m.body)) {
    if (!acknowledged_) out.log.push_back("the coordinator took my join: " + j->status);
    acknowledged_ = true;
    join_status_ = j->status;
  } else if (auto* r = std::get_if<Refuse>(&m.body)) {
    end(Status::internal("the coordinator refused this member: " + r->reason), out);
  } else if (auto* w = std::get_if<Welcome>(&m.body)) {
    if (Status s = take_layout(*w); !s.ok())
      return drop(Status::invalid_input("a layout from the coordinator: " + s.message()), now_ms,
                  out);
    phase_ = MemberPhase::building;
    out.build = welcome_;
  } else if (auto* s = std::get_if<Shutdown>(&m.body)) {
    end(s->error.empty() ? Status()
                         : Status::internal("the coordinator ended the job: " + s->error),
        out);
  } else if (!std::holds_alternative<Heartbeat>(m.body)) {
    drop(Status::invalid_input(fmt::format("a {} before the Welcome", kind_name(m.body))), now_ms,
         out);
  }
}

Status MemberCore::take_layout(const Welcome& w) {
  auto layout = ClusterLayout::make(w);
  if (!layout) return layout.status();
  const MemberInfo& self = w.members[w.you];
  const MemberInfo& me = config_.me;
  if (self.role != me.role || self.count != me.count || self.endpoint != me.endpoint ||
      self.public_key != me.public_key || self.durable != me.durable)
    return Status::invalid_input(fmt::format("it names this member as a {} at {} hosting {}",
                                             to_string(self.role), self.endpoint, self.count));
  if (me.role == MemberRole::ps && w.resume && !me.durable)
    return Status::invalid_input("it resumes shards this member does not keep on disk");
  if (w.backups_only && (me.role != MemberRole::ps || w.resume || w.job.replicas < 2 ||
                         layout->backup_nodes_of(w.you).empty()))
    return Status::invalid_input(
        "it has this member hold backups only, but it is no ps of a replicated job given backups");
  layout_.emplace(std::move(layout.value()));
  welcome_ = w;
  you_ = w.you;
  nodes_expected_ = me.role == MemberRole::worker ? self.count + (self.has_aggregator ? 1 : 0) : 0;
  return Status();
}

void MemberCore::built(const Status& status, uint64_t now_ms, MemberEffects& out,
                       std::optional<DenseState> dense_start) {
  if (phase_ != MemberPhase::building) return;
  if (!status.ok()) {
    send(Leave{status.message(), /*drained=*/false}, out);
    return end(status, out);
  }
  phase_ = MemberPhase::serving;
  last_heard_ms_ = now_ms;
  next_heartbeat_ms_ = now_ms;
  if (dense_start && config_.me.role == MemberRole::ps)
    send(DenseStart{std::move(*dense_start)}, out);
  send(Ready{}, out);
  const MemberInfo& self = welcome_.members[you_];
  out.log.push_back(fmt::format(
      "built my cores (nodes {}..{}{}); ready", self.first_node, self.first_node + self.count - 1,
      self.has_aggregator ? fmt::format(", aggregator {}", self.aggregator) : std::string()));
}

Status MemberCore::check_served(const ControlMessage& m) const {
  const ClusterLayout& layout = *layout_;
  auto nodes_ok = [&](const std::vector<NodeId>& nodes, bool durable_shards) {
    for (NodeId n : nodes) {
      if (n >= layout.nodes()) return false;
      if (durable_shards) {
        const auto owner = layout.owner(n);
        if (layout.role(n) != NodeRole::shard || !owner || !layout.members()[*owner].durable)
          return false;
      }
    }
    return true;
  };
  if (auto* lost = std::get_if<NodesLost>(&m.body))
    return nodes_ok(lost->nodes, false)
               ? Status()
               : Status::invalid_input("NodesLost names nodes outside the layout");
  if (auto* back = std::get_if<ShardsRestarted>(&m.body))
    return nodes_ok(back->nodes, true)
               ? Status()
               : Status::invalid_input(
                     "ShardsRestarted names nodes that are not shards of a durable ps");
  if (auto* moved = std::get_if<ShardsMoved>(&m.body)) {
    if (moved->member >= layout.members().size() ||
        layout.members()[moved->member].role != MemberRole::ps)
      return Status::invalid_input(
          fmt::format("ShardsMoved names member {}, which is no ps member", moved->member));
    for (NodeId n : moved->shards)
      if (Status s = layout.check_move(n, moved->member); !s.ok())
        return Status::invalid_input("ShardsMoved: " + s.message());
    if (moved->member == you_ && config_.me.role != MemberRole::ps)
      return Status::invalid_input("ShardsMoved to a worker");
    // The other backups of the shards it promotes, named to the promoting member only.
    std::set<NodeId> seen;
    for (NodeId b : moved->backups) {
      const auto shard = layout.shard_of_backup(b);
      if (moved->member != you_ || !shard ||
          std::find(moved->shards.begin(), moved->shards.end(), *shard) == moved->shards.end() ||
          layout.owner(b) == you_ || !seen.insert(b).second)
        return Status::invalid_input(
            fmt::format("ShardsMoved names node {} as a backup of shards it moves to member {}", b,
                        moved->member));
    }
    return Status();
  }
  if (auto* placed = std::get_if<BackupsPlaced>(&m.body)) {
    // Checked in order on a copy: two placements of one message must not put two replicas of a
    // shard on one member either.
    ClusterLayout after = layout;
    for (const NodePlacement& p : placed->placed) {
      if (p.member == you_)
        return Status::invalid_input("BackupsPlaced places a backup on this member");
      if (Status s = after.place_backup(p.node, p.member); !s.ok())
        return Status::invalid_input("BackupsPlaced: " + s.message());
    }
    return Status();
  }
  if (auto* report = std::get_if<ReportApplied>(&m.body)) {
    std::set<NodeId> seen;
    for (NodeId b : report->backups)
      if (!layout.shard_of_backup(b) || layout.owner(b) != you_ || !seen.insert(b).second)
        return Status::invalid_input(
            fmt::format("ReportApplied names node {}, which is no backup this ps hosts", b));
    return Status();
  }
  if (auto* done = std::get_if<CheckpointComplete>(&m.body)) {
    if (config_.me.role != MemberRole::ps || !config_.takes_checkpoints)
      return Status::invalid_input("CheckpointComplete to a member that takes no checkpoints");
    if (done->shards.size() != layout.shards())
      return Status::invalid_input(fmt::format("CheckpointComplete lists {} shards of {}",
                                               done->shards.size(), layout.shards()));
    for (size_t s = 0; s < done->shards.size(); ++s)
      if (done->shards[s].shard != s || done->shards[s].dir != fmt::format("shard-{}", s))
        return Status::invalid_input(
            fmt::format("CheckpointComplete's entry {} is not shard {}", s, s));
    // A checkpoint step after the last one completed: a manifest is never written over another.
    const uint32_t every = welcome_.job.checkpoint_every;
    if (!every || done->step == 0 || done->step % every != 0 || done->step <= last_complete_)
      return Status::invalid_input(
          fmt::format("CheckpointComplete of step {}: no checkpoint step after the last complete "
                      "one ({}; every {})",
                      done->step, last_complete_, every));
    return Status();
  }
  if (std::holds_alternative<DenseStart>(m.body) &&
      (config_.me.role != MemberRole::worker || started_))
    return Status::invalid_input("DenseStart to a member that is not a worker about to start");
  const bool expected =
      std::holds_alternative<Shutdown>(m.body) || std::holds_alternative<Heartbeat>(m.body) ||
      std::holds_alternative<DenseStart>(m.body) ||
      (config_.me.role == MemberRole::worker && std::holds_alternative<Start>(m.body)) ||
      (config_.me.role == MemberRole::ps && std::holds_alternative<ShardSummaryRequest>(m.body));
  return expected ? Status()
                  : Status::invalid_input(fmt::format("a {} to a serving {}", kind_name(m.body),
                                                      to_string(config_.me.role)));
}

void MemberCore::on_serving(const ControlMessage& m, uint64_t now_ms, MemberEffects& out) {
  if (Status bad = check_served(m); !bad.ok()) return drop(bad, now_ms, out);
  const uint64_t* epoch = nullptr;
  if (auto* lost = std::get_if<NodesLost>(&m.body)) epoch = &lost->epoch;
  if (auto* back = std::get_if<ShardsRestarted>(&m.body)) epoch = &back->epoch;
  if (auto* moved = std::get_if<ShardsMoved>(&m.body)) epoch = &moved->epoch;
  if (auto* placed = std::get_if<BackupsPlaced>(&m.body)) epoch = &placed->epoch;
  if (epoch) {
    if (*epoch <= membership_epoch_)
      return drop(Status::invalid_input(fmt::format("a {} of epoch {}, not after {}",
                                                    kind_name(m.body), *epoch, membership_epoch_)),
                  now_ms, out);
    membership_epoch_ = *epoch;
  }
  last_heard_ms_ = std::max(last_heard_ms_, now_ms);
  if (std::holds_alternative<Start>(m.body)) {
    if (started_ || draining_) return;
    started_ = true;
    out.start = true;
    const uint32_t n = welcome_.members[you_].count;
    out.log.push_back(fmt::format("training starts: {} replica{}", n, n == 1 ? "" : "s"));
  } else if (auto* lost = std::get_if<NodesLost>(&m.body)) {
    out.lost.insert(out.lost.end(), lost->nodes.begin(), lost->nodes.end());
    out.log.push_back(lost->reason + ": no longer sending to its nodes");
    // A replicated shard whose primary was lost: nothing more is taken in its name until its
    // next member is named, so that the backups' applied forwards stop where they are.
    if (layout_->replicas() > 1)
      for (NodeId n : lost->nodes)
        if (layout_->role(n) == NodeRole::shard) {
          layout_->detach_shard(n);
          out.detach.push_back(n);
        }
  } else if (auto* placed = std::get_if<BackupsPlaced>(&m.body)) {
    for (const NodePlacement& p : placed->placed) {
      const Status s = layout_->place_backup(p.node, p.member);
      COLONY_ASSERT(s.ok(), "a placement check_served took: {}", s.message());
    }
    out.placed.insert(out.placed.end(), placed->placed.begin(), placed->placed.end());
  } else if (auto* report = std::get_if<ReportApplied>(&m.body)) {
    out.report_applied.insert(out.report_applied.end(), report->backups.begin(),
                              report->backups.end());
  } else if (std::holds_alternative<ShardSummaryRequest>(m.body)) {
    ShardSummary s;
    s.bad_messages = bad_messages_;
    send(s, out);
  } else if (auto* complete = std::get_if<CheckpointComplete>(&m.body)) {
    last_complete_ = complete->step;
    out.manifest = *complete;
  } else if (auto* start = std::get_if<DenseStart>(&m.body)) {
    out.log.push_back(
        fmt::format("the replicas start from the dense layers of step {}", start->state.step));
    out.dense_start = std::move(start->state);
  } else if (auto* back = std::get_if<ShardsRestarted>(&m.body)) {
    if (back->nodes.empty()) return;
    out.restarted.insert(out.restarted.end(), back->nodes.begin(), back->nodes.end());
    out.log.push_back(fmt::format("shards {}..{} restarted: re-sending what they may have lost",
                                  back->nodes.front(), back->nodes.back()));
  } else if (auto* moved = std::get_if<ShardsMoved>(&m.body)) {
    if (moved->shards.empty()) return;
    for (NodeId n : moved->shards) {
      const Status s = layout_->move_shard(n, moved->member);
      COLONY_ASSERT(s.ok(), "a move check_served took: {}", s.message());
    }
    // One move in a set of effects (the driver carries out each message's before the next).
    COLONY_ASSERT(out.promote.empty() && !out.moved, "two ShardsMoved in one set of effects");
    if (moved->member == you_) {
      out.promote = moved->shards;
      out.promote_backups = moved->backups;
      out.log.push_back(fmt::format("failover: promoting this ps's backups of shards {}",
                                    fmt::join(moved->shards, ", ")));
      return;
    }
    out.restarted.insert(out.restarted.end(), moved->shards.begin(), moved->shards.end());
    out.log.push_back(
        fmt::format("failover: shards {} are served by member {} now: re-sending what they may "
                    "have lost",
                    fmt::join(moved->shards, ", "), moved->member));
    out.moved = std::move(*moved);
  } else if (auto* s = std::get_if<Shutdown>(&m.body)) {
    if (s->error.empty()) out.log.push_back("the job is over; exiting");
    end(s->error.empty() ? Status()
                         : Status::internal("the coordinator ended the job: " + s->error),
        out);
  }
}

void MemberCore::promoted(std::vector<NodeId> shards, MemberEffects& out) {
  if (phase_ != MemberPhase::serving) return;
  send(Promoted{std::move(shards)}, out);
}

void MemberCore::backups_copied(std::vector<NodeId> backups, MemberEffects& out) {
  if (phase_ != MemberPhase::serving || backups.empty()) return;
  out.log.push_back(fmt::format(
      "backup node{} {} {} and follow{} {} primar{}", backups.size() == 1 ? "" : "s",
      fmt::join(backups, ", "), backups.size() == 1 ? "has its copy" : "have their copies",
      backups.size() == 1 ? "s" : "", backups.size() == 1 ? "its" : "their",
      backups.size() == 1 ? "y" : "ies"));
  send(BackupsCopied{std::move(backups)}, out);
}

void MemberCore::applied(Applied applied, MemberEffects& out) {
  if (phase_ != MemberPhase::serving) return;
  applied.epoch = membership_epoch_;
  send(std::move(applied), out);
}

void MemberCore::drop(const Status& why, uint64_t now_ms, MemberEffects& out) {
  ++bad_messages_;
  if (now_ms < next_drop_log_ms_) return;
  next_drop_log_ms_ = now_ms + drop_log_every_ms;
  out.log.push_back(
      fmt::format("dropped a control message: {} ({} dropped so far; logged at most once a minute)",
                  why.message(), bad_messages_));
}

void MemberCore::send_done(std::string error, MemberEffects& out) {
  MemberDone d;
  d.error = std::move(error);
  d.drained = draining_;
  d.counters.bad_messages = bad_messages_;
  send(std::move(d), out);
  done_sent_ = true;
}

void MemberCore::node_done(NodeId node, const Status& error, MemberEffects& out) {
  if (phase_ != MemberPhase::serving || config_.me.role != MemberRole::worker || done_sent_) return;
  ++nodes_done_;
  if (!error.ok() && local_error_.empty())
    local_error_ = fmt::format("node {}: {}", node, error.message());
  if (nodes_done_ < nodes_expected_ && local_error_.empty()) return;
  send_done(local_error_, out);
  if (!local_error_.empty()) {
    out.log.push_back("failed: " + local_error_);
    return end(Status::internal(local_error_), out);
  }
  if (draining_) {
    out.log.push_back("drained; exiting");
    end(Status(), out);
  }
}

void MemberCore::dense_checkpointed(DenseState state, MemberEffects& out) {
  if (phase_ != MemberPhase::serving || config_.me.role != MemberRole::worker) return;
  send(DenseCheckpointed{std::move(state)}, out);
}

void MemberCore::checkpointed(std::vector<std::pair<uint32_t, ShardCheckpoint>> copies,
                              MemberEffects& out) {
  if (phase_ != MemberPhase::serving) return;
  std::map<uint32_t, ShardsCheckpointed> by_step;
  for (auto& [step, copy] : copies) {
    by_step[step].step = step;
    by_step[step].shards.push_back(std::move(copy));
  }
  for (auto& [step, report] : by_step) send(std::move(report), out);
}

void MemberCore::stop(MemberEffects& out) {
  switch (phase_) {
    case MemberPhase::joining:
      out.log.push_back("stopped by a signal before the job started");
      return end(Status(), out);
    case MemberPhase::building:
      // A durable ps has served nothing yet: its store is as its last process left it, and it
      // may start again over it (a resumed ps stopped again at once).
      send(Leave{"stopped by a signal before its shards were built",
                 /*drained=*/config_.me.role == MemberRole::ps && config_.me.durable},
           out);
      return end(Status(), out);
    case MemberPhase::serving:
      break;
    case MemberPhase::ended:
      return;
  }
  if (config_.me.role == MemberRole::ps) {
    if (draining_) return;
    draining_ = true;
    out.log.push_back(
        welcome_.job.replicas > 1
            ? "SIGTERM: draining the shards, then leaving: while training runs, the coordinator "
              "hands them to their backups (the job ends if one has none left)"
        : config_.me.durable && welcome_.job.replicas == 1
            ? "SIGTERM: draining the shards and writing their rows to the store, then leaving: "
              "while training runs, the coordinator waits up to its --join-timeout for this ps "
              "to start again with the same --listen and --store"
            : "SIGTERM: draining the shards");
    out.drain = true;
    return;
  }
  if (draining_) return;
  draining_ = true;
  if (!started_) {
    out.log.push_back("SIGTERM before the start: leaving");
    send(Leave{"stopped by SIGTERM before the start", /*drained=*/false}, out);
    return end(Status(), out);
  }
  if (done_sent_) {
    out.log.push_back("SIGTERM after this member finished: exiting");
    return end(Status(), out);
  }
  out.log.push_back(
      "SIGTERM: taking no more batches; waiting for the pushes in flight to be acknowledged");
  out.stop_feeding = true;
}

void MemberCore::drained(MemberEffects& out) {
  if (phase_ != MemberPhase::serving || !draining_) return;
  out.log.push_back("drained: every shard has handled what it was sent; leaving");
  send(Leave{"stopped by SIGTERM", /*drained=*/true}, out);
  end(Status(), out);
}

void MemberCore::fail(const Status& error, MemberEffects& out) {
  if (phase_ == MemberPhase::ended) return;
  out.log.push_back("failed: " + error.message());
  if (phase_ == MemberPhase::serving && config_.me.role == MemberRole::worker && !done_sent_)
    send_done(error.message(), out);
  else if (phase_ != MemberPhase::joining)
    send(Leave{error.message(), /*drained=*/false}, out);
  end(error, out);
}

}  // namespace colony
