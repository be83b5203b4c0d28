// A worker's training loop as a pure state machine: batches and replies in, pulls and pushes
// out.
//
// For each batch (one step) the core deduplicates the keys (BatchIndex) and pulls their rows
// through its KvClient (one pull per shard), or under hierarchical push from its node
// aggregator (one message), which pulls for the whole node. Up to `max_inflight` steps have pulls
// out at once, so rows for batch i+1 are on their way while batch i is computed. Steps complete
// strictly in order: when every reply of the oldest step is in, the model's forward/backward
// runs on the gathered rows and the summed gradients go out, one push per shard (flat), or
// all to the node aggregator (hierarchical), which pushes for the whole group. A shard that
// gets no key of a step gets a ClockAdvance instead. Pushes are asynchronous: the next step
// does not wait for acks; the shards' consistency gate is what bounds staleness.
//
// A pull sent under an old shard map is answered with the new map; the core adopts it and
// re-sends the step's pulls. A PsError is fatal: error() reports it and the core stops.
//
// Deep models: the step's dense gradients go to the aggregator (DenseReduce) beside its sparse
// push, and the next step is computed only once the all-reduced sum has come back
// (DenseBroadcast) and been applied, so every replica computes every step with the same dense
// parameters. Pulls keep overlapping this wait.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "data/batch.h"
#include "models/dense_optimizer.h"
#include "models/model.h"
#include "ps/protocol.h"
#include "storage/dense_file.h"
#include "worker/gradient_alert.h"
#include "worker/kv_client.h"

namespace colony {

struct WorkerConfig {
  NodeId id = 0;
  ModelSpec model;
  ShardMapSpec map;
  std::vector<NodeId> shard_nodes;  // node id of shard i of the map
  // Hierarchical push: pulls and gradients go here, not to the shards.
  std::optional<NodeId> aggregator;
  size_t max_inflight = 2;  // steps with pulls outstanding at once (>= 1)
  // Read-ahead (--read-ahead-batches): batches taken beyond max_inflight. Each is hinted to the
  // shards when it is taken (its unique keys, KvClient::hint) and pulled once fewer than
  // max_inflight steps have pulls out, so a shard can read its rows in before the pull. 0: none.
  uint32_t read_ahead_batches = 0;
  // Shards may restart over durable stores: keep pushes until acknowledged (KvClient::resync).
  bool durable_shards = false;
  // How its pushes to the shards carry gradients (KvClient::Options; under hierarchical push
  // the aggregator's pushes do, and the gradients to it stay fp32 in memory), and how the
  // shards' replies to its pulls carry rows.
  ValueFormat push_format = ValueFormat::fp32;
  ValueFormat pull_format = ValueFormat::fp32;
  uint64_t error_feedback_rows = 0;  // of its pushes (KvClient::Options)
  // The largest part of a pull or push to a shard (KvClient::Options::part_bytes).
  size_t part_bytes = part_bytes_default;
  // A deep model's dense parameters (hybrid training, docs/models.md): initialised from `seed`
  // as the single-process trainer does, stepped by `dense_optimizer`, and kept equal across
  // replicas through the aggregators' all-reduce (ps/protocol.h DenseReduce): of the gradients
  // every step when dense_sync_every is 1, else of the parameters every dense_sync_every steps
  // and once more at the end (weighted by the steps each replica trained). A replica without an
  // aggregator must be the only one (dense_alone) and steps on its own gradients.
  nn::DenseOptimizerConfig dense_optimizer{};
  uint64_t seed = 1;
  uint32_t dense_sync_every = 1;
  bool dense_alone = false;
  // Checkpoints (the replica the driver chooses, 0: none): at every step S that is a multiple
  // of this, once the dense parameters hold steps 0..S-1 (after the all-reduce or the averaging
  // that completes step S-1; a multiple of dense_sync_every), a copy of them and of the
  // optimizer's state waits in take_dense_checkpoint().
  uint32_t dense_checkpoint_every = 0;
  // Start from saved dense layers and optimizer state (a checkpoint or a continued store)
  // instead of initialising from `seed`; its shape must be this model's (the driver checks
  // DenseState::shape, make() the sizes).
  std::shared_ptr<const DenseState> dense_start{};
  // A step whose gradients (rows' or dense) are not all finite (--on-nan): false stops the
  // core with an error naming the step and the key; true skips the step instead: its samples
  // are not counted, its push carries no rows (the shards see only its clock), and under a
  // gradient all-reduce it contributes nothing (0 samples). Counted in steps_skipped, described
  // by last_skip().
  bool skip_not_finite = false;
  // A trained step whose gradient norm is more than this many times the median of the
  // replica's last gradient_window_steps steps, or less than 1/this of it, raises an exploding
  // or vanishing gradient alert (stats().gradient_alerts, last_gradient_alert()), once until
  // the norm is back within the bounds. 0: never. Decided once gradient_window_min steps are in.
  double gradient_alert_ratio = 100.0;
  // Tests: the gradients of this step (the clock its push carries; 0: none) are made NaN, as a
  // diverging model's would be.
  uint32_t poison_step = 0;
};

struct WorkerStats {
  uint64_t steps = 0;
  uint64_t samples = 0;
  double loss_sum = 0.0;  // progressive logloss summed over trained samples
  uint64_t pull_messages = 0;
  uint64_t push_messages = 0;    // pushes and clock advances sent (to shards or the aggregator)
  uint64_t push_bytes = 0;       // keys and gradients in those pushes
  uint64_t pull_retries = 0;     // pulls re-sent after a shard-map update
  uint64_t replies_dropped = 0;  // replies that answered no open request (KvClient)
  uint64_t dense_syncs = 0;      // dense all-reduce results applied
  uint64_t steps_skipped = 0;    // steps skipped for a gradient that was not finite
  // The L2 norm of the last trained step's gradient (rows' and dense) over its samples.
  double grad_norm = 0.0;
  uint64_t gradient_alerts = 0;  // exploding or vanishing gradient alerts raised
  uint64_t hint_messages = 0;    // PullHints sent (read_ahead_batches)
};

class WorkerCore {
 public:
  // Fails with invalid_input for a bad map, a shard list that does not match it,
  // max_inflight == 0, a bad model shape or dense optimizer setting, dense_sync_every == 0, or
  // a deep model with neither an aggregator nor dense_alone, a dense_checkpoint_every that is
  // not a multiple of dense_sync_every, or a dense_start of other sizes than the model's.
  static Expected<std::unique_ptr<WorkerCore>> make(const WorkerConfig& config);

