// The layout of a cluster of member processes: which node ids each member hosts, and what
// every node is. The coordinator numbers the nodes here (assign_nodes); members rebuild the
// same layout from the Welcome they receive (ClusterLayout::make), after checking it, and every
// driver asks it who may say what (check_ps_message).
//
// Numbering: the ps members' shards first (shard s is node s), then the worker members'
// replicas, then one node aggregator per worker member under hierarchical push, then the
// coordinator's own node (it pulls to evaluate), then, under replication (JobSpec::replicas
// K > 1), the shards' backups: backup j (0..K-2) of shard s is node coordinator + 1 +
// s * (K - 1) + j, hosted by the ps member j + 1 places after the shard's own, in member order
// and wrapping round, so that the K replicas of a shard are on K ps members.
//
// Trust: a Welcome, and any ps message, arrives off the wire. make() refuses a layout whose ids
// or counts do not add up, so nothing built from it can index out of bounds; check_ps_message
// says whether a message may come from the member that sent it (identified by its CURVE key,
// or unknown on an --insecure cluster) to the node it names. Neither asserts on its input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "ps/cluster_protocol.h"
#include "ps/protocol.h"

namespace colony {

// The most node ids one cluster has (shards, replicas, aggregators and the coordinator).
inline constexpr uint32_t cluster_nodes_max = 1u << 20;

enum class NodeRole : uint8_t { shard, replica, aggregator, coordinator, backup };

// Numbers the nodes of `members` in place (first_node, has_aggregator, aggregator) and returns
// the coordinator's node id. The coordinator calls it once every member has joined.
NodeId assign_nodes(std::vector<MemberInfo>& members, bool hierarchical);

// The layout part of a Welcome for `members` (numbered by assign_nodes) training `job` under
// `map` (its shard count set to the ps members' shards): what ClusterLayout::make takes. The
// embedded cluster and the simulator plan their layouts with it, as the coordinator does.
Welcome plan_layout(std::vector<MemberInfo> members, const JobSpec& job, ShardMapSpec map);

// Who sent a message, as the transport knows it: a member index, the coordinator, or nobody
// known (an --insecure cluster cannot tell).
struct MessageOrigin {
  enum class Kind : uint8_t { member, coordinator, unknown } kind = Kind::unknown;
  uint32_t member = 0;
  static MessageOrigin of_member(uint32_t i) { return {Kind::member, i}; }
  static MessageOrigin of_coordinator() { return {Kind::coordinator, 0}; }
};

class ClusterLayout {
 public:
  // The layout a Welcome describes. Fails with invalid_input, naming what is wrong, unless:
  // `you` names a member; there is at least one ps and one worker member; each member hosts
  // 1..4096 nodes; the ps members' first nodes number the shards 0..S-1 without gap or overlap
  // and S equals the map's shard count; the worker members' replicas follow without gap, as
  // many as workers_total; aggregators are present exactly under hierarchical push, each a
  // distinct id after the replicas, numbered in the order of their members (so every member
  // agrees on dense_root); the coordinator's node is the one after all of them; the job's
  // replicas K are 1..shard_replicas_max and at most the ps members; a non-empty public key is
  // not used by two members; the heartbeat timeout is above the interval; and each of the
  // Welcome's `placed` moves (a shard: move_shard, a backup: place_backup), replayed in order,
  // is allowed.
  static Expected<ClusterLayout> make(const Welcome& w);

