// The coordinator of a cluster as a pure state machine: membership, the layout, heartbeats and
// the end of the job.
//
// It takes control messages and the time (milliseconds on any monotonic clock the driver
// chooses: the daemon's steady clock, the simulator's virtual one) and returns effects: control
// messages to members, parameter-server messages to shards, log lines, and whether the job
// has finished training or failed. It never reads a clock or touches a socket; the driver
// calls on_timer(now) at next_deadline() or sooner.
//
// Life of a job:
//   joining   members join (a ps with the shards it hosts, a worker with its replicas) until
//             the shards and replicas expected are all there. A member that joins again from
//             the same endpoint (a retry) is the same member. Every notice_ms the coordinator
//             logs who it still waits for; after join_timeout_ms it fails the job naming them.
//   starting  every member is sent a Welcome with the whole layout; the job starts (Start to
//             every worker member) once each has answered Ready.
//   running   members send heartbeats; a member silent for heartbeat_timeout_ms is lost, and so
//             is one the driver could not send a membership change (on_send_failed). A lost
//             ps member fails the job (its rows are gone), unless it joined as durable (its
//             shards keep their rows on disk): then the others are told to stop sending to its
//             nodes, and the job waits up to join_timeout_ms for it to join again from the same
//             endpoint (also one that left drained, SIGTERM, while training ran: a supervisor's
//             restart; a Leave on an error still fails the job). It gets a Welcome with `resume`
//             set; once it is Ready, the worker members get ShardsRestarted and re-send what it may
//             have lost. A lost worker member fails the job when require_all_workers; otherwise the
//             coordinator tells every shard that the lost member's senders are done (a ClockAdvance
//             to clock_done on their behalf, so the consistency gate stops waiting for them), tells
//             the other members to drop messages to its nodes, and the job goes on with the rest.
//             Under replicated:K a ps member that is lost, or leaves (SIGTERM: Leave once its
//             shards have drained), fails over instead: a member holding a backup of each of its
//             shards promotes it (ShardsMoved, Promoted) and the others re-route to it
//             (fail_over). With more than one live backup (K > 2) the most advanced is promoted,
//             and the others follow it (start_failover). A ps member whose shards failed over
//             may join again (a restarted process with its key): once no failover is under way
//             it is welcomed to hold backups only (Welcome::backups_only): each shard's backup
//             nodes that are neither live nor being copied, one a shard, are placed on it; once
//             it is Ready every other ps member is told (BackupsPlaced), the primaries send
//             the copies, and each backup counts as live once its member says it has its copy
//             (BackupsCopied). So a job that lost a ps gets its K replicas back, and outlives
//             a loss of any member again (rebackup).
//   trained   every worker member has finished (MemberDone) or been lost: training_done is set
//             once, and every ps member is asked for a ShardSummary of its shards (summed into
//             totals().shards; one that has not answered within heartbeat_timeout_ms is left
//             out, and logged). Once summaries_pending() is false, the driver evaluates the
//             model and calls finish().
//   ended     Shutdown went to every member (also after a failure).
//
// Checkpoints (the job's checkpoint_every): each ps member tells which of its shards have
// checkpointed a step (ShardsCheckpointed); for a deep model, the worker member that hosts the
// first worker replica sends that replica's dense layers of the step (DenseCheckpointed). Once
// every shard (and the dense layers) is in, every ps member is sent CheckpointComplete with the
// whole list and the dense layers, and writes the step's dense.bin and manifest. A report for a
// shard the member does not host or in a folder other than shard-<s>, dense layers from another
// member or of another shape, and either of a step that is no pending checkpoint step, are
// refused; at most checkpoint_steps_pending_max steps are pending. (A deep model's checkpoints
// stop completing once the worker member hosting the first replica is lost.)
//
// Resuming a deep model (`colony ps --resume-from`): each ps member sends the checkpoint's dense
// layers (DenseStart) before its Ready. Once every member is ready, the coordinator checks that
// every ps member sent the same ones, or none did (otherwise the job fails, naming two members
// that differ), and sends them to every worker member before Start.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ps/cluster_layout.h"
#include "ps/cluster_protocol.h"
#include "ps/protocol.h"
#include "ps/shard_map.h"

