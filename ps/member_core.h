// A member of a cluster (`colony ps`, `colony worker`) as a pure state machine: the member's
// side of the control protocol of ps/cluster_protocol.h.
//
// It takes control messages from the coordinator, local events (its cores were built, a core
// finished, shards checkpointed, a signal, a local failure) and the time (milliseconds on any
// monotonic clock), and returns effects: control messages for the coordinator, what the driver
// must do to its cores (build them, start the workers, stop sending to lost nodes, resync with
// restarted shards, write a checkpoint manifest), log lines, and when the member ends. It never
// reads a clock or touches a socket; the driver calls on_timer(now) at next_deadline() or
// sooner. The daemon's member loop (actors/member_daemon.cpp) and the simulator
// (sim/full_sim.cpp) both drive it.
//
// Life of a member:
//   joining   it sends Join every join_retry_ms until the coordinator answers (Joined); after
//             join_timeout_ms without a Welcome it fails, saying whether anyone answered.
//   building  a Welcome that adds up (ClusterLayout::make) and names this member as it joined:
//             the driver builds its cores (effects.build) and calls built(); it answers Ready.
//   serving   heartbeats both ways; the workers start on Start. Coordinator silent for the
//             heartbeat timeout: the member fails. A worker member reports MemberDone once all
//             its cores are done (or one failed); the job ends with Shutdown.
//   ended     effects.exit says how (ok, or the error); nothing more is sent.
//
// Counters: the MemberDone, ShardSummary and Heartbeat this core sends carry no counters of
// its own beyond bad_messages; the driver completes them from its cores (fill_counters in the
// effects' contract) before they go out.
//
// Trust: control messages reach this core only from the coordinator's key (the driver checks
// the key). They are still not believed blindly: a Welcome that does not add up, a message out
// of place in the current phase or naming nodes outside the layout, a ShardsMoved to a member
// that holds no backup of a shard it names (or naming as the shards' other backups nodes that are
// not, or are this member's), a ReportApplied naming nodes that are not backups this ps hosts,
// a BackupsPlaced that places a backup on this member or where ClusterLayout::place_backup
// refuses it, or a NodesLost, ShardsRestarted, ShardsMoved or BackupsPlaced whose
// epoch is not after the last one taken (a late or repeated one), is
// dropped and counted in bad_messages(); one log line a minute at most says so. Nothing here
// asserts on a message's content.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ps/cluster_layout.h"
#include "ps/cluster_protocol.h"

namespace colony {

struct MemberConfig {
  MemberInfo me;  // as it joins (role, endpoint, key, count, data, durable, incarnation, store)
  uint64_t join_timeout_ms = 60'000;
  uint64_t join_retry_ms = 1'000;
  uint64_t notice_ms = 5'000;  // how often "still waiting" is logged while joining
  // A ps that writes checkpoints (it has a folder for them); others refuse CheckpointComplete.
  bool takes_checkpoints = false;
  std::string coordinator;  // its address, for messages
};

enum class MemberPhase { joining, building, serving, ended };

// What the member core asks its driver to do. The driver carries out the effects of one control
// message (on_message) before it hands the core the next: `lost`, `restarted` and `moved` are
// sets, so NodesLost, ShardsRestarted and ShardsMoved take effect in the order they came only
// that way (a ps lost again right after its restart must end up lost), and `moved` holds one.
struct MemberEffects {
  // To the coordinator, in order. The driver completes the counters of a MemberDone, a
  // ShardSummary or a Heartbeat among them from its cores before sending (their error,
  // drained and bad_messages fields are set here), and sends each in this process's name
  // (ControlMessage::incarnation: the config's me.incarnation).
  std::vector<ControlBody> control;
  // Build the cores from this layout (checked), then call built().
  std::optional<Welcome> build;
  bool start = false;             // feed the workers their first batches
  bool stop_feeding = false;      // SIGTERM on a worker: take no more batches
  bool drain = false;             // SIGTERM on a ps: let the shards finish, then call drained()
  std::vector<NodeId> lost;       // drop messages to these nodes from now on
  std::vector<NodeId> restarted;  // these shards restarted: send to them again, clients resync
  // Failover: promote this ps's backups of these shards to serve as them, then call promoted().
  // Under K > 2 the new primaries forward to `promote_backups` (each a backup node of one of
  // them, hosted elsewhere), starting with what they may lack (ShardBackup::Promotion::resend).
  std::vector<NodeId> promote;
  std::vector<NodeId> promote_backups;
  // Failover under replication: the primary of these shards was lost. Take nothing more in their
  // name (the backups here apply no more of the lost primary's forwards) until a ShardsMoved
  // names their new member (ClusterLayout::detach_shard).
  std::vector<NodeId> detach;
  // Failover under K > 2: ask these backups here how far each applied, then call applied().
  std::vector<NodeId> report_applied;
  // Re-replication: backup nodes placed on another ps member (the layout says so already, and a
  // later ShardsMoved is checked against it): their messages go there from now on, and a shard
  // served here whose backup was placed sends it its copy and forwards to it
  // (ShardPrimary::add_backup, send_copy).
  std::vector<NodePlacement> placed;
  // Failover: these shards are served by another member from now on (the layout says so
  // already): send their messages there (`restarted` names them too).
  std::optional<ShardsMoved> moved;
  // Write this step's dense.bin (a deep model's) and manifest (then ok or fail()).
  std::optional<CheckpointComplete> manifest;
  // A worker: its replicas start from these dense layers (before `start`; WorkerCore checks
  // their sizes).
  std::optional<DenseState> dense_start;
  std::optional<Status> exit;  // the member ends: ok, or why it failed
  std::vector<std::string> log;
  // Nothing to carry out.
  bool empty() const {
    return control.empty() && !build && !start && !stop_feeding && !drain && lost.empty() &&
           restarted.empty() && promote.empty() && detach.empty() && report_applied.empty() &&
           placed.empty() && !moved && !manifest && !dense_start && !exit && log.empty();
  }
};

class MemberCore {
 public:
  // Fails with invalid_input for a count outside 1..4096 or a zero join timeout or retry.
  static Expected<MemberCore> make(const MemberConfig& config, uint64_t now_ms);

