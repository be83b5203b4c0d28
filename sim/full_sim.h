// Full numerics, internal to sim/: the real shard, worker, aggregator, coordinator and member
// cores on the virtual clock. One class, its rooms in five files:
//   full_sim.cpp        building the cores from a layout, feeding workers, handling a message
//                       (a core is a FIFO server, like an actor's mailbox), the run and its result
//   sim_transport.cpp   the modelled network: ps and control messages cross it, partitions hold
//                       them, lossy links drop, duplicate and reorder them; the fault sites that
//                       garble control messages and forge ps messages
//   sim_members.cpp     membership: the coordinator core on a host of its own, a MemberCore per
//                       member host, and what a crash is: the process dies and a new one starts
//   sim_invariants.cpp  the checker: what a shard holds by its own count, and the invariants
//   sim_replication.cpp replicated shards (SimOptions::replicas): forwards and acknowledgements
//                       between ps hosts, lost backups, a restarted shard taken from a backup
//
// Crashes run the real recovery path. A crashed host's process is gone: its cores, its member
// core, what it had queued. Only the ps's durable store survives (sim/sim_store.h: what was
// committed). The restarted process joins again with a new incarnation, as `colony ps` and
// `colony worker` do: before the start it is welcomed again; after it, a worker is lost at once
// (and refused), and a durable ps is welcomed back with `resume`, rebuilds its shards over the
// store (ShardCore::begin_resync), and the workers resync with them on ShardsRestarted
// (KvClient::resync). A replicated ps (SimOptions::replicas > 1) keeps nothing: it rebuilds
// its shards from their backups on the other ps hosts (ShardBackup::promote).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/hash.h"
#include "data/generator.h"
#include "ps/cluster_layout.h"
#include "ps/coordinator_core.h"
#include "ps/member_core.h"
#include "ps/replication.h"
#include "ps/shard_core.h"
#include "sim/network.h"
#include "sim/sim_store.h"
#include "sim/simulator.h"
#include "worker/aggregator_core.h"
#include "worker/worker_core.h"

namespace colony::sim::detail {

inline constexpr uint64_t header_bytes = 64;

enum class Role : uint8_t { shard, worker, aggregator };

struct Host {
  bool down = false;  // crashed: no process until the restart
  double slow = 1.0;
  VirtualNanos disk_full_until = 0;
  std::vector<VirtualNanos> cpu_free;  // when each CPU of the host's pool is next free
  // By node: NodesLost named it, so this host's transport drops messages to it.
  std::vector<bool> lost;
  bool exited = false;  // its member process ended (until a restart starts another)
};

// The member process of a host: its core, and the timer that drives it.
struct MemberHost {
  std::optional<MemberCore> core;  // none while the host is down
  uint32_t incarnations = 0;       // processes started on the host
  std::optional<uint32_t> index;   // its member index, once welcomed
  // Its worker cores all finished, in some incarnation: a crash after that does not undo it.
  bool trained = false;
  VirtualNanos armed_at = -1;
  uint64_t timer = 0;  // the generation of the armed timer event
  // Its process got SIGTERM (FaultKind::stop): once it exits, it is started again at this time.
  std::optional<VirtualNanos> restart_at;
};

// What the invariant checker believes a shard holds, rebuilt from the same inputs as the core.
struct ShardShadow {
  std::unordered_map<NodeId, uint32_t> clocks;
  std::unordered_map<uint64_t, uint32_t> versions;  // pushes applied per key
  // A restarted shard: until a sender's resync, nothing of it is applied.
  bool resyncing = false;
  std::unordered_map<NodeId, bool> resynced;
  void reset(const std::vector<NodeId>& senders);
  // A restart over the durable store: the clocks start over (the senders resync them, each to
  // the later of its resync and `committed`, the store's clock of it), the versions the rows
  // hold stay.
  void restart(const std::map<uint64_t, uint32_t>& committed);
  std::map<uint64_t, uint32_t> committed;
  uint32_t min_clock() const;
  // Applies a push or clock advance by the protocol's rule (next clock, or clock_done; a
  // resync sets the clock while restarting).
  void apply(const PsMessage& m);
};

struct Core {
  Role role = Role::worker;
  uint32_t host = 0, tid = 0, index = 0;  // index: shard node or global worker index
  std::unique_ptr<ShardCore> shard;
  std::unique_ptr<ShardPrimary> primary;  // over `shard`, with SimOptions::replicas > 1
  std::unique_ptr<WorkerCore> worker;
  std::unique_ptr<AggregatorCore> aggregator;
  uint32_t generation = 0;  // builds of this core (one per process that built it)
  bool dead = false;        // its process crashed: it handles nothing more
  VirtualNanos died_at = 0;
  VirtualNanos busy_until = 0;
  uint32_t batches = 0;
  bool feeding_done = false;
  bool done = false;
  VirtualNanos compute_ns = 0;
  std::vector<VirtualNanos> step_ends;
  std::unordered_map<uint64_t, uint32_t> seen_versions;  // workers: key -> last version read
  bool live() const { return !dead && (shard || worker || aggregator); }
};

// A backup of a shard (SimOptions::replicas > 1) on another ps host: backup r (1..replicas - 1)
// of shard s lives on ps host (s + r) mod ps, in slot s * (replicas - 1) + r - 1.
struct Backup {
  uint32_t shard = 0, host = 0;
  uint32_t generation = 0;            // builds of it (one per process that built it)
  std::unique_ptr<ShardBackup> core;  // none once its process died, or once promoted
  std::shared_ptr<DurableRows> rows;  // its core's store (a checker's view of its commits)
  VirtualNanos busy_until = 0;
  VirtualNanos rows_at = 0;  // rebuilt: when its copy of the rows has arrived (not promoted before)
};

struct Partition {
  std::vector<bool> a, b;  // by host
  VirtualNanos heal_at;
};

struct Lossy {
  double drop, duplicate, reorder;
  VirtualNanos end;
};

struct Flight {
  uint32_t from;
  Outgoing message;
  VirtualNanos sent_at;
  uint32_t generation;  // of the sending core: a process that died sends nothing more
};

class FullSim {
 public:
  explicit FullSim(const SimOptions& o);
  Expected<SimResult> run(const std::function<void(double)>& progress);

