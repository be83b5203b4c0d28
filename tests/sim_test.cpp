#define BOOST_TEST_MODULE sim_test
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "common/hash.h"
#include "sim/event_queue.h"

using namespace colony;
using colony::sim::EventQueue;
using colony::sim::VirtualNanos;

BOOST_AUTO_TEST_CASE(new_queue_is_empty_at_time_zero) {
  EventQueue q;
  BOOST_TEST(q.now() == 0);
  BOOST_TEST(q.pending() == 0u);
  BOOST_TEST(q.executed() == 0u);
  BOOST_TEST(!q.run_next());
  BOOST_TEST(q.executed() == 0u);
}

BOOST_AUTO_TEST_CASE(events_run_in_time_order) {
  EventQueue q;
  std::vector<std::pair<int, VirtualNanos>> log;
  for (int id : {5, 1, 4, 2, 3}) q.schedule(id * 10, [&, id] { log.emplace_back(id, q.now()); });
  BOOST_TEST(q.pending() == 5u);
  while (q.run_next()) {}
  const std::vector<std::pair<int, VirtualNanos>> want{{1, 10}, {2, 20}, {3, 30}, {4, 40}, {5, 50}};
  BOOST_TEST((log == want));
  BOOST_TEST(q.now() == 50);
  BOOST_TEST(q.executed() == 5u);
  BOOST_TEST(q.pending() == 0u);
}

BOOST_AUTO_TEST_CASE(ties_run_in_scheduling_order) {
  EventQueue q;
  std::vector<int> log;
  std::vector<uint64_t> seqs;
  for (int i = 0; i < 100; ++i) seqs.push_back(q.schedule(i % 2 ? 7 : 3, [&, i] { log.push_back(i); }));
  for (size_t i = 1; i < seqs.size(); ++i) BOOST_TEST(seqs[i] > seqs[i - 1]);
  while (q.run_next()) {}
  std::vector<int> want;
  for (int i = 0; i < 100; i += 2) want.push_back(i);
  for (int i = 1; i < 100; i += 2) want.push_back(i);
  BOOST_TEST(log == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(run_until_stops_at_bound_inclusive_and_advances_now) {
  EventQueue q;
  std::vector<VirtualNanos> ran;
  for (VirtualNanos t : {10, 20, 30}) q.schedule(t, [&, t] { ran.push_back(t); });
  q.run_until(20);
  BOOST_TEST(ran == (std::vector<VirtualNanos>{10, 20}), boost::test_tools::per_element());
  BOOST_TEST(q.now() == 20);
  BOOST_TEST(q.pending() == 1u);
  BOOST_TEST(q.executed() == 2u);

  q.run_until(25);  // nothing due: time still advances to the bound
  BOOST_TEST(ran.size() == 2u);
  BOOST_TEST(q.now() == 25);

  q.run_until(29);
  BOOST_TEST(q.now() == 29);
  BOOST_TEST(ran.size() == 2u);

  q.run_until(1000);
  BOOST_TEST(ran.size() == 3u);
  BOOST_TEST(q.now() == 1000);
  BOOST_TEST(q.pending() == 0u);

  // On an empty queue run_until just moves the clock; an earlier bound does not move it back.
  q.run_until(2000);
  BOOST_TEST(q.now() == 2000);
  q.run_until(1500);
  BOOST_TEST(q.now() == 2000);
  BOOST_TEST(q.executed() == 3u);
}

BOOST_AUTO_TEST_CASE(events_scheduled_from_inside_events_run) {
  EventQueue q;
  std::vector<std::pair<int, VirtualNanos>> log;
  std::function<void(int)> chain = [&](int depth) {
    log.emplace_back(depth, q.now());
    if (depth < 5) q.schedule(q.now() + 3, [&, depth] { chain(depth + 1); });
  };
  q.schedule(1, [&] { chain(0); });
  // Depth 1 is scheduled (from inside depth 0) for time 4 after this event was: it runs second.
  q.schedule(4, [&] { log.emplace_back(100, q.now()); });
  q.run_until(10);
  const std::vector<std::pair<int, VirtualNanos>> want{{0, 1}, {100, 4}, {1, 4}, {2, 7}, {3, 10}};
  BOOST_TEST((log == want));
  BOOST_TEST(q.pending() == 1u);
  BOOST_TEST(q.executed() == 5u);
  while (q.run_next()) {}
  BOOST_TEST(log.size() == 7u);
  BOOST_TEST(q.now() == 16);
  BOOST_TEST(q.executed() == 7u);
}

BOOST_AUTO_TEST_CASE(zero_delay_event_from_inside_runs_in_same_run_until) {
  EventQueue q;
  int inner = 0;
  q.schedule(5, [&] { q.schedule(q.now(), [&] { ++inner; }); });
  q.run_until(5);
  BOOST_TEST(inner == 1);
  BOOST_TEST(q.executed() == 2u);
  BOOST_TEST(q.now() == 5);
}

BOOST_AUTO_TEST_CASE(executed_counts_every_event_run) {
  EventQueue q;
  for (int i = 0; i < 37; ++i) q.schedule(i / 3, [] {});
  uint64_t steps = 0;
  while (q.run_next()) BOOST_TEST(q.executed() == ++steps);
  BOOST_TEST(q.executed() == 37u);
}

namespace {

struct LogEntry {
  uint64_t id;
  VirtualNanos at;
  bool operator==(const LogEntry&) const = default;
};

// A seeded random workload: initial events at random times, each of which may schedule
// children at random delays (often zero, to make ties), interleaved with run_until calls.
std::vector<LogEntry> run_workload(uint64_t seed) {
  EventQueue q;
  SplitMix64 rng(seed);
  std::vector<LogEntry> log;
  uint64_t next_id = 0;
  std::function<void(uint64_t)> fire = [&](uint64_t id) {
    log.push_back({id, q.now()});
    const int children = static_cast<int>(rng.next() % 3);
    for (int c = 0; c < children && next_id < 5000; ++c) {
      const VirtualNanos delay = rng.next() % 4 == 0 ? 0 : static_cast<VirtualNanos>(rng.next() % 50);
      const uint64_t child = next_id++;
      q.schedule(q.now() + delay, [&fire, child] { fire(child); });
    }
  };
  for (int i = 0; i < 200; ++i) {
    const uint64_t id = next_id++;
    q.schedule(static_cast<VirtualNanos>(rng.next() % 100), [&fire, id] { fire(id); });
  }
  VirtualNanos bound = 0;
  while (q.pending() > 0) {
    bound += static_cast<VirtualNanos>(rng.next() % 40);
    q.run_until(bound);
    BOOST_REQUIRE(q.now() >= bound);
  }
  BOOST_REQUIRE(q.executed() == log.size());
  return log;
}

}  // namespace

BOOST_AUTO_TEST_CASE(same_seeded_schedule_gives_identical_logs) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto a = run_workload(seed);
    const auto b = run_workload(seed);
    BOOST_TEST(a.size() > 200u);
    BOOST_TEST((a == b), "seed " << seed);
    // Times never go backwards.
    bool monotone = true;
    for (size_t i = 1; i < a.size(); ++i) monotone &= a[i].at >= a[i - 1].at;
    BOOST_TEST(monotone, "seed " << seed);
  }
  BOOST_TEST(!(run_workload(1) == run_workload(2)));
}
