// The control protocol between the coordinator and the member processes of a cluster (`colony
// ps`, `colony worker`): joining, the layout the coordinator hands out, start, heartbeats, the
// end of the job. Plain structs, like ps/protocol.h; actors/envelope.h puts them on the wire.
//
// A member is one process. It joins with the node cores it can host (a ps: shards; a worker:
// replicas, plus a node aggregator under hierarchical push); once every expected member has
// joined, the coordinator numbers the nodes and sends every member a Welcome with the whole
// layout, so members can reach each other directly. Members answer Ready once their cores are
// built; the coordinator then sends Start to the workers. Both sides send Heartbeats; a member
// silent for the heartbeat timeout is lost (see ps/coordinator_core.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ps/optimizer.h"
#include "ps/protocol.h"
#include "ps/shard_map.h"
#include "storage/checkpoint.h"
#include "storage/dense_file.h"
#include "storage/store_spec.h"

namespace colony {

enum class MemberRole : uint8_t { ps = 0, worker = 1 };
const char* to_string(MemberRole role);

// Everything a member needs to build its cores the way the coordinator was told to train.
struct JobSpec {
  uint8_t model = 1;  // ModelKind (models/model.h): 0 lr, 1 fm, 2 deepfm, 3 dlrm, 4 dcn
  uint32_t dim = 8;
  OptimizerConfig optimizer;
  uint64_t seed = 1;
  float factor_init_std = 0.01f;
  uint32_t batch = 512;
  uint32_t epochs = 1;
  Consistency consistency;
  bool hierarchical = false;  // push through a node aggregator per worker member
  uint32_t max_inflight = 2;
  uint64_t skip_bad_lines = 0;
  bool use_cache = true;
  // The shards' row policies (ShardConfig): admission after this many pulls of a key (0, 1:
  // every key), eviction of rows not updated for this many steps (0: never), a checkpoint of
  // every shard every this many steps (0: none; a ps writes it under its --checkpoint-dir).
  uint32_t admit_after = 0;
  uint32_t evict_after = 0;
  uint32_t checkpoint_every = 0;
  // Deep models (models/model.h ModelSpec; ps/ keeps them as plain numbers): field slots, dense
  // features per sample, hidden layer sizes, cross layers; the dense optimizer
  // (models/dense_optimizer.h: kind 0 adam, 1 adamw, 2 sgd with momentum) and its settings.
  uint32_t fields = 1;
  uint32_t dense = 0;
  std::vector<uint32_t> mlp{};
  std::vector<uint32_t> bottom{};
  uint32_t cross_layers = 3;
  uint8_t dense_optimizer = 0;
  float dense_lr = 1e-3f;
  float dense_beta1 = 0.9f;
  float dense_beta2 = 0.999f;
  float dense_eps = 1e-8f;
  float dense_weight_decay = 0.0f;
  float dense_momentum = 0.9f;
  // How the replicas keep their dense parameters equal: 1, an all-reduce of the gradients every
  // step; K > 1, each replica steps on its own gradients and the replicas average their
  // parameters every K steps and once more when they finish (DenseReduce).
  uint32_t dense_sync_every = 1;
  // What a shard's acknowledgement of a push promises (--durability); none given: each ps
  // store's default, none for memory and log on disk.
  std::optional<Durability> durability{};
  // --on-nan skip: a worker skips a step whose gradients are not all finite (WorkerConfig::
  // skip_not_finite); false: the job fails at the first.
  bool skip_not_finite = false;
  // How rows travel and are kept: a compact row or state format is refused by a ps member with
  // a store on disk.
  ValueFormats formats{};
  // Batches each worker hints to the shards ahead of its pulls (WorkerConfig::
  // read_ahead_batches, --read-ahead-batches): 0..read_ahead_batches_max.
  uint32_t read_ahead_batches = 0;
  // Replicas of each shard (--durability replicated:K, ps/replication.h): 1..shard_replicas_max,
  // at most the ps members (ClusterLayout places them); 1 replicates nothing.
  uint32_t replicas = 1;
  bool operator==(const JobSpec&) const = default;
};
inline constexpr uint32_t shard_replicas_max = 8;

struct MemberInfo {
  MemberRole role = MemberRole::ps;
  std::string endpoint;    // where the member's own socket listens, e.g. tcp://10.0.0.2:7101
  std::string public_key;  // its CURVE public key in Z85; empty on an --insecure cluster
  uint32_t count = 1;      // shards (ps) or worker replicas (worker) it hosts
  std::string data;        // a worker's --data path (the coordinator compares them)
  bool durable = false;    // a ps whose shards keep their rows on disk: it may restart and rejoin
  // Chosen anew by each start of the member's process: a Join with the same key (or, on an
  // --insecure cluster, the same endpoint) and another incarnation is the member restarted.
  uint64_t incarnation = 0;
  std::string store = {};  // a ps's row store (its --store), for reports
  // A ps started with --resume-from: the checkpoint step its shards start from (0: none). Every
  // ps member of a job must start from the same one.
  uint32_t resumed_from = 0;
  // Assigned by the coordinator (in Welcome):
  NodeId first_node = 0;  // its cores are nodes first_node .. first_node + count - 1
  bool has_aggregator = false;
  NodeId aggregator = 0;  // its node aggregator (hierarchical push)
  bool operator==(const MemberInfo&) const = default;
};

struct Join {
  MemberInfo member;  // the assigned fields are ignored
};

// Where a node of the layout is served from, when no longer where the layout first placed it:
// a shard a failover moved (ShardsMoved), a backup placed on a ps that rejoined (BackupsPlaced).
struct NodePlacement {
  NodeId node = 0;
  uint32_t member = 0;
  bool operator==(const NodePlacement&) const = default;
};

struct Welcome {
  uint32_t you = 0;                 // the receiver's index in `members`
  std::vector<MemberInfo> members;  // every member, in join order
  JobSpec job;
  ShardMapSpec map;
  NodeId coordinator_node = 0;  // the coordinator's own node id (it pulls to evaluate)
  uint32_t workers_total = 0;   // worker replicas in the cluster
  // True when every worker member named the same --data: replica g of W trains on batches
  // g, g+W, ...; false: each member's replicas split its own file among themselves.
  bool split_data = true;
  uint32_t heartbeat_ms = 1000;
  uint32_t heartbeat_timeout_ms = 10000;
  // To a ps that restarted and rejoined: reopen the shards' stores (they must exist) and wait
  // for every peer to resync (ShardCore::begin_resync).
  bool resume = false;
  // To a ps that rejoins a replicated job (JobSpec::replicas K > 1) after its shards failed
  // over: it serves no shard, and builds the backups the layout places on it (backup_nodes_of),
  // each empty until its primary sends it a copy (ReplicaCopy). `placed` is every move of a node
  // since the layout was first placed, in the order made (ClusterLayout::make replays them).
  bool backups_only = false;
  std::vector<NodePlacement> placed = {};
};

struct Ready {};
struct Start {};

// Counts of a histogram kept by a member (monitor/registry.h Histogram): observations per
// bucket, not cumulative, the last bucket +Inf's, and the observations' sum. The bucket bounds
// are fixed by the protocol: load_staleness_buckets and load_latency_buckets count them.
struct LoadHistogram {
  std::vector<uint64_t> counts{};
  double sum = 0.0;
  bool operator==(const LoadHistogram&) const = default;
};
// Read staleness: at most 0, 1, 2, 4, ..., 64 steps behind, and more (monitor/ps_metrics.h).
inline constexpr size_t load_staleness_buckets = 9;
// Pull and push latency: at most 50 us, 100 us, ... (16 doublings to 1.6 s), and more.
inline constexpr size_t load_latency_buckets = 17;
// The most hot keys a ps member lists for one of its shards.
inline constexpr size_t load_hot_keys_per_shard_max = 16;

// One of a shard's most-pulled keys, as a ps member's sketch estimates it (monitor/hot_keys.h).
struct LoadHotKey {
  uint32_t shard = 0;  // the shard's position in MemberLoad::shards
  uint64_t key = 0;
  uint64_t pulls = 0;  // estimated pulls since the process started
  bool operator==(const LoadHotKey&) const = default;
};

// What a member process is doing, sent by `colony ps` and `colony worker` with each heartbeat
// for the coordinator's load alerts (monitor/alerts.h) and dashboard. Counters are totals since
// the process started; a worker member fills busy_ns and steps (one entry per replica it
// hosts) and its replicas' staleness and latency histograms, a ps member `shards` (the shard
// nodes it serves: those it was placed with, and any it took over in a failover, in node order),
// rows_served and rows_pulled (one entry per shard of `shards`), rows_memory_bytes and its
// shards' hot keys. A histogram, rows_pulled or hot_keys may be empty (nothing counted). The
// coordinator refuses a load that does not fit the member's role and count or the shards it
// serves, or whose counters went down (CoordinatorCore::on_message).
struct MemberLoad {
  uint64_t rss_bytes = 0;               // resident memory of the process
  uint64_t rows_memory_bytes = 0;       // a ps: memory its stores hold for the rows
  std::vector<uint64_t> busy_ns{};      // a worker: nanoseconds each replica spent on its steps
  std::vector<uint64_t> steps{};        // a worker: steps each replica has taken
  std::vector<uint64_t> rows_served{};  // a ps: rows each shard has served (pulled and pushed)
  // A worker, over its replicas: how many steps behind the slowest sender each read was, and
  // the seconds from each pull and push to its reply.
  LoadHistogram staleness{}, pull_latency{}, push_latency{};
  std::vector<uint64_t> rows_pulled{};  // a ps: rows each shard sent in answer to pulls
  // A ps: each shard's most-pulled keys (at most load_hot_keys_per_shard_max a shard), each
  // a key of that shard.
  std::vector<LoadHotKey> hot_keys{};
  std::vector<NodeId> shards{};  // a ps: what its by-shard entries describe, in node order
  bool operator==(const MemberLoad&) const = default;
};

struct Heartbeat {
  uint64_t samples = 0;  // a worker member's samples trained so far
  // A member daemon's load (none from the coordinator, nor from the simulator's members).
  std::optional<MemberLoad> load{};
};

// What worker cores did, summed over cores, processes and members: the one set of training
// counters every summary and report is built from (MemberDone carries a member's; the
// coordinator, the embedded cluster and the simulator sum them; worker/counters.h reads the
// cores' own). A new counter is a field here, its line in operator+=, the code that counts it,
// and its place in the wire codec (actors/envelope.cpp) and the reports that print it.
struct WorkerCounters {
  uint64_t samples = 0;
  double loss_sum = 0.0;  // progressive logloss summed over the samples trained
  uint64_t steps = 0;
  uint64_t pull_messages = 0;
  uint64_t push_messages = 0;  // to the shards (by the aggregator under hierarchical push)
  uint64_t push_bytes = 0;     // keys and gradients in those pushes
  uint64_t bad_lines_skipped = 0;
  uint64_t pushes_resent = 0;    // to restarted shards (KvClient::resync)
  uint64_t replies_dropped = 0;  // replies the clients could not match to a request
  uint64_t bad_messages = 0;     // messages a process dropped as malformed, misaddressed or forged
  double cpu_seconds = 0.0;      // user + system CPU of the processes while training
  uint64_t steps_skipped = 0;    // steps skipped for a gradient that was not finite (--on-nan)
  // Keys in the pulls to the shards and rows in their replies (by the aggregator under
  // hierarchical push), as bytes on the wire.
  uint64_t pull_bytes = 0;
  WorkerCounters& operator+=(const WorkerCounters& o) {
    samples += o.samples;
    loss_sum += o.loss_sum;
    steps += o.steps;
    pull_messages += o.pull_messages;
    push_messages += o.push_messages;
    push_bytes += o.push_bytes;
    pull_bytes += o.pull_bytes;
    bad_lines_skipped += o.bad_lines_skipped;
    pushes_resent += o.pushes_resent;
    replies_dropped += o.replies_dropped;
    bad_messages += o.bad_messages;
    cpu_seconds += o.cpu_seconds;
    steps_skipped += o.steps_skipped;
    return *this;
  }
  bool operator==(const WorkerCounters&) const = default;
};

// A worker member's cores are all done (or one failed, or it drained after SIGTERM).
struct MemberDone {
  std::string error;     // empty: success
  bool drained = false;  // stopped early on SIGTERM
  WorkerCounters counters;
  bool read_from_cache = false;  // every replica read a binary cache in its last epoch
  // A deep model's dense parameters after training: those of the member's replica that took in
  // the most dense all-reduces (`dense_steps`; a replica that ran out of batches early stops
  // taking them in). The coordinator evaluates with the reported parameters of the most steps.
  // Empty for LR and FM.
  std::vector<float> dense = {};
  uint64_t dense_steps = 0;
};

// NodesLost and ShardsRestarted change what a member may send to: the coordinator numbers them
// 1, 2, 3... in the order it sends them (`epoch`, one number per event), and a member takes one
// only when its epoch is above the last it took, so a late or repeated one never undoes a newer
// one (a NodesLost for a ps arriving again after its ShardsRestarted would stop its workers).

// Sent to every member when members were lost: messages to these nodes are dropped from now on.
struct NodesLost {
  std::vector<NodeId> nodes;
  std::string reason;
  uint64_t epoch = 0;
};

// Sent to the worker members when a restarted ps is ready again: its shard nodes take messages
// again, and every client re-sends what they may have lost (KvClient::resync).
struct ShardsRestarted {
  std::vector<NodeId> nodes;
  uint64_t epoch = 0;
};

// Failover (JobSpec::replicas K > 1): shard nodes `shards`, whose primary was lost, are now
// served by ps member `member`, which held a backup of each. Sent first to that member alone,
// which promotes its backups (ShardBackup::promote) and answers Promoted; then, once it has, to
// every other member: the shards' messages go to `member` from now on (and are taken from its
// key), and every client re-sends what the lost primary had not acknowledged (KvClient::resync),
// as to a restarted shard. Numbered with NodesLost and ShardsRestarted (`epoch`).
//
// Under K > 2 a shard may keep backups: `backups` names, to the member promoting, the other
// live backup nodes of the shards it promotes (the new primaries forward to them and send them
// what they may lack, ShardBackup::Promotion::resend); empty for every other member. Before
// that, the coordinator asked each live backup how far it applied (ReportApplied, Applied) to
// promote the most advanced, and moved the shards on the members holding the other backups
// first (a ShardsMoved, then a ReportApplied whose answer says it was taken), so that they take
// the new primary's forwards from its first.
struct ShardsMoved {
  std::vector<NodeId> shards;
  uint32_t member = 0;
  uint64_t epoch = 0;
  std::vector<NodeId> backups = {};
};

// Failover under K > 2, to a ps member: how far have these backup nodes it hosts applied their
// primary's forwards (ShardBackup::applied)? Once their primary was declared lost (NodesLost)
// nothing more from it reaches them, so the answer (Applied) is final until a ShardsMoved names
// their new primary.
struct ReportApplied {
  std::vector<NodeId> backups;
};

// The answer to ReportApplied: `applied[j]` is how far backup node `backups[j]` applied.
// `epoch`: the member's last NodesLost, ShardsRestarted or ShardsMoved taken, which shows that it
// took the one sent before the question (a detach, or the move it confirms).
struct Applied {
  std::vector<NodeId> backups;
  std::vector<uint64_t> applied;
  uint64_t epoch = 0;
};

// From a ps member that promoted its backups of `shards` (ShardsMoved): they serve as the shards.
struct Promoted {
  std::vector<NodeId> shards;
};

// Re-replication (JobSpec::replicas K > 1): backup nodes placed on a ps member that rejoined the
// job (Welcome::backups_only), sent to every other member once that member is Ready. Each takes
// the placements into its layout (ClusterLayout::place_backup); a member serving a placed
// backup's shard sends the new backup its copy (ReplicaCopy, ShardPrimary::add_backup) and
// forwards to it from then on. Numbered with NodesLost, ShardsRestarted and ShardsMoved (`epoch`).
struct BackupsPlaced {
  std::vector<NodePlacement> placed;
  uint64_t epoch = 0;
};

// From the ps member hosting them: these placed backups have their copy and follow their
// primaries; each may now be promoted.
struct BackupsCopied {
  std::vector<NodeId> backups;
};

// A member leaves on its own: stopped (SIGTERM) or failed; `reason` says why. `drained`: a ps
// stopped on purpose whose store holds all it acknowledged: its shards handled everything they
// were sent and wrote the rows their stores held only in memory to disk (MemberCore::drained),
// or a durable ps stopped before its shards were built (it served nothing); never set with an
// error.
struct Leave {
  std::string reason;
  bool drained = false;
};

// The job is over: members stop and exit (0 when `error` is empty).
struct Shutdown {
  std::string error;
};

// The coordinator has taken a join; `status` says who it still waits for.
struct Joined {
  std::string status;
};

// A join the coordinator will not take (the cluster is full, the role is unknown).
struct Refuse {
  std::string reason;
};

// Sent by the coordinator to every ps member once training is over, before it evaluates: each
// answers with ShardSummary.
struct ShardSummaryRequest {};

// A ps member's shards, summed (what the report says of the model).
struct ShardSummary {
  uint64_t table_rows = 0;
  uint64_t table_bytes = 0;        // rows x row floats x 4: values, optimizer state, stamps
  uint64_t pulls_deferred = 0;     // answered later than they arrived, because of the gate
  uint64_t rows_not_admitted = 0;  // pulled rows answered with the initial row (--admit-after)
  uint64_t updates_dropped = 0;    // pushed rows of keys not admitted
  uint64_t rows_evicted = 0;       // --evict-after
  uint64_t bad_messages =
      0;  // messages the ps process dropped as malformed, misaddressed or forged
  uint64_t memory_bytes = 0;  // memory the stores hold for the rows (tables, indexes, caches)
  double cpu_seconds = 0.0;   // user + system CPU of the ps process so far
  uint64_t pushes_lost = 0;   // acknowledged steps its restarted shards lacked (ShardStats)
  // Row updates refused because they would have made a row NaN or infinite (ShardStats).
  uint64_t updates_not_finite = 0;
  // Replication (JobSpec::replicas K > 1): the rows the member's backups hold, and digests of
  // its primaries' rows and of its backups' (ShardCore::rows_digest, summed with wrap-around);
  // rows still as they were made count in neither (a pull makes rows on the primary alone).
  // A primary counts once for each of its live backups in replicated_rows and rows_digest (a
  // failover leaves a shard, and those whose backups were on the lost member, with fewer; one
  // with none counts in neither). Every backup holds its primary's rows when, summed over the ps
  // members, backup_rows is replicated_rows and backup_digest is rows_digest (backups_equal).
  uint64_t backup_rows = 0;
  uint64_t rows_digest = 0;
  uint64_t backup_digest = 0;
  uint64_t replicated_rows = 0;
  bool backups_equal() const {
    return backup_rows == replicated_rows && backup_digest == rows_digest;
  }
  ShardSummary& operator+=(const ShardSummary& o) {
    table_rows += o.table_rows;
    table_bytes += o.table_bytes;
    pulls_deferred += o.pulls_deferred;
    rows_not_admitted += o.rows_not_admitted;
    updates_dropped += o.updates_dropped;
    rows_evicted += o.rows_evicted;
    bad_messages += o.bad_messages;
    memory_bytes += o.memory_bytes;
    cpu_seconds += o.cpu_seconds;
    pushes_lost += o.pushes_lost;
    updates_not_finite += o.updates_not_finite;
    backup_rows += o.backup_rows;
    rows_digest += o.rows_digest;
    backup_digest += o.backup_digest;
    replicated_rows += o.replicated_rows;
    return *this;
  }
  bool operator==(const ShardSummary&) const = default;
};

// From a ps member: some of its shards have checkpointed their rows at `step` (the slowest
// sender's clock reached a multiple of the job's checkpoint_every; ShardCore::checkpoint_due),
// each under its own --checkpoint-dir as storage/checkpoint.h lays it out.
struct ShardsCheckpointed {
  uint32_t step = 0;
  std::vector<ShardCheckpoint> shards;
};

// To every ps member once every shard has checkpointed `step` (and, for a deep model, the first
// worker replica has handed in its dense layers of that step): the step is complete, and each
// writes the step's dense.bin (a deep model's) and then its manifest (storage/checkpoint.h)
// listing every shard.
struct CheckpointComplete {
  uint32_t step = 0;
  std::vector<ShardCheckpoint> shards;  // by shard index, one per shard of the job
  std::optional<DenseState> dense{};    // a deep model's dense layers of `step`; none for LR, FM
};

// From the worker member that hosts the cluster's first worker replica, for a deep model whose
// job checkpoints: that replica's dense layers and their optimizer state at checkpoint step
// `state.step` (the replicas' dense layers are equal then: WorkerConfig::dense_checkpoint_every).
struct DenseCheckpointed {
  DenseState state;
};

// A deep model's dense layers to start from. From a ps member started with --resume-from, before
// its Ready: the checkpoint's dense.bin. From the coordinator to every worker member, before
// Start, once every ps member named the same one: each replica starts from them.
struct DenseStart {
  DenseState state;
};

using ControlBody =
    std::variant<Join, Welcome, Ready, Start, Heartbeat, MemberDone, NodesLost, Leave, Shutdown,
                 Refuse, Joined, ShardsRestarted, ShardSummaryRequest, ShardSummary,
                 ShardsCheckpointed, CheckpointComplete, DenseCheckpointed, DenseStart, ShardsMoved,
                 Promoted, ReportApplied, Applied, BackupsPlaced, BackupsCopied>;

// A control message and who sent it: a member's index once welcomed, or control_from_unknown
// (a joiner, or the coordinator, which is control_from_coordinator).
inline constexpr uint32_t control_from_unknown = 0xffffffffu;
inline constexpr uint32_t control_from_coordinator = 0xfffffffeu;
struct ControlMessage {
  uint32_t from = control_from_unknown;
  ControlBody body;
  // The CURVE public key (Z85) of the connection it came over, set by the receiving driver from
  // the transport (never encoded: a sender cannot choose it); empty on an --insecure cluster.
  std::string sender_key = {};
  // From a member: the sending process's incarnation (its Join's MemberInfo::incarnation), which
  // the member's driver (the daemon, the simulator) puts on every message it sends, so that what
  // a process sent before it was restarted, read after its next process joined (a restart at
  // once: the two come over different connections), is not taken for the new one's. 0: not
  // stated (the coordinator's own messages, and the core tests'), taken as the current one's.
  uint64_t incarnation = 0;
};

}  // namespace colony