namespace colony {

struct CoordinatorConfig {
  uint32_t shards = 1;   // shards expected, over all ps members
  uint32_t workers = 1;  // worker replicas expected, over all worker members
  JobSpec job;
  ShardMapSpec map;  // its `shards` is overwritten with `shards`
  uint64_t join_timeout_ms = 60'000;
  uint64_t notice_ms = 5'000;     // how often "still waiting" is logged
  uint32_t heartbeat_ms = 1'000;  // how often members and coordinator send heartbeats
  uint32_t heartbeat_timeout_ms = 10'000;
  bool require_all_workers = false;
  // Who may join in which role: each listed CURVE public key with the one role it may take, or
  // nullopt for a key that may join as ps or worker (a `colony keygen --nodes` key). Empty (an
  // --insecure cluster): anyone reaching the socket may join, in any role.
  std::map<std::string, std::optional<MemberRole>> key_roles;
  // A deep model's dense layers (worker/wiring.h dense_shape) and how many parameters they hold;
  // empty and 0 for LR and FM. With job.checkpoint_every, a step's checkpoint completes only
  // once the first worker replica's dense layers of that step are in (DenseCheckpointed), and a
  // DenseStart must name this shape.
  std::string dense_shape{};
  uint64_t dense_params = 0;
};

// The most checkpoint steps the coordinator waits on at once (older ones are given up).
inline constexpr size_t checkpoint_steps_pending_max = 16;
// The most earlier processes of one member whose late messages the coordinator still tells
// from lies (ControlMessage::incarnation).
inline constexpr size_t past_incarnations_max = 8;

enum class CoordinatorPhase { joining, starting, running, trained, ended };

// A control message for a member, or for a joiner that is not one (a refusal).
struct ControlOut {
  std::string endpoint;    // where it listens
  std::string public_key;  // its CURVE server key (empty on an --insecure cluster)
  ControlMessage message;
  // To a joiner that is not a member (a refusal): the driver keeps no connection to it after.
  bool one_off = false;
};

struct CoordinatorEffects {
  std::vector<ControlOut> control;
  Outbox ps;                     // to shard nodes
  std::vector<std::string> log;  // lines for the operator
  bool training_done = false;    // set once, when the job reaches `trained`
  Status failed;                 // set once, when the job fails (Shutdown already queued)
  // Failover: the coordinator's own messages to these shards (evaluation pulls, clocks of lost
  // workers) go to their new member from now on.
  std::vector<ShardsMoved> moved;
  // Re-replication: backup nodes placed on a ps that rejoined (BackupsPlaced), for the driver's
  // own copy of the layout (a later ShardsMoved to that member is checked against it).
  std::vector<NodePlacement> placed;
};

// What the members reported at the end, summed.
struct CoordinatorTotals {
  // The worker members' counters, summed. Its bad_messages also counts what this core refused as
  // forged or out of place (sent with another member's key, from a lost member, a join in a role
  // its key does not have) and what the ps members dropped; its cpu_seconds the ps members' CPU
  // so far.
  WorkerCounters counters;
  uint32_t workers_lost = 0;     // worker members lost (heartbeat timeout)
  uint32_t workers_drained = 0;  // worker members that stopped early on SIGTERM
  uint32_t ps_restarts = 0;      // ps members lost and back (durable stores)
  uint32_t failovers = 0;        // promotions done: each Promoted, a member took over shards
  uint32_t backups_added = 0;    // backups copied to a ps that rejoined (BackupsCopied)
  bool read_from_cache = true;   // every worker member read binary caches in its last epoch
  uint32_t checkpoints = 0;      // steps every shard has checkpointed (the job's checkpoint_every)
  uint32_t last_checkpoint_step = 0;
  ShardSummary shards;           // the ps members' shards once training is over
  uint32_t shard_summaries = 0;  // ps members whose summary is in `shards`
  // Backups placed on a ps that rejoined whose copies were not all in when training ended: the
  // primaries count them as backups and their holder has no rows yet, so the rows are not
  // compared (the report's backups_equal is null).
  uint32_t backups_copying = 0;
};

// The members' load as their heartbeats told it (MemberLoad), for the driver's load alerts
// (monitor/alerts.h). Counters are totals since the job started, summed over the incarnations
// of a restarted member and over the members a failed-over shard was served by (saturating);
// 0 for a member that has sent none.
struct ClusterLoad {
  // By worker replica, in member order (the replicas' node ids and members alongside).
  std::vector<NodeId> worker_nodes;
  std::vector<uint32_t> worker_members;
  std::vector<double> worker_busy_s;
  std::vector<uint64_t> worker_steps;
  std::vector<uint64_t> shard_rows;         // by shard index: rows served (pulled and pushed)
  std::vector<uint64_t> shard_rows_pulled;  // by shard index: rows sent in answer to pulls
  // Over all worker members: their reads' staleness and their pulls' and pushes' latency
  // (buckets as MemberLoad's; no counts until a worker sent some).
  LoadHistogram staleness, pull_latency, push_latency;
  // Each shard's most-pulled keys, as its ps member's latest heartbeat listed them (`shard` is
  // the shard's index in the cluster), by shard.
  std::vector<LoadHotKey> hot_keys;
  // Each member that has sent a load: its latest resident memory and the memory its rows hold.
  struct Process {
    uint32_t member = 0;
    uint64_t rss_bytes = 0;
    uint64_t rows_memory_bytes = 0;
  };
  std::vector<Process> processes;
  // When the stalest counters above came: the earliest of the latest loads of the members still
  // in the job and training (the core's clock, in ms); 0 while one of them has sent none. A driver
  // comparing members' counters over a window compares them only while this is recent: a member
  // whose heartbeat comes late would otherwise look idle, and the others busy beside it.
  uint64_t oldest_load_ms = 0;
};

class CoordinatorCore {
 public:
  // Fails with invalid_input for zero shards or workers, zero heartbeat interval or a timeout
  // not above the interval.
  static Expected<CoordinatorCore> make(const CoordinatorConfig& config, uint64_t now_ms);

