// ClusterLayout: the layouts a member accepts from the wire, and who may send which ps message.
#define BOOST_TEST_MODULE layout_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <string>

#include "common/hash.h"
#include "ps/cluster_layout.h"

using namespace colony;

namespace {

MemberInfo member(MemberRole role, uint32_t count, const std::string& key) {
  MemberInfo m;
  m.role = role;
  m.count = count;
  m.endpoint = "tcp://10.0.0.1:" + key;
  m.public_key = key;
  return m;
}

// 2 ps members (1 and 2 shards), 2 worker members (2 replicas each); hierarchical or flat.
Welcome welcome(bool hierarchical) {
  Welcome w;
  w.members = {member(MemberRole::ps, 1, "p0"), member(MemberRole::worker, 2, "w0"),
               member(MemberRole::ps, 2, "p1"), member(MemberRole::worker, 2, "w1")};
  w.job.hierarchical = hierarchical;
  w.coordinator_node = assign_nodes(w.members, hierarchical);
  w.map.shards = 3;
  w.workers_total = 4;
  return w;
}

bool fails_with(const Welcome& w, const std::string& text) {
  auto l = ClusterLayout::make(w);
  if (l.ok()) return false;
  if (l.status().message().find(text) == std::string::npos) {
    BOOST_TEST_MESSAGE("message: " << l.status().message());
    return false;
  }
  return true;
}

PullRequest pull(NodeId sender, NodeId writer) {
  return PullRequest{{sender, 1, 0}, 0, writer, {1, 2}};
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_coordinators_numbering_makes_a_valid_layout) {
  for (bool hierarchical : {false, true}) {
    const Welcome w = welcome(hierarchical);
    auto l = ClusterLayout::make(w);
    BOOST_REQUIRE_MESSAGE(l.ok(), (l.ok() ? std::string() : l.status().message()));
    BOOST_TEST(l->shards() == 3u);
    BOOST_TEST(l->nodes() ==
               (hierarchical ? 10u : 8u));  // 3 shards, 4 replicas, 2 aggregators, coordinator
    BOOST_TEST((l->role(0) == NodeRole::shard && l->role(2) == NodeRole::shard));
    BOOST_TEST((l->role(3) == NodeRole::replica));
    BOOST_TEST(*l->owner(1) == 2u);  // member 2 hosts shards 1 and 2
    BOOST_TEST(*l->owner(3) == 1u);
    BOOST_TEST(!l->owner(l->coordinator_node()));
    BOOST_TEST(*l->member_of_key("w1") == 3u);
    BOOST_TEST(!l->member_of_key(""));
    BOOST_TEST(!l->member_of_key("stranger"));
    BOOST_TEST(l->shard_senders().size() == (hierarchical ? 2u : 4u));
  }
}

BOOST_AUTO_TEST_CASE(forged_layouts_are_refused_naming_what_is_wrong) {
  Welcome w = welcome(true);
  w.you = 4;
  BOOST_TEST(fails_with(w, "names member 4 as the receiver"));

  w = welcome(true);
  w.members[1].first_node = 4'000'000'000u;  // the forged Welcome that wrote out of bounds
  BOOST_TEST(fails_with(w, "gap or overlap"));

  w = welcome(true);
  w.members[3].aggregator = 1u << 30;
  BOOST_TEST(fails_with(w, "aggregators"));

  w = welcome(true);
  w.members[2].first_node = 0;  // two ps members on shard 0
  BOOST_TEST(fails_with(w, "gap or overlap"));

  w = welcome(true);
  w.map.shards = 7;
  BOOST_TEST(fails_with(w, "its shard map has 7"));

  w = welcome(true);
  w.workers_total = 3;
  BOOST_TEST(fails_with(w, "it says 3"));

  w = welcome(true);
  w.coordinator_node = 3;
  BOOST_TEST(fails_with(w, "coordinator at node 3"));

  w = welcome(true);
  w.members[0].count = 0;
  BOOST_TEST(fails_with(w, "outside 1..4096"));

  w = welcome(true);
  w.members[3].public_key = "w0";
  BOOST_TEST(fails_with(w, "another member's key"));

  w = welcome(true);
  w.members[1].has_aggregator = false;
  BOOST_TEST(fails_with(w, "lacks an aggregator"));

  w = welcome(false);
  w.members = {member(MemberRole::ps, 1, "p0")};
  w.members[0].first_node = 0;
  w.map.shards = 1;
  w.workers_total = 0;
  w.coordinator_node = 1;
  BOOST_TEST(fails_with(w, "at least one of each"));

  w = welcome(true);
  w.heartbeat_timeout_ms = w.heartbeat_ms;
  BOOST_TEST(fails_with(w, "heartbeat timeout"));
}

// Random damage to a valid layout: make() never crashes, and what it accepts is consistent
// (every member's nodes inside the layout, owned by that member).
BOOST_AUTO_TEST_CASE(damaged_layouts_never_crash_and_accepted_ones_add_up) {
  int accepted = 0;
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    SplitMix64 rng(seed);
    Welcome w = welcome(rng.next() % 2);
    const int damage = 1 + int(rng.next() % 3);
    for (int d = 0; d < damage; ++d) {
      MemberInfo& m = w.members[rng.next() % w.members.size()];
      switch (rng.next() % 6) {
        case 0:
          m.first_node = uint32_t(rng.next() % 12);
          break;
        case 1:
          m.count = uint32_t(rng.next() % 5);
          break;
        case 2:
          m.aggregator = uint32_t(rng.next() % 12);
          break;
        case 3:
          m.has_aggregator = !m.has_aggregator;
          break;
        case 4:
          w.coordinator_node = uint32_t(rng.next() % 12);
          break;
        case 5:
          w.you = uint32_t(rng.next() % 6);
          break;
      }
    }
    auto l = ClusterLayout::make(w);
    if (!l) continue;
    ++accepted;
    for (uint32_t i = 0; i < l->members().size(); ++i) {
      const MemberInfo& m = l->members()[i];
      for (NodeId n = m.first_node; n < m.first_node + m.count; ++n) {
        BOOST_REQUIRE(n < l->nodes());
        BOOST_TEST(*l->owner(n) == i);
      }
    }
  }
  BOOST_TEST(accepted > 0);  // some damage cancels out (a count set to what it was)
}

