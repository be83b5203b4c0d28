// An embedded cluster: PS shards, worker replicas, a node aggregator and a coordinator as CAF
// actors in one process, each actor wrapping the sans-I/O core that decides what it does.
// `colony train` runs on it.
//
// Layout: node ids 0..S-1 are the shards, S..S+W-1 the workers, then the aggregators (one per
// group of `replicas_per_node` workers, hierarchical push only). Worker w trains on batches
// w, w+W, w+2W, ... of each epoch, so together the workers make one pass per epoch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/reader.h"
#include "ps/cluster_protocol.h"
#include "ps/protocol.h"
#include "storage/store_spec.h"
#include "worker/gradient_alert.h"
#include "worker/train_job.h"
#include "worker/trainer.h"

namespace colony {

namespace monitor {
class Registry;
class TimelineRecorder;
}  // namespace monitor
class WorkerCore;

enum class PushMode { flat, hierarchical };
Expected<PushMode> parse_push_mode(const std::string& text);
const char* to_string(PushMode mode);
// --dense-sync: "every:K", K in 1..dense_sync_every_max (JobSpec::dense_sync_every);
// invalid_input saying what is accepted otherwise.
inline constexpr uint32_t dense_sync_every_max = 1000000;
Expected<uint32_t> parse_dense_sync(const std::string& text);

struct ClusterOptions {
  uint32_t shards = 1;
  uint32_t workers = 1;
  Consistency consistency;  // BSP by default
  PushMode push = PushMode::flat;
  uint32_t replicas_per_node = 0;  // hierarchical group size; 0 = all workers form one node
  size_t max_inflight = 2;         // steps with pulls outstanding per worker
  // Batches each worker hints to the shards ahead of its pulls (WorkerConfig::
  // read_ahead_batches): 0..read_ahead_batches_max.
  uint32_t read_ahead_batches = 0;
  size_t threads = 0;  // CAF scheduler threads; 0 = one per core
  // Where the shards keep their rows (memory, or DIR/shard-<i> on RocksDB, tiered with a
  // cache). A store left by an earlier run of the same job is continued; one written by
  // another job (see store_fingerprint) is refused. A deep model's dense layers and their
  // optimizer state are saved in DIR/dense.bin when the job ends and continued from it (a store
  // with rows but without it is refused).
  StoreSpec store;
  uint32_t admit_after = 0;  // feature admission (ShardConfig::admit_after)
  uint32_t evict_after = 0;  // row eviction (ShardConfig::evict_after)
  // Checkpoints every this many steps (0: none) under checkpoint_dir (default: DIR/checkpoints
  // for a store on RocksDB), laid out as storage/checkpoint.h says. Shard i copies its store
  // when its slowest sender's clock reaches a multiple (ShardCore::checkpoint_due); the step's
  // manifest is written when the last shard has (and, for a deep model, once the first
  // replica's dense layers of that step are in the step's dense.bin).
  uint32_t checkpoint_every = 0;
  std::string checkpoint_dir;
  // A deep model's dense layers: all-reduced every step (1) or averaged every K steps
  // (JobSpec::dense_sync_every). With more than one worker they need hierarchical push.
  uint32_t dense_sync_every = 1;
  // How rows travel and are kept (JobSpec::formats): a row or state format other than fp32
  // needs the memory store (storage/compact_store.h).
  ValueFormats formats{};
  // Tests (recovery): once shard `restart_shard` has applied this many pushes (0: never), its
  // core is replaced by one over the newest complete checkpoint, as after a crash and restart:
  // the updates since that checkpoint are lost (counted), the senders' clocks carry on, and
  // the pulls it held are handed to the new core (the workers' re-sent pulls).
  uint64_t restart_after_pushes = 0;
  uint32_t restart_shard = 0;
  // Tests: worker `poison_worker` (0-based) makes NaN gradients at step `poison_step` (the
  // clock its push carries; 0: never), as a diverging model would (WorkerConfig::poison_step).
  uint32_t poison_worker = 0;
  uint32_t poison_step = 0;
  // Faults (`colony train --fault-slow-worker W:MS`): worker `slow_worker` (0-based) sleeps
  // `slow_ms` milliseconds after each of its steps, a straggler (0: none).
  uint32_t slow_worker = 0;
  uint32_t slow_ms = 0;
  // Tests: when non-zero, no threads at all: CAF's test scheduler runs one message at a time,
  // and which actor runs next is drawn from this seed, so every interleaving the mailboxes
  // allow can come up, and each one can be replayed.
  uint64_t deterministic_seed = 0;
  // Live metrics (monitor/ps_metrics.h): the shards' and workers' actors record into it as they
  // run. Null: none recorded.
  std::shared_ptr<monitor::Registry> metrics;
  // A timeline (`--timeline`, monitor/timeline_recorder.h): the actors record their spans into
  // it (read, compute, pull wait and push by workers; serve, apply and gate wait by shards;
  // aggregate by node aggregators). Null: none recorded.
  std::shared_ptr<monitor::TimelineRecorder> timeline;
};

struct ClusterJob {
  TrainerConfig trainer;
  ClusterOptions cluster;
  size_t batch = 512;
  int epochs = 1;
  std::string data;                                  // training file, or
  std::shared_ptr<const std::vector<Batch>> memory;  // generated batches (when set)
  ReaderOptions reader;                              // batch_rows is overridden by `batch`
  // Tests: called with every message any actor sends, before it is sent (from the actors'
  // threads; with deterministic_seed, from run's thread only).
  std::function<void(const Outgoing&)> observer;
};

// The job as the daemons are told it (ps/cluster_protocol.h): what every core is wired from.
JobSpec job_spec(const ClusterJob& job);

struct ClusterResult {
  WorkerCounters counters;        // the worker cores' (pushes: what the shards received)
  uint64_t pulls_deferred = 0;    // pulls a shard held back for the consistency gate
  uint64_t pushes_applied = 0;    // by the shards
  uint64_t pushes_duplicate = 0;  // retries the shards recognised and did not apply
  bool read_from_cache = false;
  uint64_t model_rows = 0;
  uint64_t model_bytes = 0;      // of rows held in memory by the shards' stores
  uint64_t table_bytes = 0;      // rows times a row's bytes (parameters and optimizer state)
  uint64_t updates_dropped = 0;  // pushed rows dropped: key not admitted yet
  uint64_t rows_evicted = 0;     // rows removed for not being updated for evict_after steps
  // The stores' (StoreStats; tiered: rows found in memory or not, and rows read ahead).
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t rows_read_ahead = 0;
  uint64_t pull_hints = 0;   // workers' PullHints the shards took (ShardStats::hints)
  uint64_t checkpoints = 0;  // complete checkpoints (manifests written)
  uint32_t last_checkpoint_step = 0;
  uint64_t shard_restarts = 0;
  uint64_t updates_lost = 0;  // pushed rows applied after the checkpoint a restart went back to
  // A deep model's final dense parameters (worker/worker_core.h latest_dense) and each replica's
  // WorkerCore::dense_digest(): equal digests, replicas equal after every all-reduce.
  std::vector<float> dense{};
  std::vector<uint64_t> dense_digests{};
};

// How a running job goes, summed over its workers.
struct ClusterProgress {
  uint64_t samples = 0;                 // trained so far
  double loss_sum = 0.0;                // their progressive logloss, summed
  uint64_t steps_skipped = 0;           // for a gradient that was not finite (--on-nan skip)
  std::string last_skip{};              // what the last of those made (WorkerCore::last_skip)
  uint64_t gradient_alerts = 0;         // exploding or vanishing gradients (WorkerCore)
  GradientAlert last_gradient_alert{};  // the last of those
  // Row updates the shards refused as not finite (ShardStats::updates_not_finite), and the
  // last of them ("shard 1: key 77 from node 3 at step 12").
  uint64_t updates_not_finite = 0;
  std::string last_update_not_finite{};
  JobLoad load{};  // for alerts
};

class EmbeddedCluster {
 public:
  // Fails with invalid_input for bad options (0 shards or workers, a bad optimizer setting).
  static Expected<std::unique_ptr<EmbeddedCluster>> make(const ClusterJob& job);
  ~EmbeddedCluster();