  // True when the driver may hand in another batch (fewer than max_inflight +
  // read_ahead_batches steps taken and not pushed, not finished, no error).
  bool wants_batch() const;
  // Starts the next step on `batch` (non-empty): sends its pulls, or, with max_inflight steps
  // pulling already, its keys as hints (the pulls go out later). Precondition: wants_batch().
  // A batch the model refuses (Model::check) stops the core with that error().
  void add_batch(Batch batch, Outbox& out);
  // No more batches: once the steps in flight are pushed, tells every receiver it is done.
  void finish(Outbox& out);
  // A reply addressed to this worker: PullReply, PushAck, ShardMapUpdate or PsError.
  void on_message(const PsMessage& message, Outbox& out);
  // These shard nodes restarted over their durable stores (requires durable_shards): re-sends
  // what they may have lost (KvClient::resync).
  void on_shards_restarted(const std::vector<NodeId>& nodes, Outbox& out);

  // Finished, every step pushed and every push acknowledged (and, for a deep model, the last
  // all-reduce applied).
  bool done() const;
  // A deep model's dense parameters (empty for LR and FM).
  std::span<const float> dense() const { return dense_; }
  // A hash chained over the dense parameters after every all-reduce applied: replicas that
  // stayed bit-identical after each all-reduce have equal digests.
  uint64_t dense_digest() const { return dense_digest_; }
  // The dense parameters and optimizer state now, at step clock() (an empty shape: the driver
  // names it). Empty parameters for LR and FM.
  DenseState dense_state() const;
  // Starts from saved dense layers and optimizer state instead (what WorkerConfig::dense_start
  // does, for a driver that learns them after make()). Fails with invalid_input for sizes other
  // than the model's, or once a step has started (then nothing changes).
  Status restore_dense(const DenseState& state);
  // A checkpoint's copy of the dense state (WorkerConfig::dense_checkpoint_every), once; each
  // copy is handed out once, oldest first.
  std::optional<DenseState> take_dense_checkpoint();
  // Out of batches with every step pushed (acks may still be due).
  bool finished() const { return done_sent_; }
  const Status& error() const { return error_; }
  uint32_t clock() const { return clock_; }
  size_t in_flight() const { return steps_.size(); }  // steps taken and not pushed
  const WorkerStats& stats() const { return stats_; }
  uint64_t pushes_resent() const { return kv_->pushes_resent(); }
  uint64_t pull_bytes() const { return kv_->pull_bytes(); }  // KvClient::pull_bytes
  // What the last skipped step made ("worker 3: step 12 made a gradient of nan for key 77");
  // empty before any.
  const std::string& last_skip() const { return last_skip_; }
  // The last gradient alert raised (empty kind before any).
  const GradientAlert& last_gradient_alert() const { return last_gradient_alert_; }

