// The shard actor (actors/core_actors.h shard_fun) of a replicated shard on its own: which
// replica acknowledgements it takes, which it drops as late, and which it counts as lies.
#define BOOST_TEST_MODULE shard_actor_test
#include <boost/test/unit_test.hpp>
#include <memory>

#include "actors/core_actors.h"
#include "ps/replication.h"

using namespace colony;

namespace {

constexpr NodeId shard_node = 1;

// How many bad messages (replica acks refused) a shard actor counted after `acks`, when it
// serves as a promoted backup whose own node was `promoted_from` (nullopt: a primary as built).
uint64_t acks_refused(std::optional<NodeId> promoted_from, const std::vector<ReplicaAck>& acks) {
  SystemConfig config{1, false};
  caf::actor_system system{config};
  auto shared = std::make_shared<JobShared>();
  shared->nodes.resize(8);
  ShardConfig sc;
  sc.id = shard_node;
  sc.width = 2;
  sc.optimizer = default_optimizer_config(OptimizerKind::sgd);
  sc.init = RowInit{0, 2, 0.0f};
  sc.senders = {4};
  sc.map = ShardMapSpec{2, 1, 16, 0};
  std::shared_ptr<ShardCore> core = std::move(ShardCore::make(sc).value());
  // Promoted under replicated:2: no backup left.
  auto replication = std::make_shared<ShardReplication>(ShardReplication{
      std::move(ShardPrimary::make(*core, 0).value()), std::vector<NodeId>{}, promoted_from});
  auto shard = system.spawn(shard_fun, core, shared, replication);
  for (const ReplicaAck& ack : acks) caf::anon_send(shard, ack);
  uint64_t refused = UINT64_MAX;
  caf::scoped_actor self{system};
  self->request(shard, caf::infinite, summary_atom::value)
      .receive([&](const ShardSummary& s) { refused = s.bad_messages; }, [](caf::error&) {});
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  return refused;
}

}  // namespace

// A promoted backup's last acknowledgements to the lost primary reach the shard actor that now
// serves in its place: dropped, not counted. Any other node's is no backup's of this shard.
BOOST_AUTO_TEST_CASE(a_promoted_shard_drops_its_former_backups_acks_and_counts_others) {
  const ReplicaAck own{{5, 0, 0}, 3}, other{{6, 0, 0}, 3};
  BOOST_TEST(acks_refused(NodeId{5}, {own, own, other}) == 1u);
  BOOST_TEST(acks_refused(std::nullopt, {own, own, other}) == 3u);
}
