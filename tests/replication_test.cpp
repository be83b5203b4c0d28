// Primary-backup replication of a shard (ps/replication.h), driven as the drivers will: real
// ShardCores and KvClients exchanging messages over FIFO links in a seeded random order, the
// primary crashing at a random moment (the forwards in flight to its backups cut at a random
// point, what it held lost), a backup promoted and the clients told of it one by one, later. Every
// push adds 1 to each of its rows (SGD, step 1, gradient -1), so a row's final value counts the
// pushes applied to it: the checker compares it with the pushes the clients made, and counts what
// was lost and what was applied twice. Broken variants of the replication must be caught.
#define BOOST_TEST_MODULE replication_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/hash.h"
#include "ps/replication.h"
#include "tests/test_shard.h"
#include "worker/kv_client.h"

using namespace colony;

namespace {

constexpr NodeId shard_node = 0;
constexpr NodeId first_client = 10;
constexpr uint64_t key_space = 300;
constexpr size_t width = 2;
const ShardMapSpec map_spec{1, 1, 16, 0};

// A forward made by hand (a lie, or one out of order), from the primary's node.
ReplicaForward forward(uint64_t seq, std::variant<PushRequest, ClockAdvance> message,
                       uint64_t committed = 0, bool keys_filled = false) {
  return {{shard_node, seq, 1}, seq, committed, keys_filled, std::move(message)};
}

ShardConfig shard_config(const std::vector<NodeId>& senders, Consistency consistency) {
  ShardConfig sc;
  sc.id = shard_node;
  sc.width = width;
  sc.optimizer = default_optimizer_config(OptimizerKind::sgd);
  sc.optimizer.lr = 1.0f;
  sc.init = RowInit{0, width, 0.0f};  // every row starts at zero
  sc.consistency = consistency;
  sc.senders = senders;
  sc.map = map_spec;
  return sc;
}

std::unique_ptr<ShardCore> make_core(const ShardConfig& sc) {
  return std::move(ShardCore::make(sc).value());
}

// One client training `steps` steps: pull a batch's keys, push -1 for each, pull the next batch
// without waiting for the push's acknowledgement.
struct Client {
  NodeId id = 0;
  std::unique_ptr<KvClient> kv;
  uint32_t steps = 0;
  uint32_t step = 0;  // the step whose pull is next (or open)
  std::optional<KvClient::Ticket> pull;
  std::vector<uint64_t> keys;               // the open pull's keys
  std::deque<std::vector<float>> values{};  // pull buffers, kept until the run ends
  bool finished = false;
  bool told = true;  // has heard of the failover (resync sent)
};

struct Outcome {
  uint64_t lost = 0;         // row updates acknowledged or made that the final rows lack
  uint64_t twice = 0;        // row updates the final rows hold more than once
  uint64_t pushes_lost = 0;  // as the promoted shard counted them at the resyncs
  bool crashed = false;
  uint32_t failovers = 0;
  bool finished = false;  // every client done, no error
  std::string error;
  bool backups_equal = true;     // every live backup holds the primary's rows
  bool ack_refused = false;      // a backup acknowledged forwards its primary never sent
  uint32_t rebuilt = 0;          // backups made anew from the primary
  bool forward_refused = false;  // a backup lacked forwards it was sent after
};

struct Run {
  SplitMix64 rng;
  ReplicationFaults faults;
  std::vector<Client> clients;
  std::unique_ptr<ShardCore> core;  // the primary's
  std::unique_ptr<ShardPrimary> primary;
  std::vector<std::unique_ptr<ShardBackup>> backups;  // null once crashed or promoted
  std::deque<std::pair<size_t, PsMessage>> to_shard;  // (client, message), one FIFO per sender
  std::vector<std::deque<PsMessage>> to_client;
  std::vector<std::deque<ReplicaForward>> forwards;  // by backup
  std::vector<std::deque<ReplicaAck>> acks;          // by backup
  std::vector<uint64_t> expected = std::vector<uint64_t>(key_space, 0);
  Outcome outcome;

  bool promote_behind = false;  // a driver that promotes the backup that applied the fewest
  // Re-replication: a lost or promoted backup is replaced by a copy of the primary (at a random
  // moment), and the primary may crash once more than it has backups. `rebuild_unkept`: a broken
  // driver that gives the new backup none of the forwards the others lack.
  bool rebuild = false, rebuild_unkept = false;
  size_t backups_wanted = 0;
  explicit Run(uint64_t seed, ReplicationFaults f, bool behind = false)
      : rng(seed), faults(f), promote_behind(behind) {}
  uint64_t below(uint64_t n) { return rng.next() % n; }

  void send(size_t c, Outbox& out) {
    for (Outgoing& o : out) {
      BOOST_REQUIRE(o.to == shard_node);
      to_shard.emplace_back(c, std::move(o.message));
    }
    out.clear();
  }
  void reply(Outbox& out) {
    for (Outgoing& o : out) to_client[o.to - first_client].push_back(std::move(o.message));
    out.clear();
  }

  // The client's next move, when it has one.
  bool act(size_t c) {
    Client& cl = clients[c];
    if (cl.finished || !cl.told) return false;
    Outbox out;
    if (cl.pull && cl.kv->done(*cl.pull)) {
      std::vector<float> grads(cl.keys.size() * width, -1.0f);
      for (uint64_t k : cl.keys) ++expected[k];
      cl.kv->push(cl.keys, grads, cl.step + 1, out);
      cl.pull.reset();
      ++cl.step;
    } else if (!cl.pull && cl.step < cl.steps) {
      const size_t n = 1 + below(150);
      cl.keys.clear();
      for (uint64_t k = below(key_space); cl.keys.size() < n; k = (k + 1 + below(7)) % key_space)
        if (std::find(cl.keys.begin(), cl.keys.end(), k) == cl.keys.end()) cl.keys.push_back(k);
      cl.values.emplace_back(cl.keys.size() * width);
      cl.pull = cl.kv->pull(cl.keys, cl.step, cl.id, cl.values.back(), out);
    } else if (!cl.pull && cl.step == cl.steps) {
      cl.kv->finish(out);
      cl.finished = true;
    } else {
      return false;
    }
    send(c, out);
    return true;
  }

  // The primary dies; the backup that applied the most forwards (or, for `promote_behind`, the
  // fewest) becomes the shard, and the other live backups its backups.
  void crash_primary() {
    outcome.crashed = true;
    ++outcome.failovers;
    primary.reset();  // what it held back dies with it
    core.reset();
    to_shard.clear();
    for (auto& q : to_client)  // what it had sent may or may not arrive
      q.resize(below(q.size() + 1));
    std::vector<size_t> live;
    for (size_t b = 0; b < backups.size(); ++b) {
      acks[b].clear();
      if (!backups[b]) continue;
      // A random prefix of the forwards in flight arrives before the link breaks.
      forwards[b].resize(below(forwards[b].size() + 1));
      while (!forwards[b].empty()) {
        BOOST_REQUIRE(backups[b]->on_forward(forwards[b].front()).ok());
        forwards[b].pop_front();
      }
      live.push_back(b);
    }
    BOOST_REQUIRE(!live.empty());
    auto by_applied = [&](size_t x, size_t y) {
      return backups[x]->applied() < backups[y]->applied();
    };
    const size_t next = promote_behind ? *std::min_element(live.begin(), live.end(), by_applied)
                                       : *std::max_element(live.begin(), live.end(), by_applied);
    ShardBackup::Promotion p = backups[next]->promote(static_cast<uint32_t>(live.size() - 1));
    core = std::move(p.core);
    primary = std::move(p.primary);
    std::vector<std::unique_ptr<ShardBackup>> rest;
    for (size_t b : live)
      if (b != next) rest.push_back(std::move(backups[b]));
    backups = std::move(rest);
    forwards.assign(backups.size(), std::deque<ReplicaForward>(p.resend.begin(), p.resend.end()));
    acks.assign(backups.size(), {});
    for (Client& cl : clients) cl.told = false;
  }

  void crash_backup(size_t b) {
    backups[b].reset();
    forwards[b].clear();
    acks[b].clear();
    Outbox out;
    BOOST_REQUIRE(primary->on_backup_lost(static_cast<uint32_t>(b), out).ok());
    reply(out);
  }

  // A new backup: the primary's rows and state copied as they are now, in this process
  // (ShardCore::replica) or, every other time, as another process gets them (send_copy, in parts
  // of a random size, taken by a BackupCopy).
  void rebuild_backup() {
    ++outcome.rebuilt;
    if (below(2) == 0) {
      ShardPrimary::NewBackup added = primary->add_backup();
      BOOST_REQUIRE(added.backup == backups.size());
      auto copy = BackupCopy::make(
          core->config(), std::make_unique<MemoryRowStore>(core->store().row_floats()), faults);
      BOOST_REQUIRE(copy.ok());
      std::vector<ReplicaCopy> parts;
      BOOST_REQUIRE(send_copy(*core, std::move(added), 1 + below(64), [&](ReplicaCopy&& part) {
                      parts.push_back(std::move(part));
                    }).ok());
      if (rebuild_unkept) parts.back().kept.clear();
      for (const ReplicaCopy& part : parts) BOOST_REQUIRE((*copy)->on_part(part).ok());
      backups.push_back((*copy)->take());
      BOOST_REQUIRE(backups.back());
    } else {
      const RowStore& from = core->store();
      auto store = std::make_unique<MemoryRowStore>(from.row_floats());
      BOOST_REQUIRE(from.for_each([&](uint64_t key, const float* row) {
                          std::copy(row, row + from.row_floats(), store->find_or_insert(key).first);
                        })
                        .ok());
      auto copy = core->replica(std::move(store));
      BOOST_REQUIRE(copy.ok());
      ShardPrimary::NewBackup added = primary->add_backup();
      BOOST_REQUIRE(added.backup == backups.size());
      if (rebuild_unkept) added.kept.clear();
      auto backup = ShardBackup::rebuilt(std::move(copy.value()), std::move(added), faults);
      BOOST_REQUIRE(backup.ok());
      backups.push_back(std::move(backup.value()));
    }
    forwards.emplace_back();
    acks.emplace_back();
  }

