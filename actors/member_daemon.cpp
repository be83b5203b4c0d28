// `colony ps` and `colony worker`: a member process joins, builds its cores from the layout,
// serves until the coordinator ends the job (actors/daemon.h).
#include <algorithm>
#include <filesystem>
#include <future>
#include <map>
#include <random>

#include <fmt/ranges.h>

#include "actors/daemon_process.h"
#include "actors/embedded_cluster.h"
#include "common/log_cadence.h"
#include "gpu/reduce.h"
#include "monitor/alerts.h"
#include "ps/cluster_layout.h"
#include "ps/member_core.h"
#include "storage/checkpoint.h"
#include "worker/counters.h"
#include "worker/train_job.h"
#include "worker/wiring.h"

namespace colony {

using namespace daemon_internal;

namespace {

// The endpoint peers are to use, from --listen or the endpoint bound (`listen_or_bound`) and
// --advertise: refused when it binds every interface and names none, or when it is loopback and
// the coordinator is not (peers on other hosts could never reach it: said now, not after a
// timeout).
Expected<std::string> endpoint_for_peers(const std::string& listen_or_bound,
                                         const MemberDaemonOptions& o) {
  auto endpoint = advertised_endpoint(listen_or_bound, o.advertise);
  if (!endpoint) return endpoint.status();
  if (is_loopback(host_of(*endpoint)) && !is_loopback(host_of(o.coordinator)))
    return Status::invalid_input(fmt::format(
        "this process would listen on {}, which only this host can reach, but the coordinator at "
        "{} is on another host: give --listen tcp://<this host's address>:PORT (or --advertise "
        "HOST)",
        *endpoint, o.coordinator));
  return endpoint;
}

class Member {
 public:
  Member(const MemberDaemonOptions& o, const DaemonLog& log, DaemonSignals& signals)
      : o_(o), log_(log), signals_(signals), p_(o.threads) {}
  // The actor system (p_) waits for every actor still referenced: none is, once it goes.
  ~Member() { row_actors_.clear(); }

  Status run() {
    if (Status s = check_member_options(o_); !s.ok()) return s;
    auto keys = load_keys(o_.security);
    if (!keys) return keys.status();
    keys_ = std::move(keys.value());
    p_.shared->timeline = o_.timeline;  // before any actor or the bridge runs
    if (Status s = p_.open_bridge(o_.listen, keys_, o_.cluster_id, log_, true); !s.ok()) return s;
    p_.add_metrics(metrics_);
    if (o_.role == MemberRole::worker) {
      skip_alerts_ = &monitor::not_finite_alerts(*metrics_);
      worker_metrics_ = monitor::worker_instruments(*metrics_);
    }
    // Checked on --listen before; again on what was bound (an interface's address).
    auto endpoint = endpoint_for_peers(p_.bridge->endpoint(), o_);
    if (!endpoint) return endpoint.status();
    me_.role = o_.role;
    me_.endpoint = *endpoint;
    me_.public_key = keys_.own ? keys_.own->public_z85 : "";
    me_.count = o_.count;
    me_.data = o_.data;
    me_.durable = o_.role == MemberRole::ps && o_.store.kind != StoreKind::memory;
    if (o_.role == MemberRole::ps) me_.store = to_string(o_.store);
    if (o_.role == MemberRole::ps && !o_.resume_from.empty()) {
      // The coordinator checks that every ps starts from the same step.
      auto manifest = read_manifest(o_.resume_from);
      if (!manifest) return manifest.status();
      me_.resumed_from = manifest->step;
    }
    // This start of the process: a restart with the same key is told apart from a retry.
    me_.incarnation = (uint64_t{std::random_device{}()} << 32 | std::random_device{}()) | 1;
    log_(fmt::format("{} listening on {} ({}), joining the coordinator at {}", to_string(o_.role),
                     me_.endpoint, security_text(keys_), o_.coordinator));
    MemberConfig mc;
    mc.me = me_;
    mc.join_timeout_ms = o_.join_timeout_ms;
    mc.join_retry_ms = join_retry_ms;
    mc.notice_ms = notice_ms;
    mc.coordinator = o_.coordinator;
    mc.takes_checkpoints = o_.role == MemberRole::ps;
    auto core = MemberCore::make(mc, now_ms());
    if (!core) return core.status();
    core_.emplace(std::move(core.value()));
    MemberEffects fx;
    core_->start(now_ms(), fx);
    return loop(fx);
  }

 private:
  // The member loop: local events and control messages into the member core, its effects
  // carried out, until it ends.
  Status loop(MemberEffects& fx) {
    int signals_seen = 0;
    for (;;) {
      if (auto exit = carry_out(fx)) return *exit;
      const int stops = signals_.stop_requests.load();
      if (stops > signals_seen) {
        signals_seen = stops;
        core_->stop(fx);
      }
      if (Status e = p_.first_error(); !e.ok()) core_->fail(e, fx);
      if (auto copies = p_.inbox.take_checkpoints(); !copies.empty())
        core_->checkpointed(std::move(copies), fx);
      // A replica hands in a checkpoint's dense layers before it reports done: taken after the
      // done reports, they go out ahead of MemberDone, so the coordinator has them before the
      // job ends.
      auto done = p_.inbox.take_done();
      for (DenseState& d : p_.inbox.take_dense_checkpoints())
        core_->dense_checkpointed(std::move(d), fx);
      for (auto& [id, error] : done) core_->node_done(id, error, fx);
      if (auto copied = p_.inbox.take_backups_copied(); !copied.empty()) {
        std::vector<NodeId> nodes;
        for (auto& [b, backup] : copied) {
          backups_.at(b).backup = std::move(backup);
          nodes.push_back(b);
        }
        core_->backups_copied(std::move(nodes), fx);
      }
      if (auto exit = carry_out(fx)) return *exit;
      const uint64_t now = now_ms(), deadline = core_->next_deadline();
      const uint64_t wait = deadline <= now ? 0 : std::min<uint64_t>(poll_ms, deadline - now);
      // Each message's effects carried out before the next is taken: NodesLost, ShardsRestarted
      // and ShardsMoved change the routes in the order they came (MemberEffects). Then what came
      // while they were carried out, before the timers: once this thread was busy past the
      // heartbeat timeout (while_heartbeating), what the coordinator sent meanwhile is heard
      // before its silence is judged.
      for (uint64_t w : {wait, uint64_t{0}})
        for (ControlMessage& m : p_.inbox.wait(w)) {
          core_->on_message(m, now_ms(), fx);
          if (auto exit = carry_out(fx)) return *exit;
        }
      if (now_ms() >= core_->next_deadline()) core_->on_timer(now_ms(), fx);
    }
  }

