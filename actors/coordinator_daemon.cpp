// `colony coordinator`: drives the coordinator core over the bridge, evaluates the model at the
// end and returns the job's totals (actors/daemon.h).
#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "actors/daemon_process.h"
#include "ps/cluster_layout.h"
#include "ps/coordinator_core.h"
#include "worker/kv_client.h"
#include "worker/train_job.h"
#include "worker/wiring.h"

namespace colony {

using namespace daemon_internal;

namespace {

constexpr uint64_t load_sample_ms = 250;  // how often the load alerts sample the members' load

class Coordinator {
 public:
  Coordinator(const CoordinatorDaemonOptions& o, const DaemonLog& log, DaemonSignals& signals)
      : o_(o), log_(log), signals_(signals), p_(0) {}

  Expected<CoordinatorResult> run() {
    if (Status s = check_coordinator_listen(o_); !s.ok()) return s;
    auto keys =
        load_keys(DaemonSecurity{o_.security.insecure, o_.security.keys_dir,
                                 o_.security.key_name.empty() ? "server" : o_.security.key_name});
    if (!keys) return keys.status();
    keys_ = std::move(keys.value());
    CoordinatorConfig cc;
    cc.shards = o_.shards;
    cc.workers = o_.workers;
    cc.job = o_.job;
    cc.map.seed = o_.job.seed;
    cc.join_timeout_ms = o_.join_timeout_ms;
    cc.notice_ms = notice_ms;
    cc.heartbeat_ms = o_.heartbeat_ms;
    cc.heartbeat_timeout_ms = o_.heartbeat_timeout_ms;
    cc.require_all_workers = o_.require_all_workers;
    cc.dense_shape = dense_shape(o_.job);
    if (!cc.dense_shape.empty()) {
      auto model = Model::make(model_spec(o_.job));
      if (!model) return model.status();
      cc.dense_params = (*model)->dense_params();
    }
    for (const AuthorizedKey& k : keys_.authorized) {
      if (k.role == KeyRole::coordinator || k.public_z85 == keys_.server_public) continue;
      cc.key_roles[k.public_z85] = k.role == KeyRole::ps ? std::optional<MemberRole>(MemberRole::ps)
                                   : k.role == KeyRole::worker
                                       ? std::optional<MemberRole>(MemberRole::worker)
                                       : std::nullopt;
    }
    auto map =
        ShardMap::make(ShardMapSpec{1, o_.shards, ShardMapSpec{}.vnodes_per_shard, o_.job.seed});
    if (!map) return map.status();
    cc.map = map->spec();
    map_ = cc.map;
    auto core = CoordinatorCore::make(cc, now_ms());
    if (!core) return core.status();
    core_.emplace(std::move(core.value()));
    if (Status s = p_.open_bridge(o_.listen, keys_, o_.cluster_id, log_, false); !s.ok()) return s;
    p_.add_metrics(o_.metrics);
    if (o_.metrics) {
      metrics_ = monitor::train_instruments(*o_.metrics);
      cluster_metrics_ = monitor::cluster_instruments(*o_.metrics);
      // The coordinator learns samples from heartbeats, not the epoch or the share done.
      metrics_->epoch->set(std::nan(""));
      metrics_->progress->set(std::nan(""));
      metrics_->logloss->set(std::nan(""));
      members_ =
          &o_.metrics->gauge("colony_cluster_members", "Members that have joined the cluster.");
    }
    log_(
        fmt::format("coordinator listening on {} ({}, cluster id {}): waiting for {} shard{} and "
                    "{} worker replica{}",
                    p_.bridge->endpoint(), security_text(keys_), o_.cluster_id, o_.shards,
                    o_.shards == 1 ? "" : "s", o_.workers, o_.workers == 1 ? "" : "s"));
    while (core_->phase() != CoordinatorPhase::ended && !trained_) {
      if (signals_.stop_requests.load() > 0) {
        log_("SIGTERM: telling every member to stop");
        CoordinatorEffects fx;
        core_->finish("the coordinator was stopped (SIGTERM)", fx);
        apply(fx);
        result_.stopped_by_signal = true;
        return finish_result();
      }
      pump(poll_ms);
      if (!failed_.ok()) return failed_;
      progress();
      watch_load();
      record_metrics();
    }
    watch_load();
    record_metrics();
    result_.train_seconds = double(now_ms() - start_ms_) / 1000.0;
    // The ps members' summaries of their shards, before evaluation pulls add to them (the
    // core gives up on a silent one after the heartbeat timeout).
    while (core_->summaries_pending()) {
      pump(poll_ms);
      if (!failed_.ok()) return failed_;
    }
    if (!o_.test.empty()) {
      log_("evaluating on " + o_.test);
      auto ev = evaluate_test();
      if (!ev) {
        CoordinatorEffects fx;
        core_->finish(ev.status().message(), fx);
        apply(fx);
        return ev.status();
      }
      result_.test_logloss = ev->logloss;
      result_.test_auc = ev->auc;
      if (metrics_) {
        metrics_->test_logloss->set(ev->logloss);
        metrics_->test_auc->set(ev->auc);
      }
      result_.test_samples = ev->samples;
      log_(fmt::format("test logloss {:.5f}, auc {:.4f} over {} samples", ev->logloss, ev->auc,
                       ev->samples));
    }
    CoordinatorEffects fx;
    core_->finish("", fx);
    apply(fx);
    return finish_result();
  }

