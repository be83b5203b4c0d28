// The dense all-reduce tree (worker/dense_tree.h), driven by hand, and its use in an aggregator
// core. The tree: two node aggregators, the root (node 10, replicas 1 and 2) and another
// (node 11, replicas 3 and 4).
#define BOOST_TEST_MODULE dense_tree_test
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <map>

#include "common/hash.h"
#include "worker/aggregator_core.h"
#include "worker/dense_tree.h"

using namespace colony;

namespace {

constexpr size_t params = 37;
constexpr NodeId root_id = 10, other_id = 11;

struct Tree {
  std::unique_ptr<Reducer> reducer = make_cpu_reducer();
  std::optional<DenseTree> root, other;
  std::map<NodeId, std::vector<DenseBroadcast>> received;  // by replica

  Tree() {
    root.emplace(
        DenseTree::make({root_id, params, {1, 2, other_id}, std::nullopt}, *reducer).value());
    other.emplace(DenseTree::make({other_id, params, {3, 4}, root_id}, *reducer).value());
  }
  // Delivers `out` and everything it causes; replicas collect their broadcasts.
  void deliver(Outbox out) {
    while (!out.empty()) {
      Outgoing o = std::move(out.front());
      out.erase(out.begin());
      Outbox next;
      if (auto* r = std::get_if<DenseReduce>(&o.message)) {
        BOOST_REQUIRE(o.to == root_id);
        BOOST_REQUIRE(root->on_reduce(*r, 1, next).ok());
      } else {
        auto& b = std::get<DenseBroadcast>(o.message);
        if (o.to == other_id)
          BOOST_REQUIRE(other->on_broadcast(b, 1, next).ok());
        else
          received[o.to].push_back(b);
      }
      out.insert(out.end(), next.begin(), next.end());
    }
  }
  // Replica `r` sends step `step`.
  void send(NodeId r, uint32_t step, uint64_t samples, std::vector<float> values) {
    Outbox out;
    DenseReduce m{{r, 1, 1}, step, samples, std::move(values)};
    BOOST_REQUIRE((r <= 2 ? root : other)->on_reduce(m, 1, out).ok());
    deliver(std::move(out));
  }
};

std::vector<float> random_vector(uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> v(params);
  for (float& x : v) x = static_cast<float>(rng.uniform() * 2.0 - 1.0);
  return v;
}

std::vector<float> add(std::vector<float> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

bool same_bits(const FloatBuffer& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), b.size() * sizeof(float)) == 0;
}

// The root's aggregator core (replicas 1 and 2, peer node 11), with dense layers of
// `dense_params` floats (0: an LR or FM job).
std::unique_ptr<AggregatorCore> root_aggregator(size_t dense_params) {
  AggregatorConfig c;
  c.id = root_id;
  c.width = 1;
  c.map.shards = 1;
  c.shard_nodes = {0};
  c.replicas = {1, 2};
  c.dense_params = dense_params;
  if (dense_params > 0) c.dense_peers = {other_id};
  return std::move(AggregatorCore::make(c, make_cpu_reducer()).value());
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_replica_gets_the_same_sum_in_the_fixed_order) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Tree t;
    std::vector<std::vector<float>> g;
    for (int r = 0; r < 4; ++r) g.push_back(random_vector(seed * 10 + r));
    // Arrival order varies with the seed; the sum does not.
    std::vector<NodeId> order{1, 2, 3, 4};
    SplitMix64 rng(seed);
    for (size_t i = 3; i > 0; --i) std::swap(order[i], order[rng.next() % (i + 1)]);
    for (NodeId r : order) {
      BOOST_TEST(t.received.empty());  // nothing comes back before everyone has sent
      t.send(r, 0, 100 + r, g[r - 1]);
    }
    // The root's children in order: replica 1, replica 2, node 11's sum (replica 3 + 4).
    const std::vector<float> expect = add(add(g[0], g[1]), add(g[2], g[3]));
    for (NodeId r : {1u, 2u, 3u, 4u}) {
      BOOST_REQUIRE(t.received[r].size() == 1u);
      const DenseBroadcast& b = t.received[r][0];
      BOOST_TEST(b.step == 0u);
      BOOST_TEST(b.samples == 101u + 102u + 103u + 104u);
      BOOST_TEST(same_bits(b.values, expect));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_finished_replica_does_not_hold_up_the_others) {
  Tree t;
  Outbox out;
  BOOST_REQUIRE(t.other->on_reduce(DenseReduce{{4, 1, 1}, clock_done, 0, {}}, 1, out).ok());
  t.deliver(std::move(out));
  const auto g = random_vector(5);
  t.send(1, 0, 10, g);
  t.send(2, 0, 10, g);
  BOOST_TEST(t.received.empty());
  t.send(3, 0, 10, g);
  for (NodeId r : {1u, 2u, 3u}) BOOST_TEST(t.received[r].size() == 1u);
  BOOST_TEST(t.received.count(4) == 0u);
  BOOST_TEST(t.received[1][0].samples == 30u);
  // Then everyone finishes: with empty final contributions nothing more is broadcast.
  for (NodeId r : {1u, 2u, 3u}) {
    out.clear();
    BOOST_REQUIRE((r <= 2 ? t.root : t.other)
                      ->on_reduce(DenseReduce{{r, 2, 1}, clock_done, 0, {}}, 1, out)
                      .ok());
    t.deliver(std::move(out));
  }
  BOOST_TEST(t.root->done());
  BOOST_TEST(t.other->done());
  for (NodeId r : {1u, 2u, 3u}) BOOST_TEST(t.received[r].size() == 1u);
}

