// A shard restarted over its durable store, and the clients that resync with it
// (ShardCore::begin_resync, KvClient::resync): what the crash lost in flight is re-sent, nothing
// is applied twice (acknowledged or not: the store commits each sender's clock with its rows),
// and nothing is answered before every sender is back.
#define BOOST_TEST_MODULE resync_test
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>

#include "ps/shard_core.h"
#include "storage/store_spec.h"
#include "tests/temp_dir.h"
#include "worker/kv_client.h"

using namespace colony;
namespace fs = std::filesystem;

namespace {

struct TempDir : colony::testing::TempDir {
  TempDir() : colony::testing::TempDir("resync-test") {}
};

constexpr NodeId shard_node = 0, a = 10, b = 11;

ShardConfig config() {
  ShardConfig sc{shard_node, 0,
                 1,          default_optimizer_config(OptimizerKind::sgd),
                 RowInit{},  Consistency{ConsistencyKind::ssp, 1},
                 {a, b},     ShardMapSpec{1, 1, 16, 0}};
  sc.optimizer.lr = 1.0f;
  return sc;
}

// `new_job`: the store is opened for a job of its own, which forgets an earlier job's clocks (as
// the embedded cluster and a ps that is not resuming do).
// `tiered_none`: the tiered store under --durability none, whose acknowledged rows sit dirty in
// memory until a write-back.
std::unique_ptr<ShardCore> open_shard(const std::string& dir, bool new_job = false,
                                      bool tiered_none = false) {
  auto spec = parse_store_spec("rocksdb:" + dir, tiered_none ? 1 << 20 : 0).value();
  if (tiered_none) BOOST_REQUIRE(set_durability(spec, Durability::none).ok());
  const ShardConfig sc = config();
  auto store =
      open_shard_store(spec, StoreIdentity{"resync-test", 0, 1, ShardCore::row_floats(sc).value()});
  BOOST_REQUIRE_MESSAGE(store.ok(), (store.ok() ? std::string() : store.status().message()));
  if (new_job) BOOST_REQUIRE((*store)->clear_clocks().ok());
  return std::move(ShardCore::make(sc, std::move(store.value())).value());
}

std::unique_ptr<KvClient> client(NodeId id, size_t part_bytes = part_bytes_default) {
  return std::move(
      KvClient::make(
          {id, ShardMapSpec{1, 1, 16, 0}, {shard_node}, 1, true, ValueFormat::fp32, part_bytes})
          .value());
}

// Delivers every message of `out` for the shard to it and the replies to their clients.
void deliver(ShardCore& shard, Outbox& out, KvClient& ca, KvClient& cb) {
  Outbox replies;
  for (Outgoing& o : out) {
    BOOST_REQUIRE(o.to == shard_node);
    shard.on_message(o.message, replies);
  }
  out.clear();
  Outbox ignored;
  for (Outgoing& r : replies) (r.to == a ? ca : cb).on_message(r.message, ignored);
}

// The shard's process starts again over its store, and both clients resync with it.
std::unique_ptr<ShardCore> restart(const std::string& dir, KvClient& ca, KvClient& cb) {
  auto shard = open_shard(dir);
  shard->begin_resync();
  Outbox out;
  ca.resync(0, out);
  cb.resync(0, out);
  deliver(*shard, out, ca, cb);
  return shard;
}

float value(ShardCore& shard, uint64_t key) {
  float v = 0;
  shard.row_value(key, {&v, 1});
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_restarted_shard_gets_back_what_was_in_flight_and_nothing_twice) {
  TempDir dir;
  const std::vector<uint64_t> key = {42};
  auto ca = client(a), cb = client(b);
  float init = 0;
  {
    auto shard = open_shard(dir.path.string());
    init = value(*shard, 42);
    Outbox out, lost;
    // a's step 0 is applied and acknowledged; b's is applied but its ack is lost in the crash;
    // a's step 1 never arrives.
    ca->push(key, std::vector<float>{1.0f}, 1, out);
    deliver(*shard, out, *ca, *cb);
    cb->push(key, std::vector<float>{10.0f}, 1, out);
    Outbox acks;
    for (Outgoing& o : out) shard->on_message(o.message, acks);
    out.clear();
    ca->push(key, std::vector<float>{100.0f}, 2, lost);
    BOOST_TEST(value(*shard, 42) == init - 11.0f);
  }  // the process dies: only the committed rows survive

  auto shard = open_shard(dir.path.string());
  shard->begin_resync();
  BOOST_TEST(value(*shard, 42) == init - 11.0f);
  // A pull a sent before it heard of the restart is dropped (it will come again).
  std::vector<float> row(1);
  Outbox out;
  const auto pull = ca->pull(key, 2, a, row, out);
  deliver(*shard, out, *ca, *cb);
  BOOST_TEST(shard->stats().dropped_before_resync == 1u);
  // a resyncs: its lost push comes again, its pull is re-sent and waits for b.
  ca->resync(0, out);
  deliver(*shard, out, *ca, *cb);
  BOOST_TEST(!ca->done(pull));
  BOOST_TEST(value(*shard, 42) == init - 111.0f);
  // b resyncs: its unacknowledged push comes again, but the store committed b's clock with the
  // rows that push changed, so the shard acknowledges it as a duplicate: applied exactly once.
  cb->resync(0, out);
  deliver(*shard, out, *ca, *cb);
  BOOST_TEST(cb->pushes_resent() == 1u);
  BOOST_TEST(ca->pushes_resent() == 1u);
  BOOST_TEST(shard->stats().pushes_duplicate == 1u);
  BOOST_TEST(shard->stats().pushes_lost == 0u);  // every acknowledged push was committed
  BOOST_TEST(value(*shard, 42) == init - 111.0f);
  BOOST_TEST(ca->done(pull));
  BOOST_TEST(row[0] == init - 111.0f);
  BOOST_TEST(ca->open_tickets() == 0u);
  BOOST_TEST(cb->open_tickets() == 0u);
  const auto clocks = shard->sender_clocks();
  for (auto [node, clock] : clocks) BOOST_TEST(clock == (node == a ? 2u : 1u));
  // From here on the shard behaves as before: the next steps follow on.
  ca->push(key, std::vector<float>{1000.0f}, 3, out);
  deliver(*shard, out, *ca, *cb);
  BOOST_TEST(value(*shard, 42) == init - 1111.0f);
  BOOST_TEST(shard->error().ok());
}

// Pushes in parts across a restart (PushRequest::more): the parts a crashed shard kept were
// never applied, so they all come again and are applied once; a push applied whole before the
// crash, whose last acknowledgement was lost, comes again and is a duplicate.
BOOST_AUTO_TEST_CASE(a_push_in_parts_is_applied_once_across_a_restart) {
  TempDir dir;
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 200; ++k) keys.push_back(k * 7919);  // 3 parts of at most 85 keys
  auto ca = client(a, part_bytes_min), cb = client(b, part_bytes_min);
  auto grads = [&](float g) { return std::vector<float>(keys.size(), g); };
  std::vector<float> init(keys.size());
  auto values = [&](ShardCore& shard) {
    std::vector<float> v(keys.size());
    BOOST_REQUIRE(shard.row_values(keys, v).ok());
    return v;
  };
  {
    auto shard = open_shard(dir.path.string(), true);
    init = values(*shard);
    Outbox out, replies;
    ca->push(keys, grads(1.0f), 1, out);
    BOOST_REQUIRE_EQUAL(out.size(), 3u);
    deliver(*shard, out, *ca, *cb);
    // b's push is applied whole, but every acknowledgement of it is lost in the crash.
    cb->push(keys, grads(10.0f), 1, out);
    for (Outgoing& o : out) shard->on_message(o.message, replies);
    out.clear();
    // a's next push: only its first part arrives, and is kept.
    ca->push(keys, grads(100.0f), 2, out);
    shard->on_message(out.front().message, replies);
    out.clear();
    BOOST_TEST(shard->stats().push_parts == 2u * 2u + 1u);
    for (size_t i = 0; i < keys.size(); ++i) BOOST_TEST(values(*shard)[i] == init[i] - 11.0f);
  }  // the process dies