 private:
  struct Step {
    uint32_t clock = 0;
    Batch batch;
    std::vector<uint64_t> keys;   // unique keys, slot order
    std::vector<uint32_t> slots;  // per feature of the batch
    std::vector<float> rows;      // slots x width, filled by the pull
    // The pull, once sent (the first started_ steps): a KvClient ticket, or (hierarchical) the
    // request id of the PullRequest to the aggregator, answered with every row at once.
    uint64_t pull = 0;
    bool pulled = false;  // hierarchical: the aggregator's rows are in
  };

  WorkerCore(const WorkerConfig& config, std::unique_ptr<KvClient> kv,
             std::unique_ptr<Model> model);
  void complete_ready_steps(Outbox& out);
  // Sends the pulls of the steps not started, oldest first, while fewer than max_inflight are.
  void start_pulls(Outbox& out);
  // Hierarchical: the rows of one of this worker's pulls, from its aggregator.
  void on_node_rows(const PullReply& m);
  bool pulled(const Step& step) const;  // of a started step
  void push(Step& step, Outbox& out);
  // After a step's push: its dense gradients to the all-reduce, or stepped here (`skipped`:
  // the step contributes nothing).
  void sync_dense(const Step& step, bool skipped, Outbox& out);
  // Why the step's gradients may not be pushed (the first one not finite), or "" when they may.
  std::string not_finite_gradient(const Step& step, uint32_t clock) const;
  // A trained step's gradient norm (stats_.grad_norm) against the recent ones: raises alerts.
  void check_gradient_norm(uint32_t clock);
  void maybe_send_done(Outbox& out);
  void fail(Status status);
  void on_dense_broadcast(const DenseBroadcast& m, Outbox& out);
  // One dense optimizer step on dense_grads_ summed over `samples` samples.
  void step_dense(uint64_t samples);
  // The dense parameters now hold steps 0..`steps`-1: keeps a checkpoint copy when due.
  void dense_advanced(uint32_t steps);

  WorkerConfig config_;
  std::unique_ptr<KvClient> kv_;
  std::unique_ptr<Model> model_;
  size_t width_;
  BatchIndex index_;
  std::deque<Step> steps_;       // a deque: a step's rows stay put while its pull fills them
  size_t started_ = 0;           // of steps_, the oldest ones, whose pulls went out
  uint64_t next_request_ = 1;    // for messages to the aggregator
  uint32_t clock_ = 0;           // steps pushed
  uint32_t next_step_ = 0;       // clock of the next batch handed in
  uint64_t unacked_pushes_ = 0;  // pushes to the aggregator not yet acknowledged
  std::vector<KvClient::Ticket> push_tickets_;  // pushes to shards not yet acknowledged
  bool finishing_ = false;
  bool done_sent_ = false;
  std::vector<float> grads_;
  std::optional<nn::DenseOptimizer> dense_optimizer_;
  std::vector<float> dense_, dense_grads_;
  // The all-reduce this replica waits for: a step's, or clock_done's (the final averaging).
  std::optional<uint32_t> awaiting_dense_;
  uint64_t dense_digest_ = 0;
  std::deque<DenseState> dense_checkpoints_;
  Status error_;
  WorkerStats stats_;
  std::string last_skip_;
  GradientWatch gradient_watch_;
  GradientAlert last_gradient_alert_;
};

// Of `replicas` (non-empty), the first whose dense parameters took in the most all-reduces
// (WorkerStats::dense_syncs): replicas that trained to the end, since one that ran out of
// batches early stops taking them in. Its dense() is the model's final dense layers.
const WorkerCore& latest_dense(std::span<const WorkerCore* const> replicas);

}  // namespace colony