 private:
  CoordinatorResult finish_result() {
    const CoordinatorTotals& t = core_->totals();
    result_.totals = t;
    result_.train_logloss =
        t.counters.samples ? t.counters.loss_sum / double(t.counters.samples) : 0.0;
    result_.members = static_cast<uint32_t>(core_->members().size());
    std::vector<std::string> stores;  // each distinct one, in member order
    for (const MemberInfo& m : core_->members())
      if (m.role == MemberRole::ps &&
          std::find(stores.begin(), stores.end(), m.store) == stores.end())
        stores.push_back(m.store);
    result_.store = fmt::format("{}", fmt::join(stores, "; "));
    const BridgeStats bs = p_.bridge->stats();
    if (std::string late = late_from_moved_line(bs); !late.empty()) log_(late);
    result_.bad_messages = bs.bad_messages + t.counters.bad_messages;
    result_.refused_peers = bs.refused_peers;
    return result_;
  }

  // Handles what arrived within timeout_ms and the timers due.
  void pump(uint64_t timeout_ms) {
    const uint64_t now = now_ms();
    const uint64_t deadline = core_->next_deadline();
    const uint64_t wait = deadline <= now ? 0 : std::min(timeout_ms, deadline - now);
    for (ControlMessage& m : p_.inbox.wait(wait)) {
      keep_dense(m);
      CoordinatorEffects fx;
      core_->on_message(m, now_ms(), fx);
      apply(fx);
    }
    if (now_ms() >= core_->next_deadline()) {
      CoordinatorEffects fx;
      core_->on_timer(now_ms(), fx);
      apply(fx);
    }
  }

  void apply(CoordinatorEffects& fx) {
    for (const std::string& line : fx.log) log_(line);
    const bool was_joining = !routing_;
    if (was_joining && core_->phase() != CoordinatorPhase::joining &&
        core_->phase() != CoordinatorPhase::ended)
      setup_routing();
    std::vector<std::pair<uint32_t, ControlBody>> unsent;  // member, what it did not get
    for (ControlOut& c : fx.control) {
      if (auto* lost = std::get_if<NodesLost>(&c.message.body)) p_.bridge->mark_lost(lost->nodes);
      if (auto* back = std::get_if<ShardsRestarted>(&c.message.body))
        p_.bridge->unmark_lost(back->nodes);
      // Not waiting: the loop keeps its deadlines even when a member's queue is full or gone.
      if (Status s = p_.bridge->send_control(c.endpoint, c.public_key, c.message, /*wait=*/false,
                                             c.one_off);
          !s.ok()) {
        log_(fmt::format("could not send to {}: {}", c.endpoint, s.message()));
        const auto& members = core_->members();
        for (uint32_t i = 0; i < members.size() && !c.one_off; ++i)
          if (members[i].endpoint == c.endpoint) unsent.emplace_back(i, c.message.body);
      }
    }
    // A failover: this process's messages to the moved shards (the lost workers' clocks below,
    // evaluation pulls) go to their new member.
    for (const ShardsMoved& moved : fx.moved) {
      const MemberInfo& to = core_->members()[moved.member];
      if (Status s = p_.bridge->move_shards(moved.shards, moved.member, to.endpoint, to.public_key);
          !s.ok())
        failed_ = s;
      p_.bridge->unmark_lost(moved.shards);
    }
    for (const NodePlacement& placed : fx.placed)
      if (Status s = p_.bridge->take_placement(placed.node, placed.member); !s.ok()) failed_ = s;
    if (!fx.ps.empty()) route(*p_.shared, fx.ps);
    for (const ControlOut& c : fx.control)
      if (std::holds_alternative<Start>(c.message.body)) start_ms_ = now_ms();
    if (fx.training_done) trained_ = true;
    if (!fx.failed.ok() && failed_.ok()) failed_ = fx.failed;
    for (const auto& [i, body] : unsent) {
      CoordinatorEffects more;
      core_->on_send_failed(i, body, now_ms(), more);
      apply(more);
    }
  }