  auto shard = restart(dir.path.string(), *ca, *cb);
  BOOST_TEST(ca->pushes_resent() == 1u);
  BOOST_TEST(cb->pushes_resent() == 1u);
  BOOST_TEST(shard->stats().pushes_applied == 1u);    // a's step 2, all of it
  BOOST_TEST(shard->stats().pushes_duplicate == 1u);  // b's step 1
  // a's parts kept until its last; b's, of a step already applied, acknowledged and dropped.
  BOOST_TEST(shard->stats().push_parts == 2u);
  BOOST_TEST(shard->stats().push_parts_duplicate == 2u);
  const std::vector<float> after = values(*shard);
  for (size_t i = 0; i < keys.size(); ++i) BOOST_TEST(after[i] == init[i] - 111.0f);
  BOOST_TEST(ca->open_tickets() == 0u);
  BOOST_TEST(cb->open_tickets() == 0u);
  BOOST_TEST(shard->error().ok());
}

// A copy of a client's resync (the simulator's network duplicates messages to shards) that
// arrives after the first part of a push it re-sent is late: it must leave the kept part alone,
// or the push is applied without it. A newer resync from the same client (resyncing again after
// the first resync's other parts were lost) drops the kept parts without failing the client, which
// sends those pushes whole again.
BOOST_AUTO_TEST_CASE(a_resync_amid_a_push_in_parts_keeps_or_drops_its_parts_as_it_should) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 200; ++k) keys.push_back(k * 7919);  // 3 parts of at most 85 keys
  const std::vector<float> grads(keys.size(), 1.0f);
  for (bool newer : {false, true}) {
    BOOST_TEST_CONTEXT((newer ? "a newer resync" : "a late copy")) {
      TempDir dir;
      auto ca = client(a, part_bytes_min), cb = client(b, part_bytes_min);
      std::vector<float> init(keys.size()), after(keys.size());
      Outbox out;
      {
        auto shard = open_shard(dir.path.string(), true);
        BOOST_REQUIRE(shard->row_values(keys, init).ok());
        ca->push(keys, grads, 1, out);
        out.clear();  // the shard dies before any part arrives
      }
      auto shard = open_shard(dir.path.string());
      shard->begin_resync();
      ca->resync(0, out);
      cb->resync(0, out);
      BOOST_REQUIRE_EQUAL(out.size(), 5u);  // a's resync and 3 parts, b's resync
      Outbox replies, ignored;
      shard->on_message(out[0].message, replies);  // a's resync
      shard->on_message(out[1].message, replies);  // a's first part, kept
      if (newer) {
        // a resyncs again before the rest arrived: the rest of the first resync is not sent.
        Outbox again;
        ca->resync(0, again);
        out.erase(out.begin() + 2, out.begin() + 4);
        out.insert(out.end(), again.begin(), again.end());
      } else {
        Outbox discarded;  // the copy's replies go nowhere
        shard->on_message(out[0].message, discarded);
      }
      for (size_t i = 2; i < out.size(); ++i) shard->on_message(out[i].message, replies);
      for (Outgoing& r : replies) (r.to == a ? *ca : *cb).on_message(r.message, ignored);
      BOOST_TEST(ca->error().ok(), ca->error().message());
      BOOST_TEST(shard->error().ok());
      BOOST_TEST(shard->stats().pushes_applied == 1u);
      BOOST_REQUIRE(shard->row_values(keys, after).ok());
      for (size_t i = 0; i < keys.size(); ++i) BOOST_TEST(after[i] == init[i] - 1.0f);
      BOOST_TEST(ca->open_tickets() == 0u);
    }
  }
}