BOOST_AUTO_TEST_CASE(members_speak_only_for_their_own_nodes) {
  auto l = ClusterLayout::make(welcome(false)).value();
  // Nodes: shards 0 (member 0), 1-2 (member 2); replicas 3-4 (member 1), 5-6 (member 3);
  // coordinator 7.
  const auto w0 = MessageOrigin::of_member(1), w1 = MessageOrigin::of_member(3),
             p1 = MessageOrigin::of_member(2);
  BOOST_TEST(l.check_ps_message(pull(3, 3), 0, w0).ok());
  BOOST_TEST(
      l.check_ps_message(PushRequest{{4, 2, 0}, 1, {1}, FloatBuffer(std::vector<float>(1))}, 1, w0)
          .ok());
  BOOST_TEST(l.check_ps_message(PullReply{{1, 1, 0}, 0, {}}, 5, p1).ok());

  // A ClockAdvance in another worker's name.
  BOOST_TEST(!l.check_ps_message(ClockAdvance{{5, 9, 0}, 3, false}, 0, w0).ok());
  // A pull naming an unknown sender, or a writer of another member.
  BOOST_TEST(!l.check_ps_message(pull(1'000'000, 3), 0, w0).ok());
  BOOST_TEST(!l.check_ps_message(pull(3, 5), 0, w0).ok());
  BOOST_TEST(!l.check_ps_message(pull(3, 99), 0, w0).ok());
  // Requests to a client, replies to a shard, replies in a client's name.
  BOOST_TEST(!l.check_ps_message(pull(3, 3), 5, w0).ok());
  BOOST_TEST(!l.check_ps_message(PushAck{{3, 1, 0}}, 0, w0).ok());
  BOOST_TEST(!l.check_ps_message(PullReply{{3, 1, 0}, 0, {}}, 5, w0).ok());
  // A shard's reply sent with a worker's key.
  BOOST_TEST(!l.check_ps_message(PullReply{{1, 1, 0}, 0, {}}, 5, w1).ok());
  // A receiver outside the layout.
  BOOST_TEST(!l.check_ps_message(pull(3, 3), 99, w0).ok());
  // A pull hint is a request: from a member's own replica to a shard, and nowhere else.
  BOOST_TEST(l.check_ps_message(PullHint{{3, 1, 0}, {1, 2}}, 0, w0).ok());
  BOOST_TEST(!l.check_ps_message(PullHint{{5, 1, 0}, {1, 2}}, 0, w0).ok());  // another's name
  BOOST_TEST(!l.check_ps_message(PullHint{{3, 1, 0}, {1, 2}}, 5, w0).ok());  // to a replica
  BOOST_TEST(!l.check_ps_message(PullHint{{1, 1, 0}, {1, 2}}, 0, p1).ok());  // from a shard

  // The coordinator pulls as its own node, and releases lost members' clocks, nothing more.
  const auto coord = MessageOrigin::of_coordinator();
  BOOST_TEST(l.check_ps_message(pull(7, 7), 0, coord).ok());
  BOOST_TEST(l.check_ps_message(ClockAdvance{{5, 1, 0}, clock_done, false}, 0, coord).ok());
  BOOST_TEST(!l.check_ps_message(ClockAdvance{{5, 1, 0}, 4, false}, 0, coord).ok());
  BOOST_TEST(!l.check_ps_message(pull(3, 3), 0, coord).ok());
  // A member cannot pose as the coordinator's node.
  BOOST_TEST(!l.check_ps_message(pull(7, 7), 0, w0).ok());

  // A shard's map update can only restate the cluster's map: one to another map (a new version,
  // another seed) would set a client's routing apart from every shard's for good.
  const ShardMapSpec& map = l.map();
  const ShardMapUpdate same{
      {1, 1, map.version}, map.version, map.shards, map.vnodes_per_shard, map.seed};
  BOOST_TEST(l.check_ps_message(same, 5, p1).ok());
  ShardMapUpdate newer = same, reseeded = same;
  newer.version = map.version + 1;
  reseeded.seed = map.seed + 1;
  for (const ShardMapUpdate& lie : {newer, reseeded}) {
    BOOST_TEST(!l.check_ps_message(lie, 5, p1).ok());
    BOOST_TEST(!l.check_ps_message(lie, 5, MessageOrigin{}).ok());
  }

  // On an --insecure cluster only the structure is checked.
  BOOST_TEST(l.check_ps_message(ClockAdvance{{5, 9, 0}, 3, false}, 0, MessageOrigin{}).ok());
  BOOST_TEST(!l.check_ps_message(pull(1'000'000, 3), 0, MessageOrigin{}).ok());
}