  uint32_t nodes() const { return static_cast<uint32_t>(role_.size()); }
  const ShardMapSpec& map() const { return map_; }
  // Whether any ps member keeps its shards on disk, or the shards are replicated (they may
  // restart or fail over: clients keep pushes until acknowledged).
  bool durable_shards() const;
  uint32_t shards() const { return shards_; }
  NodeId coordinator_node() const { return coordinator_node_; }
  const std::vector<MemberInfo>& members() const { return members_; }
  // The role and owning member of node n < nodes() (the coordinator's node has no owner).
  NodeRole role(NodeId n) const { return role_[n]; }
  std::optional<uint32_t> owner(NodeId n) const;
  // The member whose CURVE key is `public_key`; nullopt for an empty or unknown key.
  std::optional<uint32_t> member_of_key(const std::string& public_key) const;
  // The senders whose pushes and clocks a shard waits for: every aggregator under hierarchical
  // push, else every replica.
  std::vector<NodeId> shard_senders() const;
  // The root of a deep model's dense all-reduce (DenseReduce, DenseBroadcast): the first worker
  // member's aggregator, which is the lowest-numbered one. nullopt without aggregators.
  std::optional<NodeId> dense_root() const { return dense_root_; }
  // The shard nodes of member i (empty for a worker member).
  std::vector<NodeId> nodes_of(uint32_t i) const;
  // Replication: each shard's replicas (JobSpec::replicas, 1: none), the backup nodes of shard
  // s < shards() (K - 1 of them, in order), the shard that backup node n belongs to (nullopt for
  // a node that is no backup), and the backup nodes member i hosts.
  uint32_t replicas() const { return replicas_; }
  std::vector<NodeId> backups_of(uint32_t shard) const;
  std::optional<uint32_t> shard_of_backup(NodeId n) const;
  std::vector<NodeId> backup_nodes_of(uint32_t i) const;
  // Failover (ShardsMoved): shard node `shard` is served by member `member` from now on, so its
  // messages are taken from that member's key (owner()). Fails with invalid_input, changing
  // nothing, unless `shard` is a shard node and `member` hosts one of its backups: a member can
  // only take over a shard it holds a copy of. nodes_of() still names the shards as first placed.
  Status move_shard(NodeId shard, uint32_t member);
  // Failover under replication: the primary of shard node `shard` was lost, and its next member
  // is not known yet. No member's key speaks for the shard until move_shard names one (owner()
  // is nullopt); what its last server sent is late (served_before). Nothing for a node that is
  // no shard, or is detached already.
  void detach_shard(NodeId shard);
  // What move_shard would fail with (ok: it would move the shard).
  Status check_move(NodeId shard, uint32_t member) const;
  // Re-replication (BackupsPlaced): backup node `backup` is hosted by ps member `member` from now
  // on. Fails with invalid_input, changing nothing, unless `backup` is a backup node and `member`
  // a ps member that holds no other replica of its shard (serves it, or hosts another of its
  // backup nodes): the K replicas of a shard stay on K members.
  Status place_backup(NodeId backup, uint32_t member);
  // What place_backup would fail with (ok: it would place the backup).
  Status check_place(NodeId backup, uint32_t member) const;
  // Whether `m`, for node `receiver` from `origin`, is in the name of a shard node that origin's
  // member served before move_shard moved it away, and otherwise well-formed (check_ps_message
  // allows it from an unknown origin): sent then and still on the way, it is late, not forged.
  // check_ps_message refuses it all the same.
  bool served_before(const PsMessage& m, NodeId receiver, const MessageOrigin& origin) const;

  // Whether `m`, received from `origin`, may be delivered to node `receiver`. Fails with
  // invalid_input saying why not, when: the receiver or the message's sender is not a node of
  // this layout; requests (pull, push, clock, pull hint) go to a node that is not a shard, or
  // replies (pull reply, ack, map update, error) to a shard; a request's sender is a shard, or a
  // reply's sender is not one; a replica forward or copy goes anywhere but from a shard to one of
  // its own backups, or a replica ack anywhere but from a backup to its own shard; any other
  // message goes to or comes from a backup; a shard map update describes another map than the
  // layout's (a cluster keeps one map for the whole job); a pull's writer is not a node of its
  // sender's member (or the coordinator's own node for its own pulls); a dense message does not
  // follow an edge of the all-reduce tree; or the sender's node is not the origin member's. The
  // tree's edges: a DenseReduce goes to an aggregator from a replica of the same member, or to the
  // root (dense_root) from any aggregator, the root's own included; a DenseBroadcast goes to an
  // aggregator from the root only, and to a replica from its own member's aggregator; nothing
  // dense goes to a shard or the coordinator. The coordinator may send requests as its own
  // node, and a ClockAdvance to clock_done in the name of any replica or aggregator (it does
  // so for lost members), but nothing dense. With an unknown origin only the structural checks
  // apply.
  Status check_ps_message(const PsMessage& m, NodeId receiver, const MessageOrigin& origin) const;

 private:
  ClusterLayout() = default;
  std::vector<MemberInfo> members_;
  ShardMapSpec map_;
  std::vector<NodeRole> role_;
  // By node; members_.size() for the coordinator's node, `detached` for a detached shard.
  static constexpr uint32_t detached = 0xffffffffu;
  std::vector<uint32_t> owner_;
  std::vector<std::pair<NodeId, uint32_t>> moved_from_;      // (shard, member) of each move_shard
  std::unordered_map<std::string, uint32_t> member_of_key_;  // non-empty keys only
  uint32_t shards_ = 0;
  uint32_t replicas_ = 1;
  NodeId coordinator_node_ = 0;
  std::optional<NodeId> dense_root_;
};

}  // namespace colony