 private:
  // ---- full_sim.cpp ----
  VirtualNanos now() const { return q_.now(); }
  uint64_t now_ms() const { return static_cast<uint64_t>(now() / 1'000'000); }
  void mix(uint64_t a, uint64_t b) {
    hash_ = hash_combine(hash_, hash_combine(uint64_t(now()), hash_combine(a, b)));
  }
  // Every member as it joins: one per ps host (one shard each), one per worker node.
  std::vector<MemberInfo> members() const;
  MemberInfo member_info(uint32_t host) const;
  // The job every core is built from (the same as the coordinator core's, when there is one).
  JobSpec job() const;
  // Numbers the cores of a layout (a Welcome's): roles, hosts and configs, no core built yet.
  Status plan(const Welcome& welcome);
  // Builds host `host`'s cores anew (a new process); shards over their durable rows, resyncing
  // when `resume`.
  Status build_host(uint32_t host, bool resume);
  void feed(Core& c, Outbox& out);
  // `duplicate`: a copy the network made; the shard handles it, its replies are not sent.
  void process(uint32_t to, PsMessage m, bool duplicate = false);
  void mark_done(Core& c);
  // Replication: forwards from shard `shard`'s primary (of build `generation`) to its backups,
  // leaving at `at`; a forward crossing to backup slot `slot`; its arrival; the ack's crossing
  // back and arrival; a primary told its backups on `lost_host` are lost.
  void replicate(uint32_t shard, std::vector<ReplicaForward>& forwards, VirtualNanos at);
  // When a replication message of `bytes` sent now over `connection` (FIFO) arrives.
  VirtualNanos replica_transfer(uint32_t from_host, uint32_t to_host, uint64_t bytes,
                                uint64_t connection, VirtualNanos sent = -1);
  void send_forward(uint32_t shard, uint32_t generation, uint32_t slot, uint32_t backup_generation,
                    ReplicaForward f);
  void forward_arrives(uint32_t shard, uint32_t generation, uint32_t slot,
                       uint32_t backup_generation, const ReplicaForward& f);
  void send_ack(uint32_t shard, uint32_t generation, uint32_t slot, ReplicaAck ack);
  void ack_arrives(uint32_t shard, uint32_t generation, uint32_t slot, ReplicaAck ack);
  void backups_lost(uint32_t host, uint32_t lost_host);
  // The backups host `host` kept are gone (its process died or ended, or it was declared lost).
  void drop_backups_on(uint32_t host);
  // A restarted primary's shard from its most advanced live backup; fails with not_found when
  // none is left.
  Status promote(uint32_t shard);
  // Re-replication: every backup slot without a backup, on a ps host whose process is up and
  // built and whose member the coordinator has not declared lost, gets a copy of its shard's live
  // primary (ShardPrimary::add_backup); the rows cross the network before it applies a forward.
  // Called when a member is built and when one learns of a loss or a restart (a late word of an
  // earlier loss drops a new backup: it is made again).
  void rebuild_backups();
  // Pull replies and acknowledgements a replicated shard released (held for its backups).
  void released(Core& c, Outbox& out);
  void violation(std::string v);
  void timeline(std::string name, const char* cat, uint32_t host, uint32_t tid, VirtualNanos start,
                VirtualNanos duration);
  VirtualNanos step_ns(const Core& c);
  bool all_done() const { return finished_ == workers_ + aggregators_; }
  bool job_over() const { return coordinated_ ? job_over_ : all_done(); }
  // A periodic event (timers, heartbeats): the run ends when nothing else is left for long.
  void periodic(VirtualNanos at, EventQueue::Action action);

