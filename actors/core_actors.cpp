#include "actors/core_actors.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

namespace colony {

void route(JobShared& shared, Outbox& out) {
  for (Outgoing& o : out) {
    COLONY_ASSERT(o.to < shared.nodes.size(), "message to unknown node {}", o.to);
    if (shared.observer) shared.observer(o);
    std::visit([&](auto& m) { caf::anon_send(shared.nodes[o.to], std::move(m)); }, o.message);
  }
  out.clear();
}

namespace {

// Tells the coordinator, once, that a core has finished or failed.
template <class Self, class Core>
void report_once(Self* self, bool& reported, const Core& core, JobShared& shared,
                 const coordinator_actor& coordinator, NodeId id) {
  if (reported) return;
  if (!core.error().ok()) {
    shared.fail(core.error());
    self->send(coordinator, done_atom::value, id, core.error());
    reported = true;
  } else if (core.done()) {
    self->send(coordinator, done_atom::value, id, Status());
    reported = true;
  }
}

// Counts a shard's request and mirrors its core's stats and size into its instruments.
void count_request(const monitor::ShardInstruments& m, const PsMessage& message) {
  if (auto* pull = std::get_if<PullRequest>(&message)) {
    m.pulls->inc();
    m.hot_keys->add(pull->keys);
  }
  if (std::holds_alternative<PushRequest>(message)) m.pushes->inc();
  if (std::holds_alternative<ClockAdvance>(message)) m.clocks->inc();
}
void record_shard(const monitor::ShardInstruments& m, const ShardCore& core, ShardStats& counted,
                  size_t queued) {
  const ShardStats& st = core.stats();
  monitor::add_growth(m.rows_pulled, st.rows_pulled, counted.rows_pulled);
  monitor::add_growth(m.rows_pushed, st.rows_pushed, counted.rows_pushed);
  monitor::add_growth(m.pulls_deferred, st.pulls_deferred, counted.pulls_deferred);
  monitor::add_growth(m.not_finite, st.pushes_not_finite, counted.pushes_not_finite);
  monitor::add_growth(m.keys_unknown, st.push_keys_unknown, counted.push_keys_unknown);
  monitor::add_growth(m.updates_not_finite, st.updates_not_finite, counted.updates_not_finite);
  monitor::add_growth(m.refused, st.messages_refused, counted.messages_refused);
  m.rows->set(double(core.rows()));
  m.bytes->set(double(core.table_bytes()));
  m.queue->set(double(queued));
}

// A worker's pulls and pushes about to be sent, timed from now. A request never answered (one
// re-sent under a new shard map, one to a lost shard) leaves its entry behind: past a bound the
// entries are dropped (a few latencies go unmeasured; memory stays bounded).
void time_requests(worker_state& st) {
  constexpr size_t timed_requests_max = 4096;
  if (st.pulls_sent.size() > timed_requests_max) st.pulls_sent.clear();
  if (st.pushes_sent.size() > timed_requests_max) st.pushes_sent.clear();
  const auto now = std::chrono::steady_clock::now();
  for (const Outgoing& o : st.out) {
    if (auto* pull = std::get_if<PullRequest>(&o.message))
      st.pulls_sent[{o.to, pull->header.request_id}] = {now, pull->clock};
    else if (auto* push = std::get_if<PushRequest>(&o.message))
      st.pushes_sent[{o.to, push->header.request_id}] = now;
  }
}
// The latency (and for a pull, the staleness) of the request a reply answers, recorded into
// the metrics and as a span of worker `id` on the timeline: "pull" (on track 1) and "push" (on
// track 2) are requests in flight, which overlap the worker's compute.
void time_reply(worker_state& st, const PsMessage& message, monitor::TimelineRecorder* timeline,
                NodeId id) {
  const auto now = std::chrono::steady_clock::now();
  auto seconds = [&](worker_state::Since since) {
    return std::chrono::duration<double>(now - since).count();
  };
  if (auto* reply = std::get_if<PullReply>(&message)) {
    auto it = st.pulls_sent.find({reply->header.sender, reply->header.request_id});
    if (it == st.pulls_sent.end()) return;
    const uint32_t clock = it->second.second;
    if (st.metrics) {
      st.metrics->pull_seconds->observe(seconds(it->second.first));
      st.metrics->staleness->observe(clock > reply->min_clock ? double(clock - reply->min_clock)
                                                              : 0.0);
    }
    if (timeline)
      timeline->span(fmt::format("pull {} from node {}", clock, reply->header.sender), "pull",
                     "worker", id, 1, it->second.first, now);
    st.pulls_sent.erase(it);
  } else if (auto* ack = std::get_if<PushAck>(&message)) {
    auto it = st.pushes_sent.find({ack->header.sender, ack->header.request_id});
    if (it == st.pushes_sent.end()) return;
    if (st.metrics) st.metrics->push_seconds->observe(seconds(it->second));
    if (timeline)
      timeline->span(fmt::format("push to node {}", ack->header.sender), "push", "worker", id, 2,
                     it->second, now);
    st.pushes_sent.erase(it);
  }
}

// A shard's handling of one message as a span (pushes "apply", pulls "serve"), and the pulls
// it held at the gate: one that got no reply at once is remembered, and its reply, when some
// later message releases it, ends a "gate wait" span.
void record_shard_spans(shard_state& st, monitor::TimelineRecorder& timeline, NodeId id,
                        const PsMessage& m, std::chrono::steady_clock::time_point start) {
  constexpr size_t held_pulls_max = 4096;  // pulls never answered (a lost worker) age out
  const auto now = std::chrono::steady_clock::now();
  for (const Outgoing& o : st.out) {
    auto* reply = std::get_if<PullReply>(&o.message);
    if (!reply) continue;
    auto it = st.pulls_held.find({o.to, reply->header.request_id});
    if (it == st.pulls_held.end()) continue;
    timeline.span(fmt::format("pull from node {}", o.to), "gate wait", "shard", id, 1, it->second,
                  now);
    st.pulls_held.erase(it);
  }
  if (auto* pull = std::get_if<PullRequest>(&m)) {
    timeline.span(fmt::format("pull from node {}", pull->header.sender), "serve", "shard", id, 0,
                  start, now);
    const bool answered = std::any_of(st.out.begin(), st.out.end(), [&](const Outgoing& o) {
      auto* reply = std::get_if<PullReply>(&o.message);
      return reply && o.to == pull->header.sender &&
             reply->header.request_id == pull->header.request_id;
    });
    if (!answered) {
      if (st.pulls_held.size() >= held_pulls_max) st.pulls_held.clear();
      st.pulls_held[{pull->header.sender, pull->header.request_id}] = start;
    }
  } else if (auto* push = std::get_if<PushRequest>(&m)) {
    timeline.span(fmt::format("push {} from node {}", push->clock, push->header.sender), "apply",
                  "shard", id, 0, start, now);
  }
}

// The kinds of PsMessage, by variant index (the aggregator's spans are named by them).
constexpr const char* message_kinds[] = {"pull",        "pull reply",      "push",
                                         "push ack",    "clock",           "shard map",
                                         "ps error",    "dense reduce",    "dense broadcast",
                                         "pull hint",   "replica forward", "replica ack",
                                         "replica copy"};
static_assert(std::size(message_kinds) == std::variant_size_v<PsMessage>);

}  // namespace

namespace {

// Where a replicated shard's backup node is reached: through the proxy it was placed with, or
// as the job's nodes say.
const caf::actor& backup_route(const JobShared& shared, const ShardReplication& r, NodeId node) {
  auto placed = r.placed.find(node);
  if (placed != r.placed.end()) return placed->second;
  COLONY_ASSERT(node < shared.nodes.size(), "a backup at unknown node {}", node);
  return shared.nodes[node];
}

// Sends a replicated shard's forwards to every live backup, in order.
void send_forwards(JobShared& shared, const ShardReplication& r,
                   std::vector<ReplicaForward>& forwards) {
  size_t last = r.backups.size();  // the last live one takes each forward, the others a copy
  for (size_t b = 0; b < r.backups.size(); ++b)
    if (r.primary->live(uint32_t(b))) last = b;
  for (ReplicaForward& f : forwards)
    for (size_t b = 0; b <= last && last < r.backups.size(); ++b) {
      if (!r.primary->live(uint32_t(b))) continue;
      if (b == last)
        caf::anon_send(backup_route(shared, r, r.backups[b]), std::move(f));
      else
        caf::anon_send(backup_route(shared, r, r.backups[b]), f);
    }
  forwards.clear();
}

// The primary's number for the live backup at `node` (a node placed again after it was lost has
// a lost number and a live one); nullopt when none is live.
std::optional<uint32_t> live_backup(const ShardReplication& r, NodeId node) {
  for (size_t b = r.backups.size(); b-- > 0;)
    if (r.backups[b] == node && r.primary->live(uint32_t(b))) return uint32_t(b);
  return std::nullopt;
}

}  // namespace

shard_actor::behavior_type shard_fun(shard_actor::stateful_pointer<shard_state> self,
                                     std::shared_ptr<ShardCore> core,
                                     std::shared_ptr<JobShared> shared,
                                     std::shared_ptr<ShardReplication> replication) {
  if (shared->metrics)
    self->state.metrics = monitor::shard_instruments(*shared->metrics, core->config().shard_index);
  self->state.before = self->state.counted = core->stats();
  auto handle = [self, core, shared, replication](PsMessage m) {
    auto& st = self->state;
    if (st.metrics) count_request(*st.metrics, m);
    const auto start = std::chrono::steady_clock::now();
    if (auto* ack = std::get_if<ReplicaAck>(&m)) {
      // Only this shard's backups may acknowledge (the layout checked it); a lie about how far
      // one got changes nothing (ShardPrimary::on_ack) and is counted.
      if (replication && replication->promoted_from == ack->header.sender) return;
      const std::optional<uint32_t> b =
          replication ? live_backup(*replication, ack->header.sender) : std::nullopt;
      // One from a backup declared lost was on its way then (no lie).
      const bool lost = replication && !b &&
                        std::find(replication->backups.begin(), replication->backups.end(),
                                  ack->header.sender) != replication->backups.end();
      if (!lost && (!b || !replication->primary->on_ack(*b, *ack, st.out).ok())) ++st.acks_refused;
    } else if (replication) {
      replication->primary->on_message(m, st.out, st.forwards);
      send_forwards(*shared, *replication, st.forwards);
    } else {
      core->on_message(m, st.out);
    }
    if (shared->timeline) record_shard_spans(st, *shared->timeline, core->config().id, m, start);
    route(*shared, st.out);
    if (!core->error().ok()) shared->fail(core->error());  // the store failed: end the job
    if (shared->after_shard_message) shared->after_shard_message(*core);
    if (st.metrics) record_shard(*st.metrics, *core, st.counted, self->mailbox().size());
    if (const uint64_t n = core->stats().updates_not_finite; n > st.updates_refused_reported) {
      const RowNotFinite& last = core->last_row_not_finite();
      shared->updates_refused(
          n - st.updates_refused_reported,
          fmt::format("shard {}: key {} from node {} at step {}", core->config().shard_index,
                      last.key, last.sender, last.clock));
      st.updates_refused_reported = n;
    }
    if (const uint32_t s = core->config().shard_index; s < shared->shard_rows.size()) {
      const ShardStats& now = core->stats();
      const ShardStats& before = self->state.before;
      shared->shard_rows[s].store(
          now.rows_pulled + now.rows_pushed - before.rows_pulled - before.rows_pushed,
          std::memory_order_relaxed);
      // After shard_rows: a reader that loads this first reads no fewer rows served than pulled.
      shared->shard_rows_pulled[s].store(now.rows_pulled - before.rows_pulled,
                                         std::memory_order_release);
      shared->shard_bytes[s].store(core->store().memory_bytes(), std::memory_order_relaxed);
    }
  };
  return {
      [handle](PullRequest& m) { handle(std::move(m)); },
      [handle](PushRequest& m) { handle(std::move(m)); },
      [handle](ClockAdvance& m) { handle(std::move(m)); },
      [handle](PullHint& m) { handle(std::move(m)); },
      [handle](ReplicaAck& m) { handle(std::move(m)); },
      [self, shared, replication](backup_lost_atom, NodeId backup) {
        if (!replication) return;
        // Already lost (a repeated notice) changes nothing.
        if (auto b = live_backup(*replication, backup))
          (void)replication->primary->on_backup_lost(*b, self->state.out);
        route(*shared, self->state.out);
      },
      [core, shared, replication](add_backup_atom, NodeId backup, caf::actor to) {
        if (!replication) return;
        // The copy it starts from, then (as for every backup) the forwards made after it.
        ShardPrimary::NewBackup added = replication->primary->add_backup();
        COLONY_ASSERT(added.backup == replication->backups.size(), "backup {} of {}", added.backup,
                      replication->backups.size());
        replication->backups.push_back(backup);
        replication->placed[backup] = to;
        if (replication->promoted_from == backup) replication->promoted_from.reset();
        const Status sent =
            send_copy(*core, std::move(added), replica_copy_rows_per_part,
                      [&](ReplicaCopy&& part) { caf::anon_send(to, std::move(part)); });
        if (!sent.ok()) shared->fail(sent);
      },
      [](quiesce_atom) { return true; },
      [core](flush_atom) { return core->store().flush(); },
      [self, core, shared, replication](summary_atom) {
        if (shared->slow_summary_ms)
          std::this_thread::sleep_for(std::chrono::milliseconds(shared->slow_summary_ms));
        const ShardStats& st = core->stats();
        ShardSummary s{core->rows(),         core->table_bytes(), st.pulls_deferred,
                       st.rows_not_admitted, st.updates_dropped,  st.rows_evicted};
        s.memory_bytes = core->store().memory_bytes();
        s.pushes_lost = st.pushes_lost;
        s.updates_not_finite = st.updates_not_finite;
        s.bad_messages = self->state.acks_refused;
        // Once for each live backup, which should hold the same rows (ShardSummary).
        const ShardPrimary* primary = replication ? replication->primary.get() : nullptr;
        if (const uint32_t live = primary ? primary->backups_live() : 0; live > 0) {
          auto digest = core->rows_digest();
          if (!digest) shared->fail(digest.status());
          s.rows_digest = digest ? live * digest->digest : 0;  // wraps round, as the sums do
          s.replicated_rows = digest ? live * digest->rows : 0;
        }
        return s;
      },
  };
}

backup_actor::behavior_type backup_fun(backup_actor::stateful_pointer<backup_state> self,
                                       std::shared_ptr<ShardBackup> backup,
                                       std::shared_ptr<BackupCopy> copy,
                                       std::shared_ptr<JobShared> shared, NodeId id) {
  self->state.backup = std::move(backup);
  self->state.copy = std::move(copy);
  auto cannot_follow = [shared, id](NodeId primary, const std::string& why) {
    shared->fail(Status::internal(
        fmt::format("the backup (node {}) of shard node {} can no longer follow its primary: {}",
                    id, primary, why)));
  };
  return {
      [self, shared, id, cannot_follow](ReplicaForward& f) {
        auto& st = self->state;
        if (st.spent) return;  // from the lost primary, after the promotion
        if (!st.backup) {
          // Sent to this node's last process before it was lost, and queued on the link since:
          // a new primary's copy comes ahead of its forwards.
          if (st.copy && st.copy->parts() == 0) return;
          return cannot_follow(f.header.sender, "a forward before its copy was complete");
        }
        auto ack = st.backup->on_forward(f);
        if (!ack) return cannot_follow(f.header.sender, ack.status().message());
        ack->header = {id, ack->seq, f.header.map_version};
        // The sender is this backup's shard (the bridge checked it against the layout).
        caf::anon_send(shared->nodes[f.header.sender], std::move(*ack));
      },
      [self, shared, id, cannot_follow](ReplicaCopy& part) {
        auto& st = self->state;
        if (st.spent) return;
        if (!st.copy || st.backup)
          return cannot_follow(part.header.sender, "a copy it did not wait for");
        if (Status s = st.copy->on_part(part); !s.ok())
          return cannot_follow(part.header.sender, s.message());
        if (!st.copy->done()) return;
        st.backup = std::shared_ptr<ShardBackup>(st.copy->take());
        if (shared->backup_copied) shared->backup_copied(id, st.backup);
      },
      [self](promote_atom) {
        self->state.spent = true;
        return true;
      },
      [self](applied_atom) {
        return self->state.backup ? self->state.backup->applied() : uint64_t{0};
      },
      [](quiesce_atom) { return true; },
      [self](flush_atom) {
        auto& st = self->state;
        return st.spent || !st.backup ? Status() : st.backup->core().store().flush();
      },
      [self, shared](summary_atom) {
        ShardSummary s;
        auto& st = self->state;
        if (st.spent || !st.backup) return s;
        ShardCore& core = st.backup->core();
        s.memory_bytes = core.store().memory_bytes();
        auto digest = core.rows_digest();
        if (!digest) shared->fail(digest.status());
        s.backup_rows = digest ? digest->rows : 0;
        s.backup_digest = digest ? digest->digest : 0;
        return s;
      },
  };
}

worker_actor::behavior_type worker_fun(worker_actor::stateful_pointer<worker_state> self,
                                       std::shared_ptr<WorkerCore> core,
                                       std::shared_ptr<WorkerSource> source,
                                       std::shared_ptr<JobShared> shared,
                                       coordinator_actor coordinator, NodeId id) {
  if (shared->metrics) self->state.metrics = monitor::worker_instruments(*shared->metrics);
  // Runs `work` (a call into the core); with a timeline, a call in which steps were computed
  // (the model's forward and backward pass, the push built) is a "compute" span.
  auto computing = [core, shared, id](auto&& work) {
    if (!shared->timeline) return work();
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t steps = core->stats().steps;
    work();
    if (core->stats().steps > steps)
      shared->timeline->span(fmt::format("step {}", core->stats().steps), "compute", "worker", id,
                             0, t0, std::chrono::steady_clock::now());
  };
  // After every message: hand in batches while the core wants them, send what it produced,
  // and tell the coordinator once it has finished or failed.
  auto step = [self, core, source, shared, coordinator, id, computing]() {
    auto& st = self->state;
    while (core->error().ok() && core->wants_batch()) {
      Batch batch;
      const auto read_start = std::chrono::steady_clock::now();
      auto more = source->next(batch);
      if (shared->timeline)
        shared->timeline->span("batch", "read", "worker", id, 0, read_start,
                               std::chrono::steady_clock::now());
      if (!more) {
        shared->fail(more.status());
        if (!st.reported) self->send(coordinator, done_atom::value, id, more.status());
        st.reported = true;
        return;
      }
      if (!*more) {
        computing([&] { core->finish(st.out); });
        break;
      }
      computing([&] { core->add_batch(std::move(batch), st.out); });
    }
    if (st.metrics || shared->timeline) time_requests(st);
    route(*shared, st.out);
    if (shared->after_worker_message) shared->after_worker_message(*core);
    const uint64_t samples = core->stats().samples;
    shared->loss_sum += core->stats().loss_sum - st.loss_reported;
    st.loss_reported = core->stats().loss_sum;
    shared->samples += samples - st.samples_reported;
    st.samples_reported = samples;
    if (core->stats().steps_skipped > st.skips_reported) {
      shared->skipped(core->stats().steps_skipped - st.skips_reported, core->last_skip());
      st.skips_reported = core->stats().steps_skipped;
    }
    if (core->stats().gradient_alerts > st.gradient_alerts_reported) {
      shared->gradient_alerted(core->stats().gradient_alerts - st.gradient_alerts_reported,
                               core->last_gradient_alert());
      st.gradient_alerts_reported = core->stats().gradient_alerts;
    }
    report_once(self, st.reported, *core, *shared, coordinator, id);
  };
  if (auto it = shared->worker_slot.find(id); it != shared->worker_slot.end())
    self->state.slot = it->second;
  // Runs `work` (a message's handling), counting its time as busy and the steps it took, for
  // the driver's alerts; a straggler (a test's fault) sleeps after each step it took.
  //
  // With a timeline, the time between two messages is a wait: for rows ("pull wait") while
  // pulls are out, otherwise for acknowledgements or the dense all-reduce ("push wait").
  auto timed = [self, core, shared, id](auto&& work) {
    auto& st = self->state;
    const auto t0 = std::chrono::steady_clock::now();
    if (shared->timeline && st.idle_since)
      shared->timeline->span("waiting", st.waiting_for_pulls ? "pull wait" : "push wait", "worker",
                             id, 0, *st.idle_since, t0);
    const uint64_t steps_before = core->stats().steps;
    work();
    const uint64_t steps = core->stats().steps;
    const std::optional<size_t> slot = st.slot;
    if (slot && shared->slow_ms && *slot == shared->slow_slot && steps > steps_before) {
      const auto slept = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(shared->slow_ms) *
                                  (steps - steps_before));
      if (shared->timeline)
        shared->timeline->span("slowed (--fault-slow-worker)", "compute", "worker", id, 0, slept,
                               std::chrono::steady_clock::now());
    }
    const auto end = std::chrono::steady_clock::now();
    if (shared->timeline) {
      st.idle_since = core->done() || !core->error().ok() ? std::nullopt : std::optional(end);
      st.waiting_for_pulls = !st.pulls_sent.empty();
    }
    if (!slot) return;
    const auto busy = end - t0;
    shared->worker_busy_ns[*slot].fetch_add(
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(busy).count()),
        std::memory_order_relaxed);
    shared->worker_steps[*slot].store(steps, std::memory_order_relaxed);
  };
  auto handle = [self, core, shared, id, step, timed, computing](PsMessage m) {
    timed([&] {
      if (self->state.metrics || shared->timeline)
        time_reply(self->state, m, shared->timeline.get(), id);
      computing([&] { core->on_message(m, self->state.out); });
      step();
    });
  };
  return {
      [step, timed](start_atom) { timed(step); },
      [handle](PullReply& m) { handle(std::move(m)); },
      [handle](PushAck& m) { handle(std::move(m)); },
      [handle](ShardMapUpdate& m) { handle(std::move(m)); },
      [handle](PsError& m) { handle(std::move(m)); },
      [handle](DenseBroadcast& m) { handle(std::move(m)); },
      [self, core, step](restarted_atom, const std::vector<NodeId>& shards) {
        core->on_shards_restarted(shards, self->state.out);
        step();
      },
  };
}