  // Carries out the core's effects (which may call the core again, adding effects); the
  // member's exit status once it has ended.
  std::optional<Status> carry_out(MemberEffects& fx) {
    while (true) {
      MemberEffects e = std::exchange(fx, MemberEffects{});
      for (const std::string& line : e.log) log_(line);
      if (e.build) {
        const Status built = build(*e.build);
        core_->built(built, now_ms(), fx, std::exchange(resumed_dense_, std::nullopt));
      }
      // Before the replicas start: no message has reached their cores yet (they send nothing
      // before start, and the member core takes no DenseStart after Start).
      if (e.dense_start)
        if (Status s = start_dense(*e.dense_start); !s.ok()) {
          core_->fail(s, fx);
          e.start = false;
        }
      if (e.start) {
        for (auto& a : worker_actors_) caf::anon_send(a, start_atom::value);
      }
      if (e.stop_feeding)
        for (auto& s : sources_) s->stop();
      if (!e.lost.empty()) {
        p_.bridge->mark_lost(e.lost);
        backups_lost(e.lost);
      }
      if (!e.detach.empty()) p_.bridge->detach_shards(e.detach);
      if (!e.report_applied.empty()) {
        // Bounded by the heartbeat timeout per backup; heartbeats go on meanwhile.
        auto applied = while_heartbeating([&] { return report_applied(e.report_applied); });
        if (!applied)
          core_->fail(applied.status(), fx);
        else
          core_->applied(std::move(*applied), fx);
      }
      if (!e.promote.empty()) {
        if (Status s = promote(e.promote, e.promote_backups); !s.ok())
          core_->fail(s, fx);
        else
          core_->promoted(std::move(e.promote), fx);
      }
      if (!e.placed.empty())
        if (Status s = place_backups(e.placed); !s.ok()) core_->fail(s, fx);
      if (e.moved) {
        const MemberInfo& to = core_->welcome().members[e.moved->member];
        if (Status s = p_.bridge->move_shards(e.moved->shards, e.moved->member, to.endpoint,
                                              to.public_key);
            !s.ok())
          core_->fail(s, fx);
      }
      if (!e.restarted.empty()) {
        p_.bridge->unmark_lost(e.restarted);
        for (auto& a : worker_actors_) caf::anon_send(a, restarted_atom::value, e.restarted);
        if (aggregator_)
          caf::anon_send(p_.shared->nodes[in_layout().aggregator], restarted_atom::value,
                         e.restarted);
      }
      if (e.manifest)
        if (Status s = write_checkpoint_manifest(*e.manifest); !s.ok()) core_->fail(s, fx);
      if (e.drain) {
        Status flushed = while_heartbeating([this] {
          drain_ps();
          return flush_ps();
        });
        if (!flushed.ok()) core_->fail(flushed, fx);
        core_->drained(fx);
      }
      for (ControlBody& body : e.control) {
        const bool join = std::holds_alternative<Join>(body);
        fill_counters(body);
        if (std::holds_alternative<ShardSummary>(body))
          if (Status s = report_checkpoints_now(); !s.ok() && !e.exit) return s;
        // A Join is not waited for: with no connection yet there is no queue, and the loop must
        // keep its deadlines. An unsent Join is simply sent again next time.
        Status s = send(std::move(body), /*wait=*/!join);
        if (!s.ok() && !join && !e.exit) return s;
      }
      if (e.exit) {
        // However the job ended, the rows a ps holds only in memory go to its store.
        if (Status s = flush_ps(); !s.ok() && e.exit->ok()) return s;
        return e.exit;
      }
      if (fx.empty()) return std::nullopt;
    }
  }

  // Runs `work` (which waits on this process's actors: a ps's quiesce, flush or summary, each
  // over all of its store for a large one) on a thread of its own, while this thread sends a
  // heartbeat every heartbeat interval: however long it takes, the coordinator does not
  // declare this member lost meanwhile. `work` must not use the control connection.
  template <typename F>
  auto while_heartbeating(F work) -> decltype(work()) {
    auto done = std::async(std::launch::async, std::move(work));
    const auto every = std::chrono::milliseconds(core_->welcome().heartbeat_ms);
    while (done.wait_for(every) != std::future_status::ready) {
      ControlBody heartbeat = Heartbeat{};
      fill_counters(heartbeat);
      (void)send(std::move(heartbeat), /*wait=*/false);  // the next one is sent all the same
    }
    return done.get();
  }

  // This member as the layout numbers it.
  const MemberInfo& in_layout() const { return core_->welcome().members[core_->you()]; }

  // The counters of a MemberDone, ShardSummary or Heartbeat about to go out, from the cores.
  void fill_counters(ControlBody& body) {
    if (auto* d = std::get_if<MemberDone>(&body)) {
      add_summary(*d);
      log_skips();
      if (std::string late = late_from_moved_line(p_.bridge->stats()); !late.empty()) log_(late);
      if (d->error.empty())
        log_(fmt::format("done: {} samples in {} steps ({} skipped)", d->counters.samples,
                         d->counters.steps, d->counters.steps_skipped));
    } else if (auto* s = std::get_if<ShardSummary>(&body)) {
      log_skips();  // the shards' last refused updates
      const uint64_t own = s->bad_messages;
      *s = while_heartbeating([this] { return summarize_shards(); });
      s->bad_messages += own;
      const size_t shards = row_actors_.size() - backups_.size();  // its own and taken over
      log_(fmt::format("training is over: {} rows in {} shard{}", s->table_rows, shards,
                       shards == 1 ? "" : "s"));
    } else if (auto* h = std::get_if<Heartbeat>(&body)) {
      h->samples = p_.shared->samples.load();
      leak();
      h->load = load();
      log_skips();
    }
  }

  // This process's load for the coordinator's alerts, once its cores are built (the load
  // arrays sized; none before).
  std::optional<MemberLoad> load() const {
    JobShared& sh = *p_.shared;
    MemberLoad l;
    if (o_.role == MemberRole::worker) {
      if (sh.worker_busy_ns.size() != o_.count) return std::nullopt;
      for (size_t w = 0; w < o_.count; ++w) {
        l.busy_ns.push_back(sh.worker_busy_ns[w].load());
        l.steps.push_back(sh.worker_steps[w].load());
      }
      auto counts = [](const monitor::Histogram& h, size_t buckets) {
        COLONY_ASSERT(h.bounds().size() + 1 == buckets,
                      "a histogram of {} buckets where the protocol has {}", h.bounds().size() + 1,
                      buckets);
        LoadHistogram out{{}, h.sum()};
        for (size_t b = 0; b < buckets; ++b) out.counts.push_back(h.bucket(b));
        return out;
      };
      l.staleness = counts(*worker_metrics_->staleness, load_staleness_buckets);
      l.pull_latency = counts(*worker_metrics_->pull_seconds, load_latency_buckets);
      l.push_latency = counts(*worker_metrics_->push_seconds, load_latency_buckets);
    } else {
      if (!core_->layout()) return std::nullopt;
      // The shards it serves (its own, and any promoted here), in node order; not its backups.
      const NodeId shards = core_->layout()->shards();
      for (const auto& [s, actor] : row_actors_) {
        if (s >= shards) continue;
        if (s >= sh.shard_rows.size()) return std::nullopt;  // not built yet
        l.shards.push_back(s);
        // Pulled first (acquire; the shard stores it after served): never more than served.
        l.rows_pulled.push_back(sh.shard_rows_pulled[s].load(std::memory_order_acquire));
        l.rows_served.push_back(sh.shard_rows[s].load());
        l.rows_memory_bytes += sh.shard_bytes[s].load();
      }
      if (l.shards.empty()) return std::nullopt;
      static_assert(monitor::hot_keys_listed <= load_hot_keys_per_shard_max);
      for (const monitor::HotKeyCount& h : monitor::shard_hot_keys(*metrics_)) {
        auto at = std::find(l.shards.begin(), l.shards.end(), h.shard);
        if (at != l.shards.end())
          l.hot_keys.push_back({static_cast<uint32_t>(at - l.shards.begin()), h.key, h.pulls});
      }
    }
    l.rss_bytes = static_cast<uint64_t>(monitor::resident_bytes());
    return l;
  }