  // Runs the whole job; `progress` is called a few times a second from the calling thread, and
  // once more when the workers are done.
  // Fails with the first error any actor met (a reader's invalid_input naming file and line, a
  // refused request). Call once.
  Expected<ClusterResult> run(const std::function<void(const ClusterProgress&)>& progress);

  // After run: each sample's logit under the shards' final weights (and a deep model's final
  // dense layers).
  Status predict(const Batch& batch, std::vector<float>& logits);
  // After run: the final parameters of `key` (its initial row when never touched). Asserts
  // that the shard's store can be read (tests).
  void row_value(uint64_t key, std::span<float> out) const;
  // The first error of run or predict (a shard's store failing during evaluation).
  Status error() const;

 private:
  struct Impl;
  explicit EmbeddedCluster(std::unique_ptr<Impl> impl);
  ClusterResult collect() const;
  // A deep model's final dense layers: of the replica latest_dense picks.
  const WorkerCore& final_dense_replica() const;
  std::span<const float> final_dense() const;
  Expected<ClusterResult> finish();
  std::unique_ptr<Impl> impl_;
};

// The identity a job's shard stores are written under: the model, its width, the optimizer
// and the seed (rows trained under other settings are not this job's rows).
std::string store_fingerprint(const TrainerConfig& trainer);

// `colony train` on the embedded cluster: the same options, data, evaluation and report as
// run_train_job (the single-process trainer), with the training done by the cluster. The
// cluster runs all epochs in one go, so the test set is evaluated once, at the end.
Expected<TrainJobResult> run_cluster_train_job(
    const TrainJobOptions& options, const ClusterOptions& cluster,
    const std::function<void(const TrainProgress&)>& progress);

// `colony bench ps`: pull+push round trips between a client and one shard actor, in
// process, with Zipf-skewed keys. Each round trip pulls `keys_per_request` rows of `width`
// floats and pushes as many gradients back (applied with SGD). Returns the seconds taken for
// `round_trips` round trips after a warm-up.
struct PsBenchFigure {
  double seconds = 0.0;
  uint64_t rows = 0;   // rows pulled plus rows pushed
  uint64_t bytes = 0;  // keys and rows the pulls carry, and the pushes' gradients
};
Expected<PsBenchFigure> measure_ps_round_trips(size_t width, size_t keys_per_request,
                                               uint64_t round_trips, uint64_t seed);

}  // namespace colony