  // A control message from a member (`message.from` is its index, or control_from_unknown for
  // a Join). Messages that make no sense in the current phase are logged and ignored. Identity:
  // a message is taken only when `message.sender_key` is the key member `from` joined with
  // (both empty on an --insecure cluster), and a Join only when its key is its sender's and
  // may take its role (config.key_roles); anything else, and anything from a member declared
  // lost (but the first Leave: a member busy past the heartbeat timeout, logged), is counted in
  // totals().bad_messages, logged and dropped. A Join with a known key (or
  // endpoint) and a new incarnation is that member restarted: before the start it is welcomed
  // again; while running the old incarnation is lost at once (a durable ps is then welcomed
  // back to resume), without waiting for the heartbeat timeout. What the old process sent
  // (ControlMessage::incarnation), read after that Join, is logged and ignored up to its Leave
  // (so for the last past_incarnations_max processes), its Join included; a message in the name
  // of any other incarnation is a lie. A worker member restarted after it finished is refused
  // (it has nothing left to train), not lost.
  void on_message(const ControlMessage& message, uint64_t now_ms, CoordinatorEffects& out);
  // Deadlines: join timeout, notices, heartbeats to send, members to declare lost.
  void on_timer(uint64_t now_ms, CoordinatorEffects& out);
  // The driver could not hand member i (not a one-off joiner) the control message `body` it was
  // given to send (its queue stayed full, or it is gone). One that changes what the ready member
  // may send or take leaves it acting on a cluster that has moved on, and nothing later tells it
  // what it missed: it is declared lost at once, as a silent one is (under replication its shards
  // fail over; a failover waiting on it goes on without it). Those are, to a worker member, any
  // NodesLost, ShardsMoved or ShardsRestarted; to a ps member, a ShardsMoved, or under
  // replication a NodesLost naming shards or backups. Any other is logged by the driver only.
  // Nothing for a member gone already, finished (a worker whose MemberDone came), or not ready
  // (building its cores, or welcomed back: its ready deadline applies).
  void on_send_failed(uint32_t i, const ControlBody& body, uint64_t now_ms,
                      CoordinatorEffects& out);
  // The next time on_timer has something to do.
  uint64_t next_deadline() const;

  // After training_done: Shutdown to every member still there; the phase becomes ended.
  void finish(const std::string& error, CoordinatorEffects& out);