  // --fault-leak-mb: starts the leak (monitor::fault_leak_mb_per_s, on a thread of its own) once
  // training has begun here (a step taken, a row served).
  void leak() {
    const JobShared& sh = *p_.shared;
    auto begun = [](const std::deque<std::atomic<uint64_t>>& counts) {
      return std::any_of(counts.begin(), counts.end(), [](const auto& n) { return n.load() > 0; });
    };
    if (!begun(sh.worker_steps) && !begun(sh.shard_rows)) return;
    leak_.start(monitor::fault_leak_mb_per_s);
  }

  // The replicas' gradient alerts since the last heartbeat (the last of them logged, all
  // counted), the row updates the shards refused as not finite and, under --on-nan skip, the
  // steps the replicas skipped (both logged as often as log_this_count says), counted in
  // colony_alerts_total.
  void log_skips() {
    const ClusterProgress now = p_.shared->progress();
    if (now.gradient_alerts > gradient_alerts_logged_) {
      log_(fmt::format("warning: alert {}: {}", now.last_gradient_alert.kind,
                       now.last_gradient_alert.message));
      monitor::alerts(*metrics_, now.last_gradient_alert.kind)
          .inc(double(now.gradient_alerts - gradient_alerts_logged_));
      gradient_alerts_logged_ = now.gradient_alerts;
    }
    if (now.updates_not_finite > updates_refused_logged_) {  // a ps member's shards
      monitor::alerts(*metrics_, "not_finite_row")
          .inc(double(now.updates_not_finite - updates_refused_logged_));
      if (log_this_count(updates_refused_logged_, now.updates_not_finite))
        log_("warning: alert not_finite_row: " +
             monitor::not_finite_row_message(now.last_update_not_finite, now.updates_not_finite));
      updates_refused_logged_ = now.updates_not_finite;
    }
    if (now.steps_skipped <= skips_logged_) return;
    if (skip_alerts_) skip_alerts_->inc(double(now.steps_skipped - skips_logged_));
    if (log_this_count(skips_logged_, now.steps_skipped))
      log_(
          fmt::format("warning: {}: skipped, nothing of it applied (--on-nan skip; {} step{} "
                      "skipped so far)",
                      now.last_skip, now.steps_skipped, now.steps_skipped == 1 ? "" : "s"));
    skips_logged_ = now.steps_skipped;
  }

  // Ahead of a ShardSummary: the checkpoints its shards copied before they answered it (the
  // last step's, often), so that the coordinator has them before the job ends.
  Status report_checkpoints_now() {
    auto copies = p_.inbox.take_checkpoints();
    if (copies.empty()) return Status();
    MemberEffects now;
    core_->checkpointed(std::move(copies), now);
    for (ControlBody& report : now.control)
      if (Status s = send(std::move(report)); !s.ok()) return s;
    return Status();
  }

  Status send(ControlBody body, bool wait = true) {
    const uint32_t from =
        core_ && core_->phase() != MemberPhase::joining ? core_->you() : control_from_unknown;
    return p_.bridge->send_control(o_.coordinator, keys_.server_public,
                                   ControlMessage{from, std::move(body), {}, me_.incarnation},
                                   wait);
  }

