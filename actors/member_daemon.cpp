// `colony ps` and `colony worker`: a member process joins, builds its cores from the layout,
// serves until the coordinator ends the job (actors/daemon.h).
#include <filesystem>
#include <map>
#include <random>

#include "actors/daemon_process.h"
#include "gpu/reduce.h"
#include "ps/cluster_layout.h"
#include "storage/checkpoint.h"
#include "worker/train_job.h"
#include "worker/wiring.h"

namespace colony {

using namespace daemon_internal;

namespace {

class Member {
 public:
  Member(const MemberDaemonOptions& o, const DaemonLog& log, DaemonSignals& signals)
      : o_(o), log_(log), signals_(signals), p_(o.threads) {}

  Status run() {
    if (o_.count == 0 || o_.count > 4096)
      return Status::invalid_input(
          fmt::format("{} {} out of range 1..4096",
                      o_.role == MemberRole::ps ? "--shards" : "--replicas", o_.count));
    if (o_.role == MemberRole::worker && o_.data.empty())
      return Status::invalid_input("--data is required");
    if (o_.coordinator.empty())
      return Status::invalid_input("--coordinator tcp://HOST:PORT is required");
    auto keys = load_keys(o_.security);
    if (!keys) return keys.status();
    keys_ = std::move(keys.value());
    if (Status s = p_.open_bridge(o_.listen, keys_, o_.cluster_id, log_, true); !s.ok()) return s;
    auto endpoint = advertised_endpoint(p_.bridge->endpoint(), o_.advertise);
    if (!endpoint) return endpoint.status();
    // Peers on other hosts could never reach a loopback address: say so now, not after a timeout.
    if (is_loopback(host_of(*endpoint)) && !is_loopback(host_of(o_.coordinator)))
      return Status::invalid_input(fmt::format(
          "this process would listen on {}, which only this host can reach, but the coordinator at "
          "{} is on "
          "another host: give --listen tcp://<this host's address>:PORT (or --advertise HOST)",
          *endpoint, o_.coordinator));
    me_.role = o_.role;
    me_.endpoint = *endpoint;
    me_.public_key = keys_.own ? keys_.own->public_z85 : "";
    me_.count = o_.count;
    me_.data = o_.data;
    me_.durable = o_.role == MemberRole::ps && o_.store.kind != StoreKind::memory;
    if (o_.role == MemberRole::ps) me_.store = to_string(o_.store);
    // This start of the process: a restart with the same key is told apart from a retry.
    me_.incarnation = (uint64_t{std::random_device{}()} << 32 | std::random_device{}()) | 1;
    log_(fmt::format("{} listening on {} ({}), joining the coordinator at {}", to_string(o_.role),
                     me_.endpoint, security_text(keys_), o_.coordinator));
    auto welcome = join();
    if (!welcome) return welcome.status();
    if (!welcome->has_value()) return Status();  // stopped or told to shut down before the start
    welcome_ = std::move(**welcome);
    if (Status s = build(); !s.ok()) {
      (void)send(Leave{s.message()});
      return s;
    }
    if (Status s = send(Ready{}); !s.ok()) return s;
    const MemberInfo& self = welcome_.members[you_];
    log_(fmt::format(
        "built my cores (nodes {}..{}{}); ready", self.first_node, self.first_node + self.count - 1,
        self.has_aggregator ? fmt::format(", aggregator {}", self.aggregator) : std::string()));
    return serve();
  }

 private:
  Status send(ControlBody body, bool wait = true) {
    return p_.bridge->send_control(o_.coordinator, keys_.server_public,
                                   ControlMessage{you_, std::move(body)}, wait);
  }

