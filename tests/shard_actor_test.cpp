// The shard actor (actors/core_actors.h shard_fun) of a replicated shard on its own: which
// replica acknowledgements it takes, which it drops as late, which it counts as lies, and what
// a promoted backup reports as served.
#define BOOST_TEST_MODULE shard_actor_test
#include <boost/test/unit_test.hpp>
#include <memory>

#include "actors/core_actors.h"
#include "ps/replication.h"
#include "ps/shard_map.h"

using namespace colony;

namespace {

constexpr NodeId shard_node = 1, client = 4;

std::unique_ptr<ShardCore> make_core() {
  ShardConfig sc;
  sc.id = shard_node;
  sc.shard_index = shard_node;  // node and index alike: the shards are nodes 0 and 1
  sc.width = 2;
  sc.optimizer = default_optimizer_config(OptimizerKind::sgd);
  sc.init = RowInit{0, 2, 0.0f};
  sc.senders = {client};
  sc.map = ShardMapSpec{1, 2, 16, 0};  // shards 0 and 1
  return std::move(ShardCore::make(sc).value());
}

struct Served {
  uint64_t bad_messages = UINT64_MAX;  // the shard's summary's: replica acks refused
  uint64_t rows = UINT64_MAX;          // the rows served it told JobShared (for the heartbeats)
};

// What a shard actor over `core` (a primary without backups, as a promoted backup under
// replicated:2 is) counted after `acks`, when its own node as a backup was `promoted_from`
// (nullopt: a primary as built).
Served serve(std::shared_ptr<ShardCore> core, std::optional<NodeId> promoted_from,
             const std::vector<ReplicaAck>& acks) {
  SystemConfig config{1, false};
  caf::actor_system system{config};
  auto shared = std::make_shared<JobShared>();
  shared->nodes.resize(8);
  for (NodeId s = 0; s <= shard_node; ++s) {
    shared->shard_rows.emplace_back(0);
    shared->shard_rows_pulled.emplace_back(0);
    shared->shard_bytes.emplace_back(0);
  }
  auto replication = std::make_shared<ShardReplication>(ShardReplication{
      std::move(ShardPrimary::make(*core, 0).value()), std::vector<NodeId>{}, promoted_from});
  auto shard = system.spawn(shard_fun, core, shared, replication);
  for (const ReplicaAck& ack : acks) caf::anon_send(shard, ack);
  Served served;
  caf::scoped_actor self{system};
  self->request(shard, caf::infinite, summary_atom::value)
      .receive([&](const ShardSummary& s) { served.bad_messages = s.bad_messages; },
               [](caf::error&) {});
  served.rows = shared->shard_rows[shard_node].load();
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  return served;
}

}  // namespace

// A promoted backup's last acknowledgements to the lost primary reach the shard actor that now
// serves in its place: dropped, not counted. Any other node's is no backup's of this shard.
BOOST_AUTO_TEST_CASE(a_promoted_shard_drops_its_former_backups_acks_and_counts_others) {
  const ReplicaAck own{{5, 0, 0}, 3}, other{{6, 0, 0}, 3};
  BOOST_TEST(serve(make_core(), NodeId{5}, {own, own, other}).bad_messages == 1u);
  BOOST_TEST(serve(make_core(), std::nullopt, {own, own, other}).bad_messages == 3u);
}

// The rows a promoted backup's core applied as a backup were served by the lost primary (whose
// heartbeats counted them): the shard actor that serves it now counts from there.
BOOST_AUTO_TEST_CASE(a_promoted_backup_counts_no_row_it_applied_as_a_backup) {
  auto primary_core = make_core();
  auto primary = std::move(ShardPrimary::make(*primary_core, 1).value());
  auto backup = std::move(ShardBackup::make(make_core()).value());
  Outbox out;
  std::vector<ReplicaForward> forwards;
  const ShardMap map = ShardMap::make(primary_core->config().map).value();
  std::vector<uint64_t> keys;  // two keys of this shard
  for (uint64_t key = 1; keys.size() < 2 && key < 1000; ++key)
    if (map.shard_of(key) == shard_node) keys.push_back(key);
  BOOST_REQUIRE_EQUAL(keys.size(), 2u);
  primary->on_message(
      PushRequest{{client, 1, 1}, 1, keys, FloatBuffer(std::vector<float>{-1, -1, -1, -1})}, out,
      forwards);
  BOOST_REQUIRE_EQUAL(forwards.size(), 1u);
  BOOST_REQUIRE(backup->on_forward(forwards[0]).ok());
  BOOST_REQUIRE_EQUAL(backup->core().stats().rows_pushed, 2u);
  std::shared_ptr<ShardCore> promoted = std::move(backup->promote(0).core);
  BOOST_TEST(serve(promoted, NodeId{5}, {{{6, 0, 0}, 1}}).rows == 0u);
}