aggregator_actor::behavior_type aggregator_fun(
    aggregator_actor::stateful_pointer<aggregator_state> self, std::shared_ptr<AggregatorCore> core,
    std::shared_ptr<JobShared> shared, coordinator_actor coordinator, NodeId id) {
  auto handle = [self, core, shared, coordinator, id](PsMessage m) {
    auto& st = self->state;
    const auto start = std::chrono::steady_clock::now();
    core->on_message(m, st.out);
    if (shared->timeline)
      shared->timeline->span(message_kinds[m.index()], "aggregate", "aggregator", id, 0, start,
                             std::chrono::steady_clock::now());
    route(*shared, st.out);
    report_once(self, st.reported, *core, *shared, coordinator, id);
  };
  return {
      [handle](PullRequest& m) { handle(std::move(m)); },
      [handle](PullReply& m) { handle(std::move(m)); },
      [handle](PushRequest& m) { handle(std::move(m)); },
      [handle](ClockAdvance& m) { handle(std::move(m)); },
      [handle](PushAck& m) { handle(std::move(m)); },
      [handle](ShardMapUpdate& m) { handle(std::move(m)); },
      [handle](PsError& m) { handle(std::move(m)); },
      [handle](DenseReduce& m) { handle(std::move(m)); },
      [handle](DenseBroadcast& m) { handle(std::move(m)); },
      [self, core, shared](restarted_atom, const std::vector<NodeId>& shards) {
        core->on_shards_restarted(shards, self->state.out);
        route(*shared, self->state.out);
      },
  };
}

}  // namespace colony
