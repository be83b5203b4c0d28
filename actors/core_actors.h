// The CAF actors that wrap the sans-I/O cores (shard, worker replica, node aggregator), shared
// by the embedded cluster and the cluster daemons. Internal to actors/: CAF headers are heavy.
//
// Every actor of one process shares a JobShared: the actor handle of every node id (a local
// core's actor, or, in a daemon, a proxy that carries messages to a remote process) and the
// first error any actor met.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "actors/embedded_cluster.h"
#include "actors/ps_actors.h"
#include "data/reader.h"
#include "monitor/ps_metrics.h"
#include "monitor/timeline_recorder.h"
#include "ps/replication.h"
#include "ps/shard_core.h"
#include "worker/aggregator_core.h"
#include "worker/worker_core.h"

namespace colony {

struct shard_state {
  static inline const char* name = "colony.shard";
  Outbox out;
  std::vector<ReplicaForward> forwards;  // a replicated shard's, for its backups
  uint64_t acks_refused = 0;             // ReplicaAcks its primary refused (counted as bad)
  // With metrics: the instruments, and the core's stats they have counted up to.
  std::optional<monitor::ShardInstruments> metrics;
  ShardStats counted;
  // The core's stats when this actor began serving it: a promoted backup's core counted the
  // forwards it applied as a backup, which are no rows this shard served.
  ShardStats before;
  uint64_t updates_refused_reported = 0;  // ShardStats::updates_not_finite told JobShared
  // With a timeline: the pulls its core held (the gate), by (sender, request id), since when.
  std::map<std::pair<NodeId, uint64_t>, std::chrono::steady_clock::time_point> pulls_held;
};

struct backup_state {
  static inline const char* name = "colony.backup";
  // Declared, so that the state is no aggregate: CAF builds a state from the actor's pointer
  // when it can, and C++20 would initialize `spent` from it (true).
  backup_state() = default;
  bool spent = false;  // promoted: the ShardBackup is no longer this actor's
  // A backup placed on a ps that rejoined: its copy, until the last part built the backup.
  std::shared_ptr<ShardBackup> backup;
  std::shared_ptr<BackupCopy> copy;
};

struct worker_state {
  static inline const char* name = "colony.worker";
  Outbox out;
  uint64_t samples_reported = 0;
  double loss_reported = 0.0;
  uint64_t skips_reported = 0;
  uint64_t gradient_alerts_reported = 0;
  std::optional<size_t> slot;  // in JobShared's load arrays, when the driver keeps them
  bool reported = false;
  // With metrics or a timeline: the pulls (with their clock) and pushes in flight, by (peer,
  // request id), since when; with metrics, the instruments they are recorded into.
  std::optional<monitor::WorkerInstruments> metrics;
  using Since = std::chrono::steady_clock::time_point;
  std::map<std::pair<NodeId, uint64_t>, std::pair<Since, uint32_t>> pulls_sent;
  std::map<std::pair<NodeId, uint64_t>, Since> pushes_sent;
  // With a timeline: when the last message's handling ended (none once done), and whether
  // pulls were out then.
  std::optional<Since> idle_since;
  bool waiting_for_pulls = false;
};

struct aggregator_state {
  static inline const char* name = "colony.aggregator";
  Outbox out;
  bool reported = false;
};

// What every actor of one job shares with the driver: where to send, and how the job goes.
struct JobShared {
  std::vector<caf::actor> nodes;  // by NodeId
  std::function<void(const Outgoing&)> observer;
  // Called by a shard's actor after each message, with its core (checkpoints, recovery).
  std::function<void(ShardCore&)> after_shard_message;
  // Called by a worker's actor after each message, with its core (dense-layer checkpoints).
  std::function<void(WorkerCore&)> after_worker_message;
  // Called by a backup's actor once its copy built the backup (a ps that rejoined).
  std::function<void(NodeId, std::shared_ptr<ShardBackup>)> backup_copied;
  std::atomic<uint64_t> samples{0};
  std::atomic<double> loss_sum{0.0};       // the workers' progressive logloss, summed over samples
  std::atomic<uint64_t> steps_skipped{0};  // --on-nan skip
  std::string last_skip;                   // guarded by mutex
  std::atomic<uint64_t> gradient_alerts{0};
  GradientAlert last_gradient_alert;  // guarded by mutex
  std::atomic<uint64_t> updates_not_finite{0};
  std::string last_update_not_finite;  // guarded by mutex
  // Live metrics (monitor/ps_metrics.h) the actors record; null: none.
  std::shared_ptr<monitor::Registry> metrics;
  // The timeline the actors record their spans into (`--timeline`); null: none.
  std::shared_ptr<monitor::TimelineRecorder> timeline;
  // Load, for the driver's alerts (monitor/alerts.h) and a member daemon's heartbeats, where
  // the driver sized these before the actors started: each worker's busy
  // nanoseconds and steps, by slot (worker_slot maps its node id), and each shard's rows served
  // (pulled and pushed), rows pulled and the memory its rows hold (RowStore::memory_bytes), by
  // shard index.
  std::map<NodeId, size_t> worker_slot;
  std::deque<std::atomic<uint64_t>> worker_busy_ns, worker_steps, shard_rows, shard_rows_pulled,
      shard_bytes;
  // Tests (a straggler): the worker in this slot sleeps slow_ms after each of its steps.
  size_t slow_slot = 0;
  uint32_t slow_ms = 0;
  // Tests (a slow disk): each shard takes slow_summary_ms more to summarize itself.
  uint32_t slow_summary_ms = 0;
  std::mutex mutex;
  Status first_error;  // guarded by mutex
  void fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mutex);
    if (first_error.ok()) first_error = s;
  }
  // A worker skipped `count` more steps, the last of them for `why`.
  void skipped(uint64_t count, const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    last_skip = why;
    steps_skipped += count;
  }
  // A worker raised `count` more gradient alerts, the last of them `alert`.
  void gradient_alerted(uint64_t count, const GradientAlert& alert) {
    std::lock_guard<std::mutex> lock(mutex);
    last_gradient_alert = alert;
    gradient_alerts += count;
  }
  // A shard refused `count` more row updates as not finite, the last of them `what`.
  void updates_refused(uint64_t count, const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    last_update_not_finite = what;
    updates_not_finite += count;
  }
  ClusterProgress progress() {
    ClusterProgress p;
    {
      std::lock_guard<std::mutex> lock(mutex);
      p.last_skip = last_skip;
      p.last_gradient_alert = last_gradient_alert;
      p.last_update_not_finite = last_update_not_finite;
    }
    p.updates_not_finite = updates_not_finite.load();
    p.gradient_alerts = gradient_alerts.load();
    p.samples = samples.load();
    p.loss_sum = loss_sum.load();
    p.steps_skipped = steps_skipped.load();
    for (size_t w = 0; w < worker_busy_ns.size(); ++w) {
      p.load.worker_busy_s.push_back(double(worker_busy_ns[w].load()) * 1e-9);
      p.load.worker_steps.push_back(worker_steps[w].load());
    }
    for (size_t s = 0; s < shard_rows.size(); ++s) {
      p.load.shard_rows.push_back(shard_rows[s].load());
      p.load.rows_memory_bytes += double(shard_bytes[s].load());
    }
    return p;
  }
};