  // A deep model's final dense layers come with the worker members' MemberDone. Kept for
  // evaluation: those that took in the most dense all-reduces (MemberDone::dense_steps; the
  // lowest-numbered member's on a tie), of the model's size and finite, from a worker member
  // over the connection its key proved (the core checks the rest of the message itself).
  void keep_dense(const ControlMessage& m) {
    const auto* done = std::get_if<MemberDone>(&m.body);
    if (!done || done->dense.empty() || m.from >= core_->members().size()) return;
    const MemberInfo& member = core_->members()[m.from];
    if (member.role != MemberRole::worker || m.sender_key != member.public_key) return;
    if (dense_from_ != control_from_unknown &&
        (done->dense_steps < dense_steps_ ||
         (done->dense_steps == dense_steps_ && m.from >= dense_from_)))
      return;
    auto model = Model::make(model_spec(o_.job));
    const bool fits = model && (*model)->dense_params() == done->dense.size() &&
                      std::all_of(done->dense.begin(), done->dense.end(),
                                  [](float x) { return std::isfinite(x); });
    if (!fits) {
      log_(
          fmt::format("member {} reported {} dense parameters that do not fit --model {}: "
                      "ignored",
                      m.from, done->dense.size(), to_string(model_spec(o_.job).kind)));
      return;
    }
    dense_ = done->dense;
    dense_from_ = m.from;
    dense_steps_ = done->dense_steps;
  }

  // Once the layout is out: proxies for every shard, and a local actor for evaluation pulls.
  void setup_routing() {
    routing_ = true;
    auto& nodes = p_.shared->nodes;
    const NodeId me = core_->coordinator_node();
    nodes.resize(size_t{me} + 1);
    for (const MemberInfo& m : core_->members())
      if (m.role == MemberRole::ps)
        if (Status s = p_.bridge->add_remote_nodes(m.endpoint, m.public_key, m.first_node, m.count);
            !s.ok())
          failed_ = s;
    self_.emplace(p_.system);
    nodes[me] = caf::actor_cast<caf::actor>(*self_);
    auto layout = ClusterLayout::make(core_->layout());
    COLONY_ASSERT(layout.ok(), "the coordinator core's own layout: {}", layout.status().message());
    p_.bridge->set_layout(std::move(layout.value()),
                          keys_.own ? keys_.own->public_z85 : std::string());
    p_.bridge->set_routing_ready({me});
  }

  // The job's colony_train_* metrics, from the core (on this thread; scrapes read atomics).
  void record_metrics() {
    if (!metrics_) return;
    members_->set(double(core_->members().size()));
    const uint64_t samples = core_->samples_reported();
    if (samples > samples_counted_) metrics_->samples->inc(double(samples - samples_counted_));
    samples_counted_ = std::max(samples_counted_, samples);
    const CoordinatorTotals& t = core_->totals();  // the members that have reported
    if (t.counters.samples)
      metrics_->logloss->set(t.counters.loss_sum / double(t.counters.samples));
  }