  // ---- sim_transport.cpp ----
  static std::string endpoint(uint32_t host) { return fmt::format("sim://host/{}", host); }
  static std::string key_of(uint32_t host) { return fmt::format("sim-key-{:032}", host); }
  uint32_t host_of_endpoint(const std::string& e) const;
  uint32_t host_of_node(NodeId n) const {
    return coordinated_ && n == coordinator_node_ ? coordinator_host_ : cores_[n].host;
  }
  uint32_t host_of(const HostRef& h) const;
  // When no partition separates the two hosts any more (now() when none does now).
  VirtualNanos healed_at(uint32_t a, uint32_t b) const;
  void control(uint32_t from_host, uint32_t to_host, ControlMessage m);
  // With garble_control on: a duplicate, a replay, a garbled copy or a message in another
  // member's name goes out besides `m`.
  void garble_control(uint32_t from_host, uint32_t to_host, const ControlMessage& m);
  void deliver_control(uint32_t host, ControlMessage m, bool garbled = false);
  void emit(uint32_t from, Outbox& out, VirtualNanos at);
  void send(uint32_t flight);
  // With forge_ps on: a ps message in another member's name, which the receiving bridge
  // (ClusterLayout::check_ps_message) must refuse.
  void forge_ps(uint32_t from_host, const PsMessage& m, NodeId to);
  void deliver(uint32_t to, PsMessage m, bool duplicate = false);
  void inject(const FaultEvent& e);

  // ---- sim_members.cpp ----
  void coordinator_effects(CoordinatorEffects& fx);
  void arm_coordinator();
  void member_start(uint32_t host);  // a new member process on the host joins
  void member_effects(uint32_t host, MemberEffects& fx);
  void arm_member(uint32_t host);
  // When the host's cores will have handled what they were sent (now, if idle).
  VirtualNanos host_idle_at(uint32_t host) const;
  void fill_counters(uint32_t host, ControlBody& body) const;
  void member_exit(uint32_t host, const std::string& why);
  void crash(uint32_t host);
  void restart(uint32_t host);
  // SIGTERM to a ps host's process (FaultKind::stop): its member core drains the shards, leaves
  // (Leave::drained) and exits; the host is down from then until `restart_at`, or at once if the
  // drain outlasted it. Nothing when the host has no process.
  void stop(uint32_t host, VirtualNanos restart_at);
  // The process exits once its member core has: its cores and memory are gone, as in a crash,
  // but its durable store keeps every commit (no lost log tail).
  void process_gone(uint32_t host, bool crashed);
  // Whether the coordinator has declared the member on this host lost (or it left).
  bool member_gone(uint32_t host) const {
    return coordinated_ && members_[host].index && coordinator_->gone(*members_[host].index);
  }