  CoordinatorPhase phase() const { return phase_; }
  const std::vector<MemberInfo>& members() const { return members_; }
  // Once past joining: the layout as members are sent it (ClusterLayout::make takes it).
  Welcome layout() const { return welcome_for(0); }
  // Whether member i was lost or has left.
  bool gone(uint32_t i) const { return state_[i].gone; }
  NodeId coordinator_node() const { return coordinator_node_; }
  const CoordinatorTotals& totals() const { return totals_; }
  uint64_t samples_reported() const;  // from the latest heartbeats and final reports
  // Once past joining (empty before): the load the members' heartbeats reported. A heartbeat
  // whose load does not fit its member (a worker's busy times and steps, one per replica, and
  // histograms of the protocol's buckets; a ps's shards, in node order, each one it serves now,
  // rows served and pulled, one per shard listed, no more pulled than served, and hot keys that
  // are keys of their shard, no key twice and at most load_hot_keys_per_shard_max a shard;
  // nothing of the other role's) or whose counters went below its last one's (or that lists a
  // shard fewer) is dropped whole, like any other lie (on_message). A shard that failed over
  // sums the rows each of its servers counted; its hot keys are its current server's.
  ClusterLoad load() const;
  // Trained, and some ps member's ShardSummary is still awaited (until its deadline).
  bool summaries_pending() const;

