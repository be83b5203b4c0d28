#include "ps/cluster_layout.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <variant>

namespace colony {

namespace {

// The most nodes one member hosts (the daemons' --shards and --replicas bound).
constexpr uint32_t member_nodes_max = 4096;

bool is_request(const PsMessage& m) {
  return std::holds_alternative<PullRequest>(m) || std::holds_alternative<PushRequest>(m) ||
         std::holds_alternative<ClockAdvance>(m) || std::holds_alternative<PullHint>(m);
}

const MessageHeader& header_of(const PsMessage& m) {
  return std::visit([](const auto& x) -> const MessageHeader& { return x.header; }, m);
}

bool is_dense(const PsMessage& m) {
  return std::holds_alternative<DenseReduce>(m) || std::holds_alternative<DenseBroadcast>(m);
}

const char* kind_name(const PsMessage& m) {
  static constexpr const char* names[] = {"pull",        "pull reply",      "push",
                                          "push ack",    "clock advance",   "shard map update",
                                          "error",       "dense reduce",    "dense broadcast",
                                          "pull hint",   "replica forward", "replica ack",
                                          "replica copy"};
  static_assert(std::size(names) == std::variant_size_v<PsMessage>, "a ps message without a name");
  return names[m.index()];
}

const char* role_name(NodeRole r) {
  switch (r) {
    case NodeRole::shard:
      return "shard";
    case NodeRole::replica:
      return "worker replica";
    case NodeRole::aggregator:
      return "node aggregator";
    case NodeRole::coordinator:
      return "coordinator";
    case NodeRole::backup:
      return "shard backup";
  }
  return "?";
}

// Checks that the ranges [first, first + count) of `ranges` tile [begin, begin + total).
Status tiles(std::vector<std::pair<uint64_t, uint64_t>> ranges, uint64_t begin, uint64_t total,
             const char* what) {
  std::sort(ranges.begin(), ranges.end());
  uint64_t next = begin;
  for (const auto& [first, count] : ranges) {
    if (first != next)
      return Status::invalid_input(fmt::format(
          "the layout's {} leave a gap or overlap at node {} (expected {})", what, first, next));
    next = first + count;
  }
  if (next != begin + total)
    return Status::invalid_input(
        fmt::format("the layout's {} end at node {}, expected {}", what, next, begin + total));
  return Status();
}

}  // namespace

NodeId assign_nodes(std::vector<MemberInfo>& members, bool hierarchical) {
  NodeId next = 0;
  for (MemberInfo& m : members)
    if (m.role == MemberRole::ps) {
      m.first_node = next;
      next += m.count;
    }
  for (MemberInfo& m : members)
    if (m.role == MemberRole::worker) {
      m.first_node = next;
      next += m.count;
    }
  for (MemberInfo& m : members) {
    m.has_aggregator = hierarchical && m.role == MemberRole::worker;
    m.aggregator = m.has_aggregator ? next++ : 0;
  }
  return next;
}

Welcome plan_layout(std::vector<MemberInfo> members, const JobSpec& job, ShardMapSpec map) {
  Welcome w;
  w.job = job;
  w.coordinator_node = assign_nodes(members, job.hierarchical);
  map.shards = 0;
  for (const MemberInfo& m : members) {
    if (m.role == MemberRole::ps)
      map.shards += m.count;
    else
      w.workers_total += m.count;
  }
  w.map = map;
  w.members = std::move(members);
  return w;
}

bool ClusterLayout::durable_shards() const {
  if (replicas_ > 1) return true;  // a backup may take a lost primary's place
  return std::any_of(members_.begin(), members_.end(),
                     [](const MemberInfo& m) { return m.role == MemberRole::ps && m.durable; });
}

Expected<ClusterLayout> ClusterLayout::make(const Welcome& w) {
  if (w.members.empty()) return Status::invalid_input("the layout lists no members");
  if (w.you >= w.members.size())
    return Status::invalid_input(fmt::format(
        "the layout names member {} as the receiver, of {} members", w.you, w.members.size()));
  if (w.heartbeat_ms == 0 || w.heartbeat_timeout_ms <= w.heartbeat_ms)
    return Status::invalid_input(
        fmt::format("the layout's heartbeat timeout {} ms is not above its interval {} ms",
                    w.heartbeat_timeout_ms, w.heartbeat_ms));
  std::vector<std::pair<uint64_t, uint64_t>> shard_ranges, replica_ranges, aggregators;
  uint64_t shards = 0, replicas = 0;
  std::set<std::string> keys;
  for (size_t i = 0; i < w.members.size(); ++i) {
    const MemberInfo& m = w.members[i];
    if (m.count == 0 || m.count > member_nodes_max)
      return Status::invalid_input(fmt::format(
          "member {} of the layout hosts {} nodes, outside 1..{}", i, m.count, member_nodes_max));
    if (!m.public_key.empty() && !keys.insert(m.public_key).second)
      return Status::invalid_input(
          fmt::format("member {} of the layout has another member's key", i));
    if (m.role == MemberRole::ps) {
      if (m.has_aggregator)
        return Status::invalid_input(fmt::format("ps member {} has an aggregator", i));
      shard_ranges.emplace_back(m.first_node, m.count);
      shards += m.count;
    } else {
      replica_ranges.emplace_back(m.first_node, m.count);
      replicas += m.count;
      if (m.has_aggregator != w.job.hierarchical)
        return Status::invalid_input(fmt::format(
            "worker member {} {} an aggregator, but push is {}", i,
            m.has_aggregator ? "has" : "lacks", w.job.hierarchical ? "hierarchical" : "flat"));
      if (m.has_aggregator) aggregators.emplace_back(m.aggregator, 1);
    }
  }
  if (shards == 0 || replicas == 0)
    return Status::invalid_input(fmt::format(
        "the layout has {} shards and {} worker replicas; it needs at least one of each", shards,
        replicas));
  if (shards != w.map.shards)
    return Status::invalid_input(fmt::format(
        "the layout's members host {} shards, its shard map has {}", shards, w.map.shards));
  if (replicas != w.workers_total)
    return Status::invalid_input(fmt::format("the layout's members host {} replicas, it says {}",
                                             replicas, w.workers_total));
  if (Status s = tiles(shard_ranges, 0, shards, "shards"); !s.ok()) return s;
  if (Status s = tiles(replica_ranges, shards, replicas, "worker replicas"); !s.ok()) return s;
  if (Status s = tiles(aggregators, shards + replicas, aggregators.size(), "aggregators"); !s.ok())
    return s;
  // The first worker member's aggregator is the root of the dense all-reduce, and every member
  // must agree which one that is: the lowest-numbered.
  if (!std::is_sorted(aggregators.begin(), aggregators.end()))
    return Status::invalid_input("the layout's aggregators are not numbered in member order");
  const uint64_t total = shards + replicas + aggregators.size();
  if (w.coordinator_node != total)
    return Status::invalid_input(fmt::format(
        "the layout puts the coordinator at node {}, expected {}", w.coordinator_node, total));
  const uint32_t k = w.job.replicas;
  std::vector<uint32_t> ps_members;
  for (uint32_t i = 0; i < w.members.size(); ++i)
    if (w.members[i].role == MemberRole::ps) ps_members.push_back(i);
  if (k == 0 || k > shard_replicas_max || k > ps_members.size())
    return Status::invalid_input(
        fmt::format("the job keeps {} replicas of each shard: it needs 1..{}, and as many ps "
                    "members (the layout has {})",
                    k, shard_replicas_max, ps_members.size()));
  const uint64_t backups = shards * (k - 1);
  if (total + 1 + backups > cluster_nodes_max)
    return Status::invalid_input(
        fmt::format("the layout has {} nodes, over {}", total + 1 + backups, cluster_nodes_max));

  ClusterLayout l;
  l.members_ = w.members;
  l.map_ = w.map;
  l.shards_ = static_cast<uint32_t>(shards);
  l.replicas_ = k;
  l.coordinator_node_ = static_cast<NodeId>(total);
  l.role_.assign(total + 1 + backups, NodeRole::coordinator);
  l.owner_.assign(total + 1 + backups, static_cast<uint32_t>(w.members.size()));
  for (uint32_t i = 0; i < w.members.size(); ++i) {
    const MemberInfo& m = w.members[i];
    if (!m.public_key.empty()) l.member_of_key_[m.public_key] = i;
    for (NodeId n = m.first_node; n < m.first_node + m.count; ++n) {
      l.role_[n] = m.role == MemberRole::ps ? NodeRole::shard : NodeRole::replica;
      l.owner_[n] = i;
    }
    if (m.has_aggregator) {
      l.role_[m.aggregator] = NodeRole::aggregator;
      l.owner_[m.aggregator] = i;
      if (!l.dense_root_) l.dense_root_ = m.aggregator;
    }
  }
  for (size_t p = 0; p < ps_members.size(); ++p) {
    const MemberInfo& m = w.members[ps_members[p]];
    for (NodeId s = m.first_node; s < m.first_node + m.count; ++s)
      for (uint32_t j = 0; j + 1 < k; ++j) {
        const NodeId b = l.coordinator_node_ + 1 + s * (k - 1) + j;
        l.role_[b] = NodeRole::backup;
        l.owner_[b] = ps_members[(p + 1 + j) % ps_members.size()];
      }
  }
  for (const NodePlacement& p : w.placed) {
    const Status s =
        p.node < l.shards_ ? l.move_shard(p.node, p.member) : l.place_backup(p.node, p.member);
    if (!s.ok())
      return Status::invalid_input(fmt::format("the layout's move of node {} to member {}: {}",
                                               p.node, p.member, s.message()));
  }
  return l;
}

std::vector<NodeId> ClusterLayout::backups_of(uint32_t shard) const {
  std::vector<NodeId> out;
  if (shard >= shards_) return out;
  for (uint32_t j = 0; j + 1 < replicas_; ++j)
    out.push_back(coordinator_node_ + 1 + shard * (replicas_ - 1) + j);
  return out;
}

std::optional<uint32_t> ClusterLayout::shard_of_backup(NodeId n) const {
  if (n >= role_.size() || role_[n] != NodeRole::backup) return std::nullopt;
  return (n - coordinator_node_ - 1) / (replicas_ - 1);
}

std::vector<NodeId> ClusterLayout::backup_nodes_of(uint32_t i) const {
  std::vector<NodeId> out;
  for (NodeId n = coordinator_node_ + 1; n < role_.size(); ++n)
    if (owner_[n] == i) out.push_back(n);
  return out;
}

Status ClusterLayout::move_shard(NodeId shard, uint32_t member) {
  if (Status s = check_move(shard, member); !s.ok()) return s;
  if (owner_[shard] != member) detach_shard(shard);
  owner_[shard] = member;
  return Status();
}

void ClusterLayout::detach_shard(NodeId shard) {
  if (shard >= shards_ || owner_[shard] == detached) return;
  const std::pair<NodeId, uint32_t> from{shard, owner_[shard]};
  if (std::find(moved_from_.begin(), moved_from_.end(), from) == moved_from_.end())
    moved_from_.push_back(from);
  owner_[shard] = detached;
}

bool ClusterLayout::served_before(const PsMessage& m, NodeId receiver,
                                  const MessageOrigin& origin) const {
  if (origin.kind != MessageOrigin::Kind::member) return false;
  const std::pair<NodeId, uint32_t> from{header_of(m).sender, origin.member};
  return std::find(moved_from_.begin(), moved_from_.end(), from) != moved_from_.end() &&
         check_ps_message(m, receiver, MessageOrigin{}).ok();
}

Status ClusterLayout::check_move(NodeId shard, uint32_t member) const {
  if (shard >= shards_)
    return Status::invalid_input(
        fmt::format("node {} is no shard (the layout has {} shards)", shard, shards_));
  for (NodeId b : backups_of(shard))
    if (owner_[b] == member) return Status();
  return Status::invalid_input(fmt::format(
      "member {} holds no backup of shard {}: it cannot serve the shard", member, shard));
}

Status ClusterLayout::place_backup(NodeId backup, uint32_t member) {
  if (Status s = check_place(backup, member); !s.ok()) return s;
  owner_[backup] = member;
  return Status();
}

Status ClusterLayout::check_place(NodeId backup, uint32_t member) const {
  const std::optional<uint32_t> shard = shard_of_backup(backup);
  if (!shard) return Status::invalid_input(fmt::format("node {} is no shard backup", backup));
  if (member >= members_.size() || members_[member].role != MemberRole::ps)
    return Status::invalid_input(fmt::format("member {} is no ps member", member));
  if (owner_[*shard] == member)
    return Status::invalid_input(fmt::format(
        "member {} serves shard {}: it cannot hold a backup of it too", member, *shard));
  for (NodeId b : backups_of(*shard))
    if (b != backup && owner_[b] == member)
      return Status::invalid_input(
          fmt::format("member {} holds backup node {} of shard {} already", member, b, *shard));
  return Status();
}

std::optional<uint32_t> ClusterLayout::owner(NodeId n) const {
  if (n >= owner_.size() || owner_[n] >= members_.size()) return std::nullopt;
  return owner_[n];
}

std::optional<uint32_t> ClusterLayout::member_of_key(const std::string& public_key) const {
  auto it = member_of_key_.find(public_key);
  if (it == member_of_key_.end()) return std::nullopt;
  return it->second;
}

std::vector<NodeId> ClusterLayout::shard_senders() const {
  std::vector<NodeId> out;
  const bool hierarchical = std::any_of(members_.begin(), members_.end(),
                                        [](const MemberInfo& m) { return m.has_aggregator; });
  for (NodeId n = 0; n < role_.size(); ++n)
    if (role_[n] == (hierarchical ? NodeRole::aggregator : NodeRole::replica)) out.push_back(n);
  return out;
}

std::vector<NodeId> ClusterLayout::nodes_of(uint32_t i) const {
  std::vector<NodeId> out;
  if (i >= members_.size() || members_[i].role != MemberRole::ps) return out;
  for (NodeId n = members_[i].first_node; n < members_[i].first_node + members_[i].count; ++n)
    out.push_back(n);
  return out;
}

Status ClusterLayout::check_ps_message(const PsMessage& m, NodeId receiver,
                                       const MessageOrigin& origin) const {
  const MessageHeader& h = header_of(m);
  const bool request = is_request(m);
  if (receiver >= nodes())
    return Status::invalid_input(
        fmt::format("a {} for node {}, of {}", kind_name(m), receiver, nodes()));
  if (h.sender >= nodes())
    return Status::invalid_input(
        fmt::format("a {} from node {}, of {}", kind_name(m), h.sender, nodes()));
  const NodeRole to = role_[receiver], from = role_[h.sender];
  const bool forward =
      std::holds_alternative<ReplicaForward>(m) || std::holds_alternative<ReplicaCopy>(m);
  if (forward || std::holds_alternative<ReplicaAck>(m)) {
    // Between a shard and its own backups only: forwards down, acknowledgements up.
    const NodeId backup = forward ? receiver : h.sender, shard = forward ? h.sender : receiver;
    if (role_[shard] != NodeRole::shard || shard_of_backup(backup) != shard)
      return Status::invalid_input(
          fmt::format("a {} from node {}, a {}, to node {}, a {}: not between a shard and one of "
                      "its backups",
                      kind_name(m), h.sender, role_name(from), receiver, role_name(to)));
  } else if (to == NodeRole::backup || from == NodeRole::backup) {
    return Status::invalid_input(fmt::format("a {} from node {}, a {}, to node {}, a {}",
                                             kind_name(m), h.sender, role_name(from), receiver,
                                             role_name(to)));
  } else if (is_dense(m)) {
    // The all-reduce tree: replicas to their member's aggregator, aggregators to the root; back
    // down the same edges.
    if (to != NodeRole::aggregator && to != NodeRole::replica)
      return Status::invalid_input(
          fmt::format("a {} for node {}, a {}", kind_name(m), receiver, role_name(to)));
    const bool same_member = owner_[h.sender] == owner_[receiver];
    bool edge = false;
    if (std::holds_alternative<DenseReduce>(m))
      edge =
          to == NodeRole::aggregator && ((from == NodeRole::replica && same_member) ||
                                         (from == NodeRole::aggregator && receiver == dense_root_));
    else if (to == NodeRole::aggregator)
      edge = h.sender == dense_root_;
    else
      edge = from == NodeRole::aggregator && same_member;
    if (!edge)
      return Status::invalid_input(fmt::format(
          "a {} from node {}, a {}, to node {}, a {}: not an edge of the all-reduce tree (rooted "
          "at node {})",
          kind_name(m), h.sender, role_name(from), receiver, role_name(to),
          dense_root_ ? fmt::format("{}", *dense_root_) : std::string("none")));
  } else {
    if (request != (to == NodeRole::shard))
      return Status::invalid_input(
          fmt::format("a {} for node {}, a {}", kind_name(m), receiver, role_name(to)));
    if (request == (from == NodeRole::shard))
      return Status::invalid_input(fmt::format("a {} in the name of node {}, a {}", kind_name(m),
                                               h.sender, role_name(from)));
  }
  // A cluster's shard map is the Welcome's for the whole job: an update can only restate it.
  if (const auto* update = std::get_if<ShardMapUpdate>(&m);
      update && (update->version != map_.version || update->shards != map_.shards ||
                 update->vnodes_per_shard != map_.vnodes_per_shard || update->seed != map_.seed))
    return Status::invalid_input(fmt::format(
        "a shard map update from node {} to version {} ({} shards, {} vnodes, seed {}): the "
        "cluster's map is version {} ({} shards, {} vnodes, seed {})",
        h.sender, update->version, update->shards, update->vnodes_per_shard, update->seed,
        map_.version, map_.shards, map_.vnodes_per_shard, map_.seed));
  if (const auto* pull = std::get_if<PullRequest>(&m)) {
    const bool writer_ok = pull->writer < nodes() && role_[pull->writer] != NodeRole::shard &&
                           owner_[pull->writer] == owner_[h.sender];
    if (!writer_ok)
      return Status::invalid_input(fmt::format(
          "a pull from node {} names node {} as its writer, which is not its own member's",
          h.sender, pull->writer));
  }
  switch (origin.kind) {
    case MessageOrigin::Kind::unknown:
      return Status();
    case MessageOrigin::Kind::coordinator: {
      if (from == NodeRole::coordinator) return Status();
      const auto* clock = std::get_if<ClockAdvance>(&m);
      if (clock && clock->clock == clock_done) return Status();  // releasing a lost member's clocks
      return Status::invalid_input(fmt::format(
          "the coordinator's key sent a {} in the name of node {}", kind_name(m), h.sender));
    }
    case MessageOrigin::Kind::member:
      if (owner_[h.sender] != origin.member)
        return Status::invalid_input(fmt::format(
            "member {}'s key sent a {} in the name of node {}, which is {}", origin.member,
            kind_name(m), h.sender,
            owner_[h.sender] < members_.size() ? fmt::format("member {}'s", owner_[h.sender])
            : owner_[h.sender] == detached     ? std::string("no member's (its primary was lost)")
                                               : std::string("the coordinator's")));
      return Status();
  }
  return Status();
}

}  // namespace colony