  size_t live_backups() const {
    return static_cast<size_t>(
        std::count_if(backups.begin(), backups.end(), [](const auto& b) { return b != nullptr; }));
  }

  Outcome go() {
    const size_t n = 2 + below(3);
    const uint32_t backup_count = 1 + static_cast<uint32_t>(below(2));
    const Consistency consistency =
        std::array{Consistency{ConsistencyKind::bsp, 0}, Consistency{ConsistencyKind::ssp, 2},
                   Consistency{ConsistencyKind::asp, 0}}[below(3)];
    const size_t part_bytes = below(2) ? part_bytes_min : part_bytes_default;
    std::vector<NodeId> senders;
    for (size_t c = 0; c < n; ++c) senders.push_back(first_client + static_cast<NodeId>(c));
    const ShardConfig sc = shard_config(senders, consistency);
    core = make_core(sc);
    primary = std::move(ShardPrimary::make(*core, backup_count, faults).value());
    for (uint32_t b = 0; b < backup_count; ++b)
      backups.push_back(std::move(ShardBackup::make(make_core(sc), faults).value()));
    forwards.resize(backup_count);
    acks.resize(backup_count);
    to_client.resize(n);
    for (size_t c = 0; c < n; ++c) {
      Client cl;
      cl.id = senders[c];
      KvClient::Options o{cl.id, map_spec, {shard_node}, width, true};
      o.part_bytes = part_bytes;
      cl.kv = std::move(KvClient::make(o).value());
      cl.steps = 6 + static_cast<uint32_t>(below(10));
      clients.push_back(std::move(cl));
    }
    // When the primary and a backup crash, in deliveries (never: past any run's end).
    // When the primary and a backup crash, in deliveries (never: past any run's end); with two
    // backups, the new primary may crash as well.
    const uint64_t primary_crash = below(5) ? below(250) : UINT64_MAX;
    const uint64_t second_crash =
        primary_crash == UINT64_MAX ? UINT64_MAX : primary_crash + 1 + below(250);
    const uint64_t backup_crash = below(4) ? UINT64_MAX : below(250);
    // With rebuilding: a third crash of whichever primary there is then.
    const uint64_t third_crash =
        rebuild && second_crash != UINT64_MAX ? second_crash + 1 + below(250) : UINT64_MAX;
    backups_wanted = backup_count;

    for (uint64_t tick = 0; tick < 1'000'000; ++tick) {
      if (tick == backup_crash && live_backups() > 1) {
        size_t b = below(backups.size());
        while (!backups[b]) b = (b + 1) % backups.size();
        crash_backup(b);
      }
      if ((tick == primary_crash || tick == second_crash || tick == third_crash) &&
          live_backups() > 0)
        crash_primary();
      if (rebuild && live_backups() < backups_wanted && below(20) == 0) rebuild_backup();
      // Every possible move, then one of them at random.
      std::vector<std::pair<int, size_t>> moves;
      if (!to_shard.empty()) moves.emplace_back(0, 0);
      for (size_t c = 0; c < n; ++c) {
        if (!to_client[c].empty()) moves.emplace_back(1, c);
        moves.emplace_back(2, c);
        if (!clients[c].told) moves.emplace_back(5, c);
      }
      for (size_t b = 0; b < backups.size(); ++b) {
        if (!forwards[b].empty()) moves.emplace_back(3, b);
        if (!acks[b].empty()) moves.emplace_back(4, b);
      }
      bool moved = false;
      while (!moved && !moves.empty()) {
        const size_t pick = below(moves.size());
        const auto [kind, i] = moves[pick];
        moves.erase(moves.begin() + static_cast<std::ptrdiff_t>(pick));
        Outbox out;
        std::vector<ReplicaForward> fw;
        switch (kind) {
          case 0: {  // the oldest message to the shard of a random sender
            const size_t c = to_shard[below(to_shard.size())].first;
            auto it = std::find_if(to_shard.begin(), to_shard.end(),
                                   [&](const auto& m) { return m.first == c; });
            PsMessage m = std::move(it->second);
            to_shard.erase(it);
            primary->on_message(m, out, fw);
            for (size_t b = 0; b < backups.size(); ++b)
              if (backups[b]) forwards[b].insert(forwards[b].end(), fw.begin(), fw.end());
            reply(out);
            moved = true;
            break;
          }
          case 1: {
            PsMessage m = std::move(to_client[i].front());
            to_client[i].pop_front();
            clients[i].kv->on_message(m, out);
            send(i, out);
            moved = true;
            break;
          }
          case 2:
            moved = act(i);
            break;
          case 3: {
            auto ack = backups[i]->on_forward(forwards[i].front());
            if (!ack.ok() && rebuild_unkept) {  // the broken driver's backup cannot follow
              outcome.error = ack.status().message();
              outcome.forward_refused = true;
              crash_backup(i);
              moved = true;
              break;
            }
            if (!ack.ok()) BOOST_FAIL(ack.status().message());
            forwards[i].pop_front();
            acks[i].push_back(*ack);
            moved = true;
            break;
          }
          case 4: {
            if (!primary->on_ack(static_cast<uint32_t>(i), acks[i].front(), out).ok())
              outcome.ack_refused = true;
            acks[i].pop_front();
            reply(out);
            moved = true;
            break;
          }
          case 5:  // the coordinator's word of the failover reaches this client
            clients[i].told = true;
            BOOST_REQUIRE(clients[i].kv->resync(0, out));
            send(i, out);
            moved = true;
            break;
        }
      }
      if (!moved) break;
    }

    outcome.finished = true;
    for (const Client& cl : clients) {
      if (!cl.kv->error().ok()) outcome.error = cl.kv->error().message();
      if (!cl.finished || cl.kv->open_tickets() != 0 || !cl.kv->error().ok())
        outcome.finished = false;
    }
    ShardCore& final_core = primary->core();
    outcome.pushes_lost = final_core.stats().pushes_lost;
    for (uint64_t k = 0; k < key_space; ++k) {
      float v[width];
      final_core.row_value(k, v);
      for (float x : v) {
        const auto got = static_cast<uint64_t>(x);
        BOOST_REQUIRE(float(got) == x);
        if (got < expected[k]) outcome.lost += expected[k] - got;
        if (got > expected[k]) outcome.twice += got - expected[k];
      }
      for (const auto& b : backups) {
        if (!b) continue;
        float w[width];
        const_cast<ShardCore&>(b->core()).row_value(k, w);
        if (!std::equal(v, v + width, w)) outcome.backups_equal = false;
      }
    }
    return outcome;
  }
};

Outcome run(uint64_t seed, ReplicationFaults faults = {}, bool promote_behind = false) {
  return Run(seed, faults, promote_behind).go();
}

Outcome run_rebuilding(uint64_t seed, bool unkept = false) {
  Run r(seed, {});
  r.rebuild = true;
  r.rebuild_unkept = unkept;
  return r.go();
}

// The invariants every run must keep: it finished, lost nothing and applied nothing twice, and
// its live backups hold the primary's rows.
void check_outcome(uint64_t seed, const Outcome& o) {
  BOOST_TEST_CONTEXT("seed " << seed) {
    BOOST_TEST(o.finished, o.error);
    BOOST_TEST(o.lost == 0u);
    BOOST_TEST(o.twice == 0u);
    BOOST_TEST(o.pushes_lost == 0u);
    BOOST_TEST(o.backups_equal);
    BOOST_TEST(!o.ack_refused);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(no_acknowledged_push_is_lost_or_applied_twice_across_failovers) {
  uint64_t crashed = 0, twice_over = 0;
  for (uint64_t seed = 1; seed <= 500; ++seed) {
    const Outcome o = run(seed);
    check_outcome(seed, o);
    crashed += o.crashed;
    twice_over += o.failovers > 1;
  }
  BOOST_TEST_MESSAGE(crashed << " of 500 runs lost their primary, " << twice_over
                             << " the promoted one as well");
  BOOST_TEST(crashed > 300u);
  BOOST_TEST(twice_over > 50u);
}

// Re-replication (ShardPrimary::add_backup): a backup lost or promoted is replaced, at a random
// moment, by a copy of the primary's core and rows (made in place, or sent in parts as between
// processes), which takes the primary's forwards from then on. The primary may crash three times
// with one or two backups: nothing acknowledged is lost, nothing is applied twice, and every live
// backup ends with the primary's rows. A driver that does not give the new backup the forwards the
// others still lack is caught: when the new backup is promoted, an older one cannot follow it.
BOOST_AUTO_TEST_CASE(a_rebuilt_backup_lets_a_shard_survive_more_crashes_than_it_has_backups) {
  uint64_t rebuilt = 0, beyond = 0;
  for (uint64_t seed = 1; seed <= 500; ++seed) {
    const Outcome o = run_rebuilding(seed);
    check_outcome(seed, o);
    rebuilt += o.rebuilt > 0;
    beyond += o.failovers == 3;
  }
  BOOST_TEST_MESSAGE(rebuilt << " of 500 runs rebuilt a backup, " << beyond
                             << " failed over three times");
  BOOST_TEST(rebuilt > 300u);
  BOOST_TEST(beyond > 100u);
}

BOOST_AUTO_TEST_CASE(a_rebuilt_backup_without_the_forwards_others_lack_is_caught) {
  uint64_t caught = 0;
  for (uint64_t seed = 1; seed <= 500; ++seed) caught += run_rebuilding(seed, true).forward_refused;
  BOOST_TEST_MESSAGE("a backup that could not follow caught in " << caught << " of 500 runs");
  BOOST_TEST(caught > 0u);
}

BOOST_AUTO_TEST_CASE(a_primary_that_acknowledges_before_its_backups_is_caught_losing_pushes) {
  uint64_t caught = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    const Outcome o = run(seed, {.ack_before_backups = true});
    if (o.lost > 0 && o.pushes_lost > 0) ++caught;
  }
  BOOST_TEST_MESSAGE("lost pushes caught in " << caught << " of 100 runs");
  BOOST_TEST(caught > 0u);
}

BOOST_AUTO_TEST_CASE(a_promoted_backup_that_forgets_its_clocks_is_caught_applying_pushes_twice) {
  uint64_t caught = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed)
    if (run(seed, {.promote_without_clocks = true}).twice > 0) ++caught;
  BOOST_TEST_MESSAGE("pushes applied twice caught in " << caught << " of 100 runs");
  BOOST_TEST(caught > 0u);
}

BOOST_AUTO_TEST_CASE(a_push_is_acknowledged_only_once_every_backup_has_it) {
  const std::vector<NodeId> senders = {first_client};
  const ShardConfig sc = shard_config(senders, {});
  auto core = make_core(sc);
  auto primary = std::move(ShardPrimary::make(*core, 2).value());
  auto b0 = std::move(ShardBackup::make(make_core(sc)).value());
  auto b1 = std::move(ShardBackup::make(make_core(sc)).value());
  PushRequest push{{first_client, 1, 1}, 1, {7}, FloatBuffer(std::vector<float>{-1.0f, -1.0f})};
  Outbox out;
  std::vector<ReplicaForward> fw;
  primary->on_message(push, out, fw);
  BOOST_TEST(out.empty());
  BOOST_REQUIRE(fw.size() == 1u);
  BOOST_TEST(fw[0].seq == 1u);
  const ReplicaAck a0 = b0->on_forward(fw[0]).value();
  BOOST_REQUIRE(primary->on_ack(0, a0, out).ok());
  BOOST_TEST(out.empty());  // one backup of two
  // A repeated forward is acknowledged again, not applied again.
  BOOST_TEST(b0->on_forward(fw[0]).value().seq == 1u);
  BOOST_REQUIRE(primary->on_ack(1, b1->on_forward(fw[0]).value(), out).ok());
  BOOST_REQUIRE(out.size() == 1u);
  BOOST_TEST(std::holds_alternative<PushAck>(out[0].message));
  float v[width];
  const_cast<ShardCore&>(b0->core()).row_value(7, v);
  BOOST_TEST(v[0] == 1.0f);
}

// A promoted backup resyncs with its clients (ShardCore::begin_takeover) and drops what a client
// sends before its resync: that client re-sends it after. Those messages must not reach the
// backups either, or a backup applies a push at another place in the order than the primary
// does (here before another sender's push to the same row, where the primary applies it after),
// and under a non-commutative optimizer (Adagrad) the replicas' rows differ.
BOOST_AUTO_TEST_CASE(what_a_resyncing_primary_drops_is_not_forwarded) {
  const NodeId a = first_client, b = first_client + 1;
  ShardConfig sc = shard_config({a, b}, {ConsistencyKind::asp, 0});
  sc.optimizer = default_optimizer_config(OptimizerKind::adagrad);
  auto old_core = make_core(sc);
  auto old_primary = std::move(ShardPrimary::make(*old_core, 2).value());
  std::vector<std::unique_ptr<ShardBackup>> backups;
  for (int i = 0; i < 2; ++i)
    backups.push_back(std::move(ShardBackup::make(make_core(sc)).value()));
  auto push = [](NodeId from, uint64_t id, uint32_t clock, float g) {
    return PushRequest{{from, id, 1}, clock, {7}, FloatBuffer(std::vector<float>{g, g})};
  };
  Outbox out;
  std::vector<ReplicaForward> fw;
  old_primary->on_message(push(a, 1, 1, 0.5f), out, fw);
  old_primary->on_message(push(b, 1, 1, -0.25f), out, fw);
  for (auto& backup : backups)
    for (const ReplicaForward& f : fw) BOOST_REQUIRE(backup->on_forward(f).ok());
  // The primary dies; backup 0 becomes the shard, backup 1 its backup.
  ShardBackup::Promotion p = backups[0]->promote(1);
  ShardBackup& other = *backups[1];
  auto deliver = [&](const PsMessage& m) {
    fw.clear();
    p.primary->on_message(m, out, fw);
    for (const ReplicaForward& f : fw) {
      auto ack = other.on_forward(f);
      BOOST_REQUIRE(ack.ok());
      BOOST_REQUIRE(p.primary->on_ack(0, *ack, out).ok());
    }
  };
  deliver(ClockAdvance{{b, 2, 1}, 1, true, 1});  // b has heard of the failover
  deliver(push(a, 2, 2, 1.0f));                  // a has not: the shard drops it
  BOOST_TEST(p.core->stats().dropped_before_resync == 1u);
  deliver(push(b, 2, 2, -2.0f));
  deliver(ClockAdvance{{a, 3, 1}, 1, true, 1});  // a resyncs and sends its push again
  deliver(push(a, 2, 2, 1.0f));
  float mine[width], theirs[width];
  p.core->row_value(7, mine);
  const_cast<ShardCore&>(other.core()).row_value(7, theirs);
  BOOST_TEST(mine[0] == theirs[0]);
  BOOST_TEST(mine[1] == theirs[1]);
  BOOST_TEST(other.core().stats().pushes_duplicate == p.core->stats().pushes_duplicate);
}

// A client whose last steps had no keys for this shard sent it only clock advances, which the
// primary took but never forwarded before it died: the client's resync names a clock two steps
// past what the promoted backup applied. The promoted core takes it (begin_takeover); the other
// backup must take the same clock, not refuse it as skipping steps, or it misses every later push
// of that client while acknowledging their forwards.
BOOST_AUTO_TEST_CASE(a_resync_that_skips_steps_moves_every_replica_alike) {
  const NodeId a = first_client;
  const ShardConfig sc = shard_config({a}, {ConsistencyKind::asp, 0});
  auto old_core = make_core(sc);
  auto old_primary = std::move(ShardPrimary::make(*old_core, 2).value());
  std::vector<std::unique_ptr<ShardBackup>> backups;
  for (int i = 0; i < 2; ++i)
    backups.push_back(std::move(ShardBackup::make(make_core(sc)).value()));
  KvClient::Options o{a, map_spec, {shard_node}, width, true};
  auto kv = std::move(KvClient::make(o).value());
  Outbox out, replies;
  std::vector<ReplicaForward> fw;
  const std::vector<uint64_t> keys{7};
  const std::vector<float> g(width, -1.0f);
  kv->push(keys, g, 1, out);
  for (Outgoing& m : out) old_primary->on_message(m.message, replies, fw);
  out.clear();
  for (auto& b : backups)
    for (const ReplicaForward& f : fw) BOOST_REQUIRE(b->on_forward(f).ok());
  for (uint32_t i = 0; i < 2; ++i)
    BOOST_REQUIRE(old_primary->on_ack(i, {{}, fw.back().seq}, replies).ok());
  for (Outgoing& r : replies) kv->on_message(r.message, out);
  replies.clear();
  kv->push({}, {}, 2, out);  // two steps with no keys here: clock advances, lost with the primary
  kv->push({}, {}, 3, out);
  BOOST_REQUIRE(out.size() == 2u);
  out.clear();
  ShardBackup::Promotion p = backups[0]->promote(1);
  ShardBackup& other = *backups[1];
  for (const ReplicaForward& f : p.resend) BOOST_REQUIRE(other.on_forward(f).ok());
  auto deliver = [&](const PsMessage& m) {
    fw.clear();
    p.primary->on_message(m, replies, fw);
    for (const ReplicaForward& f : fw) {
      auto ack = other.on_forward(f);
      BOOST_REQUIRE(ack.ok());
      BOOST_REQUIRE(p.primary->on_ack(0, *ack, replies).ok());
    }
  };
  BOOST_REQUIRE(kv->resync(0, out));
  for (Outgoing& m : out) deliver(m.message);
  out.clear();
  kv->push(keys, g, 4, out);
  for (Outgoing& m : out) deliver(m.message);
  BOOST_TEST(p.core->sender_clock(a).value_or(0) == 4u);
  BOOST_TEST(other.core().sender_clock(a).value_or(0) == 4u);
  float mine[width], theirs[width];
  p.core->row_value(7, mine);
  const_cast<ShardCore&>(other.core()).row_value(7, theirs);
  BOOST_TEST(mine[0] == 2.0f);
  BOOST_TEST(theirs[0] == 2.0f);
}

namespace {

// A push part: with its keys, or (kop != 0) naming the keys of pull `kop` instead.
PushRequest part(NodeId from, uint64_t id, uint32_t clock, std::vector<uint64_t> keys, bool more,
                 uint64_t kop = 0) {
  PushRequest p{
      {from, id, 1}, clock, keys, FloatBuffer(std::vector<float>(keys.size() * width, -1.0f))};
  p.more = more;
  p.keys_of_pull = kop;
  if (kop) p.keys.clear();
  return p;
}

}  // namespace

// A copy the network made of a push part (kept until the push's last part comes) is dropped by its
// request id, on the primary and on the backup alike: the part is applied once. A part naming the
// keys of a pull keeps naming it when forwarded with those keys, so the backup checks it as the
// primary does.
BOOST_AUTO_TEST_CASE(a_copy_of_a_push_part_is_applied_once_on_every_replica) {
  for (bool named : {false, true}) {
    BOOST_TEST_CONTEXT((named ? "parts naming their pulls" : "parts with their keys")) {
      const NodeId a = first_client;
      const ShardConfig sc = shard_config({a}, {ConsistencyKind::asp, 0});
      auto core = make_core(sc);
      auto primary = std::move(ShardPrimary::make(*core, 1).value());
      auto backup = std::move(ShardBackup::make(make_core(sc)).value());
      Outbox out;
      std::vector<ReplicaForward> fw;
      primary->on_message(PullRequest{{a, 1, 1}, 0, a, {1}}, out, fw);
      primary->on_message(PullRequest{{a, 2, 1}, 0, a, {2}}, out, fw);
      const PushRequest p1 = part(a, 3, 1, {1}, true, named ? 1 : 0);
      const PushRequest p2 = part(a, 4, 1, {2}, false, named ? 2 : 0);
      primary->on_message(p1, out, fw);
      primary->on_message(p1, out, fw, /*discard_replies=*/true);
      primary->on_message(p2, out, fw);
      for (const ReplicaForward& f : fw)
        BOOST_REQUIRE(primary->on_ack(0, backup->on_forward(f).value(), out).ok());
      // A late copy of the first part, after the push was applied: dropped (acknowledged), and
      // the sender's next push is taken, not refused as coming while a push was unfinished.
      fw.clear();
      out.clear();
      primary->on_message(p1, out, fw, /*discard_replies=*/true);
      primary->on_message(part(a, 5, 2, {1}, false), out, fw);
      for (const ReplicaForward& f : fw)
        BOOST_REQUIRE(primary->on_ack(0, backup->on_forward(f).value(), out).ok());
      BOOST_REQUIRE(out.size() == 1u);
      BOOST_TEST(std::holds_alternative<PushAck>(out[0].message));
      BOOST_TEST(core->stats().push_parts_duplicate == 2u);
      BOOST_TEST(backup->core().stats().push_parts_duplicate == 2u);
      for (uint64_t k : {1, 2}) {
        float mine[width], theirs[width];
        core->row_value(k, mine);
        const_cast<ShardCore&>(backup->core()).row_value(k, theirs);
        BOOST_TEST(mine[0] == (k == 1 ? 2.0f : 1.0f), "key " << k);
        BOOST_TEST(theirs[0] == mine[0], "key " << k);
      }
    }
  }
}

// A copy of a client's resync that comes after the first part of a push it sent after the resync
// is late: the primary and its backup both keep the part, and the push is applied whole on both.
BOOST_AUTO_TEST_CASE(a_late_copy_of_a_resync_leaves_a_push_in_parts_whole_on_every_replica) {
  const NodeId a = first_client;
  const ShardConfig sc = shard_config({a}, {ConsistencyKind::asp, 0});
  auto core = make_core(sc);
  auto primary = std::move(ShardPrimary::make(*core, 1).value());
  auto backup = std::move(ShardBackup::make(make_core(sc)).value());
  Outbox out;
  std::vector<ReplicaForward> fw;
  const ClockAdvance resync{{a, 3, 1}, 0, true};
  primary->on_message(resync, out, fw);
  primary->on_message(part(a, 4, 1, {1}, true), out, fw);
  primary->on_message(resync, out, fw, /*discard_replies=*/true);
  primary->on_message(part(a, 5, 1, {2}, false), out, fw);
  for (const ReplicaForward& f : fw)
    BOOST_REQUIRE(primary->on_ack(0, backup->on_forward(f).value(), out).ok());
  for (const Outgoing& o : out) BOOST_TEST(!std::holds_alternative<PsError>(o.message));
  BOOST_TEST(core->stats().pushes_applied == 1u);
  for (uint64_t k : {1, 2}) {
    float mine[width], theirs[width];
    core->row_value(k, mine);
    const_cast<ShardCore&>(backup->core()).row_value(k, theirs);
    BOOST_TEST(mine[0] == 1.0f, "key " << k);
    BOOST_TEST(theirs[0] == mine[0], "key " << k);
  }
}

// A newer resync over kept parts (the first resync's other parts lost on the way) drops them on
// the primary and its backup alike, and the push the client sends again whole is applied once on
// both. After a failover under three replicas, the other backup drops the parts it kept from the
// lost primary's forwards at the client's resync with the promoted one, as that one has.
BOOST_AUTO_TEST_CASE(a_resync_over_kept_parts_drops_them_on_every_replica_alike) {
  const NodeId a = first_client;
  const ShardConfig sc = shard_config({a}, {ConsistencyKind::asp, 0});
  auto applied_once = [&](const ShardCore& mine, const ShardCore& theirs) {
    BOOST_TEST(mine.stats().pushes_applied == 1u);
    BOOST_TEST(theirs.stats().pushes_applied == 1u);
    for (uint64_t k : {1, 2}) {
      float m[width], t[width];
      const_cast<ShardCore&>(mine).row_value(k, m);
      const_cast<ShardCore&>(theirs).row_value(k, t);
      BOOST_TEST(m[0] == 1.0f, "key " << k);
      BOOST_TEST(t[0] == m[0], "key " << k);
    }
  };
  {
    auto core = make_core(sc);
    auto primary = std::move(ShardPrimary::make(*core, 1).value());
    auto backup = std::move(ShardBackup::make(make_core(sc)).value());
    Outbox out;
    std::vector<ReplicaForward> fw;
    primary->on_message(ClockAdvance{{a, 3, 1}, 0, true}, out, fw);
    primary->on_message(part(a, 4, 1, {1}, true), out, fw);  // kept; part 5 is lost
    primary->on_message(ClockAdvance{{a, 6, 1}, 0, true}, out, fw);
    primary->on_message(part(a, 7, 1, {1}, true), out, fw);
    primary->on_message(part(a, 8, 1, {2}, false), out, fw);
    for (const ReplicaForward& f : fw)
      BOOST_REQUIRE(primary->on_ack(0, backup->on_forward(f).value(), out).ok());
    for (const Outgoing& o : out) BOOST_TEST(!std::holds_alternative<PsError>(o.message));
    applied_once(*core, backup->core());
  }
  auto core = make_core(sc);
  auto primary = std::move(ShardPrimary::make(*core, 2).value());
  std::vector<std::unique_ptr<ShardBackup>> backups;
  for (int i = 0; i < 2; ++i)
    backups.push_back(std::move(ShardBackup::make(make_core(sc)).value()));
  Outbox out;
  std::vector<ReplicaForward> fw;
  primary->on_message(part(a, 4, 1, {1}, true), out, fw);
  for (auto& backup : backups)
    for (const ReplicaForward& f : fw) BOOST_REQUIRE(backup->on_forward(f).ok());
  // The primary dies before the push's last part; backup 0 is promoted, backup 1 follows it.
  ShardBackup::Promotion p = backups[0]->promote(1);
  ShardBackup& other = *backups[1];
  for (const ReplicaForward& f : p.resend)
    BOOST_REQUIRE(p.primary->on_ack(0, other.on_forward(f).value(), out).ok());
  out.clear();
  for (const PsMessage& m :
       {PsMessage(ClockAdvance{{a, 6, 1}, 0, true}), PsMessage(part(a, 7, 1, {1}, true)),
        PsMessage(part(a, 8, 1, {2}, false))}) {
    fw.clear();
    p.primary->on_message(m, out, fw);
    for (const ReplicaForward& f : fw)
      BOOST_REQUIRE(p.primary->on_ack(0, other.on_forward(f).value(), out).ok());
  }
  for (const Outgoing& o : out) BOOST_TEST(!std::holds_alternative<PsError>(o.message));
  applied_once(*p.core, other.core());
}

// A copy of a message the network made (the simulator's duplicates): forwarded like any other,
// so the backups see what the core saw, but its replies are dropped.
BOOST_AUTO_TEST_CASE(a_duplicate_is_forwarded_and_its_replies_dropped) {
  const ShardConfig sc = shard_config({first_client}, {});
  auto core = make_core(sc);
  auto primary = std::move(ShardPrimary::make(*core, 1).value());
  auto backup = std::move(ShardBackup::make(make_core(sc)).value());
  PushRequest push{{first_client, 1, 1}, 1, {7}, FloatBuffer(std::vector<float>{-1.0f, -1.0f})};
  Outbox out;
  std::vector<ReplicaForward> fw;
  primary->on_message(push, out, fw);
  primary->on_message(push, out, fw, /*discard_replies=*/true);
  BOOST_REQUIRE(fw.size() == 2u);
  for (const ReplicaForward& f : fw)
    BOOST_REQUIRE(primary->on_ack(0, backup->on_forward(f).value(), out).ok());
  BOOST_REQUIRE(out.size() == 1u);  // the original's acknowledgement only
  BOOST_TEST(std::holds_alternative<PushAck>(out[0].message));
  BOOST_TEST(core->stats().pushes_duplicate == 1u);
  BOOST_TEST(backup->core().stats().pushes_duplicate == 1u);
  float v[width];
  const_cast<ShardCore&>(backup->core()).row_value(7, v);
  BOOST_TEST(v[0] == 1.0f);  // applied once on both
  core->row_value(7, v);
  BOOST_TEST(v[0] == 1.0f);
}

// Found by tests/fuzz/core_fuzz.cpp: a push naming a pull of no keys (a client's lie, or its
// mistake) is forwarded with its keys filled in as none, and the backup takes it as the primary
// did (it used to refuse it, and could no longer follow its primary).
BOOST_AUTO_TEST_CASE(a_push_naming_a_pull_of_no_keys_is_taken_alike_by_every_replica) {
  const ShardConfig sc = shard_config({first_client}, {});
  auto core = make_core(sc);
  auto primary = std::move(ShardPrimary::make(*core, 1).value());
  auto backup = std::move(ShardBackup::make(make_core(sc)).value());
  Outbox out;
  std::vector<ReplicaForward> fw;
  primary->on_message(PullRequest{{first_client, 4, 1}, 0, first_client, {}}, out, fw);
  PushRequest push{{first_client, 5, 1}, 1, {}, FloatBuffer(std::vector<float>{})};
  push.keys_of_pull = 4;
  primary->on_message(push, out, fw);
  BOOST_REQUIRE(fw.size() == 1u);
  BOOST_TEST(fw[0].keys_filled);
  auto ack = backup->on_forward(fw[0]);
  BOOST_REQUIRE_MESSAGE(ack.ok(), (ack.ok() ? std::string() : ack.status().message()));
  BOOST_TEST((backup->core().sender_clocks() == core->sender_clocks()));
}

BOOST_AUTO_TEST_CASE(lies_and_gaps_on_the_replication_links_are_refused) {
  const ShardConfig sc = shard_config({first_client}, {});
  auto core = make_core(sc);
  auto primary = std::move(ShardPrimary::make(*core, 1).value());
  auto backup = std::move(ShardBackup::make(make_core(sc)).value());
  Outbox out;
  // An acknowledgement of a forward never sent, or from a backup that is not one.
  BOOST_TEST(!primary->on_ack(0, {{}, 5}, out).ok());
  BOOST_TEST(!primary->on_ack(3, {{}, 0}, out).ok());
  // One still on the way when its backup was declared lost is no lie: ignored.
  auto two_core = make_core(sc);
  auto two = std::move(ShardPrimary::make(*two_core, 2).value());
  std::vector<ReplicaForward> sent;
  Outbox replies;
  two->on_message(
      PushRequest{{first_client, 1, 1}, 1, {7}, FloatBuffer(std::vector<float>{-1.0f, -1.0f})},
      replies, sent);
  BOOST_REQUIRE(two->on_backup_lost(0, replies).ok());
  BOOST_TEST(two->on_ack(0, {{}, 1}, replies).ok());
  BOOST_TEST(!two->on_ack(0, {{}, 2}, replies).ok());  // past the last forward: a lie still
  BOOST_TEST(replies.empty());                         // backup 1 has not acknowledged
  BOOST_TEST(two->held() == 1u);
  BOOST_TEST(!two->on_ack(1, {{}, 5}, replies).ok());
  BOOST_REQUIRE(two->on_ack(1, {{}, 1}, replies).ok());
  BOOST_TEST(replies.size() == 1u);
  // A forward past the next one is refused and nothing is applied.
  ClockAdvance advance{{first_client, 1, 1}, 1};
  BOOST_TEST(!backup->on_forward(forward(2, advance)).ok());
  BOOST_TEST(backup->applied() == 0u);
  // A forward that says every backup had already applied it (or more) before it was sent.
  BOOST_TEST(!backup->on_forward(forward(1, advance, 1)).ok());
  BOOST_TEST(!backup->on_forward(forward(1, advance, 7)).ok());
  BOOST_TEST(backup->applied() == 0u);
  BOOST_TEST(backup->on_forward(forward(1, advance)).value().seq == 1u);
  // Keys said to be filled in for a push that names no pull.
  PushRequest keyed{{first_client, 2, 1}, 1, {7}, FloatBuffer(std::vector<float>{1.0f, 1.0f})};
  BOOST_TEST(!backup->on_forward(forward(2, keyed, 0, /*keys_filled=*/true)).ok());
  BOOST_TEST(backup->applied() == 1u);
  // Feature admission counts pulls the backups never see.
  ShardConfig admitting = sc;
  admitting.admit_after = 3;
  BOOST_TEST(!ShardPrimary::make(*make_core(admitting), 1).ok());
  BOOST_TEST(!ShardBackup::make(make_core(admitting)).ok());
  // So does stale-row eviction: a promoted primary stamps rows by clocks its backups do not see.
  ShardConfig evicting = sc;
  evicting.evict_after = 4;
  auto refused = ShardPrimary::make(*make_core(evicting), 1);
  BOOST_TEST(!refused.ok());
  BOOST_TEST(refused.status().message().find("evict_after") != std::string::npos);
  BOOST_TEST(!ShardBackup::make(make_core(evicting)).ok());
  // Once its only backup is lost, the primary acknowledges at once.
  std::vector<ReplicaForward> fw;
  PushRequest push{{first_client, 3, 1}, 1, {7}, FloatBuffer(std::vector<float>{1.0f, 1.0f})};
  primary->on_message(push, out, fw);
  BOOST_TEST(out.empty());
  BOOST_REQUIRE(primary->on_backup_lost(0, out).ok());
  BOOST_TEST(out.size() == 1u);
  BOOST_TEST(!primary->on_backup_lost(0, out).ok());
}

// A primary that never advances `committed` would grow its backups' logs without end: past
// replica_log_max kept forwards the backup refuses, applying nothing; committing trims the log.
BOOST_AUTO_TEST_CASE(a_primary_that_stops_committing_is_refused_past_the_log_bound) {
  const ShardConfig sc = shard_config({first_client}, {});
  auto backup = std::move(ShardBackup::make(make_core(sc)).value());
  for (uint64_t seq = 1; seq <= colony::replica_log_max; ++seq)
    BOOST_REQUIRE(
        backup->on_forward(forward(seq, ClockAdvance{{first_client, seq, 1}, uint32_t(seq)})).ok());
  BOOST_TEST(backup->kept() == colony::replica_log_max);
  const uint64_t next = colony::replica_log_max + 1;
  auto refused = backup->on_forward(forward(next, ClockAdvance{{first_client, next, 1}, 1}));
  BOOST_REQUIRE(!refused.ok());
  BOOST_TEST(refused.status().message().find("stopped committing") != std::string::npos,
             refused.status().message());
  BOOST_TEST(backup->applied() == colony::replica_log_max);
  // The same forward with everything before it committed is taken, and the log trimmed.
  BOOST_TEST(backup
                 ->on_forward(
                     forward(next, ClockAdvance{{first_client, next, 1}, uint32_t(next)}, next - 1))
                 .ok());
  BOOST_TEST(backup->kept() == 1u);
}

// The same lie in fewer, larger pushes: past replica_log_bytes_max bytes kept the backup refuses,
// long before the count bound. The pushes share one gradient buffer, so the test holds 4 MiB.
BOOST_AUTO_TEST_CASE(a_primary_that_stops_committing_large_pushes_is_refused_past_the_byte_bound) {
  constexpr size_t wide = 1024, keys = 1024;  // 4 MiB of gradients a push
  ShardConfig sc = shard_config({first_client}, Consistency{ConsistencyKind::asp, 0});
  sc.width = wide;
  sc.init = RowInit{0, wide, 0.0f};
  auto backup = std::move(ShardBackup::make(make_core(sc)).value());
  auto grads = std::make_shared<std::vector<float>>(keys * wide, 0.0f);
  std::vector<uint64_t> key_list(keys);
  for (size_t k = 0; k < keys; ++k) key_list[k] = k;
  auto push = [&](uint64_t seq) {
    return PushRequest{{first_client, seq, 1},
                       0,
                       key_list,
                       FloatBuffer::view(grads, grads->data(), grads->size())};
  };
  const uint64_t each =
      colony::replica_forward_overhead_bytes + keys * (sizeof(uint64_t) + wide * sizeof(float));
  const uint64_t fit = colony::replica_log_bytes_max / each;
  BOOST_REQUIRE(fit < colony::replica_log_max);
  for (uint64_t seq = 1; seq <= fit; ++seq)
    BOOST_REQUIRE(backup->on_forward(forward(seq, push(seq))).ok());
  BOOST_TEST(backup->kept_bytes() == fit * each);
  auto refused = backup->on_forward(forward(fit + 1, push(fit + 1)));
  BOOST_REQUIRE(!refused.ok());
  BOOST_TEST(refused.status().message().find("bytes of forwards uncommitted") != std::string::npos,
             refused.status().message());
  BOOST_TEST(backup->applied() == fit);
  // Committing all but the last kept forward makes room, and the count of bytes follows the trim.
  BOOST_TEST(backup->on_forward(forward(fit + 1, push(fit + 1), fit - 1)).ok());
  BOOST_TEST(backup->kept() == 2u);
  BOOST_TEST(backup->kept_bytes() == 2 * each);
  // A backup rebuilt from a live primary counts the forwards it is handed, and refuses more than
  // a backup keeps.
  ShardPrimary::NewBackup added{0, 2, {forward(1, push(1)), forward(2, push(2))}};
  auto rebuilt = ShardBackup::rebuilt(make_core(sc), added);
  BOOST_REQUIRE(rebuilt.ok());
  BOOST_TEST(rebuilt.value()->kept_bytes() == 2 * each);
  added.kept.clear();
  for (uint64_t seq = 1; seq <= fit + 1; ++seq) added.kept.push_back(forward(seq, push(seq)));
  added.applied = fit + 1;
  auto over = ShardBackup::rebuilt(make_core(sc), std::move(added));
  BOOST_REQUIRE(!over.ok());
  BOOST_TEST(over.status().message().find("a backup keeps") != std::string::npos,
             over.status().message());
}

BOOST_AUTO_TEST_CASE(a_driver_that_promotes_a_backup_behind_another_is_caught) {
  // With two backups a crash may leave one ahead of the other; promoting the one behind makes the
  // other take the new primary's forwards for those it already had.
  uint64_t caught = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const Outcome o = run(seed, {}, true);
    if (o.ack_refused || !o.backups_equal || o.lost > 0 || o.twice > 0) ++caught;
  }
  BOOST_TEST_MESSAGE("a promotion behind caught in " << caught << " of 200 runs");
  BOOST_TEST(caught > 0u);
}