  // The load alerts, from the members' heartbeats (CoordinatorCore::load), sampled every
  // load_sample_ms while training: each logged, counted in colony_alerts_total{kind} and kept
  // for the report.
  void watch_load() {
    const uint64_t now = now_ms();
    if (core_->phase() != CoordinatorPhase::running || now < next_load_ms_) return;
    next_load_ms_ = now + load_sample_ms;
    const ClusterLoad load = core_->load();
    if (cluster_metrics_) export_load(load);
    const double time_s = double(now - start_ms_) / 1000.0;
    // Each process's memory, compared only with its own: sampled however late the others are.
    const std::vector<MemberInfo>& members = core_->members();
    std::vector<monitor::ClusterAlertMonitor::Process> processes;
    for (const ClusterLoad::Process& p : load.processes) {
      if (core_->gone(p.member)) continue;
      const MemberInfo& m = members[p.member];
      processes.push_back(
          {fmt::format("{} member {} ({})", to_string(m.role), p.member, m.endpoint),
           double(p.rss_bytes), double(p.rows_memory_bytes)});
    }
    raise(alerts_.observe_processes(time_s, processes));
    // Counters compared across members only while every member's are fresh: a heartbeat late by
    // a second (a loaded machine) would make its member look idle over the window, and a shard
    // with a tenth of the load look hot beside it.
    if (now > load.oldest_load_ms + 3 * uint64_t(o_.heartbeat_ms)) return;
    monitor::AlertSample sample;
    sample.time_s = time_s;
    sample.worker_busy_s = load.worker_busy_s;
    sample.worker_steps = load.worker_steps;
    sample.shard_rows = load.shard_rows;
    for (size_t w = 0; w < load.worker_nodes.size(); ++w)
      sample.worker_names.push_back(
          fmt::format("worker node {} (member {})", load.worker_nodes[w], load.worker_members[w]));
    raise(alerts_.observe_cluster(std::move(sample)));
  }

  // Each alert logged, counted in colony_alerts_total{kind} and kept for the report.
  void raise(std::vector<monitor::Alert> alerts) {
    for (monitor::Alert& alert : alerts) {
      log_(fmt::format("warning: alert {}: {}", alert.kind, alert.message));
      if (o_.metrics) monitor::alerts(*o_.metrics, alert.kind).inc();
      result_.alerts.push_back(std::move(alert));
    }
  }

  // The dashboard's cluster-wide panels (the shard load map, staleness, latency, hot keys):
  // what the load grew by since the last export, into colony_cluster_*.
  void export_load(const ClusterLoad& load) {
    monitor::ClusterInstruments& m = *cluster_metrics_;
    auto histogram = [](monitor::Histogram* h, const LoadHistogram& now, LoadHistogram& last) {
      if (now.counts.empty()) return;
      last.counts.resize(now.counts.size());
      std::vector<uint64_t> grew(now.counts.size());
      for (size_t b = 0; b < grew.size(); ++b) {
        grew[b] = now.counts[b] >= last.counts[b] ? now.counts[b] - last.counts[b] : 0;
        last.counts[b] = now.counts[b];
      }
      h->add(grew, std::max(0.0, now.sum - last.sum));
      last.sum = std::max(last.sum, now.sum);
    };
    histogram(m.staleness, load.staleness, exported_.staleness);
    histogram(m.pull_seconds, load.pull_latency, exported_.pull_latency);
    histogram(m.push_seconds, load.push_latency, exported_.push_latency);
    // The shards' counters, looked up once (the shard count is the job's).
    for (uint32_t k = exported_.served.size(); k < load.shard_rows.size(); ++k) {
      exported_.served.push_back({&m.rows_served(k), 0});
      exported_.pulled.push_back({&m.rows_pulled(k), 0});
    }
    for (size_t k = 0; k < load.shard_rows.size(); ++k) {
      monitor::add_growth(exported_.served[k].first, load.shard_rows[k],
                          exported_.served[k].second);
      monitor::add_growth(exported_.pulled[k].first, load.shard_rows_pulled[k],
                          exported_.pulled[k].second);
    }
    std::vector<monitor::HotKeyCount> hot;
    for (const LoadHotKey& h : load.hot_keys) hot.push_back({h.shard, h.key, h.pulls});
    m.list_hot_keys(std::move(hot));
  }

  void progress() {
    const uint64_t now = now_ms();
    if (core_->phase() != CoordinatorPhase::running || now < next_progress_ms_) return;
    next_progress_ms_ = now + notice_ms;
    const uint64_t samples = core_->samples_reported();
    const double seconds = double(now - start_ms_) / 1000.0;
    log_(fmt::format("trained {} samples ({:.0f}/s)", samples,
                     seconds > 0 ? double(samples) / seconds : 0.0));
  }