// Found by the simulator: a second resync from a sender (a ShardsRestarted seen twice, or one
// its process sent before it died, arriving after the coordinator declared it done) must not
// move its clock back; a pull-only client's resync (a replica under hierarchical push) is taken
// without a clock, before and after the shard's restart.
BOOST_AUTO_TEST_CASE(a_second_resync_never_moves_a_clock_back) {
  TempDir dir;
  auto shard = open_shard(dir.path.string());
  shard->begin_resync();
  Outbox out;
  constexpr NodeId puller = 12;  // not a sender
  shard->on_message(ClockAdvance{{a, 1, 1}, 3, true}, out);
  shard->on_message(ClockAdvance{{b, 1, 1}, 3, true}, out);
  shard->on_message(ClockAdvance{{puller, 1, 1}, 0, true}, out);
  BOOST_TEST(out.empty());
  BOOST_TEST(shard->min_clock() == 3u);
  // The coordinator declares b done (a resync, in case the shard still waited for b).
  shard->on_message(ClockAdvance{{b, 2, 1}, clock_done, true}, out);
  // b's old process's resync arrives late, and a's comes again: ordinary advances, duplicates.
  shard->on_message(ClockAdvance{{b, 3, 1}, 1, true}, out);
  shard->on_message(ClockAdvance{{a, 3, 1}, 2, true}, out);
  shard->on_message(ClockAdvance{{puller, 2, 1}, 0, true}, out);
  for (const Outgoing& o : out) BOOST_TEST(!std::holds_alternative<PsError>(o.message));
  BOOST_TEST(shard->min_clock() == 3u);
  for (auto [node, clock] : shard->sender_clocks())
    BOOST_TEST(clock == (node == b ? clock_done : 3u), "node " << node);
  // A shard that never restarted takes a pull-only client's resync without refusing it.
  TempDir other;
  auto fresh = open_shard(other.path.string());
  Outbox fresh_out;
  fresh->on_message(ClockAdvance{{puller, 1, 1}, 0, true}, fresh_out);
  BOOST_TEST(fresh_out.empty());
}