namespace {

// The rows of `from`, copied into a store of their own (what a driver sends a new backup).
std::unique_ptr<RowStore> copy_rows(const RowStore& from) {
  auto store = std::make_unique<MemoryRowStore>(from.row_floats());
  BOOST_REQUIRE(from.for_each([&](uint64_t key, const float* row) {
                      std::copy(row, row + from.row_floats(), store->find_or_insert(key).first);
                    })
                    .ok());
  return store;
}

// Whether two replica states say the same (parts by sender, request id, step, keys and gradients).
bool same_state(const ReplicaState& x, const ReplicaState& y) {
  auto same_part = [](const PushRequest& p, const PushRequest& q) {
    return p.header.sender == q.header.sender && p.header.request_id == q.header.request_id &&
           p.clock == q.clock && p.more == q.more && p.keys == q.keys &&
           p.keys_of_pull == q.keys_of_pull &&
           std::equal(p.grads.begin(), p.grads.end(), q.grads.begin(), q.grads.end());
  };
  return x.clocks == y.clocks && x.keys_dropped == y.keys_dropped &&
         x.last_checkpoint == y.last_checkpoint &&
         std::equal(x.parts.begin(), x.parts.end(), y.parts.begin(), y.parts.end(), same_part);
}

// A primary with two senders, caught between the parts of a push: sender a has kept a part that
// names its pull's keys, sender b's part naming a pull the shard never saw was refused (keys
// left out), and both have passed the checkpoint of step 2.
struct PendingPrimary {
  static constexpr NodeId a = first_client, b = first_client + 1;
  ShardConfig sc;
  std::unique_ptr<ShardCore> core;
  std::unique_ptr<ShardPrimary> primary;
  Outbox out;
  std::vector<ReplicaForward> fw;