  // Builds this member's cores from a Welcome the member core has checked.
  Status build(const Welcome& w) {
    const ClusterLayout& layout = *core_->layout();
    const MemberInfo& self = w.members[w.you];
    auto& nodes = p_.shared->nodes;
    nodes.resize(layout.nodes());
    const JobSpec& job = w.job;
    std::vector<NodeId> local;
    for (NodeId n = self.first_node; n < self.first_node + self.count; ++n) {
      if (n >= nodes.size()) return Status::internal(fmt::format("node {} outside the layout", n));
      // The load the heartbeats carry (load()), counted by the actors: sized before they start.
      JobShared& sh = *p_.shared;
      if (o_.role == MemberRole::worker) {
        sh.slow_ms = o_.fault_slow_ms;  // slot 0: the first replica
        sh.worker_slot[n] = n - self.first_node;
        sh.worker_busy_ns.emplace_back(0);
        sh.worker_steps.emplace_back(0);
      } else {
        sh.slow_summary_ms = o_.fault_slow_ms;
        // Every shard's, under replication: a failover may move any of them here (promote).
        const size_t counted = layout.replicas() > 1 ? layout.shards() : n + 1;
        while (sh.shard_rows.size() < counted) {
          sh.shard_rows.emplace_back(0);
          sh.shard_rows_pulled.emplace_back(0);
          sh.shard_bytes.emplace_back(0);
        }
      }
      // A ps back to hold backups only: its shards are served by other members now.
      if (!w.backups_only) local.push_back(n);
    }
    if (o_.role == MemberRole::ps) {
      // A deep model started from a checkpoint continues its dense layers too: the coordinator
      // hands them to the workers (MemberCore::built).
      if (!o_.resume_from.empty() && !w.resume && !dense_shape(job).empty()) {
        auto dense = resumed_dense(job);
        if (!dense) return dense.status();
        resumed_dense_ = std::move(dense.value());
      }
      if (job.checkpoint_every) {
        checkpoint_root_ = o_.checkpoint_dir;
        if (checkpoint_root_.empty() && o_.store.kind == StoreKind::memory)
          return Status::invalid_input(
              fmt::format("the job checkpoints every {} steps (--checkpoint-every): give this ps "
                          "--checkpoint-dir DIR (a memory "
                          "store has no folder of its own)",
                          job.checkpoint_every));
        if (checkpoint_root_.empty())
          checkpoint_root_ = (std::filesystem::path(o_.store.dir) / "checkpoints").string();
        // A ps resumed mid-job finds this job's own checkpoints there.
        if (!w.resume && !w.backups_only)
          if (Status s = check_checkpoint_root_free(checkpoint_root_, job.checkpoint_every);
              !s.ok())
            return s;
        // Run by each shard's actor after a message: a shard whose slowest sender has reached a
        // checkpoint step copies its store, and the loop reports it to the coordinator.
        p_.shared->after_shard_message = [this](ShardCore& core) {
          const auto step = core.checkpoint_due();
          if (!step) return;
          auto copy = checkpoint_shard(core, *step);
          if (!copy) return p_.shared->fail(copy.status());
          p_.inbox.push_checkpoint(*step, std::move(copy.value()));
        };
      }
      // Replication starts every replica empty: a backup could not follow a primary that starts
      // from rows it lacks.
      if (layout.replicas() > 1 && (!o_.resume_from.empty() || o_.store.resume))
        return Status::invalid_input(fmt::format(
            "the job keeps {} replicas of each shard, which start from empty stores in this "
            "version: {} would start this ps's shards from rows their backups lack",
            layout.replicas(), o_.store.resume ? "--resume" : "--resume-from"));
      // The job says what an acknowledgement promises; a store that cannot keep it is refused.
      StoreSpec store_spec = o_.store;
      if (job.durability)
        if (Status s = set_durability(store_spec, *job.durability); !s.ok()) return s;
      // Replicated, a push is kept by being on K members: a store on disk is only the rows'
      // capacity tier, written back (on eviction, drain and exit) without a log on every push.
      if (layout.replicas() > 1)
        if (Status s = set_durability(store_spec, Durability::none); !s.ok()) return s;
      if (layout.replicas() > 1)
        log_(
            fmt::format("durability replicated:{}: every push is on {} ps members before it is "
                        "acknowledged",
                        layout.replicas(), layout.replicas()));
      else if (job.durability || store_spec.kind != StoreKind::memory)
        log_(fmt::format("durability {}: {}", to_string(store_spec.durability),
                         store_spec.durability == Durability::none
                             ? "acknowledged pushes live in memory until written back"
                         : store_spec.durability == Durability::log
                             ? "every push is in a log before it is acknowledged"
                             : "every push is in a log synced to disk before it is acknowledged"));
      for (NodeId n : local) {
        ShardConfig sc = shard_config(job, layout, n);
        auto row_floats = ShardCore::row_floats(sc);
        if (!row_floats) return row_floats.status();
        if (job.formats.row != ValueFormat::fp32 || job.formats.state != ValueFormat::fp32) {
          auto parts = ShardCore::row_parts(sc, job.formats.row, job.formats.state);
          if (!parts) return parts.status();
          store_spec.compact_parts = std::move(parts.value());
        }
        if (w.resume) {
          // Never a silent start from scratch: a resumed shard's store must be there.
          const std::string path = shard_store_path(o_.store.dir, n);
          if (o_.store.kind == StoreKind::memory || !std::filesystem::exists(path))
            return Status::invalid_input(fmt::format(
                "resuming shard {}: {} does not exist: restart this ps with the --store it had", n,
                o_.store.kind == StoreKind::memory ? std::string("--store memory") : path));
        }
        // The store records which cluster, job and shard wrote it: another's is refused, even
        // under the default cluster id.
        const StoreIdentity identity{store_owner(job), n, w.map.shards, *row_floats};
        // --resume-from: a new job starts from the checkpoint's rows (a ps resumed mid-job
        // from its store: they are already there).
        const std::string copy =
            o_.resume_from.empty() || w.resume
                ? std::string()
                : (std::filesystem::path(o_.resume_from) / fmt::format("shard-{}", n)).string();
        auto store = copy.empty() ? open_shard_store(store_spec, identity)
                                  : restore_shard_store(store_spec, identity, copy);
        if (!store) return store.status();
        if (!copy.empty())
          log_(fmt::format("shard {}: restored {} rows from {}", n, (*store)->size(), copy));
        if (Status s = check_empty_replica(**store, fmt::format("shard {}", n),
                                           shard_store_path(store_spec.dir, n));
            !s.ok())
          return s;
        // A new job's senders count their clocks from 0: an earlier job's must not stand for
        // theirs (a ps resumed mid-job keeps them: they are this job's).
        if (!w.resume)
          if (Status cleared = (*store)->clear_clocks(); !cleared.ok()) return cleared;
        if (const StoreStats st = (*store)->stats();
            st.log_records_replayed || st.log_bytes_dropped)
          log_(fmt::format(
              "shard {}: replayed {} pushes from its push log{}", n, st.log_records_replayed,
              st.log_bytes_dropped
                  ? fmt::format(" and cut off its torn tail ({} bytes)", st.log_bytes_dropped)
                  : std::string()));
        identities_.emplace(n, identity);
        auto core = ShardCore::make(sc, std::move(store.value()));
        if (!core) return core.status();
        // Rows of this job (resumed mid-job) or of a checkpoint (with its dense layers) are not
        // an earlier run's.
        if (Status st =
                check_daemon_dense_state(w.job, w.resume || !copy.empty() ? 0 : (*core)->rows());
            !st.ok())
          return st;
        if (w.resume) (*core)->begin_resync();
        shard_cores_.push_back(std::shared_ptr<ShardCore>(std::move(core.value())));
        // Replication: every push and clock goes through a primary, which forwards it to the
        // shard's backups on the other ps members and acknowledges it once they have it.
        std::shared_ptr<ShardReplication> replication;
        if (layout.replicas() > 1) {
          auto primary = ShardPrimary::make(*shard_cores_.back(), layout.replicas() - 1);
          if (!primary) return primary.status();
          replication = std::make_shared<ShardReplication>(
              ShardReplication{std::move(primary.value()), layout.backups_of(n), std::nullopt});
        }
        nodes[n] = caf::actor_cast<caf::actor>(
            p_.system.spawn(shard_fun, shard_cores_.back(), p_.shared, replication));
        row_actors_[n] = nodes[n];
      }
      if (Status s = build_backups(w, store_spec, local); !s.ok()) return s;
      // Replication: forwards to the backups other members host, acknowledgements to the
      // primaries, wherever the layout has them now (a failover moves shards, a rejoin places
      // backups).
      if (layout.replicas() > 1)
        for (NodeId n = 0; n < layout.nodes(); ++n) {
          const NodeRole role = layout.role(n);
          const std::optional<uint32_t> owner = layout.owner(n);
          if ((role != NodeRole::shard && role != NodeRole::backup) || !owner || *owner == w.you)
            continue;
          const MemberInfo& m = w.members[*owner];
          if (Status s = p_.bridge->add_remote_nodes(m.endpoint, m.public_key, n, 1); !s.ok())
            return s;
        }
      for (const MemberInfo& m : w.members) {
        if (m.role != MemberRole::worker) continue;
        if (Status s = p_.bridge->add_remote_nodes(m.endpoint, m.public_key, m.first_node, m.count);
            !s.ok())
          return s;
        if (m.has_aggregator)
          if (Status s = p_.bridge->add_remote_nodes(m.endpoint, m.public_key, m.aggregator, 1);
              !s.ok())
            return s;
      }
      if (Status s = p_.bridge->add_remote_nodes(o_.coordinator, keys_.server_public,
                                                 w.coordinator_node, 1);
          !s.ok())
        return s;
    } else {
      job_ = std::make_unique<ClusterJob>();
      job_->trainer.model = model_spec(job);
      job_->trainer.model.device = o_.device;
      job_->trainer.model.compute_threads = o_.compute_threads;
      job_->trainer.optimizer = job.optimizer;
      job_->trainer.seed = job.seed;
      job_->trainer.factor_init_std = job.factor_init_std;
      job_->trainer.dense_optimizer = dense_optimizer_config(job);
      job_->batch = job.batch;
      job_->epochs = static_cast<int>(job.epochs);
      job_->data = o_.data;
      job_->reader = o_.reader;
      job_->reader.skip_bad_lines = job.skip_bad_lines;
      job_->reader.use_cache = job.use_cache;
      NodeId first_worker = clock_done;
      for (const MemberInfo& m : w.members)
        if (m.role == MemberRole::worker) first_worker = std::min(first_worker, m.first_node);
      // Core reports come to a local stand-in for the coordinator actor, which hands them to the
      // loop.
      Inbox* inbox = &p_.inbox;
      auto reporter = p_.system.spawn([inbox]() -> coordinator_actor::behavior_type {
        return {
            [](run_atom, const std::vector<caf::actor>&, uint32_t) { return Status(); },
            [inbox](done_atom, NodeId id, Status& error) {
              inbox->push_done(id, std::move(error));
            },
        };
      });
      p_.extra.push_back(caf::actor_cast<caf::actor>(reporter));
      // A deep model's checkpoints: the cluster's first replica keeps its dense layers of each
      // checkpoint step, and the loop sends them to the coordinator (the replicas' are equal).
      const std::string shape = dense_shape(job);
      if (!shape.empty() && job.checkpoint_every)
        p_.shared->after_worker_message = [this, shape](WorkerCore& core) {
          while (auto state = core.take_dense_checkpoint()) {
            state->shape = shape;
            p_.inbox.push_dense_checkpoint(std::move(*state));
          }
        };
      for (NodeId n : local) {
        WorkerConfig wc = worker_config(job, layout, n);
        wc.model.device = o_.device;
        wc.model.compute_threads = o_.compute_threads;
        if (!shape.empty() && n == first_worker) wc.dense_checkpoint_every = job.checkpoint_every;
        auto core = WorkerCore::make(wc);
        if (!core) return core.status();
        workers_.push_back(std::shared_ptr<WorkerCore>(std::move(core.value())));
        sources_.push_back(
            w.split_data ? std::make_shared<WorkerSource>(*job_, n - first_worker, w.workers_total)
                         : std::make_shared<WorkerSource>(*job_, n - self.first_node, self.count));
        auto h =
            p_.system.spawn(worker_fun, workers_.back(), sources_.back(), p_.shared, reporter, n);
        nodes[n] = caf::actor_cast<caf::actor>(h);
        worker_actors_.push_back(nodes[n]);
      }
      if (self.has_aggregator) {
        auto core = AggregatorCore::make(aggregator_config(job, layout, w.you), make_cpu_reducer());
        if (!core) return core.status();
        aggregator_ = std::shared_ptr<AggregatorCore>(std::move(core.value()));
        nodes[self.aggregator] = caf::actor_cast<caf::actor>(
            p_.system.spawn(aggregator_fun, aggregator_, p_.shared, reporter, self.aggregator));
        local.push_back(self.aggregator);
      }
      for (const MemberInfo& m : w.members)
        if (m.role == MemberRole::ps)
          if (Status s =
                  p_.bridge->add_remote_nodes(m.endpoint, m.public_key, m.first_node, m.count);
              !s.ok())
            return s;
      // A deep model's dense all-reduce: the other worker members' aggregators (the root sends
      // to all of them, the others to the root).
      if (workers_.front()->dense().size() > 0)
        for (uint32_t i = 0; i < w.members.size(); ++i) {
          const MemberInfo& m = w.members[i];
          if (i == w.you || m.role != MemberRole::worker || !m.has_aggregator) continue;
          if (Status s = p_.bridge->add_remote_nodes(m.endpoint, m.public_key, m.aggregator, 1);
              !s.ok())
            return s;
        }
    }
    // A ps back to hold backups: what its peers queued for its shards' last process is late.
    std::vector<NodeId> former;
    for (NodeId n : layout.nodes_of(w.you))
      if (layout.owner(n) != w.you) former.push_back(n);
    p_.bridge->set_layout(layout, keys_.server_public);
    p_.bridge->set_routing_ready(local, former, w.resume || w.backups_only);
    return Status();
  }