// Issue 14: a second job over the same store (the same job run again, or continued) counts its
// senders' clocks from 0 again. The first job's committed clocks must not stand for the second's:
// a restart in the second job would take its pushes for duplicates of the first's and drop them.
BOOST_AUTO_TEST_CASE(a_new_job_over_an_earlier_jobs_store_does_not_take_its_clocks) {
  TempDir dir;
  const std::vector<uint64_t> key = {42};
  {
    auto shard = open_shard(dir.path.string(), true);
    auto ca = client(a), cb = client(b);
    Outbox out;
    for (uint32_t step = 1; step <= 3; ++step) {
      ca->push(key, std::vector<float>{1.0f}, step, out);
      cb->push(key, std::vector<float>{1.0f}, step, out);
      deliver(*shard, out, *ca, *cb);
    }
  }  // the first job ends
  // The second job: its clients outlive its ps.
  auto ca = client(a), cb = client(b);
  float before = 0;
  {
    auto shard = open_shard(dir.path.string(), true);
    Outbox out;
    ca->push(key, std::vector<float>{1.0f}, 1, out);
    deliver(*shard, out, *ca, *cb);
    before = value(*shard, 42);
  }  // the second job's ps dies after a's step 1
  auto shard = restart(dir.path.string(), *ca, *cb);
  Outbox out;
  // a's step 2, and b's step 1 (b had not pushed in this job before the crash; the first job's
  // b reached step 3).
  ca->push(key, std::vector<float>{1.0f}, 2, out);
  cb->push(key, std::vector<float>{1.0f}, 1, out);
  deliver(*shard, out, *ca, *cb);
  BOOST_TEST(shard->stats().pushes_duplicate == 0u);
  BOOST_TEST(shard->stats().pushes_lost == 0u);
  BOOST_TEST(value(*shard, 42) == before - 2.0f);  // both applied
}