  PendingPrimary() : sc(shard_config({a, b}, {ConsistencyKind::asp, 0})) {
    sc.checkpoint_every = 2;
    core = make_core(sc);
    primary = std::move(ShardPrimary::make(*core, 1).value());
    uint64_t id = 1;
    for (uint32_t clock : {1u, 2u})
      for (NodeId n : {a, b}) primary->on_message(ClockAdvance{{n, id++, 1}, clock}, out, fw);
    primary->on_message(PullRequest{{a, 50, 1}, 2, a, {1, 2}}, out, fw);
    primary->on_message(part(a, 51, 3, {1, 2}, true, 50), out, fw);
    primary->on_message(part(b, 60, 3, {}, true, 99), out, fw);
  }
};

}  // namespace

// A new backup built in another process (ShardCore::from_replica_state over a copy of the rows
// and the primary's replica_state()) takes the rest of a push kept in parts, the resend of a push
// refused for keys left out, and the next checkpoint as its primary does.
BOOST_AUTO_TEST_CASE(a_backup_built_from_the_replica_state_follows_its_primary) {
  PendingPrimary p;
  const ReplicaState state = p.core->replica_state();
  BOOST_REQUIRE(state.parts.size() == 1u);
  BOOST_TEST(state.parts[0].keys == (std::vector<uint64_t>{1, 2}));  // filled in
  BOOST_TEST((state.keys_dropped == std::vector<std::pair<NodeId, uint32_t>>{{p.b, 3}}));
  BOOST_TEST(state.last_checkpoint == 2u);
  BOOST_TEST((state.clocks == std::vector<std::pair<NodeId, uint32_t>>{{p.a, 2}, {p.b, 2}}));

  Outbox out;
  BOOST_REQUIRE(p.primary->on_backup_lost(0, out).ok());
  auto copy = ShardCore::from_replica_state(p.sc, copy_rows(p.core->store()), state);
  BOOST_REQUIRE_MESSAGE(copy.ok(), (copy.ok() ? std::string() : copy.status().message()));
  BOOST_TEST(same_state(copy.value()->replica_state(), state));
  ShardPrimary::NewBackup added = p.primary->add_backup();
  const uint32_t index = added.backup;  // 1: the lost one keeps its number
  auto backup = std::move(ShardBackup::rebuilt(std::move(copy.value()), std::move(added)).value());

  BOOST_TEST(backup->core().stats().push_parts == 0u);  // counted where it came

  std::vector<ReplicaForward> fw;
  p.primary->on_message(part(p.a, 52, 3, {3}, false), out, fw);    // the push's last part
  p.primary->on_message(part(p.b, 61, 3, {}, true, 98), out, fw);  // the rest of b's refused push
  p.primary->on_message(part(p.b, 62, 3, {4}, true), out, fw);     // b's push again, whole
  p.primary->on_message(part(p.b, 63, 3, {5}, false), out, fw);
  for (NodeId n : {p.a, p.b}) p.primary->on_message(ClockAdvance{{n, 70 + n, 1}, 4}, out, fw);
  for (const ReplicaForward& f : fw) {
    auto ack = backup->on_forward(f);
    BOOST_REQUIRE_MESSAGE(ack.ok(), (ack.ok() ? std::string() : ack.status().message()));
    BOOST_REQUIRE(p.primary->on_ack(index, ack.value(), out).ok());
  }
  BOOST_TEST(p.primary->held() == 0u);
  BOOST_TEST(p.core->stats().rows_pushed == 5u);
  BOOST_TEST(backup->core().stats().rows_pushed == 5u);
  // The rest of the refused push was dropped on both, as the refusal it took over says.
  BOOST_TEST(p.core->stats().push_parts_dropped == 1u);
  BOOST_TEST(backup->core().stats().push_parts_dropped == 1u);
  BOOST_TEST(p.core->rows_digest().value().digest == backup->core().rows_digest().value().digest);
  BOOST_TEST(same_state(backup->core().replica_state(), p.core->replica_state()));
  // Both reached the checkpoint of step 4, and only that one (step 2's was the primary's before).
  BOOST_TEST((p.core->checkpoint_due() == std::optional<uint32_t>(4)));
  BOOST_TEST((backup->core().checkpoint_due() == std::optional<uint32_t>(4)));
}