  // Until a Welcome: nullopt inside when the job ended (or a signal came) before it.
  Expected<std::optional<Welcome>> join() {
    const uint64_t start = now_ms();
    uint64_t next_join = start, next_notice = start + notice_ms;
    bool acknowledged = false;
    std::string status;
    for (;;) {
      const uint64_t now = now_ms();
      if (signals_.stop_requests.load() > 0) {
        log_("stopped by a signal before the job started");
        return std::optional<Welcome>();
      }
      if (now - start >= o_.join_timeout_ms) {
        if (acknowledged)
          return Status::internal(
              fmt::format("the cluster did not fill within {} s (--join-timeout): {}",
                          o_.join_timeout_ms / 1000, status));
        return Status::internal(
            fmt::format("no answer from the coordinator at {} within {} s (--join-timeout): is it "
                        "running and reachable from "
                        "here, with the same --cluster-id, and is this process's public key in its "
                        "authorized_keys?",
                        o_.coordinator, o_.join_timeout_ms / 1000));
      }
      if (!acknowledged && now >= next_join) {
        // Not waiting: with no connection yet there is no queue, and the loop must keep its
        // deadlines. An unsent Join is simply sent again next time.
        (void)send(Join{me_}, /*wait=*/false);
        next_join = now + join_retry_ms;
      }
      if (now >= next_notice) {
        log_(acknowledged ? fmt::format("joined; waiting for the cluster to fill: {}", status)
                          : fmt::format("waiting for the coordinator at {} ({} s): no answer yet",
                                        o_.coordinator, (now - start) / 1000));
        next_notice = now + notice_ms;
      }
      for (ControlMessage& m : p_.inbox.wait(poll_ms)) {
        if (auto* j = std::get_if<Joined>(&m.body)) {
          if (!acknowledged) log_("the coordinator took my join: " + j->status);
          acknowledged = true;
          status = j->status;
        } else if (auto* r = std::get_if<Refuse>(&m.body)) {
          return Status::internal("the coordinator refused this member: " + r->reason);
        } else if (auto* w = std::get_if<Welcome>(&m.body)) {
          if (Status s = take_layout(*w); !s.ok()) {
            p_.bridge->count_bad_message();
            log_("ignored a layout from the coordinator: " + s.message());
            continue;
          }
          return std::optional<Welcome>(std::move(*w));
        } else if (auto* s = std::get_if<Shutdown>(&m.body)) {
          if (s->error.empty()) return std::optional<Welcome>();
          return Status::internal("the coordinator ended the job: " + s->error);
        }
      }
    }
  }

  // Checks a Welcome (ids, counts, and that it names this member as it joined) and keeps its
  // layout; nothing is built from a layout that does not add up.
  Status take_layout(const Welcome& w) {
    auto layout = ClusterLayout::make(w);
    if (!layout) return layout.status();
    const MemberInfo& self = w.members[w.you];
    if (self.role != me_.role || self.count != me_.count || self.endpoint != me_.endpoint ||
        self.public_key != me_.public_key)
      return Status::invalid_input(fmt::format("it names this member as a {} at {} hosting {}",
                                               to_string(self.role), self.endpoint, self.count));
    layout_.emplace(std::move(layout.value()));
    return Status();
  }