// Issue 14: a store that acknowledged pushes it had not made durable (the tiered store under
// --durability none, killed before a write-back) is caught at the resync and the loss counted:
// the steps up to each sender's last acknowledged push. A clock advance the crash swallowed is
// not a lost push: it carries no rows, and the resync's clock covers it.
BOOST_AUTO_TEST_CASE(acknowledged_pushes_a_store_lost_are_counted_at_the_resync) {
  TempDir dir;
  const std::vector<uint64_t> key = {42};
  auto ca = client(a), cb = client(b);
  {
    auto shard = open_shard(dir.path.string(), true, true);
    Outbox out;
    ca->push(key, std::vector<float>{1.0f}, 1, out);
    ca->push(key, std::vector<float>{1.0f}, 2, out);
    deliver(*shard, out, *ca, *cb);  // both acknowledged, both only in the cache
    ca->push({}, {}, 3, out);        // a clock advance, never delivered: the ps dies first
  }
  auto shard = open_shard(dir.path.string(), false, true);
  shard->begin_resync();
  Outbox out;
  ca->resync(0, out);
  cb->resync(0, out);
  deliver(*shard, out, *ca, *cb);
  BOOST_TEST(shard->stats().pushes_lost == 2u);
}

// A shard restarted mid-job checkpoints every 5 steps. Its process crashed with both senders at
// step 12, after the copy of step 10 was taken: its rows are past step 10 now, so once every
// sender has resynced it names no checkpoint for step 10 (whose complete copy, in its folder,
// another one would have collided with); the next, step 15, is due as usual. A pull-only client
// resyncing first changes nothing.
BOOST_AUTO_TEST_CASE(a_restarted_shard_takes_no_checkpoint_of_the_steps_it_resumed_past) {
  ShardConfig sc = config();
  sc.checkpoint_every = 5;
  auto shard = std::move(ShardCore::make(sc).value());
  shard->begin_resync();
  Outbox out;
  uint64_t id = 1;
  shard->on_message(ClockAdvance{{a + 7, id++, 1}, 0, /*resync=*/true}, out);  // pulls only
  for (NodeId n : {a, b}) {
    shard->on_message(ClockAdvance{{n, id++, 1}, 12, /*resync=*/true}, out);
    BOOST_TEST(!shard->checkpoint_due().has_value());
  }
  BOOST_TEST(shard->min_clock() == 12u);
  for (uint32_t clock = 13; clock <= 15; ++clock)
    for (NodeId n : {a, b}) shard->on_message(ClockAdvance{{n, id++, 1}, clock}, out);
  BOOST_TEST((shard->checkpoint_due() == std::optional<uint32_t>(15)));
}

// A restarted shard drops pull hints while it waits for its senders' resyncs, and takes them
// again (its store reads their rows ahead) once every sender has resynced: before, it dropped
// every hint for the rest of the job.
BOOST_AUTO_TEST_CASE(a_restarted_shard_takes_pull_hints_again_once_every_sender_resynced) {
  auto shard = std::move(ShardCore::make(config()).value());
  shard->begin_resync();
  Outbox out;
  const PullHint hint{{a, 1, 1}, {1, 2, 3}};
  shard->on_message(hint, out);
  shard->on_message(ClockAdvance{{a, 2, 1}, 4, /*resync=*/true}, out);
  shard->on_message(hint, out);
  BOOST_TEST(shard->stats().hints_dropped == 2u);
  shard->on_message(ClockAdvance{{b, 3, 1}, 4, /*resync=*/true}, out);
  shard->on_message(hint, out);
  BOOST_TEST(shard->stats().hints == 1u);
  BOOST_TEST(shard->stats().hints_dropped == 2u);
  BOOST_TEST(out.empty());  // hints are never answered
}