// The replica state comes off the wire from the primary's member: whatever in it the primary's
// core could not have held is refused, naming it, and builds no core.
BOOST_AUTO_TEST_CASE(a_replica_state_the_primary_could_not_hold_is_refused) {
  PendingPrimary p;
  const ReplicaState good = p.core->replica_state();
  const std::vector<std::pair<std::string, ReplicaState>> lies = [&] {
    std::vector<std::pair<std::string, ReplicaState>> v;
    auto lie = [&](std::string what, auto change) {
      ReplicaState s = good;
      change(s);
      v.emplace_back(std::move(what), std::move(s));
    };
    lie("no feature admission", [](ReplicaState&) {});  // with the config below
    lie("not a sender", [](ReplicaState& s) { s.clocks[1].first = 3; });
    lie("senders' clocks", [](ReplicaState& s) { s.clocks.pop_back(); });
    lie("comes twice", [](ReplicaState& s) { s.clocks[1].first = s.clocks[0].first; });
    lie("the last of its push", [](ReplicaState& s) { s.parts[0].more = false; });
    lie("not from a sender", [](ReplicaState& s) { s.parts[0].header.sender = 3; });
    lie("gradient floats", [](ReplicaState& s) { s.parts[0].keys.push_back(9); });
    lie("holds a gradient of", [](ReplicaState& s) {
      s.parts[0].grads = FloatBuffer(std::vector<float>(2 * width, std::nanf("")));
    });
    lie("its sender's clock (2) has passed", [](ReplicaState& s) { s.parts[0].clock = 2; });
    lie("repeats one before it", [](ReplicaState& s) { s.parts.push_back(s.parts[0]); });
    lie("under shard map version 7", [](ReplicaState& s) { s.parts[0].header.map_version = 7; });
    lie("was not finished", [](ReplicaState& s) {
      s.parts.push_back(s.parts[0]);
      ++s.parts[1].header.request_id;
      s.parts[1].keys_of_pull = 0;
      s.parts[1].clock = 4;
    });
    lie("does not belong", [](ReplicaState&) {});  // with the config below
    lie("names the keys of pull 50 twice", [](ReplicaState& s) {
      s.parts.push_back(s.parts[0]);
      ++s.parts[1].header.request_id;
    });
    lie("refused for keys left out, is not a sender",
        [](ReplicaState& s) { s.keys_dropped[0].first = 3; });
    lie("refused for keys left out twice",
        [](ReplicaState& s) { s.keys_dropped.push_back(s.keys_dropped[0]); });
    lie("and has parts kept as well",
        [](ReplicaState& s) { s.keys_dropped[0].first = first_client; });
    lie("not a checkpoint step", [](ReplicaState& s) { s.last_checkpoint = 3; });
    return v;
  }();
  for (const auto& [what, state] : lies) {
    BOOST_TEST_CONTEXT(what) {
      ShardConfig sc = p.sc;
      if (what == "no feature admission") sc.admit_after = 2;
      if (what == "does not belong") {  // the shard of a 2-shard map that does not own key 1
        sc.map.shards = 2;
        sc.shard_index = 1 - ShardMap::make(sc.map).value().shard_of(1);
      }
      auto copy = ShardCore::from_replica_state(sc, copy_rows(p.core->store()), state);
      BOOST_REQUIRE(!copy.ok());
      BOOST_TEST((copy.status().code() == Status::Code::invalid_input));
      BOOST_TEST(copy.status().message().find(what) != std::string::npos, copy.status().message());
    }
  }
  BOOST_TEST(ShardCore::from_replica_state(p.sc, copy_rows(p.core->store()), good).ok());
}