namespace {

DenseReduce reduce(NodeId sender) {
  return DenseReduce{{sender, 1, 0}, 4, 32, FloatBuffer(std::vector<float>(3))};
}
DenseBroadcast broadcast(NodeId sender) {
  return DenseBroadcast{{sender, 1, 0}, 4, 64, FloatBuffer(std::vector<float>(3))};
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_dense_all_reduce_root_is_the_first_worker_members_aggregator) {
  BOOST_TEST(!ClusterLayout::make(welcome(false)).value().dense_root());
  auto l = ClusterLayout::make(welcome(true)).value();
  // Aggregators: 7 (member 1, the first worker member) and 8 (member 3).
  BOOST_REQUIRE(l.dense_root());
  BOOST_TEST(*l.dense_root() == 7u);
  BOOST_TEST((l.role(7) == NodeRole::aggregator && *l.owner(7) == 1u));

  // Every member must agree on the root: aggregators numbered out of member order are refused.
  Welcome w = welcome(true);
  std::swap(w.members[1].aggregator, w.members[3].aggregator);
  BOOST_TEST(fails_with(w, "not numbered in member order"));
}

BOOST_AUTO_TEST_CASE(dense_messages_follow_the_all_reduce_tree) {
  auto l = ClusterLayout::make(welcome(true)).value();
  // Nodes: shards 0 (member 0), 1-2 (member 2); replicas 3-4 (member 1), 5-6 (member 3);
  // aggregators 7 (member 1, the root), 8 (member 3); coordinator 9.
  const auto w0 = MessageOrigin::of_member(1), w1 = MessageOrigin::of_member(3),
             p0 = MessageOrigin::of_member(0), coord = MessageOrigin::of_coordinator();
  auto allowed = [&](const PsMessage& m, NodeId to, const MessageOrigin& from) {
    const Status s = l.check_ps_message(m, to, from);
    BOOST_TEST_MESSAGE("allowed? " << s.message());
    return s.ok();
  };

  // Up: a replica to its own member's aggregator; a node's sum to the root (the root's own too).
  BOOST_TEST(allowed(reduce(3), 7, w0));
  BOOST_TEST(allowed(reduce(6), 8, w1));
  BOOST_TEST(allowed(reduce(8), 7, w1));
  BOOST_TEST(allowed(reduce(7), 7, w0));
  // Down: the root to each aggregator, an aggregator to its own member's replicas.
  BOOST_TEST(allowed(broadcast(7), 8, w0));
  BOOST_TEST(allowed(broadcast(7), 7, w0));
  BOOST_TEST(allowed(broadcast(7), 4, w0));
  BOOST_TEST(allowed(broadcast(8), 5, w1));

  // Up, refused: a replica to another member's aggregator; an aggregator to one that is not
  // the root; the root's sum back down as a reduce; to a replica, a shard or the coordinator;
  // from a shard or the coordinator's node.
  BOOST_TEST(!allowed(reduce(5), 7, w1));
  BOOST_TEST(!allowed(reduce(7), 8, w0));
  BOOST_TEST(!allowed(reduce(3), 4, w0));
  BOOST_TEST(!allowed(reduce(3), 0, w0));
  BOOST_TEST(!allowed(reduce(3), 9, w0));
  BOOST_TEST(!allowed(reduce(0), 7, p0));
  BOOST_TEST(!allowed(reduce(9), 7, coord));
  // Forged: member 3 (listed, with a key) sends a reduce in the name of member 1's replica, to
  // member 1's aggregator, or in the name of member 1's aggregator to the root.
  BOOST_TEST(!allowed(reduce(3), 7, w1));
  BOOST_TEST(!allowed(reduce(7), 7, w1));
  // Structurally fine but from the coordinator's key in a replica's name: not the coordinator's
  // to send.
  BOOST_TEST(!allowed(reduce(3), 7, coord));

  // Down, refused: to an aggregator from one that is not the root (even to the root); from a
  // replica; to another member's replica; to a shard or the coordinator.
  BOOST_TEST(!allowed(broadcast(8), 7, w1));
  BOOST_TEST(!allowed(broadcast(8), 8, w1));
  BOOST_TEST(!allowed(broadcast(3), 7, w0));
  BOOST_TEST(!allowed(broadcast(3), 4, w0));
  BOOST_TEST(!allowed(broadcast(7), 5, w0));
  BOOST_TEST(!allowed(broadcast(8), 3, w1));
  BOOST_TEST(!allowed(broadcast(7), 0, w0));
  BOOST_TEST(!allowed(broadcast(7), 9, w0));
  // Forged: member 3 broadcasts in the root's name.
  BOOST_TEST(!allowed(broadcast(7), 8, w1));

  // The reason names the message and the tree.
  const Status s = l.check_ps_message(broadcast(8), 7, w1);
  BOOST_TEST(s.message().find("dense broadcast") != std::string::npos, s.message());
  BOOST_TEST(s.message().find("rooted at node 7") != std::string::npos, s.message());

  // On an --insecure cluster only the tree is checked.
  BOOST_TEST(allowed(reduce(3), 7, MessageOrigin{}));
  BOOST_TEST(!allowed(reduce(5), 7, MessageOrigin{}));

  // Flat push has no aggregators: nothing dense goes anywhere.
  auto flat = ClusterLayout::make(welcome(false)).value();
  for (NodeId to = 0; to < flat.nodes(); ++to)
    for (NodeId from = 0; from < flat.nodes(); ++from) {
      BOOST_TEST(!flat.check_ps_message(reduce(from), to, MessageOrigin{}).ok());
      BOOST_TEST(!flat.check_ps_message(broadcast(from), to, MessageOrigin{}).ok());
    }
}

// Replication (JobSpec::replicas): each shard's backups are nodes after the coordinator's, on the
// ps members after the shard's own, wrapping round; forwards go only from a shard to its own
// backups and acknowledgements only back, each from the member hosting the sender.
BOOST_AUTO_TEST_CASE(backups_are_placed_on_other_ps_members_and_speak_only_to_their_shard) {
  // 3 ps members (shards 0 | 1-2 | 3), 1 worker member (replicas 4-5); coordinator 6; with 3
  // replicas, backups 7-14: shard s's are 7 + 2s and 8 + 2s.
  Welcome w;
  w.members = {member(MemberRole::ps, 1, "p0"), member(MemberRole::ps, 2, "p1"),
               member(MemberRole::worker, 2, "w0"), member(MemberRole::ps, 1, "p2")};
  w.job.replicas = 3;
  w.coordinator_node = assign_nodes(w.members, false);
  w.map.shards = 4;
  w.workers_total = 2;
  auto made = ClusterLayout::make(w);
  BOOST_REQUIRE_MESSAGE(made.ok(), (made.ok() ? std::string() : made.status().message()));
  const ClusterLayout& l = *made;
  BOOST_TEST(l.coordinator_node() == 6u);
  BOOST_TEST(l.nodes() == 15u);
  BOOST_TEST(l.replicas() == 3u);
  BOOST_TEST((l.backups_of(1) == std::vector<NodeId>{9, 10}));
  BOOST_TEST(l.backups_of(4).empty());
  const std::vector<uint32_t> ps_member_of_shard = {0, 1, 1, 3}, ps = {0, 1, 3};
  for (uint32_t s = 0; s < 4; ++s) {
    std::vector<uint32_t> hosts = {ps_member_of_shard[s]};
    for (NodeId b : l.backups_of(s)) {
      BOOST_TEST((l.role(b) == NodeRole::backup));
      BOOST_TEST(*l.shard_of_backup(b) == s);
      hosts.push_back(*l.owner(b));
    }
    std::sort(hosts.begin(), hosts.end());
    BOOST_TEST(hosts == ps, "shard " << s << ": its replicas are on every ps member");
  }
  BOOST_TEST((l.backup_nodes_of(3) == std::vector<NodeId>{8, 9, 11}));
  BOOST_TEST(!l.shard_of_backup(3));
  BOOST_TEST(!l.shard_of_backup(99));

  const auto p0 = MessageOrigin::of_member(0), p1 = MessageOrigin::of_member(1),
             p2 = MessageOrigin::of_member(3), w0 = MessageOrigin::of_member(2);
  const ReplicaForward fw{{1, 1, 0}, 1, 0, false, ClockAdvance{{4, 1, 0}, 1}};
  // Shard 1 (member 1) to its backups 9 (member 3) and 10 (member 0), and their acks back.
  BOOST_TEST(l.check_ps_message(fw, 9, p1).ok());
  BOOST_TEST(l.check_ps_message(fw, 10, p1).ok());
  BOOST_TEST(l.check_ps_message(ReplicaAck{{9, 1, 0}, 1}, 1, p2).ok());
  BOOST_TEST(l.check_ps_message(ReplicaAck{{10, 1, 0}, 1}, 1, p0).ok());
  // Not to another shard's backup, nor to a shard or a worker; not in another member's name.
  BOOST_TEST(!l.check_ps_message(fw, 11, p1).ok());
  BOOST_TEST(!l.check_ps_message(fw, 2, p1).ok());
  BOOST_TEST(!l.check_ps_message(fw, 4, p1).ok());
  BOOST_TEST(!l.check_ps_message(fw, 9, p2).ok());
  const ReplicaForward from_backup{{9, 1, 0}, 1, 0, false, ClockAdvance{{4, 1, 0}, 1}};
  BOOST_TEST(!l.check_ps_message(from_backup, 10, p2).ok());
  // An ack to another shard, from a worker, or with another member's key.
  BOOST_TEST(!l.check_ps_message(ReplicaAck{{9, 1, 0}, 1}, 2, p2).ok());
  BOOST_TEST(!l.check_ps_message(ReplicaAck{{4, 1, 0}, 1}, 1, w0).ok());
  BOOST_TEST(!l.check_ps_message(ReplicaAck{{9, 1, 0}, 1}, 1, p0).ok());
  // Clients never talk to a backup, nor a backup to them.
  BOOST_TEST(!l.check_ps_message(pull(4, 4), 9, w0).ok());
  BOOST_TEST(!l.check_ps_message(PushAck{{9, 1, 0}}, 4, p2).ok());
  BOOST_TEST(!l.check_ps_message(ClockAdvance{{9, 1, 0}, 2}, 1, p2).ok());
  // The coordinator cannot forward in a shard's name.
  BOOST_TEST(!l.check_ps_message(fw, 9, MessageOrigin::of_coordinator()).ok());

  // More replicas than ps members, or none.
  w.job.replicas = 4;
  BOOST_TEST(fails_with(w, "keeps 4 replicas of each shard"));
  w.job.replicas = 0;
  BOOST_TEST(fails_with(w, "keeps 0 replicas"));
}

// Failover: a shard moves only to a member that holds one of its backups; from then on its
// replies are taken from that member's key, and no longer from its first member's.
BOOST_AUTO_TEST_CASE(a_shard_moves_only_to_a_member_holding_its_backup) {
  // 2 ps members (shard 0 | shard 1), 1 worker member (replica 2); coordinator 3; with 2
  // replicas, backup 4 (of shard 0, on member 1) and 5 (of shard 1, on member 0).
  Welcome w;
  w.members = {member(MemberRole::ps, 1, "p0"), member(MemberRole::ps, 1, "p1"),
               member(MemberRole::worker, 1, "w0")};
  w.job.replicas = 2;
  w.coordinator_node = assign_nodes(w.members, false);
  w.map.shards = 2;
  w.workers_total = 1;
  auto made = ClusterLayout::make(w);
  BOOST_REQUIRE_MESSAGE(made.ok(), (made.ok() ? std::string() : made.status().message()));
  ClusterLayout l = *made;
  BOOST_REQUIRE((l.backups_of(1) == std::vector<NodeId>{5}));
  const PushAck ack{{1, 1, 0}};
  const auto p0 = MessageOrigin::of_member(0), p1 = MessageOrigin::of_member(1);
  BOOST_TEST(l.check_ps_message(ack, 2, p1).ok());
  BOOST_TEST(!l.check_ps_message(ack, 2, p0).ok());
  // Refused, changing nothing: member 1 holds no backup of shard 1, a worker none, node 5 is no
  // shard.
  BOOST_TEST(!l.move_shard(1, 1).ok());
  BOOST_TEST(!l.move_shard(1, 2).ok());
  BOOST_TEST(!l.move_shard(5, 0).ok());
  BOOST_TEST(*l.owner(1) == 1u);
  BOOST_TEST(l.check_move(1, 0).ok());
  BOOST_TEST(*l.owner(1) == 1u);
  BOOST_REQUIRE(l.move_shard(1, 0).ok());
  BOOST_TEST(*l.owner(1) == 0u);
  BOOST_TEST(l.check_ps_message(ack, 2, p0).ok());
  BOOST_TEST(!l.check_ps_message(ack, 2, p1).ok());
  // Member 1's ack is refused, but it served shard 1 before: late, not forged. Nobody else
  // served it, and member 1 never served shard 0.
  BOOST_TEST(l.served_before(ack, 2, p1));
  BOOST_TEST(!l.served_before(ack, 2, p0));
  BOOST_TEST(!l.served_before(ack, 2, MessageOrigin::of_member(2)));
  BOOST_TEST(!l.served_before(ack, 2, MessageOrigin::of_coordinator()));
  BOOST_TEST(!l.served_before(PushAck{{0, 1, 0}}, 2, p1));
  // What a shard never sends, in its name, is a lie still: a request, a reply to a shard, a
  // forward to a backup of another shard.
  BOOST_TEST(!l.served_before(PushRequest{{1, 1, 1}, 1, {7}, {}}, 0, p1));
  BOOST_TEST(!l.served_before(ack, 0, p1));
  const ReplicaForward forward{{1, 1, 0}, 1, 0, false, ClockAdvance{}};
  BOOST_TEST(l.served_before(forward, 5, p1));   // to its own backup: late
  BOOST_TEST(!l.served_before(forward, 4, p1));  // to shard 0's backup: a lie
  BOOST_TEST(l.durable_shards());  // replicated: clients keep pushes until acknowledged
}

// Re-replication: a backup node is placed only on a ps member holding no other replica of its
// shard; from then on its acknowledgements are taken from that member's key. A Welcome's moves
// are replayed in order, and one the layout would refuse makes the Welcome refused.
BOOST_AUTO_TEST_CASE(a_backup_is_placed_only_where_its_shard_has_no_replica) {
  // 3 ps members (shards 0, 1, 2), 1 worker member (replica 3); coordinator 4; with 2 replicas,
  // backups 5 (of shard 0, on member 1), 6 (of shard 1, on member 2), 7 (of shard 2, on member 0).
  Welcome w;
  w.members = {member(MemberRole::ps, 1, "p0"), member(MemberRole::ps, 1, "p1"),
               member(MemberRole::ps, 1, "p2"), member(MemberRole::worker, 1, "w0")};
  w.job.replicas = 2;
  w.coordinator_node = assign_nodes(w.members, false);
  w.map.shards = 3;
  w.workers_total = 1;
  ClusterLayout l = ClusterLayout::make(w).value();
  BOOST_REQUIRE((l.backups_of(0) == std::vector<NodeId>{5}));
  // Refused, changing nothing: member 0 serves shard 0; a worker; no such member; no backup.
  BOOST_TEST(!l.place_backup(5, 0).ok());
  BOOST_TEST(!l.place_backup(5, 3).ok());
  BOOST_TEST(!l.place_backup(5, 9).ok());
  BOOST_TEST(!l.place_backup(1, 2).ok());
  BOOST_TEST(*l.owner(5) == 1u);
  const ReplicaAck ack{{5, 1, 0}, 1};
  BOOST_TEST(l.check_ps_message(ack, 0, MessageOrigin::of_member(1)).ok());
  BOOST_REQUIRE(l.place_backup(5, 2).ok());
  BOOST_TEST(*l.owner(5) == 2u);
  BOOST_TEST(l.check_ps_message(ack, 0, MessageOrigin::of_member(2)).ok());
  BOOST_TEST(!l.check_ps_message(ack, 0, MessageOrigin::of_member(1)).ok());
  BOOST_TEST((l.backup_nodes_of(2) == std::vector<NodeId>{5, 6}));
  // A copy goes as a forward does: from the shard to its own backup only.
  ReplicaCopy copy;
  copy.header = {0, 0, 0};
  BOOST_TEST(l.check_ps_message(copy, 5, MessageOrigin::of_member(0)).ok());
  BOOST_TEST(!l.check_ps_message(copy, 6, MessageOrigin::of_member(0)).ok());
  copy.header.sender = 3;
  BOOST_TEST(!l.check_ps_message(copy, 5, MessageOrigin::of_member(3)).ok());

  // Shard 1 fails over to member 2 (which holds backup 6); backup 6 is then placed on member 0,
  // and a member that served the shard cannot take its backup.
  Welcome moved = w;
  moved.you = 1;
  moved.placed = {{1, 2}, {6, 0}};
  ClusterLayout m = ClusterLayout::make(moved).value();
  BOOST_TEST(*m.owner(1) == 2u);
  BOOST_TEST(*m.owner(6) == 0u);
  BOOST_TEST(!m.check_place(6, 2).ok());
  // Out of order, the move of shard 1 finds its backup on member 0 and is refused; so is a
  // placement on the member serving the shard.
  moved.placed = {{6, 0}, {1, 2}};
  BOOST_TEST(fails_with(moved, "the layout's move of node 1 to member 2"));
  moved.placed = {{1, 2}, {6, 2}};
  BOOST_TEST(fails_with(moved, "serves shard 1"));
  moved.placed = {{5, 7}};
  BOOST_TEST(fails_with(moved, "no ps member"));
}