  // Which cluster and job a shard's store belongs to (StoreIdentity::cluster_id): another's is
  // refused, even under the default cluster id.
  std::string store_owner(const JobSpec& job) const {
    TrainerConfig fingerprinted;
    fingerprinted.model = model_spec(job);
    fingerprinted.optimizer = job.optimizer;
    fingerprinted.seed = job.seed;
    return fmt::format("cluster-{} {}", o_.cluster_id, store_fingerprint(fingerprinted));
  }

  // Replication: a replica's store must start empty (its primary or backups start so). Fails
  // with invalid_input naming `what` and the store's `path` otherwise.
  Status check_empty_replica(const RowStore& store, const std::string& what,
                             const std::string& path) const {
    if (core_->layout()->replicas() == 1 || store.size() == 0) return Status();
    return Status::invalid_input(fmt::format(
        "{}: its store at {} holds {} rows of an earlier run, but the job's {} replicas of each "
        "shard start from empty stores in this version: give this ps a new --store",
        what, path, store.size(), core_->layout()->replicas()));
  }

  // Replication: the backups this ps hosts of other members' shards (ClusterLayout places them),
  // each over a store of its own as `spec` says (on disk, DIR/backups/shard-<i>), added to
  // `local`.
  Status build_backups(const Welcome& w, const StoreSpec& spec, std::vector<NodeId>& local) {
    const ClusterLayout& layout = *core_->layout();
    const JobSpec& job = w.job;
    for (NodeId b : layout.backup_nodes_of(w.you)) {
      const uint32_t shard = *layout.shard_of_backup(b);
      ShardConfig sc = shard_config(job, layout, shard);
      auto row_floats = ShardCore::row_floats(sc);
      if (!row_floats) return row_floats.status();
      // On disk, under DIR/backups/shard-<i>: apart from the shards this ps is primary of.
      StoreSpec backup_spec = spec;
      if (!backup_spec.dir.empty())
        backup_spec.dir = (std::filesystem::path(spec.dir) / "backups").string();
      // The shard's own identity: a backup holds the shard's rows, and once promoted it serves
      // (and checkpoints) them as the shard; its folder keeps it apart from this ps's shards.
      const StoreIdentity identity{store_owner(job), shard, w.map.shards, *row_floats};
      auto store = open_shard_store(backup_spec, identity);
      if (!store) return store.status();
      if (w.backups_only) {
        // Back to hold backups: what an earlier process of this ps kept is stale, and the
        // primary's copy replaces it.
        if (Status s = erase_all(**store, fmt::format("the backup of shard {}", shard)); !s.ok())
          return s;
      } else if (Status s =
                     check_empty_replica(**store, fmt::format("the backup of shard {}", shard),
                                         shard_store_path(backup_spec.dir, shard));
                 !s.ok()) {
        return s;
      }
      if (Status cleared = (*store)->clear_clocks(); !cleared.ok()) return cleared;
      std::shared_ptr<ShardBackup> held;
      std::shared_ptr<BackupCopy> copy;
      if (w.backups_only) {
        auto made = BackupCopy::make(sc, std::move(store.value()));
        if (!made) return made.status();
        copy = std::move(made.value());
      } else {
        auto core = ShardCore::make(sc, std::move(store.value()));
        if (!core) return core.status();
        auto backup = ShardBackup::make(std::move(core.value()));
        if (!backup) return backup.status();
        held = std::move(backup.value());
      }
      p_.shared->nodes[b] =
          caf::actor_cast<caf::actor>(p_.system.spawn(backup_fun, held, copy, p_.shared, b));
      backups_.emplace(b, HeldBackup{held, identity});
      row_actors_[b] = p_.shared->nodes[b];
      local.push_back(b);
    }
    if (!backups_.empty())
      log_(fmt::format("holding {} backup{} of other members' shards (replicas {}){}",
                       backups_.size(), backups_.size() == 1 ? "" : "s", layout.replicas(),
                       w.backups_only ? ", each waiting for its primary's copy" : ""));
    // A backup built from its copy is this member's to promote from then on (the loop takes it).
    if (w.backups_only)
      p_.shared->backup_copied = [this](NodeId b, std::shared_ptr<ShardBackup> backup) {
        p_.inbox.push_backup_copied(b, std::move(backup));
      };
    return Status();
  }