BOOST_AUTO_TEST_CASE(final_parameters_are_summed_for_averaging) {
  Tree t;
  std::vector<std::vector<float>> p;
  for (int r = 0; r < 4; ++r) p.push_back(random_vector(40 + r));
  for (NodeId r : {4u, 1u, 3u, 2u}) t.send(r, clock_done, 1, p[r - 1]);
  const std::vector<float> expect = add(add(p[0], p[1]), add(p[2], p[3]));
  for (NodeId r : {1u, 2u, 3u, 4u}) {
    BOOST_REQUIRE(t.received[r].size() == 1u);
    BOOST_TEST(t.received[r][0].step == clock_done);
    BOOST_TEST(t.received[r][0].samples == 4u);
    BOOST_TEST(same_bits(t.received[r][0].values, expect));
  }
  BOOST_TEST(t.root->done());
  BOOST_TEST(t.other->done());
}

BOOST_AUTO_TEST_CASE(protocol_violations_are_errors_that_change_nothing) {
  Tree t;
  Outbox out;
  const auto g = random_vector(9);
  auto reduce = [&](NodeId from, uint32_t step, std::vector<float> v) {
    return t.root->on_reduce(DenseReduce{{from, 1, 1}, step, 1, std::move(v)}, 1, out);
  };
  BOOST_TEST(!reduce(3, 0, g).ok());  // replica 3 is node 11's child, not the root's
  BOOST_TEST(!reduce(1, 0, std::vector<float>(params + 1)).ok());  // wrong size
  BOOST_TEST(!reduce(1, 0, {}).ok());  // only a final contribution may be empty
  BOOST_TEST(out.empty());
  BOOST_TEST(reduce(1, 0, g).ok());
  BOOST_TEST(!reduce(1, 0, g).ok());  // the same step twice
  BOOST_TEST(!reduce(1, 1, g).ok());  // the next step before step 0 was reduced
  BOOST_TEST(out.empty());
  // A broadcast from a node that is not the parent, or for a step nobody waits for.
  BOOST_TEST(!t.other->on_broadcast(DenseBroadcast{{1, 1, 1}, 0, 1, g}, 1, out).ok());
  BOOST_TEST(!t.other->on_broadcast(DenseBroadcast{{root_id, 1, 1}, 0, 1, g}, 1, out).ok());
  BOOST_TEST(!t.root->on_broadcast(DenseBroadcast{{root_id, 1, 1}, 0, 1, g}, 1, out).ok());
  BOOST_TEST(out.empty());
  // Finished, then sending again.
  BOOST_TEST(reduce(2, clock_done, {}).ok());
  BOOST_TEST(!reduce(2, 5, g).ok());
  // Bad configurations.
  auto reducer = make_cpu_reducer();
  BOOST_TEST(!DenseTree::make({1, params, {}, std::nullopt}, *reducer).ok());
  BOOST_TEST(!DenseTree::make({1, params, {2, 3, 2}, std::nullopt}, *reducer).ok());
  BOOST_TEST(!DenseTree::make({1, 0, {2}, std::nullopt}, *reducer).ok());
}

// In an aggregator core: a dense message from another aggregator (over the wire, from a listed
// member) that breaks the protocol is dropped and counted; one from the node's own replica is a
// bug, and stops the core.
BOOST_AUTO_TEST_CASE(an_aggregator_drops_a_peers_bad_dense_message_and_stops_on_its_replicas) {
  auto core = root_aggregator(params);
  Outbox out;
  core->on_message(DenseReduce{{other_id, 1, 1}, 0, 1, std::vector<float>(params + 1)}, out);
  core->on_message(DenseBroadcast{{other_id, 2, 1}, 0, 1, std::vector<float>(params)}, out);
  BOOST_TEST(core->error().ok());
  BOOST_TEST(core->stats().dense_refused == 2u);
  BOOST_TEST(!core->last_refusal().ok());
  BOOST_TEST(out.empty());
  // The peer's well-formed contribution still counts: with both replicas' the step completes.
  core->on_message(DenseReduce{{other_id, 3, 1}, 0, 1, random_vector(1)}, out);
  core->on_message(DenseReduce{{1, 1, 1}, 0, 1, random_vector(2)}, out);
  core->on_message(DenseReduce{{2, 1, 1}, 0, 1, random_vector(3)}, out);
  BOOST_TEST(out.size() == 3u);  // the broadcast to both replicas and the other aggregator
  core->on_message(DenseReduce{{1, 2, 1}, 1, 1, std::vector<float>(3)}, out);
  BOOST_TEST(!core->error().ok());
}

// An LR or FM job has no dense tree: a dense message from another aggregator is still only a
// dropped, counted message, never the end of the job.
BOOST_AUTO_TEST_CASE(an_aggregator_without_dense_layers_drops_dense_messages) {
  auto core = root_aggregator(0);
  Outbox out;
  core->on_message(DenseReduce{{other_id, 1, 1}, 0, 1, random_vector(4)}, out);
  core->on_message(DenseBroadcast{{other_id, 2, 1}, 0, 1, random_vector(5)}, out);
  BOOST_TEST(core->error().ok());
  BOOST_TEST(core->stats().dense_refused == 2u);
  BOOST_TEST(out.empty());
}