// Sends every message of `out` to its node's actor (in order) and clears `out`. The observer,
// when set, sees each message first.
void route(JobShared& shared, Outbox& out);

// The batches of one worker: w, w+W, w+2W, ... of every epoch.
class WorkerSource {
 public:
  WorkerSource(const ClusterJob& job, uint32_t index, uint32_t count)
      : job_(job), index_(index), count_(count) {
    options_ = job.reader;
    options_.batch_rows = job.batch;
  }
  Expected<bool> next(Batch& out) {
    if (stopping_.load()) return false;
    while (true) {
      if (!reader_) {
        if (epoch_ >= job_.epochs) return false;
        ++epoch_;
        position_ = 0;
        if (job_.memory) {
          reader_ = make_memory_reader(job_.memory, job_.batch, job_.reader.holdout);
        } else {
          auto r = open_reader(job_.data, options_);
          if (!r) return r.status();
          reader_ = std::move(r.value());
        }
      }
      auto more = reader_->next(out);
      if (!more) return more.status();
      if (!*more) {
        stats_ = reader_->stats();
        reader_.reset();
        continue;
      }
      if (position_++ % count_ == index_) return true;
    }
  }
  const ReaderStats& last_stats() const { return stats_; }
  // From any thread: hand out no more batches (a worker drained on SIGTERM).
  void stop() { stopping_ = true; }