  // Removes every row of `store` (`what`, for errors), which an earlier process left.
  Status erase_all(RowStore& store, const std::string& what) const {
    if (store.size() == 0) return Status();
    std::vector<uint64_t> keys;
    if (Status s = store.for_each([&](uint64_t key, const float*) { keys.push_back(key); });
        !s.ok())
      return s;
    log_(fmt::format("{}: dropping the {} rows an earlier process of this ps kept", what,
                     keys.size()));
    if (Status s = store.erase(keys); !s.ok()) return s;
    return store.flush();
  }

  // Copies shard `core`'s store as step `step`'s checkpoint (an actor's thread).
  Expected<ShardCheckpoint> checkpoint_shard(ShardCore& core, uint32_t step) {
    const uint32_t i = core.config().shard_index;
    auto dir = prepare_checkpoint_copy(checkpoint_root_, step, i);
    if (!dir) return dir.status();
    StoreIdentity identity;
    {
      std::lock_guard lock(identities_mu_);
      identity = identities_.at(i);
    }
    if (Status s = core.store().checkpoint(*dir, identity); !s.ok()) return s;
    ShardCheckpoint c{i, fmt::format("shard-{}", i), core.rows(), {}};
    for (auto [node, clock] : core.sender_clocks()) c.sender_clocks.emplace_back(node, clock);
    return c;
  }

  // Every shard has checkpointed `c.step`: this ps writes the step's dense.bin (a deep model's)
  // and manifest beside its copies.
  Status write_checkpoint_manifest(const CheckpointComplete& c) {
    std::unique_lock lock(identities_mu_);
    const StoreIdentity id = identities_.begin()->second;
    lock.unlock();
    const JobSpec& job = core_->welcome().job;
    CheckpointManifest m{c.step,        id.cluster_id,           core_->layout()->shards(),
                         id.row_floats, model_spec(job).width(), c.shards};
    const std::string shape = dense_shape(job);
    if (shape.empty() != !c.dense || (c.dense && c.dense->shape != shape))
      return Status::invalid_input(fmt::format(
          "the coordinator completed the checkpoint of step {} with {}, this job's are \"{}\"",
          c.step,
          c.dense ? fmt::format("the dense layers \"{}\"", c.dense->shape)
                  : std::string("no dense layers"),
          shape));
    if (c.dense) {
      m.dense_shape = c.dense->shape;
      m.dense_params = c.dense->params.size();
      const std::string path =
          (std::filesystem::path(checkpoint_step_dir(checkpoint_root_, c.step)) / dense_file_name)
              .string();
      if (Status s = write_dense_state(path, *c.dense); !s.ok()) return s;
    }
    if (Status s = write_manifest(checkpoint_root_, m); !s.ok()) return s;
    log_(fmt::format("checkpoint of step {} complete: wrote {}", c.step,
                     checkpoint_step_dir(checkpoint_root_, c.step)));
    return Status();
  }

  // --resume-from of a deep model: the checkpoint's dense layers, which must be this job's.
  Expected<DenseState> resumed_dense(const JobSpec& job) const {
    const std::string path = (std::filesystem::path(o_.resume_from) / dense_file_name).string();
    const std::string shape = dense_shape(job);
    auto saved = read_dense_state(path);
    if (!saved)
      return Status::invalid_input(
          fmt::format("--resume-from {}: --model {} needs the checkpoint's dense layers: {}",
                      o_.resume_from, to_string(model_spec(job).kind), saved.status().message()));
    if (saved->shape != shape)
      return Status::invalid_input(
          fmt::format("--resume-from: {} holds the dense layers of \"{}\"; this job's are \"{}\"",
                      path, saved->shape, shape));
    log_(fmt::format("the dense layers of step {} come from {}", saved->step, path));
    return saved;
  }

  // A worker: its replicas start from `state` (the coordinator's DenseStart).
  Status start_dense(const DenseState& state) {
    const std::string shape = dense_shape(core_->welcome().job);
    if (state.shape != shape)
      return Status::invalid_input(fmt::format(
          "the coordinator sent the dense layers of \"{}\" to start from; this job's are \"{}\"",
          state.shape, shape));
    for (const auto& w : workers_)
      if (Status s = w->restore_dense(state); !s.ok()) return s;
    return Status();
  }