// A pull makes its keys' rows on the primary alone (pulls are not forwarded): a row pulled and
// never pushed, as a lost worker's last step leaves it, is still its initial row, and the digest
// that compares a backup with its primary leaves it out on both. Adagrad and random factors, so
// that a row's initial values and optimizer state are not zeros.
BOOST_AUTO_TEST_CASE(rows_pulled_and_never_pushed_leave_the_digests_equal) {
  constexpr NodeId a = first_client;
  ShardConfig sc = shard_config({a}, {ConsistencyKind::asp, 0});
  sc.optimizer = default_optimizer_config(OptimizerKind::adagrad);
  sc.init = RowInit{7, 0, 0.05f};
  auto core = make_core(sc);
  auto primary = std::move(ShardPrimary::make(*core, 1).value());
  auto backup = std::move(ShardBackup::make(make_core(sc)).value());
  Outbox out;
  std::vector<ReplicaForward> fw;
  primary->on_message(PullRequest{{a, 1, 1}, 1, a, {1, 2, 3, 4}}, out, fw);
  primary->on_message(part(a, 2, 1, {1, 2}, false), out, fw);  // 3 and 4 are never pushed
  primary->on_message(ClockAdvance{{a, 3, 1}, 1}, out, fw);
  for (const ReplicaForward& f : fw) BOOST_REQUIRE(backup->on_forward(f).ok());
  BOOST_TEST(core->rows() == 4u);
  BOOST_TEST(backup->core().rows() == 2u);
  const auto on_primary = core->rows_digest().value();
  const auto on_backup = backup->core().rows_digest().value();
  BOOST_TEST(on_primary.rows == 2u);
  BOOST_TEST(on_backup.rows == 2u);
  BOOST_TEST(on_primary.digest == on_backup.digest);
  // A row that differs is still told apart: the backup's row 1 takes one more push.
  Outbox ignored;
  auto alone = make_core(sc);
  for (const PsMessage& m :
       {PsMessage(PullRequest{{a, 1, 1}, 1, a, {1, 2}}), PsMessage(part(a, 2, 1, {1, 2}, false)),
        PsMessage(ClockAdvance{{a, 3, 1}, 1}), PsMessage(part(a, 4, 2, {1}, false))})
    alone->on_message(m, ignored);
  BOOST_TEST(alone->rows_digest().value().rows == 2u);
  BOOST_TEST(alone->rows_digest().value().digest != on_backup.digest);
}