 private:
  struct MemberState {
    uint64_t last_heard_ms = 0;
    uint64_t load_ms = 0;  // when its latest load came
    uint64_t samples = 0;
    bool ready = false;
    bool finished = false;
    bool gone = false;
    bool awaiting_rejoin = false;  // a durable ps lost while running
    bool left = false;             // its Leave came (once declared lost, the first is taken)
    // The incarnations its current one replaced whose messages (up to each one's Leave) may
    // still be on their way: the latest past_incarnations_max, oldest first.
    std::vector<uint64_t> past_incarnations{};
    uint64_t rejoin_deadline_ms = 0;
    bool rejoining = false;  // welcomed back, not Ready yet
    // A ps rejoining a replicated job to hold backups (rebackup): welcomed with backups_only,
    // or, while `rebackup_waiting`, to be once no failover or other rebackup is under way.
    bool rebackup = false;
    bool rebackup_waiting = false;
    // The membership epoch its backups-only Welcome described: a change after it (NodesLost,
    // ShardsMoved, BackupsPlaced), which is not sent to it while it rejoins, makes its Ready a
    // loss.
    uint64_t welcome_epoch = 0;
    uint64_t ready_deadline_ms = 0;  // welcomed: building its cores until Ready (join_timeout_ms)
    bool summary_pending = false;    // a ps member asked for its ShardSummary
    // Its load: the latest of its current incarnation (`load_incarnation`), and its counters
    // summed over incarnations.
    std::optional<MemberLoad> load{};
    uint64_t load_incarnation = 0;
    std::vector<uint64_t> busy_ns_total{}, steps_total{};
    std::map<NodeId, uint64_t> rows_served_total{}, rows_pulled_total{};  // a ps: by shard node
    LoadHistogram staleness_total{}, pull_latency_total{}, push_latency_total{};
  };
  explicit CoordinatorCore(const CoordinatorConfig& config, uint64_t now_ms);
  void on_join(const Join& j, const std::string& sender_key, uint64_t now_ms,
               CoordinatorEffects& out);
  void rejoin(uint32_t i, const MemberInfo& m, uint64_t now_ms, CoordinatorEffects& out);
  // Member i, a ps whose shards failed over, joined again: it is welcomed to hold backups
  // (welcome_rebackups), at once or once no failover or other rebackup is under way.
  void rebackup(uint32_t i, const MemberInfo& m, uint64_t now_ms, CoordinatorEffects& out);
  // Welcomes the members waiting to hold backups, when nothing holds them back: places on each
  // the backup nodes no member holds (one a shard), or refuses it when there are none.
  void welcome_rebackups(CoordinatorEffects& out);
  // Whether member i is rejoining to hold backups (waiting for its Welcome, or building): the
  // membership changes are not sent to it (its Welcome or its loss covers them).
  bool rebuilding(uint32_t i) const { return state_[i].rebackup && state_[i].rejoining; }
  // From member i: its placed backups have their copies (they become live).
  void on_backups_copied(uint32_t i, const BackupsCopied& c, uint64_t now_ms,
                         CoordinatorEffects& out);
  // Why the ps members cannot start together: two that start from different checkpoint steps
  // (MemberInfo::resumed_from), named; empty when every one starts from the same (or none).
  std::string resume_steps_differ() const;
  // Member i's next process (`incarnation`) takes its place; the one it replaced is remembered
  // while its messages may still come.
  void replace_incarnation(uint32_t i, uint64_t incarnation);
  // Member i, lost, is back as process `incarnation` (replace_incarnation): welcomed again, it has
  // until the join timeout to be ready.
  void readmit(uint32_t i, uint64_t incarnation, uint64_t now_ms);
  void reject(const std::string& why, uint64_t now_ms, CoordinatorEffects& out);
  void on_checkpointed(uint32_t i, const ShardsCheckpointed& c, uint64_t now_ms,
                       CoordinatorEffects& out);
  void on_dense_checkpointed(uint32_t i, DenseState state, uint64_t now_ms,
                             CoordinatorEffects& out);
  void on_dense_start(uint32_t i, DenseState state, uint64_t now_ms, CoordinatorEffects& out);
  // Whether `step` is a checkpoint step of the job after the last complete checkpoint.
  bool pending_checkpoint_step(uint32_t step) const;
  // Whether `incarnation` is one of the processes member i's current one replaced.
  bool replaced(uint32_t i, uint64_t incarnation) const;
  // Why `state` is not this job's dense layers; empty when it is.
  std::string dense_mismatch(const DenseState& state) const;
  // Completes checkpoint step `step` once every shard, and a deep model's dense layers, are in.
  void maybe_complete(uint32_t step, CoordinatorEffects& out);
  // Every member is ready: the dense layers to start from (checked), then Start to the workers.
  void start_training(CoordinatorEffects& out);
  // The worker member that hosts the cluster's first worker replica (once welcomed).
  uint32_t first_replica_member() const;
  void welcome(CoordinatorEffects& out);
  Welcome welcome_for(uint32_t i) const;
  void lose(uint32_t i, const std::string& why, uint64_t now_ms, CoordinatorEffects& out);
  void fail(const std::string& why, CoordinatorEffects& out);
  // Replication, ps member i lost or left while training (`what` says which, as "was lost:
  // ..." or "left (...)"): the backups it held are gone (their primaries stop waiting for them:
  // NodesLost), and each shard it served, or was about to serve, fails over (start_failover);
  // fails the job when a shard has no live backup left.
  void fail_over(uint32_t i, const std::string& what, uint64_t now_ms, CoordinatorEffects& out);
  // Failover of shard s, whose primary is gone (every member detached it on NodesLost), among
  // its live backups (more than one; fail_over moves a shard with one at once): each is asked
  // how far it applied (ReportApplied, after NodesLost of epoch `lost_epoch`) and the most
  // advanced is chosen (decide).
  void start_failover(NodeId s, uint64_t lost_epoch, CoordinatorEffects& out);
  // Backup node `chosen` of shard s is to be promoted: it is spent, and this core's layout moves
  // the shard to its member, which it returns.
  uint32_t choose(NodeId s, NodeId chosen);
  // Shard s goes to its live backup `chosen` (choose): the members holding the others take the
  // move first, each answering a ReportApplied sent after it, then the chosen one promotes
  // (promote_chosen).
  void decide(NodeId s, NodeId chosen, CoordinatorEffects& out);
  // ShardsMoved of `shards` to member `host`, which holds their chosen backups, naming their
  // other live backups.
  void promote_chosen(uint32_t host, std::vector<NodeId> shards, CoordinatorEffects& out);
  // Moves the failover of shard s on once no answer it waits for is missing (a lost member's
  // never comes: fail_over takes it out).
  void advance_failover(NodeId s, CoordinatorEffects& out);
  // An Applied from member i: the answer to the oldest ReportApplied it has not answered.
  void on_applied(uint32_t i, const Applied& a, uint64_t now_ms, CoordinatorEffects& out);
  // ReportApplied for backup nodes `backups` of shard s (all on one member) to their member, whose
  // answer must show it took the message of epoch `after_epoch` sent to it before.
  void ask_applied(NodeId s, std::vector<NodeId> backups, uint64_t after_epoch,
                   CoordinatorEffects& out);
  // Member i serves `p.shards` now: every other member is told (ShardsMoved) and resyncs.
  void on_promoted(uint32_t i, const Promoted& p, CoordinatorEffects& out);
  // ClockAdvance to clock_done, as a resync, to `shards` (restarted or failed over: added to
  // shards_resynced_) for the senders of every worker member that is gone or finished (they
  // never resync themselves).
  void resync_gone_workers(const std::vector<NodeId>& shards, CoordinatorEffects& out);
  // That ClockAdvance for worker member `wm`'s senders.
  void resync_as_done(const MemberInfo& wm, const std::vector<NodeId>& shards,
                      CoordinatorEffects& out);
  void maybe_trained(uint64_t now_ms, CoordinatorEffects& out);
  void send_all(const ControlBody& body, CoordinatorEffects& out);
  std::string waiting_for() const;
  // Why member i's heartbeat load is refused; empty when it is taken.
  std::string load_refused(uint32_t i, const MemberLoad& load) const;
  void take_load(uint32_t i, const MemberLoad& load, uint64_t now_ms);
  uint32_t joined(MemberRole role) const;