  // Adds the counters of this process's cores to `d` (its error, drained and the member
  // core's bad_messages are set).
  void add_summary(MemberDone& d) const {
    std::vector<const WorkerCore*> replicas;
    for (const auto& w : workers_) replicas.push_back(w.get());
    WorkerCounters& c = d.counters;
    const uint64_t own = c.bad_messages;
    std::vector<const AggregatorCore*> aggregators;
    if (aggregator_) aggregators.push_back(aggregator_.get());
    c = core_counters(replicas, aggregators);
    for (const auto& s : sources_) c.bad_lines_skipped += s->last_stats().bad_lines_skipped;
    c.bad_messages += own + p_.bridge->stats().bad_messages;
    c.cpu_seconds = cpu_seconds() - cpu_start_;
    // A deep model's final dense layers: the coordinator evaluates with them.
    if (!workers_.empty()) {
      std::vector<const WorkerCore*> replicas;
      for (const auto& w : workers_) replicas.push_back(w.get());
      const WorkerCore& latest = latest_dense(replicas);
      d.dense.assign(latest.dense().begin(), latest.dense().end());
      d.dense_steps = latest.stats().dense_syncs;
    }
    d.read_from_cache = !sources_.empty();
    for (const auto& s : sources_)
      d.read_from_cache = d.read_from_cache && s->last_stats().from_cache;
  }

  // Re-replication (BackupsPlaced): these backups are hosted by the members named from now on;
  // a shard served here whose backup was placed sends it its copy, and forwards to it after.
  Status place_backups(const std::vector<NodePlacement>& placed) {
    const ClusterLayout& layout = *core_->layout();
    for (const NodePlacement& p : placed) {
      if (o_.role != MemberRole::ps) {
        if (Status s = p_.bridge->take_placement(p.node, p.member); !s.ok()) return s;
        continue;
      }
      const MemberInfo& to = core_->welcome().members[p.member];
      auto proxy = p_.bridge->place_backup(p.node, p.member, to.endpoint, to.public_key);
      if (!proxy) return proxy.status();
      // Told to exit with the others at the end: the shard actor that holds it would otherwise
      // keep it, and the bridge it holds, alive.
      p_.extra.push_back(*proxy);
      const uint32_t shard = *layout.shard_of_backup(p.node);
      if (auto it = row_actors_.find(shard); it != row_actors_.end()) {
        log_(fmt::format("shard {}: copying its rows to its new backup, node {} on member {}",
                         shard, p.node, p.member));
        caf::anon_send(caf::actor_cast<shard_actor>(it->second), add_backup_atom::value, p.node,
                       std::move(*proxy));
      }
    }
    return Status();
  }

  // Failover: the coordinator declared these nodes lost: the primaries here whose backups they
  // were stop waiting for them (ShardPrimary::on_backup_lost).
  void backups_lost(const std::vector<NodeId>& lost) {
    const ClusterLayout& layout = *core_->layout();
    for (NodeId n : lost)
      if (auto shard = layout.shard_of_backup(n))
        if (auto it = row_actors_.find(*shard); it != row_actors_.end())
          caf::anon_send(caf::actor_cast<shard_actor>(it->second), backup_lost_atom::value, n);
  }

  // Failover under K > 2 (ReportApplied): how far each of these backups here applied its
  // primary's forwards, asked of its actor once it has handled what it was sent (its shard is
  // detached: nothing more comes from the lost primary). Bounded by the heartbeat timeout.
  Expected<Applied> report_applied(const std::vector<NodeId>& nodes) {
    caf::scoped_actor self{p_.system};
    const auto bound = std::chrono::milliseconds(core_->welcome().heartbeat_timeout_ms);
    Applied out;
    for (NodeId b : nodes) {
      if (backups_.count(b) == 0)
        return Status::internal(
            fmt::format("failover: asked how far backup node {} applied, which this ps no longer "
                        "holds (promoted)",
                        b));
      std::optional<uint64_t> applied;
      self->request(caf::actor_cast<backup_actor>(p_.shared->nodes[b]), bound, applied_atom::value)
          .receive([&](uint64_t seq) { applied = seq; }, [](caf::error&) {});
      if (!applied)
        return Status::internal(fmt::format(
            "failover: backup node {} did not answer within the heartbeat timeout ({} ms)", b,
            bound.count()));
      out.backups.push_back(b);
      out.applied.push_back(*applied);
    }
    return out;
  }

  // Failover (ShardsMoved to this ps): the backups this ps holds of `shards` become their
  // primaries (ShardBackup::promote), each served by a shard actor of its own that forwards to
  // the shard's nodes among `backup_nodes` (its other live backups: none under replicated:2),
  // first what they may lack; from then on this process takes the shards' messages.
  Status promote(const std::vector<NodeId>& shards, const std::vector<NodeId>& backup_nodes) {
    const ClusterLayout& layout = *core_->layout();
    caf::scoped_actor self{p_.system};
    for (NodeId s : shards) {
      auto it = std::find_if(backups_.begin(), backups_.end(),
                             [&](const auto& b) { return layout.shard_of_backup(b.first) == s; });
      if (it == backups_.end())
        return Status::internal(fmt::format("failover: this ps holds no backup of shard {}", s));
      if (!it->second.backup)
        return Status::internal(
            fmt::format("failover: this ps's backup of shard {} has no copy of its rows yet", s));
      const NodeId b = it->first;
      std::vector<NodeId> others;
      for (NodeId n : backup_nodes)
        if (layout.shard_of_backup(n) == s) others.push_back(n);
      // The backup actor handles what it was sent before, then leaves its backup to this thread.
      bool spent = false;
      // Bounded: this thread keeps the member's heartbeats.
      const auto bound = std::chrono::milliseconds(core_->welcome().heartbeat_timeout_ms);
      self->request(caf::actor_cast<backup_actor>(p_.shared->nodes[b]), bound, promote_atom::value)
          .receive([&](bool) { spent = true; }, [](caf::error&) {});
      if (!spent)
        return Status::internal(fmt::format(
            "failover: the backup of shard {} did not stop within the heartbeat timeout ({} ms)", s,
            bound.count()));
      ShardBackup::Promotion promotion =
          it->second.backup->promote(static_cast<uint32_t>(others.size()));
      // A checkpoint step the backup's clocks reached is not this primary's to copy: its rows
      // are past it now.
      (void)promotion.core->checkpoint_due();
      log_(fmt::format("shard {}: promoted its backup (forward {} applied, {} rows){}", s,
                       it->second.backup->applied(), promotion.core->rows(),
                       others.empty()
                           ? std::string()
                           : fmt::format("; its backups are nodes {}, sent {} forwards "
                                         "they may lack",
                                         fmt::join(others, ", "), promotion.resend.size())));
      {
        std::lock_guard lock(identities_mu_);  // the shards' actors read it (checkpoint_shard)
        identities_.emplace(s, it->second.identity);
      }
      shard_cores_.push_back(std::shared_ptr<ShardCore>(std::move(promotion.core)));
      auto replication = std::make_shared<ShardReplication>(
          ShardReplication{std::move(promotion.primary), others, b});
      auto actor = caf::actor_cast<caf::actor>(
          p_.system.spawn(shard_fun, shard_cores_.back(), p_.shared, replication));
      if (Status st = p_.bridge->serve_shard(s, core_->you(), actor); !st.ok()) return st;
      // What the other backups may lack, ahead of every forward the new primary makes: nothing
      // reaches it before the coordinator hears Promoted, which this member sends after. Sent
      // once the shard is served here, so that their acknowledgements are taken.
      for (const ReplicaForward& f : promotion.resend)
        for (NodeId n : others) caf::anon_send(p_.shared->nodes[n], f);
      p_.bridge->unmark_lost({s});
      row_actors_.erase(b);
      row_actors_[s] = actor;
      backups_.erase(it);
    }
    return Status();
  }