  // Whether a control message received while serving makes sense in this layout; counted and
  // dropped otherwise (it came with the coordinator's key, yet is not believed blindly).
  Status check_served(const ControlMessage& m) const {
    auto nodes_ok = [&](const std::vector<NodeId>& nodes, bool durable_shards) {
      for (NodeId n : nodes) {
        if (n >= layout_->nodes()) return false;
        if (durable_shards) {
          const auto owner = layout_->owner(n);
          if (layout_->role(n) != NodeRole::shard || !owner || !layout_->members()[*owner].durable)
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
    if (auto* done = std::get_if<CheckpointComplete>(&m.body)) {
      if (o_.role != MemberRole::ps || checkpoint_root_.empty())
        return Status::invalid_input("CheckpointComplete to a member that takes no checkpoints");
      if (done->shards.size() != layout_->shards())
        return Status::invalid_input(fmt::format("CheckpointComplete lists {} shards of {}",
                                                 done->shards.size(), layout_->shards()));
      for (size_t s = 0; s < done->shards.size(); ++s)
        if (done->shards[s].shard != s || done->shards[s].dir != fmt::format("shard-{}", s))
          return Status::invalid_input(
              fmt::format("CheckpointComplete's entry {} is not shard {}", s, s));
      return Status();
    }
    const bool expected = std::holds_alternative<Start>(m.body) ||
                          std::holds_alternative<ShardSummaryRequest>(m.body) ||
                          std::holds_alternative<Shutdown>(m.body) ||
                          std::holds_alternative<Heartbeat>(m.body);
    return expected ? Status()
                    : Status::invalid_input(fmt::format(
                          "a control message of kind {} while training", m.body.index()));
  }

  Status build() {
    const Welcome& w = welcome_;
    you_ = w.you;
    const MemberInfo& self = w.members[w.you];
    if (self.count != o_.count || self.role != o_.role)
      return Status::internal(
          "the layout from the coordinator does not match what this member offered");
    auto& nodes = p_.shared->nodes;
    nodes.resize(layout_->nodes());
    const JobSpec& job = w.job;
    std::vector<NodeId> local;
    for (NodeId n = self.first_node; n < self.first_node + self.count; ++n) {
      if (n >= nodes.size()) return Status::internal(fmt::format("node {} outside the layout", n));
      local.push_back(n);
    }
    if (o_.role == MemberRole::ps) {
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
      for (NodeId n : local) {
        const ShardConfig sc = shard_config(job, *layout_, n);
        auto row_floats = ShardCore::row_floats(sc);
        if (!row_floats) return row_floats.status();
        if (w.resume) {
          // Never a silent start from scratch: a resumed shard's store must be there.
          const std::string path = shard_store_path(o_.store.dir, n);
          if (o_.store.kind == StoreKind::memory || !std::filesystem::exists(path))
            return Status::invalid_input(fmt::format(
                "resuming shard {}: {} does not exist: restart this ps with the --store it had", n,
                o_.store.kind == StoreKind::memory ? std::string("--store memory") : path));
        }
        // The store records which cluster and shard wrote it: another job's is refused.
        const StoreIdentity identity{fmt::format("cluster-{}", o_.cluster_id), n, w.map.shards,
                                     *row_floats};
        auto store = open_shard_store(o_.store, identity);
        if (!store) return store.status();
        identities_.push_back(identity);
        auto core = ShardCore::make(sc, std::move(store.value()));
        if (!core) return core.status();
        if (w.resume) (*core)->begin_resync();
        shard_cores_.push_back(std::shared_ptr<ShardCore>(std::move(core.value())));
        nodes[n] =
            caf::actor_cast<caf::actor>(p_.system.spawn(shard_fun, shard_cores_.back(), p_.shared));
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
      job_->trainer.optimizer = job.optimizer;
      job_->trainer.seed = job.seed;
      job_->trainer.factor_init_std = job.factor_init_std;
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
      for (NodeId n : local) {
        auto core = WorkerCore::make(worker_config(job, *layout_, n));
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
        auto core =
            AggregatorCore::make(aggregator_config(job, *layout_, you_), make_cpu_reducer());
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
      reports_expected_ = local.size();
    }
    p_.bridge->set_layout(*layout_, keys_.server_public);
    p_.bridge->set_routing_ready(local);
    return Status();
  }

  // Copies shard `core`'s store as step `step`'s checkpoint (an actor's thread).
  Expected<ShardCheckpoint> checkpoint_shard(ShardCore& core, uint32_t step) {
    const uint32_t i = core.config().shard_index;
    const std::string dir = checkpoint_shard_dir(checkpoint_root_, step, i);
    std::error_code ec;
    std::filesystem::create_directories(checkpoint_step_dir(checkpoint_root_, step), ec);
    if (ec)
      return Status::io_error(fmt::format(
          "{}: cannot create: {}", checkpoint_step_dir(checkpoint_root_, step), ec.message()));
    if (Status s = core.store().checkpoint(dir, identities_[i - welcome_.members[you_].first_node]);
        !s.ok())
      return s;
    ShardCheckpoint c{i, fmt::format("shard-{}", i), core.rows(), {}};
    for (auto [node, clock] : core.sender_clocks()) c.sender_clocks.emplace_back(node, clock);
    return c;
  }

  // Every shard has checkpointed `c.step`: this ps writes the step's manifest beside its copies.
  Status write_checkpoint_manifest(const CheckpointComplete& c) {
    const StoreIdentity& id = identities_.front();
    CheckpointManifest m{
        c.step,  id.cluster_id, layout_->shards(), id.row_floats, model_spec(welcome_.job).width(),
        c.shards};
    if (Status s = write_manifest(checkpoint_root_, m); !s.ok()) return s;
    log_(fmt::format("checkpoint of step {} complete: wrote {}", c.step,
                     checkpoint_step_dir(checkpoint_root_, c.step)));
    return Status();
  }

  MemberDone summary(const std::string& error) const {
    MemberDone d;
    d.error = error;
    d.drained = draining_;
    for (const auto& w : workers_) {
      const WorkerStats& st = w->stats();
      d.samples += st.samples;
      d.loss_sum += st.loss_sum;
      d.steps += st.steps;
      d.pull_messages += st.pull_messages;
      d.pushes_resent += w->pushes_resent();
      d.replies_dropped += st.replies_dropped;
      if (!aggregator_) {
        d.push_messages += st.push_messages;
        d.push_bytes += st.push_bytes;
      }
    }
    if (aggregator_) {
      d.push_messages = aggregator_->stats().push_messages;
      d.push_bytes = aggregator_->stats().push_bytes;
      d.pushes_resent += aggregator_->pushes_resent();
      d.replies_dropped += aggregator_->stats().replies_dropped;
    }
    for (const auto& s : sources_) d.bad_lines_skipped += s->last_stats().bad_lines_skipped;
    d.bad_messages = p_.bridge->stats().bad_messages;
    d.cpu_seconds = cpu_seconds() - cpu_start_;
    d.read_from_cache = !sources_.empty();
    for (const auto& s : sources_)
      d.read_from_cache = d.read_from_cache && s->last_stats().from_cache;
    return d;
  }

  Status drain_ps() {
    caf::scoped_actor self{p_.system};
    for (NodeId n = welcome_.members[you_].first_node;
         n < welcome_.members[you_].first_node + o_.count; ++n)
      self->request(caf::actor_cast<shard_actor>(p_.shared->nodes[n]), caf::infinite,
                    quiesce_atom::value)
          .receive([](bool) {}, [](caf::error&) {});
    log_("drained: every shard has handled what it was sent; leaving");
    return send(Leave{"stopped by SIGTERM"});
  }

  // The summary of this process's shards, asked of each shard actor (which answers once it has
  // handled what was queued before). A shard that does not answer within the heartbeat timeout
  // is left out, and logged.
  ShardSummary summarize_shards() {
    ShardSummary sum;
    caf::scoped_actor self{p_.system};
    for (NodeId n = welcome_.members[you_].first_node;
         n < welcome_.members[you_].first_node + o_.count; ++n)
      self->request(caf::actor_cast<shard_actor>(p_.shared->nodes[n]),
                    std::chrono::milliseconds(welcome_.heartbeat_timeout_ms), summary_atom::value)
          .receive([&](const ShardSummary& s) { sum += s; },
                   [&](caf::error& e) {
                     log_(fmt::format("shard node {} gave no summary: {}", n, p_.system.render(e)));
                   });
    sum.bad_messages = p_.bridge->stats().bad_messages;
    sum.cpu_seconds = cpu_seconds() - cpu_start_;
    return sum;
  }

  Status serve() {
    const Welcome& w = welcome_;
    uint64_t last_heard = now_ms(), next_heartbeat = last_heard;
    int signals_seen = 0;
    bool started = false, done_sent = false;
    size_t reports = 0;
    std::string local_error;
    for (;;) {
      const uint64_t now = now_ms();
      const int stops = signals_.stop_requests.load();
      if (stops > signals_seen) {
        signals_seen = stops;
        if (o_.role == MemberRole::ps) {
          log_("SIGTERM: draining the shards");
          return drain_ps();
        }
        if (!draining_) {
          draining_ = true;
          if (!started) {
            log_("SIGTERM before the start: leaving");
            return send(Leave{"stopped by SIGTERM before the start"});
          }
          log_(
              "SIGTERM: taking no more batches; waiting for the pushes in flight to be "
              "acknowledged");
          for (auto& s : sources_) s->stop();
        }
      }
      if (Status e = p_.first_error(); !e.ok()) {
        log_("failed: " + e.message());
        if (o_.role == MemberRole::worker && !done_sent)
          (void)send(summary(e.message()));
        else
          (void)send(Leave{e.message()});
        return e;
      }
      if (auto copies = p_.inbox.take_checkpoints(); !copies.empty()) {
        std::map<uint32_t, ShardsCheckpointed> by_step;
        for (auto& [step, copy] : copies) {
          by_step[step].step = step;
          by_step[step].shards.push_back(std::move(copy));
        }
        for (auto& [step, report] : by_step)
          if (Status s = send(std::move(report)); !s.ok()) return s;
      }
      for (auto& [id, error] : p_.inbox.take_done()) {
        ++reports;
        if (!error.ok() && local_error.empty())
          local_error = fmt::format("node {}: {}", id, error.message());
      }
      if (o_.role == MemberRole::worker && !done_sent &&
          (reports == reports_expected_ || !local_error.empty())) {
        const MemberDone d = summary(local_error);
        if (Status s = send(d); !s.ok()) return s;
        done_sent = true;
        log_(local_error.empty() ? fmt::format("done: {} samples in {} steps", d.samples, d.steps)
                                 : "failed: " + local_error);
        if (!local_error.empty()) return Status::internal(local_error);
        if (draining_) {
          log_("drained; exiting");
          return Status();
        }
      }
      if (now >= next_heartbeat) {
        if (Status s = send(Heartbeat{p_.shared->samples.load()}); !s.ok()) return s;
        next_heartbeat = now + w.heartbeat_ms;
      }
      if (now > last_heard + w.heartbeat_timeout_ms)
        return Status::internal(fmt::format("lost the coordinator at {}: nothing heard for {} ms",
                                            o_.coordinator, now - last_heard));
      for (ControlMessage& m : p_.inbox.wait(poll_ms)) {
        if (Status bad = check_served(m); !bad.ok()) {
          p_.bridge->count_bad_message();
          log_served_drop(bad.message());
          continue;
        }
        last_heard = now_ms();
        if (std::holds_alternative<Start>(m.body)) {
          if (started || o_.role != MemberRole::worker) continue;
          started = true;
          log_(fmt::format("training starts: {} replica{}", worker_actors_.size(),
                           worker_actors_.size() == 1 ? "" : "s"));
          for (auto& a : worker_actors_) caf::anon_send(a, start_atom::value);
        } else if (auto* lost = std::get_if<NodesLost>(&m.body)) {
          p_.bridge->mark_lost(lost->nodes);
          log_(lost->reason + ": no longer sending to its nodes");
        } else if (std::holds_alternative<ShardSummaryRequest>(m.body)) {
          if (o_.role != MemberRole::ps) continue;
          const ShardSummary sum = summarize_shards();
          log_(fmt::format("training is over: {} rows in {} shard{}", sum.table_rows, o_.count,
                           o_.count == 1 ? "" : "s"));
          if (Status s = send(sum); !s.ok()) return s;
        } else if (auto* complete = std::get_if<CheckpointComplete>(&m.body)) {
          if (Status s = write_checkpoint_manifest(*complete); !s.ok()) {
            log_("failed: " + s.message());
            (void)send(Leave{s.message()});
            return s;
          }
        } else if (auto* back = std::get_if<ShardsRestarted>(&m.body)) {
          if (back->nodes.empty()) continue;
          p_.bridge->unmark_lost(back->nodes);
          log_(fmt::format("shards {}..{} restarted: re-sending what they may have lost",
                           back->nodes.front(), back->nodes.back()));
          for (auto& a : worker_actors_) caf::anon_send(a, restarted_atom::value, back->nodes);
          if (aggregator_)
            caf::anon_send(p_.shared->nodes[welcome_.members[you_].aggregator],
                           restarted_atom::value, back->nodes);
        } else if (auto* s = std::get_if<Shutdown>(&m.body)) {
          if (s->error.empty()) {
            log_("the job is over; exiting");
            return Status();
          }
          return Status::internal("the coordinator ended the job: " + s->error);
        }
      }
    }
  }

  // At most once a minute, like the bridge's own drops.
  void log_served_drop(const std::string& why) {
    const uint64_t now = now_ms();
    if (now < next_drop_log_ms_) return;
    next_drop_log_ms_ = now + 60'000;
    log_(fmt::format(
        "dropped a control message: {} ({} bad messages so far; logged at most once a minute)", why,
        p_.bridge->stats().bad_messages));
  }

  const MemberDaemonOptions& o_;
  const DaemonLog& log_;
  DaemonSignals& signals_;
  Keys keys_;
  MemberInfo me_;
  Welcome welcome_;
  std::optional<ClusterLayout> layout_;    // from welcome_, checked
  std::vector<StoreIdentity> identities_;  // of this ps's shards, in node order
  std::string checkpoint_root_;            // with checkpoints: where they go
  const double cpu_start_ = cpu_seconds();
  uint64_t next_drop_log_ms_ = 0;
  uint32_t you_ = control_from_unknown;
  std::unique_ptr<ClusterJob> job_;  // the sources keep a reference
  std::vector<std::shared_ptr<ShardCore>> shard_cores_;
  std::vector<std::shared_ptr<WorkerCore>> workers_;
  std::vector<std::shared_ptr<WorkerSource>> sources_;
  std::shared_ptr<AggregatorCore> aggregator_;
  std::vector<caf::actor> worker_actors_;
  size_t reports_expected_ = 0;
  bool draining_ = false;
  Process p_;  // last: destroyed first, before the cores its actors use
};

}  // namespace

Status run_member(const MemberDaemonOptions& options, const DaemonLog& log,
                  DaemonSignals& signals) {
  Member m(options, log, signals);
  return m.run();
}

}  // namespace colony