// A backup whose store fails (a write-back refused: a full disk) acknowledges nothing more: an
// acknowledgement would tell the primary a push is on two replicas when it is on one. It fails
// instead, and keeps failing, duplicates included, so its driver stops it.
BOOST_AUTO_TEST_CASE(a_backup_whose_store_failed_acknowledges_nothing_more) {
  constexpr NodeId a = first_client;
  const ShardConfig sc = shard_config({a}, {ConsistencyKind::asp, 0});
  auto core = make_core(sc);
  auto primary = std::move(ShardPrimary::make(*core, 1).value());
  auto store = std::make_unique<colony::testing::UnstableStore>(ShardCore::row_floats(sc).value());
  const std::shared_ptr<bool> full = store->full;
  auto backup = std::move(
      ShardBackup::make(std::move(ShardCore::make(sc, std::move(store)).value())).value());
  Outbox out;
  std::vector<ReplicaForward> fw;
  primary->on_message(part(a, 1, 1, {1, 2}, false), out, fw);
  primary->on_message(part(a, 2, 2, {3}, false), out, fw);
  BOOST_REQUIRE_EQUAL(fw.size(), 2u);
  BOOST_TEST(backup->on_forward(fw[0]).ok());
  *full = true;
  for (const ReplicaForward& f : {fw[1], fw[0]}) {  // the next, and a duplicate
    auto ack = backup->on_forward(f);
    BOOST_REQUIRE(!ack.ok());
    BOOST_TEST(ack.status().message().find("no space left") != std::string::npos,
               ack.status().message());
  }
  BOOST_TEST(backup->applied() == 1u);
}

// A copy across processes (send_copy, BackupCopy): the primary's rows go in parts of at most the
// rows asked for, its state in the last; the backup built from them holds the same rows and
// follows the primary's next forwards as a backup built in place does.
BOOST_AUTO_TEST_CASE(a_backup_built_from_a_copy_in_parts_follows_its_primary) {
  PendingPrimary p;
  // More rows than a part carries: pulls make them (every key starts at zero), pushes move them.
  std::vector<ReplicaForward> fw;
  Outbox out;
  std::vector<uint64_t> many;
  for (uint64_t k = 10; k < 110; ++k) many.push_back(k);
  p.primary->on_message(PullRequest{{p.a, 80, 1}, 2, p.a, many}, out, fw);
  BOOST_REQUIRE(p.primary->on_backup_lost(0, out).ok());
  ShardPrimary::NewBackup added = p.primary->add_backup();
  const uint32_t index = added.backup;
  std::vector<ReplicaCopy> parts;
  BOOST_REQUIRE(send_copy(*p.core, std::move(added), 16, [&](ReplicaCopy&& part) {
                  parts.push_back(std::move(part));
                }).ok());
  const size_t rows = p.core->store().size();
  BOOST_TEST(parts.size() == (rows + 15) / 16 + 1);  // the last carries no rows
  for (size_t i = 0; i < parts.size(); ++i) {
    BOOST_TEST(parts[i].header.request_id == i);
    BOOST_TEST(parts[i].header.sender == shard_node);
    BOOST_TEST(parts[i].keys.size() <= 16u);
    BOOST_TEST(parts[i].last == (i + 1 == parts.size()));
  }
  auto copy = BackupCopy::make(p.sc, std::make_unique<MemoryRowStore>(p.core->store().row_floats()))
                  .value();
  for (const ReplicaCopy& part : parts) {
    BOOST_TEST(!copy->done());
    const Status taken = copy->on_part(part);
    BOOST_REQUIRE_MESSAGE(taken.ok(), taken.message());
  }
  BOOST_REQUIRE(copy->done());
  BOOST_TEST(copy->rows() == rows);
  std::unique_ptr<ShardBackup> backup = copy->take();
  BOOST_REQUIRE(backup);
  BOOST_TEST(!copy->take());  // once
  BOOST_TEST(p.core->rows_digest().value().digest == backup->core().rows_digest().value().digest);

  fw.clear();
  p.primary->on_message(part(p.a, 52, 3, {3}, false), out, fw);
  p.primary->on_message(part(p.b, 62, 3, {4}, true), out, fw);
  p.primary->on_message(part(p.b, 63, 3, {5, 20}, false), out, fw);
  for (const ReplicaForward& f : fw) {
    auto ack = backup->on_forward(f);
    BOOST_REQUIRE_MESSAGE(ack.ok(), (ack.ok() ? std::string() : ack.status().message()));
    BOOST_REQUIRE(p.primary->on_ack(index, ack.value(), out).ok());
  }
  BOOST_TEST(p.primary->held() == 0u);
  BOOST_TEST(p.core->rows_digest().value().digest == backup->core().rows_digest().value().digest);
  BOOST_TEST(same_state(backup->core().replica_state(), p.core->replica_state()));
}