  // Sends the first Join.
  void start(uint64_t now_ms, MemberEffects& out);
  // A control message from the coordinator's key.
  void on_message(const ControlMessage& message, uint64_t now_ms, MemberEffects& out);
  // Deadlines: join retries, notices and timeout; heartbeats; the coordinator's silence.
  void on_timer(uint64_t now_ms, MemberEffects& out);
  // The next time on_timer has something to do (none once ended).
  uint64_t next_deadline() const;

  // After effects.build: the cores are built (Ready), or could not be (Leave, then exit). A ps
  // started from a checkpoint of a deep model passes the checkpoint's dense layers, sent ahead
  // of its Ready (DenseStart).
  void built(const Status& status, uint64_t now_ms, MemberEffects& out,
             std::optional<DenseState> dense_start = std::nullopt);
  // A local core (worker replica or aggregator) finished, or failed with `error`. Once every
  // local one has (or one failed), MemberDone is sent; a failed or drained member then ends.
  void node_done(NodeId node, const Status& error, MemberEffects& out);
  // A worker's first replica kept its dense layers of a checkpoint step: DenseCheckpointed.
  void dense_checkpointed(DenseState state, MemberEffects& out);
  // Shards of this ps checkpointed (step, copy) pairs: ShardsCheckpointed per step.
  void checkpointed(std::vector<std::pair<uint32_t, ShardCheckpoint>> copies, MemberEffects& out);
  // SIGTERM (or SIGINT): a ps drains (effects.drain, then drained()), a worker stops taking
  // batches and ends once what it pushed is acknowledged; before the job starts it leaves.
  void stop(MemberEffects& out);
  // After effects.drain: every shard handled what it was sent; the member leaves.
  void drained(MemberEffects& out);
  // Something local failed (a core's store, writing a manifest): the member reports it and ends.
  void fail(const Status& error, MemberEffects& out);

  MemberPhase phase() const { return phase_; }
  // Once past joining: this member's index in the layout, and the layout.
  uint32_t you() const { return you_; }
  const std::optional<ClusterLayout>& layout() const { return layout_; }
  // After effects.promote: the backups serve as these shards now (Promoted to the coordinator).
  void promoted(std::vector<NodeId> shards, MemberEffects& out);
  // A ps welcomed to hold backups only (Welcome::backups_only): these backups here have their
  // copies (BackupsCopied to the coordinator).
  void backups_copied(std::vector<NodeId> backups, MemberEffects& out);
  // After effects.report_applied: how far each of those backups applied (Applied, with the
  // epoch of the last NodesLost, ShardsRestarted or ShardsMoved taken).
  void applied(Applied applied, MemberEffects& out);
  const Welcome& welcome() const { return welcome_; }
  // This process's incarnation (MemberConfig::me), for the driver to put on every message it
  // sends (ControlMessage::incarnation).
  uint64_t incarnation() const { return config_.me.incarnation; }
  bool started() const { return started_; }
  // Control messages dropped as out of place or not adding up.
  uint64_t bad_messages() const { return bad_messages_; }

 private:
  explicit MemberCore(const MemberConfig& config, uint64_t now_ms);
  void send(ControlBody body, MemberEffects& out);
  void end(Status status, MemberEffects& out);
  void on_joining(const ControlMessage& m, uint64_t now_ms, MemberEffects& out);
  void on_serving(const ControlMessage& m, uint64_t now_ms, MemberEffects& out);
  Status take_layout(const Welcome& w);
  Status check_served(const ControlMessage& m) const;
  void drop(const Status& why, uint64_t now_ms, MemberEffects& out);
  void send_done(std::string error, MemberEffects& out);

  MemberConfig config_;
  MemberPhase phase_ = MemberPhase::joining;
  uint64_t start_ms_ = 0;
  uint64_t next_join_ms_ = 0;
  uint64_t next_notice_ms_ = 0;
  bool acknowledged_ = false;
  std::string join_status_;
  Welcome welcome_;
  std::optional<ClusterLayout> layout_;
  uint32_t you_ = control_from_unknown;
  uint64_t last_heard_ms_ = 0;
  uint64_t next_heartbeat_ms_ = 0;
  bool started_ = false;
  bool draining_ = false;
  bool done_sent_ = false;
  size_t nodes_expected_ = 0;  // local replicas and aggregator that report node_done
  size_t nodes_done_ = 0;
  std::string local_error_;
  uint64_t bad_messages_ = 0;
  uint32_t last_complete_ = 0;  // the step of the last CheckpointComplete taken
  uint64_t next_drop_log_ms_ = 0;
  uint64_t membership_epoch_ =
      0;  // of the last NodesLost, ShardsRestarted, ShardsMoved or BackupsPlaced taken
};

}  // namespace colony