  CoordinatorConfig config_;
  CoordinatorPhase phase_ = CoordinatorPhase::joining;
  std::vector<MemberInfo> members_;
  std::vector<MemberState> state_;
  NodeId coordinator_node_ = 0;
  bool same_data_ = true;
  uint64_t join_deadline_ms_ = 0;
  uint64_t next_notice_ms_ = 0;
  uint64_t next_heartbeat_ms_ = 0;
  uint64_t summary_deadline_ms_ = 0;
  CoordinatorTotals totals_;
  std::map<uint32_t, std::map<uint32_t, ShardCheckpoint>>
      checkpoints_pending_;                       // step -> shard -> its copy
  std::map<uint32_t, DenseState> dense_pending_;  // step -> the first replica's dense layers
  std::map<uint32_t, DenseState> dense_starts_;   // ps member -> its checkpoint's dense layers
  uint64_t next_reject_log_ms_ = 0;               // rejections are logged at most once a minute
  uint64_t membership_epoch_ = 0;  // NodesLost, ShardsRestarted, ShardsMoved sent (their epoch)
  std::optional<ClusterLayout> layout_;  // once welcomed; failovers move its shards
  // Replication, by shard: its backup nodes still live (their member is there, and they were
  // not promoted), in layout order.
  std::vector<std::vector<NodeId>> live_backups_;
  // Every move of a node since the layout was placed, in order (Welcome::placed): shards moved
  // by failovers, backups placed on members that rejoined.
  std::vector<NodePlacement> placed_;
  // Member -> the backups placed on it whose copy has not come yet (BackupsCopied).
  std::map<uint32_t, std::vector<NodePlacement>> copying_;
  // A failover under way, by shard.
  struct ShardFailover {
    uint64_t round = 0;  // its attempt (a new one once its chosen member is lost)
    // The attempt fails the job once past it: join_timeout_ms after its start or after the last
    // loss of a member whose answer it waited for, asking or moving (on_timer declares losses
    // first).
    uint64_t deadline_ms = 0;
    enum class Stage { asking, moving, promoting } stage = Stage::asking;
    std::map<NodeId, std::optional<uint64_t>> applied{};  // asking: each live backup's answer
    NodeId chosen = 0;                                    // moving, promoting: the backup promoted
    std::set<uint32_t> moving{};  // moving: members holding the others, yet to answer
    std::set<uint32_t> moved{};   // members that took the move already (not told again)
  };
  std::map<NodeId, ShardFailover> failovers_;
  uint64_t failover_rounds_ = 0;
  // Member -> the ReportApplied it was sent and has not answered, oldest first: each member
  // answers in order, so an answer is its oldest question's (one for an earlier round is stale).
  struct Question {
    NodeId shard = 0;
    uint64_t round = 0;
    std::vector<NodeId> backups;
    uint64_t after_epoch = 0;  // the answer's epoch must be at least this
  };
  std::map<uint32_t, std::deque<Question>> questions_;
  // Shards that restarted or failed over during the job: each waits for every sender's resync.
  std::set<NodeId> shards_resynced_;
  // Member -> the shards of each ShardsMoved it was sent and has not answered (Promoted).
  std::multimap<uint32_t, std::vector<NodeId>> promoting_;
  uint64_t rejects_unlogged_ = 0;
  // The job's shard map, made when a hot key is first checked (the simulator's members send
  // none, and a map of many shards is megabytes).
  mutable std::shared_ptr<const ShardMap> shard_map_{};
};

}  // namespace colony