  // Pulls the rows of every test batch from the shards (keeping the control loop going while
  // it waits) and scores them.
  Expected<Evaluation> evaluate_test() {
    const NodeId me = core_->coordinator_node();
    std::vector<NodeId> shards(o_.shards);
    for (uint32_t s = 0; s < o_.shards; ++s) shards[s] = s;
    const ModelSpec model = model_spec(o_.job);
    // Replies come in fp32 once training is over (ShardConfig::wire_format), in the job's parts.
    auto kv = KvClient::make({me, map_, shards, model.width(), false, ValueFormat::fp32,
                              size_t(o_.job.formats.part_bytes)});
    if (!kv) return kv.status();
    auto scorer = Model::make(model);
    if (!scorer) return scorer.status();
    if ((*scorer)->dense_params() != dense_.size())
      return Status::internal(fmt::format(
          "no worker member reported the final dense layers of --model {}: nothing to evaluate",
          to_string(model.kind)));
    BatchIndex index;
    std::vector<float> rows;
    Outbox out;
    Status failure;
    ReaderOptions ro = o_.reader;
    ro.batch_rows = o_.job.batch;
    auto ev = evaluate(o_.test, nullptr, ro, [&](const Batch& batch, std::vector<float>& logits) {
      logits.assign(batch.rows(), 0.0f);
      if (!failure.ok()) return Status();
      if (Status s = (*scorer)->check(batch); !s.ok()) return s;
      index.build(batch, model.dense_rows());
      const auto keys = index.unique_keys();
      rows.assign(keys.size() * model.width(), 0.0f);
      const auto ticket = (*kv)->pull(keys, 0, me, rows, out);
      route(*p_.shared, out);
      auto feed = [&](PsMessage m) {
        (*kv)->on_message(m, out);
        route(*p_.shared, out);
      };
      while (!(*kv)->done(ticket) && (*kv)->error().ok() && failed_.ok()) {
        (*self_)->receive([&](PullReply& m) { feed(std::move(m)); },
                          [&](ShardMapUpdate& m) { feed(std::move(m)); },
                          [&](PsError& m) { feed(std::move(m)); },
                          caf::after(std::chrono::milliseconds(poll_ms)) >> [&] { pump(0); });
      }
      if (!(*kv)->error().ok())
        failure = (*kv)->error();
      else if (!failed_.ok())
        failure = failed_;
      if (!failure.ok()) return Status();
      (*scorer)->forward(batch, index.slots(), rows, dense_, logits);
      return Status();
    });
    if (!failure.ok()) return failure;
    return ev;
  }

  const CoordinatorDaemonOptions& o_;
  const DaemonLog& log_;
  DaemonSignals& signals_;
  Keys keys_;
  std::optional<CoordinatorCore> core_;
  CoordinatorResult result_;
  Status failed_;
  bool routing_ = false;
  bool trained_ = false;
  uint64_t start_ms_ = 0;
  uint64_t next_progress_ms_ = 0;
  monitor::ClusterAlertMonitor alerts_{o_.alerts};
  uint64_t next_load_ms_ = 0;
  std::optional<monitor::ClusterInstruments> cluster_metrics_;  // with metrics
  struct {
    LoadHistogram staleness, pull_latency, push_latency;
    // By shard: its rows served and pulled counters, and the totals exported into them.
    std::vector<std::pair<monitor::Counter*, uint64_t>> served, pulled;
  } exported_;  // what export_load has added to cluster_metrics_
  std::optional<monitor::TrainInstruments> metrics_;
  uint64_t samples_counted_ = 0;
  monitor::Gauge* members_ = nullptr;
  ShardMapSpec map_;
  std::vector<float> dense_;  // a deep model's final dense layers (keep_dense)
  uint32_t dense_from_ = control_from_unknown;
  uint64_t dense_steps_ = 0;
  Process p_;
  std::optional<caf::scoped_actor> self_;  // after p_: destroyed before the actor system
};

}  // namespace

Status check_coordinator_listen(const CoordinatorDaemonOptions& o) {
  return check_endpoint("--listen", o.listen, true);
}

Expected<CoordinatorResult> run_coordinator(const CoordinatorDaemonOptions& options,
                                            const DaemonLog& log, DaemonSignals& signals) {
  Coordinator c(options, log, signals);
  return c.run();
}

}  // namespace colony