 private:
  const ClusterJob& job_;
  uint32_t index_, count_;
  ReaderOptions options_;
  int epoch_ = 0;
  uint64_t position_ = 0;
  std::unique_ptr<BatchReader> reader_;
  ReaderStats stats_;
  std::atomic<bool> stopping_{false};
};

// The primary side of a replicated shard (ps/replication.h), kept by the shard's actor: the
// primary over the actor's core, and the nodes of its backups in the primary's numbering.
struct ShardReplication {
  std::unique_ptr<ShardPrimary> primary;
  std::vector<NodeId> backups;
  // A promoted backup's own node: its last acknowledgements, meant for the lost primary, are
  // routed here once this shard serves in its place, and are dropped (no lie).
  std::optional<NodeId> promoted_from;
  // Backups placed on a ps that rejoined (add_backup), by node: the proxy that reaches each.
  std::map<NodeId, caf::actor> placed = {};
};
// Rows a part of a copy to a new backup carries (send_copy).
inline constexpr size_t replica_copy_rows_per_part = 8192;

// A shard: each message to its core (with `replication`, to its primary, whose forwards go to
// the backups' nodes and whose replies wait for their acknowledgements), the replies routed.
shard_actor::behavior_type shard_fun(shard_actor::stateful_pointer<shard_state> self,
                                     std::shared_ptr<ShardCore> core,
                                     std::shared_ptr<JobShared> shared,
                                     std::shared_ptr<ShardReplication> replication);

// A backup of a replicated shard, node `id`: applies its primary's forwards in order and
// acknowledges each to the primary (the forward's sender). A forward it cannot apply (one lost on
// the way, or a lie from the primary's member) fails the job: the backup can no longer follow.
// With `copy` instead of `backup` (a backup placed on a ps that rejoined) it first takes its
// primary's copy (ReplicaCopy parts, in order) and hands the backup it built to
// JobShared::backup_copied; a part it cannot take, a forward before the copy is complete or a copy
// it does not wait for fails the same way.
backup_actor::behavior_type backup_fun(backup_actor::stateful_pointer<backup_state> self,
                                       std::shared_ptr<ShardBackup> backup,
                                       std::shared_ptr<BackupCopy> copy,
                                       std::shared_ptr<JobShared> shared, NodeId id);

// A worker replica: on `start` and after every reply, hands batches from `source` to its core
// while the core wants them, sends what the core produced, and reports to `coordinator` once
// (done_atom with an ok Status when done, the error otherwise).
worker_actor::behavior_type worker_fun(worker_actor::stateful_pointer<worker_state> self,
                                       std::shared_ptr<WorkerCore> core,
                                       std::shared_ptr<WorkerSource> source,
                                       std::shared_ptr<JobShared> shared,
                                       coordinator_actor coordinator, NodeId id);

aggregator_actor::behavior_type aggregator_fun(
    aggregator_actor::stateful_pointer<aggregator_state> self, std::shared_ptr<AggregatorCore> core,
    std::shared_ptr<JobShared> shared, coordinator_actor coordinator, NodeId id);

// The configuration must outlive the system (the system keeps a reference to it).
struct SystemConfig : caf::actor_system_config {
  SystemConfig(size_t threads, bool eager_polling, bool deterministic = false) {
    if (deterministic) {
      set("scheduler.policy", caf::atom("testing"));
      return;
    }
    if (threads > 0) set("scheduler.max-threads", threads);
    if (eager_polling) return;
    // CAF's idle scheduler threads poll for work for a while before they sleep (100
    // aggressive then 500 moderate attempts by default), which burns CPU that the workers'
    // model math needs on a small machine. Measured with `colony bench cluster`: polling once
    // per phase cut CPU per sample by about a tenth at the same throughput.
    set("work-stealing.aggressive-poll-attempts", size_t{1});
    set("work-stealing.moderate-poll-attempts", size_t{1});
    set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::milliseconds(1)});
  }
};

}  // namespace colony