  // ---- sim_invariants.cpp ----
  // `in`: the message the shard handled (null: replies a replicated shard released later).
  void check_shard_output(Core& c, const PsMessage* in, const Outbox& out);
  // A replicated shard's restart from backup `rows`: every push it acknowledged must be there.
  void check_promoted(uint32_t shard, const DurableRows& rows);
  // At the end: every live backup holds its primary's rows.
  void check_replicas();
  // A shard's durable store restarts: every acknowledged push must be in it.
  void check_durable(uint32_t shard);
  // No push committed twice to a shard's store (DurableRows::take_applied_twice).
  void check_applied_once(uint32_t shard);
  // Whether the worker host's process is up, started, and has every core finished.
  bool host_trained(uint32_t host) const;
  void check_membership();
  // Every core's end: failed, finished, or excused; progress after the last fault; the
  // workers' compute into `compute`.
  void check_end(VirtualNanos& compute);

  const SimOptions& o_;
  SplitMix64 rng_;
  EventQueue q_;
  Network net_;
  std::shared_ptr<const Generator> generator_;
  ShardMapSpec map_;
  std::optional<ClusterLayout> layout_;  // once planned
  std::vector<Core> cores_;
  std::vector<ShardConfig> shard_configs_;  // by shard node
  std::vector<WorkerConfig> worker_configs_;
  std::vector<AggregatorConfig> aggregator_configs_;
  std::vector<std::shared_ptr<DurableRows>> durable_;  // by shard node: survives crashes
  // Replication (SimOptions::replicas > 1): the backups by slot, each shard's backups in its
  // primary's numbering (ShardPrimary's backup indices), and what each shard acknowledged: the
  // clock of each sender's last acknowledged push (by the push's request id until then).
  std::vector<Backup> backups_;
  std::vector<std::vector<uint32_t>> replica_sets_;  // no_slot: a backup replaced since
  std::vector<VirtualNanos> primary_rows_at_;  // by shard: when a promoted primary has its rows
  static constexpr uint32_t no_slot = UINT32_MAX;
  std::vector<std::unordered_map<NodeId, uint32_t>> acked_clocks_;
  std::unordered_map<uint64_t, uint32_t> unacked_pushes_;
  // The rows a restarted host's shards were just taken from: (backup host, bytes) to copy over
  // before its member is Ready.
  std::vector<std::pair<uint32_t, uint64_t>> copies_;
  ReplicationFaults replication_faults_;
  std::vector<Host> hosts_;
  std::vector<ShardShadow> shadows_;
  std::vector<uint64_t> acked_commits_;  // per shard: its store's commits when it last acked
  struct PendingPull {
    uint32_t clock;
    std::vector<uint64_t> keys;
    VirtualNanos arrived;
  };
  std::unordered_map<uint64_t, PendingPull> pending_pulls_;  // by (shard, sender, request)
  // Per (worker, step): the longest any of its pulls was held by a shard's gate.
  std::unordered_map<uint64_t, VirtualNanos> step_gate_wait_;
  std::unordered_map<uint64_t, VirtualNanos> pair_last_;
  std::vector<std::optional<Flight>> flights_;
  std::vector<uint32_t> free_flights_;
  std::vector<Partition> partitions_;
  std::vector<Lossy> lossy_;
  uint32_t workers_ = 0, aggregators_ = 0, finished_ = 0;
  VirtualNanos step_ns_ = 0;
  VirtualNanos overhead_ns_ = 0;  // a worker's CPU per step beyond its compute
  VirtualNanos last_heal_ = 0;
  bool skip_gate_ = false, lose_log_tail_ = false, skip_resync_ = false, forget_clocks_ = false;
  bool garble_control_ = false, forge_ps_ = false;
  // Coordinated runs (not --colocate: the embedded cluster has no coordinator): the real
  // coordinator core on a host of its own, after the ps hosts.
  bool coordinated_ = false;
  uint32_t coordinator_host_ = 0;
  NodeId coordinator_node_ = 0;
  std::optional<CoordinatorCore> coordinator_;
  std::vector<MemberHost> members_;  // by host
  VirtualNanos coordinator_armed_at_ = -1;
  uint64_t coordinator_timer_ = 0;  // the generation of the armed timer event
  uint64_t periodic_pending_ = 0;
  bool job_over_ = false;
  Status build_status_;  // building cores from a Welcome failed
  // Control messages each host was sent (garble_control replays them), the newest last.
  std::vector<std::vector<ControlMessage>> sent_to_;
  uint64_t hash_ = 0;
  SimResult result_;
};

}  // namespace colony::sim::detail