// A copy's tail (the forwards the other backups lack, the parts of unfinished pushes) may be far
// larger than a message: it goes in parts of at most tail_bytes_per_part (a forward or push part
// larger than that alone), and the backup built from them is the one a copy in one part builds.
BOOST_AUTO_TEST_CASE(a_copy_whose_tail_passes_a_part_goes_in_several) {
  // Three replicas: backup 0 acknowledges nothing, backup 1 is lost and placed again, so the new
  // one keeps every forward backup 0 lacks. Both senders are between the parts of a push.
  constexpr NodeId a = first_client, b = first_client + 1;
  const ShardConfig sc = shard_config({a, b}, {ConsistencyKind::asp, 0});
  auto core = make_core(sc);
  auto primary = std::move(ShardPrimary::make(*core, 2).value());
  Outbox out;
  std::vector<ReplicaForward> fw;
  uint64_t id = 1;
  for (NodeId n : {a, b}) primary->on_message(ClockAdvance{{n, id++, 1}, 1}, out, fw);
  std::vector<uint64_t> keys;  // rows for three parts of four
  for (uint64_t k = 1; k <= 12; ++k) keys.push_back(k);
  primary->on_message(PullRequest{{a, 10, 1}, 1, a, keys}, out, fw);
  for (uint64_t k = 0; k < 3; ++k) {
    primary->on_message(part(a, 20 + k, 2, {1 + k, 10 + k}, true), out, fw);
    primary->on_message(part(b, 30 + k, 2, {20 + k}, true), out, fw);
  }
  BOOST_REQUIRE(primary->on_backup_lost(1, out).ok());
  BOOST_REQUIRE(core->replica_state().parts.size() == 6u);

  auto copied = [&](uint64_t tail_bytes) {
    std::vector<ReplicaCopy> parts;
    BOOST_REQUIRE(send_copy(
                      *core, primary->add_backup(), 4,
                      [&](ReplicaCopy&& p) { parts.push_back(std::move(p)); }, tail_bytes)
                      .ok());
    return parts;
  };
  auto built = [&](const std::vector<ReplicaCopy>& parts) {
    auto copy =
        BackupCopy::make(sc, std::make_unique<MemoryRowStore>(core->store().row_floats())).value();
    for (const ReplicaCopy& p : parts) {
      const Status taken = copy->on_part(p);
      BOOST_REQUIRE_MESSAGE(taken.ok(), taken.message());
    }
    std::unique_ptr<ShardBackup> backup = copy->take();
    BOOST_REQUIRE(backup);
    return backup;
  };
  const size_t row_parts = (core->store().size() + 3) / 4;
  BOOST_REQUIRE(row_parts == 3u);

  // At the default bytes the tail is small enough for the last part alone.
  const std::vector<ReplicaCopy> whole = copied(replica_copy_tail_bytes);
  BOOST_REQUIRE(whole.size() == row_parts + 1);
  const size_t kept = whole.back().kept.size();
  BOOST_TEST(kept == fw.size());  // every forward: backup 0 acknowledged none
  BOOST_TEST(whole.back().state.parts.size() == 6u);
  // What a part's tail counts (replica_log_bytes_max's reckoning).
  auto push_bytes = [](const PushRequest& p) {
    return replica_forward_overhead_bytes + p.keys.size() * sizeof(uint64_t) +
           (p.grads.size() + p.scales.size()) * sizeof(float);
  };
  auto tail_bytes = [&](const ReplicaCopy& c) {
    uint64_t bytes = 0;
    for (const ReplicaForward& f : c.kept)
      bytes += std::holds_alternative<PushRequest>(f.message)
                   ? push_bytes(std::get<PushRequest>(f.message))
                   : replica_forward_overhead_bytes;
    for (const PushRequest& p : c.state.parts) bytes += push_bytes(p);
    return bytes;
  };

  // At one byte a part each forward and push part goes alone, the last with the state.
  const std::vector<ReplicaCopy> spread = copied(1);
  BOOST_REQUIRE(spread.size() == row_parts + kept + 6);
  for (size_t i = row_parts; i < spread.size(); ++i) {
    BOOST_TEST(spread[i].keys.empty());
    BOOST_TEST(spread[i].kept.size() + spread[i].state.parts.size() == 1u);
    BOOST_TEST(spread[i].last == (i + 1 == spread.size()));
    BOOST_TEST(spread[i].state.clocks.empty() == !spread[i].last);
  }
  // A budget of about two forwards' bytes: fewer parts than one a forward, more than one.
  const uint64_t two =
      2 * (replica_forward_overhead_bytes + 3 * sizeof(uint64_t) + 3 * width * sizeof(float));
  const std::vector<ReplicaCopy> pairs = copied(two);
  BOOST_TEST(pairs.size() > row_parts + 1);
  BOOST_TEST(pairs.size() < spread.size());
  for (size_t i = row_parts; i < pairs.size(); ++i) BOOST_TEST(tail_bytes(pairs[i]) <= two);

  for (const auto* parts : {&whole, &spread, &pairs}) {
    std::unique_ptr<ShardBackup> backup = built(*parts);
    BOOST_TEST(backup->kept() == kept);
    BOOST_TEST(same_state(backup->core().replica_state(), core->replica_state()));
    BOOST_TEST(core->rows_digest().value().digest == backup->core().rows_digest().value().digest);
    // The forwards in their order: a promotion of it sends them to backup 0 again.
    const auto promoted = backup->promote(1);
    BOOST_REQUIRE(promoted.resend.size() == fw.size());
    for (size_t i = 0; i < fw.size(); ++i) BOOST_TEST(promoted.resend[i].seq == fw[i].seq);
  }
}

// The parts come off the wire from the primary's member: a part out of order, of rows not the
// shard's width, not finite or of another shard's keys, a key sent twice, a state the primary
// could not hold or a part after the last is refused, naming it, and the copy is spent.
BOOST_AUTO_TEST_CASE(a_copy_the_primary_could_not_have_made_is_refused) {
  PendingPrimary p;
  Outbox out;
  BOOST_REQUIRE(p.primary->on_backup_lost(0, out).ok());
  std::vector<ReplicaCopy> good;
  BOOST_REQUIRE(send_copy(*p.core, p.primary->add_backup(), 1, [&](ReplicaCopy&& part) {
                  good.push_back(std::move(part));
                }).ok());
  BOOST_REQUIRE(good.size() == 3u);  // keys 1 and 2, then the state
  const size_t floats = p.core->store().row_floats();
  // Another shard's keys: the same configuration as shard 0 of two.
  ShardConfig two = p.sc;
  two.map = ShardMapSpec{1, 2, 16, 0};
  const ShardMap map = ShardMap::make(two.map).value();
  uint64_t foreign = 1;
  while (map.shard_of(foreign) == 0) ++foreign;

  struct Lie {
    std::string what;
    ShardConfig config;
    std::vector<ReplicaCopy> parts;
  };
  std::vector<Lie> lies;
  auto with = [&](std::string what, auto change, ShardConfig sc) {
    std::vector<ReplicaCopy> parts = good;
    change(parts);
    lies.push_back({std::move(what), sc, std::move(parts)});
  };
  with(
      "out of order", [](auto& v) { std::swap(v[0], v[1]); }, p.sc);
  with(
      "floats for", [](auto& v) { v[0].rows.pop_back(); }, p.sc);
  with(
      "not finite", [](auto& v) { v[1].rows[0] = std::nanf(""); }, p.sc);
  with(
      "came before", [](auto& v) { v[1].keys = v[0].keys; }, p.sc);
  with(
      "belongs to shard", [&](auto& v) { v[0].keys = {foreign}; }, two);
  with(
      "senders' clocks", [](auto& v) { v[2].state.clocks.pop_back(); }, p.sc);
  with(
      "only the last part carries", [](auto& v) { v[1].state.clocks = v[2].state.clocks; }, p.sc);
  with(
      "a tail of",
      [](auto& v) {  // more forwards than a backup keeps, over two parts
        const ReplicaForward f = forward(1, ClockAdvance{{first_client, 1, 1}, 1});
        v[0].kept.assign(replica_log_max / 2 + 1, f);
        v[1].kept.assign(replica_log_max / 2, f);
      },
      p.sc);
  with(
      "which is not a sender",
      [](auto& v) { v[0].state.parts.push_back(part(first_client + 50, 1, 3, {}, true)); }, p.sc);
  with(
      "push parts",
      [](auto& v) {  // more parts than a copy carries, over two parts
        const PushRequest kept = part(first_client, 1, 3, {}, true);
        v[0].state.parts.assign(replica_log_max / 2 + 1, kept);
        v[1].state.parts.assign(replica_log_max / 2, kept);
      },
      p.sc);
  with(
      "complete already",
      [](auto& v) {
        v.push_back(v.back());
        v.back().header.request_id = 3;
      },
      p.sc);
  with(
      "rows of",
      [&](auto& v) {
        v[0].keys.assign(replica_copy_rows_max + 1, 1);
        v[0].rows.assign(v[0].keys.size() * floats, 0.0f);
      },
      p.sc);
  for (const Lie& lie : lies) {
    auto copy = BackupCopy::make(lie.config, std::make_unique<MemoryRowStore>(floats)).value();
    Status refused;
    for (const ReplicaCopy& part : lie.parts) {
      refused = copy->on_part(part);
      if (!refused.ok()) break;
    }
    BOOST_TEST(!refused.ok(), lie.what);
    BOOST_TEST(refused.message().find(lie.what) != std::string::npos,
               lie.what << ": " << refused.message());
    BOOST_TEST(!copy->take(), lie.what);
    // Spent: even the right next part is refused now.
    BOOST_TEST(!copy->on_part(good[0]).ok(), lie.what);
  }
  // A store that is not empty, or of another width, is no place for a copy.
  auto full = std::make_unique<MemoryRowStore>(floats);
  full->find_or_insert(7);
  BOOST_TEST(!BackupCopy::make(p.sc, std::move(full)).ok());
  BOOST_TEST(!BackupCopy::make(p.sc, std::make_unique<MemoryRowStore>(floats + 1)).ok());
  // A copy of no rows at all is one part, the last.
  auto empty_core = make_core(p.sc);
  auto empty_primary = std::move(ShardPrimary::make(*empty_core, 0).value());
  std::vector<ReplicaCopy> one;
  BOOST_REQUIRE(send_copy(*empty_core, empty_primary->add_backup(), 4, [&](ReplicaCopy&& part) {
                  one.push_back(std::move(part));
                }).ok());
  BOOST_REQUIRE(one.size() == 1u);
  BOOST_TEST(one[0].last);
  BOOST_TEST(one[0].keys.empty());
  BOOST_TEST(!send_copy(*empty_core, empty_primary->add_backup(), 0, [](ReplicaCopy&&) {}).ok());
}