  // Waits until every shard (and backup) of this ps has handled what it was sent.
  void drain_ps() {
    caf::scoped_actor self{p_.system};
    for (const auto& [n, actor] : row_actors_)
      self->request(caf::actor_cast<shard_actor>(actor), caf::infinite, quiesce_atom::value)
          .receive([](bool) {}, [](caf::error&) {});
  }

  // Has every shard of this ps write the rows its store holds only in memory (a tiered store's
  // cache) to disk, each in its own actor; the first failure, logged with its shard. Nothing to
  // do for a worker, or a ps that has not built its shards.
  Status flush_ps() {
    if (o_.role != MemberRole::ps || shard_cores_.empty()) return Status();
    Status first;
    caf::scoped_actor self{p_.system};
    for (const auto& [n, actor] : row_actors_)
      self->request(caf::actor_cast<shard_actor>(actor), caf::infinite, flush_atom::value)
          .receive(
              [&](Status& s) {
                if (s.ok()) return;
                log_(fmt::format("shard node {} could not write its cached rows: {}", n,
                                 s.message()));
                if (first.ok()) first = std::move(s);
              },
              [&](caf::error& e) {
                // Its cached rows may not be on disk: the ps must not leave as drained.
                Status s = Status::io_error(
                    fmt::format("shard node {} did not flush: {}", n, p_.system.render(e)));
                log_(s.message());
                if (first.ok()) first = std::move(s);
              });
    return first;
  }

  // The summary of this process's shards, asked of each shard actor (which answers once it has
  // handled what was queued before). A shard that does not answer within the heartbeat timeout
  // is left out, and logged.
  ShardSummary summarize_shards() {
    ShardSummary sum;
    caf::scoped_actor self{p_.system};
    for (const auto& [n, actor] : row_actors_)
      self->request(caf::actor_cast<shard_actor>(actor),
                    std::chrono::milliseconds(core_->welcome().heartbeat_timeout_ms),
                    summary_atom::value)
          .receive([&](const ShardSummary& s) { sum += s; },
                   [&](caf::error& e) {
                     log_(fmt::format("shard node {} gave no summary: {}", n, p_.system.render(e)));
                   });
    const BridgeStats bridge = p_.bridge->stats();
    sum.bad_messages += bridge.bad_messages;
    if (std::string late = late_from_moved_line(bridge); !late.empty()) log_(late);
    sum.cpu_seconds = cpu_seconds() - cpu_start_;
    return sum;
  }

  const MemberDaemonOptions& o_;
  const DaemonLog& log_;
  DaemonSignals& signals_;
  Keys keys_;
  MemberInfo me_;
  std::optional<MemberCore> core_;
  std::mutex identities_mu_;
  std::map<uint32_t, StoreIdentity> identities_;  // of the shards this ps serves, by shard
  std::string checkpoint_root_;                   // with checkpoints: where they go
  std::optional<DenseState> resumed_dense_;       // a ps's --resume-from dense layers, until Ready
  const double cpu_start_ = cpu_seconds();
  std::unique_ptr<ClusterJob> job_;  // the sources keep a reference
  std::vector<std::shared_ptr<ShardCore>> shard_cores_;
  // Replication: the backups this ps holds (until promoted), by node, with their stores' identity.
  struct HeldBackup {
    std::shared_ptr<ShardBackup> backup;
    StoreIdentity identity;
  };
  std::map<NodeId, HeldBackup> backups_;
  // The actors that answer quiesce, flush and summary: the shards this ps serves (its own and
  // those it took over) and the backups it holds, by node.
  std::map<NodeId, caf::actor> row_actors_;
  std::vector<std::shared_ptr<WorkerCore>> workers_;
  std::vector<std::shared_ptr<WorkerSource>> sources_;
  std::shared_ptr<AggregatorCore> aggregator_;
  std::vector<caf::actor> worker_actors_;
  uint64_t skips_logged_ = 0, gradient_alerts_logged_ = 0, updates_refused_logged_ = 0;
  monitor::Counter* skip_alerts_ = nullptr;
  monitor::FaultLeak leak_{o_.fault_leak_mb};
  // The actors' metrics, served with --metrics-port; kept without, for the heartbeats' load.
  std::shared_ptr<monitor::Registry> metrics_ =
      o_.metrics ? o_.metrics : std::make_shared<monitor::Registry>();
  std::optional<monitor::WorkerInstruments> worker_metrics_;  // a worker's
  Process p_;  // last: destroyed first, before the cores its actors use
};

}  // namespace

Status check_member_options(const MemberDaemonOptions& o) {
  if (o.count == 0 || o.count > 4096)
    return Status::invalid_input(fmt::format("{} {} out of range 1..4096",
                                             o.role == MemberRole::ps ? "--shards" : "--replicas",
                                             o.count));
  if (o.role == MemberRole::worker) {
    if (o.data.empty()) return Status::invalid_input("--data is required");
    // (The reader opens the path itself and takes regular files only.)
    std::error_code error;
    const auto data = std::filesystem::status(o.data, error);
    if (data.type() == std::filesystem::file_type::not_found)
      return Status::invalid_input(fmt::format("--data {}: no such file", o.data));
    if (error)  // a folder on the way that cannot be searched, say
      return Status::invalid_input(fmt::format("--data {}: {}", o.data, error.message()));
    if (!std::filesystem::is_regular_file(data))
      return Status::invalid_input(
          fmt::format("--data {}: {}, not a training file", o.data,
                      std::filesystem::is_directory(data) ? "a directory" : "a special file"));
  }
  if (o.coordinator.empty())
    return Status::invalid_input("--coordinator tcp://HOST:PORT is required");
  if (Status s = check_endpoint("--coordinator", o.coordinator, false); !s.ok()) return s;
  if (Status s = check_endpoint("--listen", o.listen, true); !s.ok()) return s;
  if (Status s = check_advertise(o.advertise); !s.ok()) return s;
  const auto peers = endpoint_for_peers(o.listen, o);
  return peers ? Status() : peers.status();
}

Status run_member(const MemberDaemonOptions& options, const DaemonLog& log,
                  DaemonSignals& signals) {
  Member m(options, log, signals);
  return m.run();
}

}  // namespace colony
