// The coordinator core on its own: membership, layout, heartbeats and losses, driven by hand
// with a fake clock (no sockets, no threads).
#define BOOST_TEST_MODULE coordinator_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/hash.h"
#include "ps/coordinator_core.h"

using namespace colony;

namespace {

MemberInfo member(MemberRole role, int i, uint32_t count = 1) {
  MemberInfo m;
  m.role = role;
  m.endpoint = "tcp://10.0.0." + std::to_string(i) + ":7000";
  m.count = count;
  m.data = "/data/train";
  return m;
}

CoordinatorConfig config(uint32_t shards, uint32_t workers, bool hierarchical = true) {
  CoordinatorConfig c;
  c.shards = shards;
  c.workers = workers;
  c.job.hierarchical = hierarchical;
  c.join_timeout_ms = 60'000;
  c.heartbeat_ms = 1'000;
  c.heartbeat_timeout_ms = 5'000;
  return c;
}

template <class T>
std::vector<std::pair<std::string, T>> sent(const CoordinatorEffects& fx) {
  std::vector<std::pair<std::string, T>> out;
  for (const ControlOut& c : fx.control)
    if (auto* m = std::get_if<T>(&c.message.body)) out.emplace_back(c.endpoint, *m);
  return out;
}

// `load` describing shard nodes `shards`.
MemberLoad with_shards(MemberLoad load, std::vector<NodeId> shards) {
  load.shards = std::move(shards);
  return load;
}

// A ps's load: `rows_served` on shards 0, 1, ... (as many as it lists).
MemberLoad ps_load(std::vector<uint64_t> rows_served, uint64_t memory_bytes = 0) {
  std::vector<NodeId> shards;
  for (NodeId s = 0; s < rows_served.size(); ++s) shards.push_back(s);
  return with_shards(MemberLoad{1, memory_bytes, {}, {}, std::move(rows_served)}, shards);
}

bool logged(const CoordinatorEffects& fx, const std::string& text) {
  return std::any_of(fx.log.begin(), fx.log.end(),
                     [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

// Joins every member and answers Ready; returns the Welcome effects.
CoordinatorEffects form(CoordinatorCore& core, const std::vector<MemberInfo>& members,
                        uint64_t now) {
  CoordinatorEffects welcome;
  for (const MemberInfo& m : members) {
    CoordinatorEffects fx;
    core.on_message({control_from_unknown, Join{m}}, now, fx);
    BOOST_REQUIRE_EQUAL(sent<Joined>(fx).size(), 1u);
    if (!sent<Welcome>(fx).empty()) welcome = fx;
  }
  return welcome;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_job_joins_starts_and_ends) {
  auto core = CoordinatorCore::make(config(2, 3), 0).value();
  const std::vector<MemberInfo> members = {member(MemberRole::worker, 1, 2),
                                           member(MemberRole::ps, 2), member(MemberRole::ps, 3),
                                           member(MemberRole::worker, 4, 1)};
  const CoordinatorEffects fx = form(core, members, 10);
  const auto welcomes = sent<Welcome>(fx);
  BOOST_REQUIRE_EQUAL(welcomes.size(), 4u);
  // Shards first, in join order; then worker replicas; then one aggregator per worker member.
  const Welcome& w = welcomes.front().second;
  BOOST_TEST(w.members[1].first_node == 0u);
  BOOST_TEST(w.members[2].first_node == 1u);
  BOOST_TEST(w.members[0].first_node == 2u);
  BOOST_TEST(w.members[3].first_node == 4u);
  BOOST_TEST(w.members[0].has_aggregator);
  BOOST_TEST(w.members[0].aggregator == 5u);
  BOOST_TEST(w.members[3].aggregator == 6u);
  BOOST_TEST(w.coordinator_node == 7u);
  BOOST_TEST(w.split_data);
  for (uint32_t i = 0; i < 4; ++i) BOOST_TEST(welcomes[i].second.you == i);
  BOOST_TEST((core.phase() == CoordinatorPhase::starting));

  for (uint32_t i = 0; i < 4; ++i) {
    CoordinatorEffects r;
    core.on_message({i, Ready{}}, 20, r);
    BOOST_TEST(sent<Start>(r).size() ==
               (i == 3 ? 2u : 0u));  // the workers only, once all are ready
  }
  BOOST_TEST((core.phase() == CoordinatorPhase::running));
  CoordinatorEffects d0, d3;
  core.on_message({0, MemberDone{"", false, WorkerCounters{700, 350.0, 7, 14, 7, 1000, 0}}}, 30,
                  d0);
  BOOST_TEST(!d0.training_done);
  core.on_message({3, MemberDone{"", false, WorkerCounters{300, 150.0, 3, 6, 3, 500, 0}}}, 31, d3);
  BOOST_TEST(d3.training_done);
  BOOST_TEST(core.totals().counters.samples == 1000u);
  BOOST_TEST(core.totals().counters.loss_sum == 500.0);
  CoordinatorEffects end;
  core.finish("", end);
  BOOST_TEST(sent<Shutdown>(end).size() == 4u);
  BOOST_TEST((core.phase() == CoordinatorPhase::ended));
}

BOOST_AUTO_TEST_CASE(joins_beyond_the_layout_are_refused_and_retries_are_the_same_member) {
  auto core = CoordinatorCore::make(config(1, 1), 0).value();
  CoordinatorEffects a, b, c;
  core.on_message({control_from_unknown, Join{member(MemberRole::ps, 1)}}, 0, a);
  core.on_message({control_from_unknown, Join{member(MemberRole::ps, 1)}}, 1, b);  // a retry
  BOOST_TEST(core.members().size() == 1u);
  BOOST_TEST(sent<Joined>(b).size() == 1u);
  core.on_message({control_from_unknown, Join{member(MemberRole::ps, 2)}}, 2, c);
  BOOST_REQUIRE_EQUAL(sent<Refuse>(c).size(), 1u);
  BOOST_TEST(sent<Refuse>(c)[0].first == "tcp://10.0.0.2:7000");
  BOOST_TEST(sent<Refuse>(c)[0].second.reason.find("only 0 more shards") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_join_timeout_fails_the_job_naming_who_is_missing) {
  auto core = CoordinatorCore::make(config(2, 2), 0).value();
  CoordinatorEffects fx;
  core.on_message({control_from_unknown, Join{member(MemberRole::ps, 1)}}, 0, fx);
  CoordinatorEffects notice;
  core.on_timer(5'000, notice);
  BOOST_TEST(logged(notice, "waiting for members: 1/2 shards and 0/2 worker replicas"));
  BOOST_TEST(core.next_deadline() <= 60'000u);
  CoordinatorEffects end;
  core.on_timer(60'000, end);
  BOOST_TEST(!end.failed.ok());
  BOOST_TEST(end.failed.message().find("gave up after 60 s") != std::string::npos);
  BOOST_TEST(end.failed.message().find("1/2 shards") != std::string::npos);
  BOOST_TEST(sent<Shutdown>(end).size() == 1u);  // the member that did join is told
}

namespace {
// A running job of 2 shards and 2 single-replica worker members; returns the core at time 100.
CoordinatorCore running(bool hierarchical, bool require_all = false) {
  CoordinatorConfig c = config(2, 2, hierarchical);
  c.require_all_workers = require_all;
  auto core = CoordinatorCore::make(c, 0).value();
  form(core,
       {member(MemberRole::ps, 1, 2), member(MemberRole::worker, 2), member(MemberRole::worker, 3)},
       0);
  for (uint32_t i = 0; i < 3; ++i) {
    CoordinatorEffects fx;
    core.on_message({i, Ready{}}, 100, fx);
  }
  BOOST_REQUIRE((core.phase() == CoordinatorPhase::running));
  return core;
}

// Member 0 of running_one_ps: one shard, incarnation 1, over a durable store or not.
MemberInfo first_ps(bool durable) {
  MemberInfo ps = member(MemberRole::ps, 1);
  ps.durable = durable;
  ps.incarnation = 1;
  return ps;
}

// One shard, one worker, and 20 s for a lost durable ps to come back.
CoordinatorConfig waiting_config() {
  CoordinatorConfig c = config(1, 1, /*hierarchical=*/false);
  c.join_timeout_ms = 20'000;
  return c;
}

// A running job of `members` under `c`, formed and every member ready at time 0.
CoordinatorCore running_with(const CoordinatorConfig& c, const std::vector<MemberInfo>& members) {
  auto core = CoordinatorCore::make(c, 0).value();
  form(core, members, 0);
  for (uint32_t i = 0; i < members.size(); ++i) {
    CoordinatorEffects fx;
    core.on_message({i, Ready{}}, 0, fx);
  }
  BOOST_REQUIRE((core.phase() == CoordinatorPhase::running));
  return core;
}

// A running job of one ps member `ps` (one shard) and one single-replica worker member, under `c`.
CoordinatorCore running_one_ps(const CoordinatorConfig& c, const MemberInfo& ps) {
  return running_with(c, {ps, member(MemberRole::worker, 2)});
}

// The worker (member 1) of running_one_ps sends heartbeats and the durable ps (member 0) none,
// until `until_ms`: whether the coordinator has declared the ps lost and waits for it by then.
bool durable_ps_goes_silent(CoordinatorCore& core, uint64_t until_ms) {
  for (uint64_t now = 0; now <= until_ms; now += 250) {
    CoordinatorEffects fx;
    core.on_message({1, Heartbeat{now}}, now, fx);
    core.on_timer(now, fx);
    if (logged(fx, "its rows are on disk: waiting")) return true;
  }
  return false;
}

// `ps` (member 0, in a new incarnation) joins again at `now`, is welcomed back to resume its
// shards, and once it is Ready the workers are told (ShardsRestarted).
void resumes(CoordinatorCore& core, const MemberInfo& ps, uint64_t now) {
  CoordinatorEffects back;
  core.on_message({control_from_unknown, Join{ps}}, now, back);
  const auto welcomes = sent<Welcome>(back);
  BOOST_REQUIRE_EQUAL(welcomes.size(), 1u);
  BOOST_TEST(welcomes[0].second.resume);
  CoordinatorEffects ready;
  core.on_message({0, Ready{}}, now + 100, ready);
  BOOST_TEST(sent<ShardsRestarted>(ready).size() == 1u);
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_silent_worker_is_lost_its_clocks_released_and_the_job_goes_on) {
  for (bool hierarchical : {false, true}) {
    CoordinatorCore core = running(hierarchical);
    // Members 0 (ps) and 2 keep sending heartbeats; member 1 goes silent.
    uint64_t now = 100;
    CoordinatorEffects lost;
    for (; now <= 6'000; now += 500) {
      CoordinatorEffects fx;
      core.on_message({0, Heartbeat{0}}, now, fx);
      core.on_message({2, Heartbeat{now}}, now, fx);
      core.on_timer(now, fx);
      if (!sent<NodesLost>(fx).empty()) lost = fx;
    }
    BOOST_TEST_CONTEXT("hierarchical " << hierarchical) {
      BOOST_REQUIRE(!sent<NodesLost>(lost).empty());
      BOOST_TEST(lost.failed.ok());
      // The lost member's sender (its aggregator, or its one replica) is done at every shard.
      const NodeId sender = hierarchical ? 4 : 2;  // shards 0-1, workers 2-3, aggregators 4-5
      BOOST_REQUIRE_EQUAL(lost.ps.size(), 2u);
      std::set<NodeId> shards;
      for (const Outgoing& o : lost.ps) {
        const auto& c = std::get<ClockAdvance>(o.message);
        BOOST_TEST(c.header.sender == sender);
        BOOST_TEST(c.clock == clock_done);
        shards.insert(o.to);
      }
      BOOST_TEST((shards == std::set<NodeId>{0, 1}));
      // Everyone else is told to stop sending to its nodes.
      BOOST_TEST(sent<NodesLost>(lost).size() == 2u);
      BOOST_TEST(core.totals().workers_lost == 1u);
      CoordinatorEffects done;
      core.on_message({2, MemberDone{"", false, WorkerCounters{10, 5.0, 1, 1, 1, 1, 0}}}, now,
                      done);
      BOOST_TEST(done.training_done);
    }
  }
}

BOOST_AUTO_TEST_CASE(losses_that_end_the_job) {
  {
    CoordinatorCore core = running(true, /*require_all=*/true);
    CoordinatorEffects fx;
    core.on_message({0, Heartbeat{0}}, 5'000, fx);
    core.on_message({2, Heartbeat{0}}, 5'000, fx);
    core.on_timer(5'200, fx);
    BOOST_TEST(!fx.failed.ok());
    BOOST_TEST(fx.failed.message().find("--require-all-workers") != std::string::npos);
  }
  {
    CoordinatorCore core = running(true);
    CoordinatorEffects fx;
    core.on_message({1, Heartbeat{0}}, 5'000, fx);
    core.on_message({2, Heartbeat{0}}, 5'000, fx);
    core.on_timer(5'200, fx);  // the ps went silent: its rows are gone
    BOOST_TEST(!fx.failed.ok());
    BOOST_TEST(fx.failed.message().find("lost ps member 0") != std::string::npos);
  }
  {
    CoordinatorCore core = running(false);
    CoordinatorEffects fx;
    core.on_message({0, Heartbeat{0}}, 5'000, fx);
    core.on_timer(5'200, fx);
    BOOST_TEST(!fx.failed.ok());
    BOOST_TEST(fx.failed.message().find("every worker member was lost") != std::string::npos);
  }
  {
    CoordinatorCore core = running(false);
    CoordinatorEffects fx;
    core.on_message(
        {1, MemberDone{"bad input at line 3", false, WorkerCounters{0, 0, 0, 0, 0, 0, 0}}}, 200,
        fx);
    BOOST_TEST(fx.failed.message().find("bad input at line 3") != std::string::npos);
    BOOST_TEST(sent<Shutdown>(fx).size() == 3u);
  }
}

// Random schedules: members join in any order, some workers die at random times, the rest
// finish. The job ends trained exactly when some worker finished; a lost worker's senders get
// clock_done at every shard exactly once; nothing is sent after the end.
BOOST_AUTO_TEST_CASE(random_schedules_keep_the_invariants) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SplitMix64 rng(seed);
    const uint32_t shards = 1 + static_cast<uint32_t>(rng.next() % 4);
    const uint32_t worker_members = 1 + static_cast<uint32_t>(rng.next() % 4);
    const bool hierarchical = rng.next() % 2;
    std::vector<MemberInfo> members;
    for (uint32_t s = 0; s < shards; ++s) members.push_back(member(MemberRole::ps, int(s)));
    for (uint32_t w = 0; w < worker_members; ++w)
      members.push_back(member(MemberRole::worker, 100 + int(w), 2));
    for (size_t i = members.size(); i > 1; --i) std::swap(members[i - 1], members[rng.next() % i]);
    auto core = CoordinatorCore::make(config(shards, 2 * worker_members, hierarchical), 0).value();
    form(core, members, 0);
    for (uint32_t i = 0; i < members.size(); ++i) {
      CoordinatorEffects fx;
      core.on_message({i, Ready{}}, 0, fx);
    }
    BOOST_REQUIRE((core.phase() == CoordinatorPhase::running));
    // Each worker member either finishes at a random time or dies (goes silent) at one.
    std::vector<uint64_t> ends(members.size(), 0);
    std::vector<bool> dies(members.size(), false);
    bool any_finishes = false;
    for (uint32_t i = 0; i < members.size(); ++i) {
      if (core.members()[i].role != MemberRole::worker) continue;
      ends[i] = 1'000 + rng.next() % 20'000;
      dies[i] = rng.next() % 3 == 0;
      any_finishes |= !dies[i];
    }
    std::map<std::pair<NodeId, NodeId>, int> released;  // (sender, shard) -> clock_done count
    bool trained = false, ended = false;
    for (uint64_t now = 0; now <= 40'000 && !ended; now += 250) {
      CoordinatorEffects fx;
      for (uint32_t i = 0; i < members.size(); ++i) {
        const bool worker = core.members()[i].role == MemberRole::worker;
        if (!worker)
          core.on_message({i, Heartbeat{0}}, now, fx);
        else if (now < ends[i])
          core.on_message({i, Heartbeat{now}}, now, fx);
        else if (!dies[i] && now < ends[i] + 250)
          core.on_message({i, MemberDone{"", false, WorkerCounters{1, 0.5, 1, 1, 1, 1, 0}}}, now,
                          fx);
      }
      core.on_timer(now, fx);
      for (const Outgoing& o : fx.ps)
        ++released[{std::get<ClockAdvance>(o.message).header.sender, o.to}];
      BOOST_TEST(!(trained && fx.training_done), "trained twice, seed " << seed);
      trained |= fx.training_done;
      if (!fx.failed.ok()) ended = true;
      if (trained) break;
    }
    BOOST_TEST(trained == any_finishes, "seed " << seed);
    for (uint32_t i = 0; i < members.size(); ++i) {
      const MemberInfo& m = core.members()[i];
      if (m.role != MemberRole::worker) continue;
      std::vector<NodeId> senders;
      if (m.has_aggregator)
        senders = {m.aggregator};
      else
        senders = {m.first_node, m.first_node + 1};
      for (NodeId sender : senders)
        for (NodeId s = 0; s < shards; ++s) {
          const int n = released.count({sender, s}) ? released[{sender, s}] : 0;
          // A dead worker is released once, unless the job failed (all died) before it was noticed.
          if (dies[i] && any_finishes) BOOST_TEST(n == 1, "seed " << seed << " sender " << sender);
          if (!dies[i]) BOOST_TEST(n == 0, "seed " << seed << " sender " << sender);
        }
    }
  }
}

// A durable ps lost while running is waited for; it comes back from the same endpoint, gets a
// Welcome to resume, and once Ready the live workers are told to resync, while a worker lost
// in the meantime is resynced as done on its behalf. One that never comes back fails the job.
BOOST_AUTO_TEST_CASE(a_durable_ps_is_waited_for_and_resumes) {
  CoordinatorConfig c = config(1, 2, /*hierarchical=*/false);
  c.join_timeout_ms = 20'000;
  auto core = CoordinatorCore::make(c, 0).value();
  MemberInfo ps = member(MemberRole::ps, 1);
  ps.durable = true;
  form(core, {ps, member(MemberRole::worker, 2), member(MemberRole::worker, 3)}, 0);
  for (uint32_t i = 0; i < 3; ++i) {
    CoordinatorEffects fx;
    core.on_message({i, Ready{}}, 0, fx);
  }
  // The ps goes silent; so, a little later, does worker member 2 (node 2).
  uint64_t now = 0;
  bool waiting = false, worker_lost = false;
  for (; now <= 9'000; now += 250) {
    CoordinatorEffects fx;
    if (now < 3'000) core.on_message({2, Heartbeat{now}}, now, fx);
    core.on_message({1, Heartbeat{now}}, now, fx);
    core.on_timer(now, fx);
    BOOST_REQUIRE(fx.failed.ok());
    waiting |= logged(fx, "its rows are on disk: waiting up to 20 s");
    worker_lost |= logged(fx, "worker member 2");
  }
  BOOST_TEST(waiting);
  BOOST_TEST(worker_lost);
  // The same endpoint joins again: it is the ps, welcomed back to resume.
  CoordinatorEffects back;
  core.on_message({control_from_unknown, Join{ps}}, now, back);
  const auto welcomes = sent<Welcome>(back);
  BOOST_REQUIRE_EQUAL(welcomes.size(), 1u);
  BOOST_TEST(welcomes[0].second.resume);
  BOOST_TEST(welcomes[0].second.you == 0u);
  CoordinatorEffects ready;
  core.on_message({0, Ready{}}, now, ready);
  const auto restarted = sent<ShardsRestarted>(ready);
  BOOST_REQUIRE_EQUAL(restarted.size(), 1u);                // the live worker only
  BOOST_TEST(restarted[0].first == "tcp://10.0.0.2:7000");  // member 1; member 2 was lost
  BOOST_TEST((restarted[0].second.nodes == std::vector<NodeId>{0}));
  BOOST_REQUIRE_EQUAL(ready.ps.size(), 1u);
  const auto& on_behalf = std::get<ClockAdvance>(ready.ps[0].message);
  BOOST_TEST(on_behalf.header.sender == 2u);
  BOOST_TEST(on_behalf.clock == clock_done);
  BOOST_TEST(on_behalf.resync);
  BOOST_TEST(core.totals().ps_restarts == 1u);

  // Another run where it never comes back.
  auto other = CoordinatorCore::make(c, 0).value();
  form(other, {ps, member(MemberRole::worker, 2), member(MemberRole::worker, 3)}, 0);
  for (uint32_t i = 0; i < 3; ++i) {
    CoordinatorEffects fx;
    other.on_message({i, Ready{}}, 0, fx);
  }
  Status failed;
  for (uint64_t t = 0; t <= 40'000 && failed.ok(); t += 500) {
    CoordinatorEffects fx;
    other.on_message({1, Heartbeat{t}}, t, fx);
    other.on_message({2, Heartbeat{t}}, t, fx);
    other.on_timer(t, fx);
    failed = fx.failed;
  }
  BOOST_TEST(failed.message().find("did not come back within 20 s") != std::string::npos,
             failed.message());
}

// A member busy past the heartbeat timeout (a ps writing a large cache to disk as it drains)
// is declared lost; its Leave, when it comes, is not a lie. A second one is.
BOOST_AUTO_TEST_CASE(a_leave_after_the_loss_is_taken_once) {
  CoordinatorConfig c = config(1, 1, /*hierarchical=*/false);
  MemberInfo ps = member(MemberRole::ps, 1);
  ps.durable = true;
  auto core = running_one_ps(c, ps);
  BOOST_REQUIRE(durable_ps_goes_silent(core, 6'000));
  CoordinatorEffects late;
  core.on_message({0, Leave{"stopped by SIGTERM", true}}, 7'000, late);
  BOOST_TEST(late.failed.ok());
  BOOST_TEST(logged(late, "left (stopped by SIGTERM) after it was declared lost"));
  BOOST_TEST(late.control.empty());  // no second loss, nothing to anyone
  BOOST_TEST(late.ps.empty());
  BOOST_TEST(core.totals().counters.bad_messages == 0u);
  CoordinatorEffects again;
  core.on_message({0, Leave{"stopped by SIGTERM", true}}, 7'100, again);
  BOOST_TEST(core.totals().counters.bad_messages == 1u);
  BOOST_TEST(!logged(again, "after it was declared lost"));
}

// The same ps, but its drain failed (its cache could not be written to its store): its Leave,
// late as it is, ends the job, as it would have had it come in time. The job does not wait for
// a process that would resume over a store missing what it acknowledged.
BOOST_AUTO_TEST_CASE(an_error_leave_after_the_loss_ends_the_job) {
  auto core = running_one_ps(waiting_config(), first_ps(/*durable=*/true));
  BOOST_REQUIRE(durable_ps_goes_silent(core, 12'000));
  CoordinatorEffects late;
  core.on_message({0, Leave{"shard node 0 could not write its cached rows", false}, {}, 1}, 12'500,
                  late);
  BOOST_TEST(late.failed.message().find("left (shard node 0 could not write its cached rows) "
                                        "after it was declared lost") != std::string::npos,
             late.failed.message());
  BOOST_TEST((core.phase() == CoordinatorPhase::ended));
}

// A worker member that finished its part (MemberDone) and is then started again by its
// supervisor is told to stop: it is not lost (the job, even with --require-all-workers, goes
// on) and not a lie.
BOOST_AUTO_TEST_CASE(a_worker_restarted_after_it_finished_is_told_to_stop) {
  for (bool require_all : {false, true}) {
    BOOST_TEST_CONTEXT("require_all_workers " << require_all) {
      CoordinatorCore core = running(/*hierarchical=*/false, require_all);
      CoordinatorEffects done;
      core.on_message({1, MemberDone{}}, 500, done);
      MemberInfo again = member(MemberRole::worker, 2);
      again.incarnation = 5;
      CoordinatorEffects back;
      core.on_message({control_from_unknown, Join{again}}, 600, back);
      BOOST_TEST(back.failed.ok(), back.failed.message());
      BOOST_TEST(sent<Refuse>(back).size() == 1u);
      BOOST_TEST(sent<NodesLost>(back).empty());
      BOOST_TEST(back.ps.empty());
      BOOST_TEST(core.totals().workers_lost == 0u);
      BOOST_TEST(core.totals().counters.bad_messages == 0u);
      // The other worker finishes: the job is trained.
      CoordinatorEffects last;
      core.on_message({2, MemberDone{}}, 700, last);
      BOOST_TEST(last.training_done);
    }
  }
}

// A ps over a durable store stopped with SIGTERM while training runs (what a supervisor does to
// restart it) leaves drained, is waited for as a lost one is, and resumes when it joins again.
// One whose rows are in memory only takes them with it, and one that leaves on an error (no
// `drained`) would fail again: both end the job, saying so.
BOOST_AUTO_TEST_CASE(a_durable_ps_that_leaves_is_waited_for_as_a_lost_one_is) {
  struct Case {
    bool durable;
    Leave leave;
    std::string failure;  // empty: waited for
  };
  const std::vector<Case> cases = {
      {true, Leave{"stopped by SIGTERM", true}, ""},
      {false, Leave{"stopped by SIGTERM", true}, "left (stopped by SIGTERM): its shards are gone"},
      {true, Leave{"shard node 0: the store could not be written", false},
       "left (shard node 0: the store could not be written): its shards are gone"},
  };
  for (const Case& k : cases) {
    BOOST_TEST_CONTEXT((k.durable ? "durable, " : "in memory, ") << k.leave.reason) {
      MemberInfo ps = first_ps(k.durable);
      auto core = running_one_ps(waiting_config(), ps);
      CoordinatorEffects left;
      core.on_message({0, k.leave, {}, 1}, 500, left);
      if (!k.failure.empty()) {
        BOOST_TEST(left.failed.message().find(k.failure) != std::string::npos,
                   left.failed.message());
        continue;
      }
      BOOST_TEST(left.failed.ok(), left.failed.message());
      BOOST_TEST(logged(left, "was lost: left (stopped by SIGTERM); its rows are on disk"));
      const auto lost = sent<NodesLost>(left);
      BOOST_REQUIRE_EQUAL(lost.size(), 1u);  // to the worker
      BOOST_TEST((lost[0].second.nodes == std::vector<NodeId>{0}));
      // Its heartbeats have stopped, and the worker's go on: no second loss, no failure.
      for (uint64_t now = 1'000; now <= 12'000; now += 250) {
        CoordinatorEffects fx;
        core.on_message({1, Heartbeat{now}}, now, fx);
        core.on_timer(now, fx);
        BOOST_REQUIRE(fx.failed.ok());
        BOOST_TEST(sent<NodesLost>(fx).empty());
      }
      ps.incarnation = 2;  // the process started again
      resumes(core, ps, 12'000);
      BOOST_TEST(core.totals().ps_restarts == 1u);
      BOOST_TEST(core.totals().counters.bad_messages == 0u);
      // The old process's Leave again, once taken: a replay, a lie.
      CoordinatorEffects replay;
      core.on_message({0, k.leave, {}, 1}, 12'500, replay);
      BOOST_TEST(replay.failed.ok());
      BOOST_TEST(core.totals().counters.bad_messages == 1u);
    }
  }
}

// A ps restarted at once (SIGTERM, then its supervisor starts it again): the new process's Join
// may be read before the old one's Leave. The Join is the restart; the late Leave, from the
// earlier incarnation, is ignored: not a loss of the new process, not a lie. The new process's
// own Leave is taken.
BOOST_AUTO_TEST_CASE(a_leave_read_after_the_next_incarnation_joined_is_ignored) {
  MemberInfo ps = first_ps(/*durable=*/true);
  auto core = running_one_ps(waiting_config(), ps);
  ps.incarnation = 2;
  CoordinatorEffects back;
  core.on_message({control_from_unknown, Join{ps}}, 500, back);
  BOOST_TEST(logged(back, "it restarted (a new incarnation joined)"));
  BOOST_REQUIRE_EQUAL(sent<Welcome>(back).size(), 1u);
  CoordinatorEffects late;
  core.on_message({0, Leave{"stopped by SIGTERM", true}, {}, 1}, 600, late);
  BOOST_TEST(late.failed.ok(), late.failed.message());
  BOOST_TEST(logged(late, "from incarnation 1, not the one that joined last: ignored"));
  BOOST_TEST(late.control.empty());
  CoordinatorEffects ready;
  core.on_message({0, Ready{}}, 700, ready);
  BOOST_TEST(sent<ShardsRestarted>(ready).size() == 1u);
  BOOST_TEST(core.totals().ps_restarts == 1u);
  BOOST_TEST(core.totals().counters.bad_messages == 0u);
  // The same again, or another incarnation's: lies, dropped and counted.
  for (uint64_t incarnation : {1, 7}) {
    CoordinatorEffects lie;
    core.on_message({0, Leave{"stopped by SIGTERM", true}, {}, incarnation}, 750, lie);
    BOOST_TEST(lie.control.empty());
  }
  BOOST_TEST(core.totals().counters.bad_messages == 2u);
  CoordinatorEffects own;
  core.on_message({0, Leave{"stopped by SIGTERM", true}, {}, 2}, 800, own);
  BOOST_TEST(logged(own, "left (stopped by SIGTERM); its rows are on disk"));
}

// A durable ps stopped again while it resumes (welcomed back, still building its shards: a
// supervisor's retried restart) leaves drained and is waited for once more; its next process
// resumes the shards.
BOOST_AUTO_TEST_CASE(a_resuming_ps_stopped_again_is_waited_for_again) {
  MemberInfo ps = first_ps(/*durable=*/true);
  auto core = running_one_ps(waiting_config(), ps);
  CoordinatorEffects left;
  core.on_message({0, Leave{"stopped by SIGTERM", true}, {}, 1}, 500, left);
  BOOST_REQUIRE(left.failed.ok());
  ps.incarnation = 2;
  CoordinatorEffects back;
  core.on_message({control_from_unknown, Join{ps}}, 1'000, back);
  BOOST_REQUIRE_EQUAL(sent<Welcome>(back).size(), 1u);
  CoordinatorEffects again;
  core.on_message({0, Leave{"stopped by a signal before its shards were built", true}, {}, 2},
                  1'500, again);
  BOOST_TEST(again.failed.ok(), again.failed.message());
  BOOST_TEST(logged(again, "its rows are on disk: waiting"));
  ps.incarnation = 3;
  resumes(core, ps, 2'000);
  BOOST_TEST(core.totals().ps_restarts == 1u);
  BOOST_TEST(core.totals().counters.bad_messages == 0u);
}

// Once training is over, every ps member is asked for a summary of its shards; the driver waits
// (summaries_pending) until each has answered or the heartbeat timeout has passed.
BOOST_AUTO_TEST_CASE(ps_members_summarize_their_shards_once_training_is_over) {
  auto core = CoordinatorCore::make(config(3, 1), 0).value();
  const std::vector<MemberInfo> members = {member(MemberRole::ps, 1), member(MemberRole::ps, 2, 2),
                                           member(MemberRole::worker, 3)};
  form(core, members, 0);
  for (uint32_t i = 0; i < 3; ++i) {
    CoordinatorEffects r;
    core.on_message({i, Ready{}}, 10, r);
  }
  BOOST_TEST(!core.summaries_pending());
  // A summary before training is over counts for nothing.
  CoordinatorEffects early;
  core.on_message({0, ShardSummary{999, 999, 999, 0, 0, 0}}, 15, early);
  CoordinatorEffects done;
  core.on_message({2, MemberDone{"", false, WorkerCounters{100, 50.0, 1, 1, 1, 10, 0, 0, 3}}}, 20,
                  done);
  BOOST_REQUIRE(done.training_done);
  BOOST_TEST(core.totals().counters.replies_dropped == 3u);
  const auto asked = sent<ShardSummaryRequest>(done);
  BOOST_REQUIRE_EQUAL(asked.size(), 2u);  // the ps members only
  BOOST_TEST(asked[0].first == members[0].endpoint);
  BOOST_TEST(asked[1].first == members[1].endpoint);
  BOOST_TEST(core.summaries_pending());
  BOOST_TEST(core.next_deadline() <= 20u + 5'000u);
  CoordinatorEffects a, again, worker;
  core.on_message({0, ShardSummary{100, 6400, 3, 1, 2, 0}}, 30, a);
  core.on_message({0, ShardSummary{100, 6400, 3, 1, 2, 0}}, 31, again);  // a repeat: counted once
  core.on_message({2, ShardSummary{7, 7, 7, 7, 7, 7}}, 32, worker);      // not a ps: ignored
  BOOST_TEST(core.summaries_pending());
  CoordinatorEffects b;
  core.on_message({1, ShardSummary{250, 16000, 4, 0, 0, 5}}, 40, b);
  BOOST_TEST(!core.summaries_pending());
  BOOST_TEST((core.totals().shards == ShardSummary{350, 22400, 7, 1, 2, 5}));
  BOOST_TEST(core.totals().shard_summaries == 2u);
}

BOOST_AUTO_TEST_CASE(a_silent_ps_is_left_out_of_the_summary_after_the_heartbeat_timeout) {
  auto core = CoordinatorCore::make(config(2, 1), 0).value();
  const std::vector<MemberInfo> members = {member(MemberRole::ps, 1), member(MemberRole::ps, 2),
                                           member(MemberRole::worker, 3)};
  form(core, members, 0);
  for (uint32_t i = 0; i < 3; ++i) {
    CoordinatorEffects r;
    core.on_message({i, Ready{}}, 10, r);
  }
  CoordinatorEffects done, a;
  core.on_message({2, MemberDone{"", false, WorkerCounters{100, 50.0, 1, 1, 1, 10, 0}}}, 1'000,
                  done);
  BOOST_REQUIRE(done.training_done);
  core.on_message({0, ShardSummary{100, 6400, 0, 0, 0, 0}}, 1'100, a);
  // Member 1 keeps sending heartbeats but no summary.
  CoordinatorEffects hb, before, after;
  core.on_message({1, Heartbeat{0}}, 5'000, hb);
  core.on_timer(5'999, before);
  BOOST_TEST(core.summaries_pending());
  core.on_timer(6'000, after);
  BOOST_TEST(!core.summaries_pending());
  BOOST_TEST(logged(after, "ps member 1 at tcp://10.0.0.2:7000 sent no shard summary"));
  BOOST_TEST(core.totals().shards.table_rows == 100u);
  BOOST_TEST(core.totals().shard_summaries == 1u);
  BOOST_TEST((core.phase() == CoordinatorPhase::trained));  // the job is not failed for it
}

// Identity: every control message is tied to the key it came with, and keys to roles.
namespace {
MemberInfo keyed(MemberRole role, int i, const std::string& key, uint64_t incarnation = 1) {
  MemberInfo m = member(role, i);
  m.public_key = key;
  m.incarnation = incarnation;
  return m;
}
ControlMessage from_key(uint32_t from, ControlBody body, const std::string& key) {
  return ControlMessage{from, std::move(body), key};
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_listed_key_speaks_only_for_its_own_member_and_role) {
  CoordinatorConfig c = config(1, 1, /*hierarchical=*/false);
  c.key_roles = {{"kp", MemberRole::ps},
                 {"kw", MemberRole::worker},
                 {"kx", MemberRole::worker},
                 {"kn", std::nullopt}};
  auto core = CoordinatorCore::make(c, 0).value();
  // A worker's key joining as a ps: refused, on a link not kept.
  CoordinatorEffects as_ps;
  core.on_message(from_key(control_from_unknown, Join{keyed(MemberRole::ps, 9, "kw")}, "kw"), 0,
                  as_ps);
  BOOST_REQUIRE_EQUAL(sent<Refuse>(as_ps).size(), 1u);
  BOOST_TEST(sent<Refuse>(as_ps)[0].second.reason.find("is a worker key") != std::string::npos);
  BOOST_TEST(as_ps.control[0].one_off);
  BOOST_TEST(core.members().empty());
  // A join naming another key than its own: dropped without an answer.
  CoordinatorEffects forged;
  core.on_message(from_key(control_from_unknown, Join{keyed(MemberRole::ps, 9, "kp")}, "kx"), 0,
                  forged);
  BOOST_TEST(forged.control.empty());
  BOOST_TEST(core.totals().counters.bad_messages == 2u);

  CoordinatorEffects fx;
  core.on_message(from_key(control_from_unknown, Join{keyed(MemberRole::ps, 1, "kp")}, "kp"), 0,
                  fx);
  core.on_message(from_key(control_from_unknown, Join{keyed(MemberRole::worker, 2, "kn")}, "kn"), 0,
                  fx);
  BOOST_REQUIRE_EQUAL(sent<Welcome>(fx).size(), 2u);
  core.on_message(from_key(0, Ready{}, "kp"), 1, fx);
  // Ready in member 1's name with member 0's key: not taken.
  core.on_message(from_key(1, Ready{}, "kp"), 1, fx);
  BOOST_TEST((core.phase() == CoordinatorPhase::starting));
  core.on_message(from_key(1, Ready{}, "kn"), 1, fx);
  BOOST_TEST((core.phase() == CoordinatorPhase::running));
  // Control messages only the coordinator sends, from a member: dropped.
  const uint64_t before = core.totals().counters.bad_messages;
  CoordinatorEffects lies;
  core.on_message(from_key(1, Shutdown{""}, "kn"), 2, lies);
  core.on_message(from_key(1, NodesLost{{0}, "lie"}, "kn"), 2, lies);
  core.on_message(from_key(1, Welcome{}, "kn"), 2, lies);
  // A MemberDone for the worker, sent with the ps's key: not taken.
  core.on_message(
      from_key(1, MemberDone{"", false, WorkerCounters{5, 1.0, 1, 1, 1, 1, 0, 0, 0, 0}}, "kp"), 2,
      lies);
  BOOST_TEST(core.totals().counters.bad_messages == before + 4u);
  BOOST_TEST(core.totals().counters.samples == 0u);
  BOOST_TEST(lies.control.empty());
  BOOST_TEST((core.phase() == CoordinatorPhase::running));
}

BOOST_AUTO_TEST_CASE(a_lost_member_is_not_revived_by_its_heartbeats) {
  auto core = running(false, false);
  // Member 2 (a worker) goes silent until lost; its heartbeats after that are counted, not taken.
  uint64_t now = 100;
  bool lost = false;
  for (; now < 20'000 && !lost; now += 250) {
    CoordinatorEffects fx;
    core.on_message({0, Heartbeat{0}}, now, fx);
    core.on_message({1, Heartbeat{now}}, now, fx);
    core.on_timer(now, fx);
    lost = core.gone(2);
  }
  BOOST_REQUIRE(lost);
  const uint64_t before = core.totals().counters.bad_messages;
  CoordinatorEffects fx;
  core.on_message({2, Heartbeat{12345}}, now, fx);
  BOOST_TEST(core.gone(2));
  BOOST_TEST(core.totals().counters.bad_messages == before + 1u);
  BOOST_TEST(core.samples_reported() < 12345u);
}

BOOST_AUTO_TEST_CASE(a_hundred_refused_joins_keep_nothing) {
  CoordinatorConfig c = config(1, 1);
  c.key_roles = {{"kp", MemberRole::ps}, {"kw", MemberRole::worker}};
  auto core = CoordinatorCore::make(c, 0).value();
  for (int i = 0; i < 100; ++i) {
    CoordinatorEffects fx;
    core.on_message(from_key(control_from_unknown, Join{keyed(MemberRole::ps, 10 + i, "kw")}, "kw"),
                    i, fx);
    BOOST_REQUIRE_EQUAL(fx.control.size(), 1u);
    BOOST_TEST(fx.control[0].one_off);
  }
  BOOST_TEST(core.members().empty());
  BOOST_TEST(core.totals().counters.bad_messages == 100u);
}

// A member restarted with the same key is recognised at once by its new incarnation.
BOOST_AUTO_TEST_CASE(a_restarted_member_is_recognised_by_its_incarnation) {
  CoordinatorConfig c = config(1, 2, /*hierarchical=*/false);
  auto core = CoordinatorCore::make(c, 0).value();
  MemberInfo ps = keyed(MemberRole::ps, 1, "", 7);
  ps.durable = true;
  const MemberInfo w0 = keyed(MemberRole::worker, 2, "", 8),
                   w1 = keyed(MemberRole::worker, 3, "", 9);
  form(core, {ps, w0, w1}, 0);
  // Restarted between its Welcome and the start: welcomed again, and the job starts.
  MemberInfo again = w0;
  again.incarnation = 80;
  CoordinatorEffects early;
  core.on_message({control_from_unknown, Join{again}}, 5, early);
  BOOST_REQUIRE_EQUAL(sent<Welcome>(early).size(), 1u);
  BOOST_TEST(sent<Welcome>(early)[0].first == w0.endpoint);
  for (uint32_t i = 0; i < 3; ++i) {
    CoordinatorEffects fx;
    core.on_message({i, Ready{}}, 10, fx);
  }
  BOOST_REQUIRE((core.phase() == CoordinatorPhase::running));
  // The same incarnation joining again is a retry: nothing happens.
  CoordinatorEffects retry;
  core.on_message({control_from_unknown, Join{ps}}, 20, retry);
  BOOST_TEST(retry.control.empty());
  BOOST_TEST(!core.gone(0));
  // The durable ps restarts (kill -9, started again at once): lost and welcomed back at the same
  // moment, long before the heartbeat timeout.
  MemberInfo ps2 = ps;
  ps2.incarnation = 70;
  CoordinatorEffects back;
  core.on_message({control_from_unknown, Join{ps2}}, 30, back);
  BOOST_TEST(logged(back, "it restarted"));
  BOOST_REQUIRE_EQUAL(sent<Welcome>(back).size(), 1u);
  BOOST_TEST(sent<Welcome>(back)[0].second.resume);
  BOOST_TEST(sent<NodesLost>(back).size() == 2u);  // told to the workers
  CoordinatorEffects ready;
  core.on_message({0, Ready{}}, 40, ready);
  BOOST_REQUIRE_EQUAL(sent<ShardsRestarted>(ready).size(), 2u);
  BOOST_TEST(core.totals().ps_restarts == 1u);
  // Each event has its epoch, after the one before: a member can tell a late NodesLost.
  const uint64_t lost_epoch = sent<NodesLost>(back)[0].second.epoch;
  BOOST_TEST(lost_epoch >= 1u);
  BOOST_TEST(sent<NodesLost>(back)[1].second.epoch == lost_epoch);
  BOOST_TEST(sent<ShardsRestarted>(ready)[0].second.epoch == lost_epoch + 1);
  // A worker restarted while running is lost (the job goes on) and refused.
  MemberInfo w1b = w1;
  w1b.incarnation = 90;
  CoordinatorEffects wx;
  core.on_message({control_from_unknown, Join{w1b}}, 50, wx);
  BOOST_TEST(core.gone(2));
  BOOST_TEST(sent<Refuse>(wx).size() == 1u);
  BOOST_TEST(core.totals().workers_lost == 1u);
  BOOST_TEST(wx.failed.ok());
}

// A member restarted at once between its Welcome and the start, twice: the old processes'
// Ready, read after the newest process joined (they come over different connections), says
// nothing of the new one, which has not built its cores yet. It is ignored, and the job starts
// only once the new process is Ready. A message in the name of none of them is a lie.
BOOST_AUTO_TEST_CASE(the_ready_of_a_process_restarted_before_the_start_is_not_the_new_ones) {
  auto core = CoordinatorCore::make(config(1, 1, /*hierarchical=*/false), 0).value();
  const MemberInfo ps = keyed(MemberRole::ps, 1, "", 7), w = keyed(MemberRole::worker, 2, "", 8);
  form(core, {ps, w}, 0);
  CoordinatorEffects ps_ready;
  core.on_message({0, Ready{}, {}, 7}, 5, ps_ready);
  MemberInfo again = w;
  for (uint64_t incarnation : {79, 80}) {
    again.incarnation = incarnation;
    CoordinatorEffects back;
    core.on_message({control_from_unknown, Join{again}}, 10, back);
    BOOST_REQUIRE_EQUAL(sent<Welcome>(back).size(), 1u);
  }
  // Their Joins again (a process retries its Join until answered), read after the newest one's.
  for (uint64_t old : {8, 79}) {
    again.incarnation = old;
    CoordinatorEffects late;
    core.on_message({control_from_unknown, Join{again}}, 15, late);
    BOOST_TEST(logged(late, "a Join from incarnation " + std::to_string(old) +
                                ", a process replaced since: ignored"));
    BOOST_TEST(late.control.empty());
  }
  // Their Ready, and a heartbeat each sent before it died.
  for (uint64_t old : {8, 79})
    for (const ControlBody& body : {ControlBody(Ready{}), ControlBody(Heartbeat{0})}) {
      CoordinatorEffects late;
      core.on_message({1, body, {}, old}, 20, late);
      BOOST_TEST(logged(late, "from incarnation " + std::to_string(old) +
                                  ", not the one that joined last: ignored"));
      BOOST_TEST(sent<Start>(late).empty());
    }
  BOOST_TEST((core.phase() == CoordinatorPhase::starting));
  CoordinatorEffects lie;
  core.on_message({1, Ready{}, {}, 9}, 25, lie);
  BOOST_TEST(sent<Start>(lie).empty());
  BOOST_TEST(core.totals().counters.bad_messages == 1u);
  CoordinatorEffects ready;
  core.on_message({1, Ready{}, {}, 80}, 30, ready);
  BOOST_TEST(sent<Start>(ready).size() == 1u);
  BOOST_TEST((core.phase() == CoordinatorPhase::running));
}

// Checkpoints across ps members: a step is complete once every shard has reported it; a report
// for a shard the member does not host, or from a worker, is refused.
BOOST_AUTO_TEST_CASE(a_checkpoint_step_completes_once_every_shard_has_it) {
  CoordinatorConfig c = config(3, 1, /*hierarchical=*/false);
  c.job.checkpoint_every = 5;
  auto core = CoordinatorCore::make(c, 0).value();
  form(core,
       {member(MemberRole::ps, 1, 2), member(MemberRole::ps, 2, 1), member(MemberRole::worker, 3)},
       0);
  for (uint32_t i = 0; i < 3; ++i) {
    CoordinatorEffects fx;
    core.on_message({i, Ready{}}, 0, fx);
  }
  // Member 0 hosts shards 0 and 1, member 1 shard 2, member 2 is the worker (node 3).
  auto copy = [](uint32_t shard) {
    return ShardCheckpoint{shard, fmt::format("shard-{}", shard), 10 + shard, {{3, 5}}};
  };
  CoordinatorEffects a, forged, worker, b;
  core.on_message({0, ShardsCheckpointed{5, {copy(0), copy(1)}}}, 10, a);
  BOOST_TEST(sent<CheckpointComplete>(a).empty());
  core.on_message({0, ShardsCheckpointed{5, {copy(2)}}}, 11, forged);  // not member 0's shard
  core.on_message({2, ShardsCheckpointed{5, {copy(2)}}}, 11, worker);  // not a ps
  BOOST_TEST(sent<CheckpointComplete>(forged).empty());
  BOOST_TEST(sent<CheckpointComplete>(worker).empty());
  BOOST_TEST(core.totals().counters.bad_messages == 2u);
  // A step that is no checkpoint step, and a copy of shard 2 in a folder no manifest would name
  // (it would have completed step 5 with a list every ps member refuses): lies.
  CoordinatorEffects off_step, elsewhere;
  core.on_message({1, ShardsCheckpointed{7, {copy(2)}}}, 11, off_step);
  ShardCheckpoint moved = copy(2);
  moved.dir = "x";
  core.on_message({1, ShardsCheckpointed{5, {moved}}}, 11, elsewhere);
  BOOST_TEST(sent<CheckpointComplete>(elsewhere).empty());
  BOOST_TEST(core.totals().counters.bad_messages == 4u);
  BOOST_TEST(core.totals().checkpoints == 0u);
  core.on_message({1, ShardsCheckpointed{5, {copy(2)}}}, 12, b);
  const auto complete = sent<CheckpointComplete>(b);
  BOOST_REQUIRE_EQUAL(complete.size(), 2u);  // to both ps members
  BOOST_TEST(complete[0].second.step == 5u);
  BOOST_REQUIRE_EQUAL(complete[0].second.shards.size(), 3u);
  for (uint32_t s = 0; s < 3; ++s) BOOST_TEST(complete[0].second.shards[s].shard == s);
  BOOST_TEST(core.totals().checkpoints == 1u);
  BOOST_TEST(core.totals().last_checkpoint_step == 5u);
  // A late repeat of a complete step is refused.
  CoordinatorEffects late;
  core.on_message({1, ShardsCheckpointed{5, {copy(2)}}}, 13, late);
  BOOST_TEST(late.control.empty());
  BOOST_TEST(core.totals().counters.bad_messages == 5u);
}

namespace {

DenseState dense_of(uint32_t step, float value, const std::string& shape = "deepfm test") {
  return DenseState{shape, step, {value, value, value}, {0.0f, 0.0f, 0.0f}, step};
}

// A deep job on 2 ps members (one shard each) and 2 worker members (one replica each),
// checkpointing every 5 steps: config and the formed core (not yet ready).
CoordinatorConfig deep_config() {
  CoordinatorConfig c = config(2, 2);
  c.job.checkpoint_every = 5;
  c.dense_shape = "deepfm test";
  c.dense_params = 3;
  return c;
}
std::vector<MemberInfo> deep_members() {
  // Member 0 is a worker that joined first, member 3 the other; the shards are nodes 0 and 1,
  // the replicas 2 (member 0: the cluster's first replica) and 3.
  return {member(MemberRole::worker, 1), member(MemberRole::ps, 2), member(MemberRole::ps, 3),
          member(MemberRole::worker, 4)};
}

}  // namespace

// Issue 14: a deep model's checkpoint completes only with the dense layers of its step, from the
// member hosting the first replica, of the job's shape; CheckpointComplete carries them.
BOOST_AUTO_TEST_CASE(a_deep_models_checkpoint_waits_for_its_dense_layers) {
  auto core = CoordinatorCore::make(deep_config(), 0).value();
  form(core, deep_members(), 0);
  for (uint32_t i = 0; i < 4; ++i) {
    CoordinatorEffects fx;
    core.on_message({i, Ready{}}, 0, fx);
  }
  auto copy = [](uint32_t shard) {
    return ShardCheckpoint{shard, fmt::format("shard-{}", shard), 10, {{4, 5}}};
  };
  CoordinatorEffects shards;
  core.on_message({1, ShardsCheckpointed{5, {copy(0)}}}, 1, shards);
  core.on_message({2, ShardsCheckpointed{5, {copy(1)}}}, 1, shards);
  BOOST_TEST(sent<CheckpointComplete>(shards).empty());  // every shard, but no dense layers yet
  // Lies, each refused and counted: from the other worker, from a ps, of another shape, of
  // another size, not finite, of a step that is no checkpoint step.
  CoordinatorEffects lies;
  DenseState nan = dense_of(5, 1.0f);
  nan.params[1] = std::numeric_limits<float>::quiet_NaN();
  DenseState big = dense_of(5, 1.0f);
  big.params.push_back(1.0f);
  core.on_message({3, DenseCheckpointed{dense_of(5, 1.0f)}}, 2, lies);
  core.on_message({1, DenseCheckpointed{dense_of(5, 1.0f)}}, 2, lies);
  core.on_message({0, DenseCheckpointed{dense_of(5, 1.0f, "dlrm test")}}, 2, lies);
  core.on_message({0, DenseCheckpointed{big}}, 2, lies);
  core.on_message({0, DenseCheckpointed{nan}}, 2, lies);
  core.on_message({0, DenseCheckpointed{dense_of(7, 1.0f)}}, 2, lies);
  BOOST_TEST(sent<CheckpointComplete>(lies).empty());
  BOOST_TEST(core.totals().counters.bad_messages == 6u);
  BOOST_TEST(core.totals().checkpoints == 0u);
  CoordinatorEffects dense;
  core.on_message({0, DenseCheckpointed{dense_of(5, 2.0f)}}, 3, dense);
  const auto complete = sent<CheckpointComplete>(dense);
  BOOST_REQUIRE_EQUAL(complete.size(), 2u);  // to both ps members
  BOOST_REQUIRE(complete[0].second.dense.has_value());
  BOOST_TEST((*complete[0].second.dense == dense_of(5, 2.0f)));
  BOOST_TEST(complete[0].second.shards.size() == 2u);
  BOOST_TEST(core.totals().checkpoints == 1u);
  // The dense layers may come first too; a repeat of a complete step is refused.
  CoordinatorEffects early, late;
  core.on_message({0, DenseCheckpointed{dense_of(10, 3.0f)}}, 4, early);
  core.on_message({0, DenseCheckpointed{dense_of(5, 2.0f)}}, 4, late);
  BOOST_TEST(core.totals().counters.bad_messages == 7u);
  core.on_message({1, ShardsCheckpointed{10, {copy(0)}}}, 5, early);
  core.on_message({2, ShardsCheckpointed{10, {copy(1)}}}, 5, early);
  BOOST_REQUIRE_EQUAL(sent<CheckpointComplete>(early).size(), 2u);
  BOOST_TEST((*sent<CheckpointComplete>(early)[0].second.dense == dense_of(10, 3.0f)));
}

// Issue 14: ps members resumed from a deep model's checkpoint send its dense layers before their
// Ready; the workers get them ahead of Start when every ps sent the same ones, and the job fails
// naming the members when they differ or only some sent any.
BOOST_AUTO_TEST_CASE(dense_layers_to_start_from_must_be_the_same_on_every_ps) {
  auto start = [](std::optional<DenseState> a, std::optional<DenseState> b) {
    auto core = CoordinatorCore::make(deep_config(), 0).value();
    form(core, deep_members(), 0);
    CoordinatorEffects fx;
    if (a) core.on_message({1, DenseStart{*a}}, 1, fx);
    if (b) core.on_message({2, DenseStart{*b}}, 1, fx);
    for (uint32_t i = 0; i < 4; ++i) core.on_message({i, Ready{}}, 2, fx);
    // Once ready, a ps may not send them any more.
    CoordinatorEffects late;
    core.on_message({1, DenseStart{dense_of(5, 9.0f)}}, 3, late);
    BOOST_TEST(late.control.empty());
    return fx;
  };
  const CoordinatorEffects same = start(dense_of(5, 2.0f), dense_of(5, 2.0f));
  BOOST_TEST(same.failed.ok());
  // To each worker member, its DenseStart ahead of its Start.
  std::vector<std::string> order;
  for (const ControlOut& c : same.control)
    if (std::holds_alternative<DenseStart>(c.message.body))
      order.push_back("dense " + c.endpoint);
    else if (std::holds_alternative<Start>(c.message.body))
      order.push_back("start " + c.endpoint);
  const std::vector<std::string> expected = {
      "dense tcp://10.0.0.1:7000", "start tcp://10.0.0.1:7000", "dense tcp://10.0.0.4:7000",
      "start tcp://10.0.0.4:7000"};
  BOOST_TEST(order == expected, boost::test_tools::per_element());
  BOOST_TEST((sent<DenseStart>(same)[0].second.state == dense_of(5, 2.0f)));
  // None sent: a fresh start, no DenseStart.
  const CoordinatorEffects none = start(std::nullopt, std::nullopt);
  BOOST_TEST(none.failed.ok());
  BOOST_TEST(sent<DenseStart>(none).empty());
  BOOST_TEST(sent<Start>(none).size() == 2u);
  // Different ones, or only one ps: the job fails and nobody starts.
  const CoordinatorEffects differ = start(dense_of(5, 2.0f), dense_of(10, 2.0f));
  BOOST_TEST(!differ.failed.ok());
  BOOST_TEST(differ.failed.message().find("ps members 1 and 2 resumed from different dense "
                                          "layers (of step 5 and of step 10)") != std::string::npos,
             differ.failed.message());
  BOOST_TEST(sent<Start>(differ).empty());
  const CoordinatorEffects one = start(std::nullopt, dense_of(5, 2.0f));
  BOOST_TEST(!one.failed.ok());
  BOOST_TEST(one.failed.message().find("ps member 2 resumed from a checkpoint's dense layers "
                                       "(step 5) and ps member 1 from none") != std::string::npos,
             one.failed.message());
  // Another job's dense layers fail the job at once, naming the ps.
  auto core = CoordinatorCore::make(deep_config(), 0).value();
  form(core, deep_members(), 0);
  CoordinatorEffects other;
  core.on_message({2, DenseStart{dense_of(5, 2.0f, "dcn test")}}, 1, other);
  BOOST_TEST(other.failed.message().find("ps member 2 at tcp://10.0.0.3:7000 resumed from dense "
                                         "layers \"dcn test\"") != std::string::npos,
             other.failed.message());
}

// Issue 15: the members' heartbeats carry their load (MemberLoad); the coordinator sums it per
// worker replica and shard for its load alerts, and drops a load that cannot be its member's
// (the other role's counters, another count of replicas or shards, counters that went down)
// with the whole heartbeat, counted as a lie.
BOOST_AUTO_TEST_CASE(heartbeat_loads_add_up_and_loads_that_cannot_be_the_members_are_dropped) {
  CoordinatorCore core = running(/*hierarchical=*/false);  // ps of 2 shards, workers at 2 and 3
  ClusterLoad l = core.load();
  BOOST_TEST(l.oldest_load_ms == 0u);  // no member has sent a load yet
  BOOST_TEST((l.worker_nodes == std::vector<NodeId>{2, 3}));
  BOOST_TEST((l.worker_members == std::vector<uint32_t>{1, 2}));
  BOOST_TEST((l.worker_steps == std::vector<uint64_t>{0, 0}));
  BOOST_TEST((l.shard_rows == std::vector<uint64_t>{0, 0}));
  BOOST_TEST(l.processes.empty());

  auto worker_load = [](uint64_t busy_ns, uint64_t steps) {
    return MemberLoad{300u << 20, 0, {busy_ns}, {steps}, {}};
  };
  CoordinatorEffects fx;
  core.on_message({0, Heartbeat{0, ps_load({1000, 3000}, 64u << 20)}}, 200, fx);
  core.on_message({1, Heartbeat{640, worker_load(2'000'000'000, 10)}}, 150, fx);
  BOOST_TEST(core.load().oldest_load_ms == 0u);  // member 2 has sent none
  core.on_message({2, Heartbeat{320, worker_load(1'000'000'000, 5)}}, 200, fx);
  BOOST_TEST(core.totals().counters.bad_messages == 0u);
  l = core.load();
  BOOST_TEST(l.oldest_load_ms == 150u);  // member 1's, the stalest
  BOOST_TEST((l.worker_busy_s == std::vector<double>{2.0, 1.0}));
  BOOST_TEST((l.worker_steps == std::vector<uint64_t>{10, 5}));
  BOOST_TEST((l.shard_rows == std::vector<uint64_t>{1000, 3000}));
  BOOST_REQUIRE_EQUAL(l.processes.size(), 3u);
  BOOST_TEST(l.processes[0].member == 0u);
  BOOST_TEST(l.processes[0].rows_memory_bytes == uint64_t{64} << 20);
  BOOST_TEST(l.processes[1].rss_bytes == uint64_t{300} << 20);

  // Well-formed lies, each with its sender's own key and index: dropped whole (the samples too).
  const std::vector<std::pair<uint32_t, MemberLoad>> lies = {
      {1, MemberLoad{1, 0, {1, 2}, {1, 2}, {}}},              // two replicas from a worker of one
      {1, MemberLoad{1, 0, {3'000'000'000}, {11}, {5}}},      // rows served, from a worker
      {1, MemberLoad{1, 5, {3'000'000'000}, {11}, {}}},       // rows held, from a worker
      {1, MemberLoad{1, 0, {1'000'000'000}, {11}, {}}},       // busy time went down
      {2, MemberLoad{1, 0, {2'000'000'000}, {4}, {}}},        // steps went down
      {1, with_shards(worker_load(3'000'000'000, 11), {0})},  // shards, from a worker
      {0, with_shards(MemberLoad{1, 0, {}, {}, {5000}}, {0, 1})},  // one count for two shards
      {0, ps_load({5000})},                                        // a shard fewer than before
      {0, with_shards(MemberLoad{1, 0, {}, {}, {2000, 4000}}, {1, 0})},    // out of node order
      {0, with_shards(MemberLoad{1, 0, {}, {}, {2000, 4000}}, {0, 2})},    // node 2 is no shard
      {0, MemberLoad{1, 0, {}, {}, {2000, 4000}}},                         // naming no shard
      {0, with_shards(MemberLoad{1, 0, {7}, {7}, {2000, 4000}}, {0, 1})},  // steps, from a ps
      {0, ps_load({999, 4000})},                                           // rows served went down
  };
  for (const auto& [from, load] : lies) {
    CoordinatorEffects lie;
    core.on_message({from, Heartbeat{999'999, load}}, 300, lie);
  }
  BOOST_TEST(core.totals().counters.bad_messages == lies.size());
  BOOST_TEST(core.samples_reported() == 960u);
  l = core.load();
  BOOST_TEST((l.worker_busy_s == std::vector<double>{2.0, 1.0}));
  BOOST_TEST((l.worker_steps == std::vector<uint64_t>{10, 5}));
  BOOST_TEST((l.shard_rows == std::vector<uint64_t>{1000, 3000}));

  // The truth goes on adding up; a heartbeat without a load (the simulator's) changes nothing.
  core.on_message({1, Heartbeat{700, worker_load(2'500'000'000, 12)}}, 400, fx);
  core.on_message({2, Heartbeat{400}}, 400, fx);
  l = core.load();
  BOOST_TEST((l.worker_busy_s == std::vector<double>{2.5, 1.0}));
  BOOST_TEST((l.worker_steps == std::vector<uint64_t>{12, 5}));
  BOOST_TEST(core.totals().counters.bad_messages == lies.size());
}

// A durable ps restarted mid-job counts its shards' rows from 0 again: the coordinator's totals
// go on from what the old process had counted.
BOOST_AUTO_TEST_CASE(a_restarted_members_load_adds_to_what_its_last_incarnation_counted) {
  CoordinatorConfig c = config(1, 1, /*hierarchical=*/false);
  MemberInfo ps = member(MemberRole::ps, 1);
  ps.durable = true;
  ps.incarnation = 1;
  auto core = running_one_ps(c, ps);
  CoordinatorEffects fx;
  core.on_message({0, Heartbeat{0, ps_load({5000})}}, 100, fx);
  BOOST_TEST(core.load().shard_rows[0] == 5000u);
  // Restarted at once: a new incarnation joins; it counts from 0.
  ps.incarnation = 2;
  CoordinatorEffects back;
  core.on_message({control_from_unknown, Join{ps}}, 200, back);
  BOOST_REQUIRE_EQUAL(sent<Welcome>(back).size(), 1u);
  core.on_message({0, Ready{}}, 300, back);
  core.on_message({0, Heartbeat{0, ps_load({700})}}, 400, back);
  BOOST_TEST(core.totals().counters.bad_messages == 0u);
  BOOST_TEST(core.load().shard_rows[0] == 5700u);
  core.on_message({0, Heartbeat{0, ps_load({900})}}, 500, back);
  BOOST_TEST(core.load().shard_rows[0] == 5900u);
  // Counts near the top, then a restart: the total stays at the top, never wraps back.
  core.on_message({0, Heartbeat{0, ps_load({UINT64_MAX - 10})}}, 600, back);
  ps.incarnation = 3;
  core.on_message({control_from_unknown, Join{ps}}, 700, back);
  core.on_message({0, Ready{}}, 800, back);
  core.on_message({0, Heartbeat{0, ps_load({1'000'000})}}, 900, back);
  BOOST_TEST(core.load().shard_rows[0] == UINT64_MAX);
}

// The dashboard's cluster panels: the workers' staleness and latency histograms add up over
// workers, the ps's rows pulled and hot keys come through by shard; a load whose histograms,
// rows pulled or hot keys cannot be its member's is dropped whole, counted as a lie.
BOOST_AUTO_TEST_CASE(histograms_and_hot_keys_in_loads_add_up_and_impossible_ones_are_dropped) {
  CoordinatorCore core = running(/*hierarchical=*/false);  // ps of shards 0 and 1, 2 workers
  const ShardMap map = ShardMap::make(core.layout().map).value();
  std::vector<uint64_t> keys_of[2];  // a few keys of each shard
  for (uint64_t key = 1; keys_of[0].size() < 20 || keys_of[1].size() < 20; ++key)
    keys_of[map.shard_of(key)].push_back(key);

  auto histogram = [](size_t buckets, uint64_t in_first, double sum) {
    LoadHistogram h{std::vector<uint64_t>(buckets, 0), sum};
    h.counts[0] = in_first;
    return h;
  };
  auto worker = [&](uint64_t reads, double latency_s) {
    MemberLoad l{1, 0, {1000}, {1}, {}};
    l.staleness = histogram(load_staleness_buckets, reads, 0.0);
    l.pull_latency = histogram(load_latency_buckets, reads, latency_s);
    l.push_latency = histogram(load_latency_buckets, reads / 2, latency_s / 2);
    return l;
  };
  auto ps = [&](std::vector<LoadHotKey> hot) {
    MemberLoad l = ps_load({500, 700});
    l.rows_pulled = {300, 600};
    l.hot_keys = std::move(hot);
    return l;
  };
  const std::vector<LoadHotKey> hot = {
      {0, keys_of[0][0], 90}, {0, keys_of[0][1], 40}, {1, keys_of[1][0], 70}};
  CoordinatorEffects fx;
  core.on_message({0, Heartbeat{0, ps(hot)}}, 200, fx);
  core.on_message({1, Heartbeat{10, worker(40, 0.5)}}, 200, fx);
  core.on_message({2, Heartbeat{10, worker(60, 0.25)}}, 200, fx);
  BOOST_TEST(core.totals().counters.bad_messages == 0u);
  ClusterLoad l = core.load();
  BOOST_REQUIRE_EQUAL(l.staleness.counts.size(), load_staleness_buckets);
  BOOST_TEST(l.staleness.counts[0] == 100u);
  BOOST_TEST(l.pull_latency.counts[0] == 100u);
  BOOST_TEST(l.pull_latency.sum == 0.75);
  BOOST_TEST(l.push_latency.counts[0] == 50u);
  BOOST_TEST((l.shard_rows_pulled == std::vector<uint64_t>{300, 600}));
  BOOST_REQUIRE_EQUAL(l.hot_keys.size(), 3u);
  BOOST_TEST((l.hot_keys[2] == LoadHotKey{1, keys_of[1][0], 70}));  // the cluster's shard index

  // Well-formed lies from the members' own keys.
  auto staleness_of = [&](size_t buckets) {
    MemberLoad w = worker(50, 0.5);
    w.staleness = histogram(buckets, 50, 0.0);
    return w;
  };
  MemberLoad fewer_reads = worker(30, 0.5);
  MemberLoad less_time = worker(40, 0.1);
  MemberLoad nan_sum = worker(50, std::nan(""));
  MemberLoad from_worker = worker(50, 0.5);
  from_worker.hot_keys = {{0, keys_of[0][0], 1}};
  MemberLoad from_ps = ps(hot);
  from_ps.pull_latency = histogram(load_latency_buckets, 1, 0.1);
  MemberLoad pulled_over_served = ps(hot);
  pulled_over_served.rows_pulled = {501, 600};
  MemberLoad pulled_down = ps(hot);
  pulled_down.rows_pulled = {299, 600};
  MemberLoad one_shard = ps(hot);
  one_shard.rows_pulled = {300};
  std::vector<LoadHotKey> too_many;
  for (size_t k = 0; k <= load_hot_keys_per_shard_max; ++k)
    too_many.push_back({0, keys_of[0][k], 1});
  struct Lie {
    uint32_t from;
    MemberLoad load;
    std::string why;  // in the log line that names the lie
  };
  const std::vector<Lie> lies = {
      {1, staleness_of(load_staleness_buckets - 1), "read staleness in 8 buckets, not 9"},
      {1, staleness_of(load_latency_buckets), "read staleness in 17 buckets, not 9"},
      {1, fewer_reads, "counters below those of its last heartbeat"},
      {1, less_time, "counters below those of its last heartbeat"},
      {2, nan_sum, "pull latency summing to nan"},
      {2, from_worker, "shards, rows served, pulled or held, or hot keys, from a worker"},
      {0, from_ps, "busy times, steps or read and request histograms, from a ps"},
      {0, pulled_over_served, "501 rows pulled from a shard that served 500"},
      {0, pulled_down, "counters below those of its last heartbeat"},
      {0, one_shard, "rows pulled from 1 shards from a ps listing 2"},
      {0, ps({{0, keys_of[1][0], 5}}),
       fmt::format("hot key {} listed on shard 0, which does not hold it", keys_of[1][0])},
      {0, ps({{2, keys_of[0][0], 5}}), "a hot key of shard 2 from a ps listing 2"},
      {0, ps({{1, keys_of[1][0], 5}, {1, keys_of[1][0], 6}}),
       fmt::format("hot key {} listed twice", keys_of[1][0])},
      {0, ps(too_many), "over 16 hot keys for shard 0"},
  };
  uint64_t now = 300;
  for (const Lie& lie : lies) {
    CoordinatorEffects fx_lie;
    now += 61'000;  // past the minute between logged rejections
    core.on_message({lie.from, Heartbeat{999'999, lie.load}}, now, fx_lie);
    BOOST_TEST(logged(fx_lie, fmt::format("a heartbeat from member {}: ", lie.from) + lie.why),
               lie.why);
  }
  BOOST_TEST(core.totals().counters.bad_messages == lies.size());
  BOOST_TEST((core.load().staleness == l.staleness));
  BOOST_TEST((core.load().hot_keys == l.hot_keys));
  BOOST_TEST((core.load().shard_rows_pulled == l.shard_rows_pulled));

  // The truth goes on: a shard's new hot list replaces its last one.
  core.on_message({0, Heartbeat{0, ps({{1, keys_of[1][1], 80}})}}, now, fx);
  core.on_message({1, Heartbeat{20, worker(45, 0.75)}}, now, fx);
  l = core.load();
  BOOST_TEST(core.totals().counters.bad_messages == lies.size());
  BOOST_TEST((l.hot_keys == std::vector<LoadHotKey>{{1, keys_of[1][1], 80}}));
  BOOST_TEST(l.staleness.counts[0] == 105u);
  BOOST_TEST(l.pull_latency.sum == 1.0);
}

// Failover (replicated:2): a ps member lost while training. The shards it served move to the
// member that holds their backups: ShardsMoved to that member alone, then, once it answers
// Promoted, to every other live member (and to the coordinator's own routes), with clock_done
// resyncs for the senders of a worker member lost before. A Promoted from another member, or
// naming other shards, is refused. Losing the member that now serves a shard whose backup is
// gone fails the job.
BOOST_AUTO_TEST_CASE(a_lost_primary_fails_over_to_the_member_holding_its_backup) {
  CoordinatorConfig c = config(3, 2, /*hierarchical=*/false);
  c.job.replicas = 2;
  auto core = CoordinatorCore::make(c, 0).value();
  // Shard 0 on member 0, shards 1 and 2 on member 1; replicas on nodes 3 and 4; the
  // coordinator's node 5; backups 6 (of shard 0, on member 1), 7 and 8 (on member 0).
  form(core,
       {member(MemberRole::ps, 1), member(MemberRole::ps, 2, 2), member(MemberRole::worker, 3),
        member(MemberRole::worker, 4)},
       0);
  for (uint32_t i = 0; i < 4; ++i) {
    CoordinatorEffects fx;
    core.on_message({i, Ready{}}, 0, fx);
  }
  // Worker member 3 goes silent first, then ps member 1.
  CoordinatorEffects lost;
  for (uint64_t now = 0; now <= 9'000; now += 250) {
    CoordinatorEffects fx;
    core.on_message({0, Heartbeat{now}}, now, fx);
    core.on_message({2, Heartbeat{now}}, now, fx);
    if (now < 2'000) core.on_message({1, Heartbeat{now}}, now, fx);
    core.on_timer(now, fx);
    BOOST_REQUIRE(fx.failed.ok());
    if (!sent<ShardsMoved>(fx).empty()) lost = fx;
  }
  BOOST_TEST(logged(lost, "failover: its shards' backups are promoted"));
  const auto nodes_lost = sent<NodesLost>(lost);
  BOOST_REQUIRE_EQUAL(nodes_lost.size(), 2u);  // to members 0 and 2
  BOOST_TEST((nodes_lost[0].second.nodes == std::vector<NodeId>{1, 2, 6}));
  const auto promote = sent<ShardsMoved>(lost);
  BOOST_REQUIRE_EQUAL(promote.size(), 1u);
  BOOST_TEST(promote[0].first == "tcp://10.0.0.1:7000");
  BOOST_TEST((promote[0].second.shards == std::vector<NodeId>{1, 2}));
  BOOST_TEST(promote[0].second.member == 0u);
  BOOST_TEST(promote[0].second.epoch > nodes_lost[0].second.epoch);
  BOOST_TEST(core.totals().failovers == 0u);  // counted once Promoted

  // Lies: a worker says it promoted them; the right member names other shards.
  for (const ControlMessage& lie :
       {ControlMessage{2, Promoted{{1, 2}}}, ControlMessage{0, Promoted{{1}}}}) {
    CoordinatorEffects fx;
    core.on_message(lie, 9'100, fx);
    BOOST_TEST(sent<ShardsMoved>(fx).empty());
    BOOST_TEST(fx.moved.empty());
  }
  CoordinatorEffects promoted;
  core.on_message({0, Promoted{{1, 2}}}, 9'200, promoted);
  BOOST_TEST(core.totals().failovers == 1u);
  const auto moved = sent<ShardsMoved>(promoted);
  BOOST_REQUIRE_EQUAL(moved.size(), 1u);  // the live worker; member 0 knows, 1 and 3 are gone
  BOOST_TEST(moved[0].first == "tcp://10.0.0.3:7000");
  BOOST_TEST((moved[0].second.shards == std::vector<NodeId>{1, 2}));
  BOOST_TEST(moved[0].second.epoch > promote[0].second.epoch);
  BOOST_REQUIRE_EQUAL(promoted.moved.size(), 1u);
  BOOST_TEST(promoted.moved[0].member == 0u);
  // The lost worker's replica (node 4) resynced as done at both moved shards.
  BOOST_REQUIRE_EQUAL(promoted.ps.size(), 2u);
  for (const Outgoing& o : promoted.ps) {
    const auto& clock = std::get<ClockAdvance>(o.message);
    BOOST_TEST(clock.header.sender == 4u);
    BOOST_TEST(clock.clock == clock_done);
    BOOST_TEST(clock.resync);
  }
  // A second Promoted is old news.
  CoordinatorEffects again;
  core.on_message({0, Promoted{{1, 2}}}, 9'300, again);
  BOOST_TEST(sent<ShardsMoved>(again).empty());

  // Member 0 now serves every shard, none with a backup: losing it loses rows.
  Status failed;
  for (uint64_t now = 9'500; now <= 20'000 && failed.ok(); now += 250) {
    CoordinatorEffects fx;
    core.on_message({2, Heartbeat{now}}, now, fx);
    core.on_timer(now, fx);
    failed = fx.failed;
  }
  BOOST_TEST(failed.message().find("whose other replica is gone too") != std::string::npos,
             failed.message());
}

// A ps member that leaves while training runs (SIGTERM: it drained, then sent Leave) under
// replicated:2 fails over at once, as a lost one does after its heartbeats stop: its shard moves
// to the member holding the backup. Before the start a leaving ps ends the job, saying why.
BOOST_AUTO_TEST_CASE(a_ps_that_leaves_while_training_hands_its_shards_to_their_backups) {
  // One ps member per replica, each hosting one shard, and a worker member.
  auto cluster = [](uint32_t replicas) {
    CoordinatorConfig c = config(replicas, 1, /*hierarchical=*/false);
    c.job.replicas = replicas;
    auto core = CoordinatorCore::make(c, 0).value();
    std::vector<MemberInfo> members;
    for (uint32_t i = 0; i < replicas; ++i) members.push_back(member(MemberRole::ps, i + 1));
    members.push_back(member(MemberRole::worker, replicas + 1));
    form(core, members, 0);
    return core;
  };
  auto ready = [](CoordinatorCore& core) {
    for (uint32_t i = 0; i < core.members().size(); ++i) {
      CoordinatorEffects fx;
      core.on_message({i, Ready{}}, 0, fx);
    }
  };
  auto core = cluster(2);
  ready(core);
  // The loads of the shards, before: each ps serves its own, and no other's.
  const ShardMap map = ShardMap::make(core.layout().map).value();
  uint64_t key_of[2] = {0, 0};  // a key of each shard
  for (uint64_t key = 1; !key_of[0] || !key_of[1]; ++key) key_of[map.shard_of(key)] = key;
  MemberLoad ps1 = with_shards(MemberLoad{1, 0, {}, {}, {100}}, {1});
  ps1.hot_keys = {{0, key_of[1], 9}};
  CoordinatorEffects loads;
  core.on_message({0, Heartbeat{0, ps_load({40})}}, 400, loads);
  core.on_message({1, Heartbeat{0, ps1}}, 400, loads);
  core.on_message({0, Heartbeat{0, ps_load({50, 5})}}, 400, loads);  // not its shard 1 yet
  BOOST_TEST(core.totals().counters.bad_messages == 1u);
  BOOST_TEST((core.load().shard_rows == std::vector<uint64_t>{40, 100}));
  CoordinatorEffects left;
  core.on_message({1, Leave{"stopped by SIGTERM", true}}, 500, left);
  BOOST_TEST(left.failed.ok(), left.failed.message());
  BOOST_TEST(
      logged(left, "ps member 1 at tcp://10.0.0.2:7000 left (stopped by SIGTERM); failover"));
  const auto promote = sent<ShardsMoved>(left);
  BOOST_REQUIRE_EQUAL(promote.size(), 1u);
  BOOST_TEST(promote[0].first == "tcp://10.0.0.1:7000");
  BOOST_TEST((promote[0].second.shards == std::vector<NodeId>{1}));
  BOOST_TEST(core.totals().failovers == 0u);  // counted once Promoted
  // Its heartbeats stop now: that is no second loss.
  for (uint64_t now = 1'000; now <= 12'000; now += 250) {
    CoordinatorEffects fx;
    core.on_message({0, Heartbeat{now}}, now, fx);
    core.on_message({2, Heartbeat{now}}, now, fx);
    core.on_timer(now, fx);
    BOOST_REQUIRE(fx.failed.ok());
    BOOST_TEST(sent<NodesLost>(fx).empty());
  }
  CoordinatorEffects promoted;
  core.on_message({0, Promoted{{1}}}, 12'100, promoted);
  BOOST_TEST(core.totals().failovers == 1u);
  BOOST_TEST(sent<ShardsMoved>(promoted).size() == 1u);  // to the worker
  // Member 0 now serves shard 1 as well: its load lists it (a load from before the promotion
  // listed shard 0 alone), and the shard's rows add to what member 1 counted; the hot keys are
  // member 0's.
  MemberLoad both = ps_load({60, 30});
  both.hot_keys = {{1, key_of[1], 4}};
  core.on_message({0, Heartbeat{0, both}}, 12'200, promoted);
  BOOST_TEST(core.totals().counters.bad_messages == 1u);
  const ClusterLoad after = core.load();
  BOOST_TEST((after.shard_rows == std::vector<uint64_t>{60, 130}));
  BOOST_REQUIRE_EQUAL(after.hot_keys.size(), 1u);
  BOOST_TEST((after.hot_keys[0] == LoadHotKey{1, key_of[1], 4}));

  // Before the start there is nothing to fail over to yet.
  auto early = cluster(2);
  CoordinatorEffects gone;
  early.on_message({1, Leave{"stopped by SIGTERM", true}}, 0, gone);
  BOOST_TEST(gone.failed.message().find("its shards are gone") != std::string::npos,
             gone.failed.message());
}

namespace {

// Replicated:3 over three ps members, one shard each, and a worker member (node 3); the
// coordinator's node 4. Backups: shard 0's nodes 5 (member 1) and 6 (member 2), shard 1's 7
// (member 2) and 8 (member 0), shard 2's 9 (member 0) and 10 (member 1).
CoordinatorCore three_replicas(uint64_t join_timeout_ms = 60'000) {
  CoordinatorConfig c = config(3, 1, /*hierarchical=*/false);
  c.job.replicas = 3;
  c.join_timeout_ms = join_timeout_ms;
  auto core = running_with(c, {member(MemberRole::ps, 1), member(MemberRole::ps, 2),
                               member(MemberRole::ps, 3), member(MemberRole::worker, 4)});
  return core;
}

// The control messages of `fx` to member endpoint `to`, in order, by kind name.
std::vector<std::string> kinds_to(const CoordinatorEffects& fx, const std::string& to) {
  std::vector<std::string> out;
  for (const ControlOut& c : fx.control)
    if (c.endpoint == to)
      out.push_back(std::visit(
          [](const auto& b) -> std::string {
            using T = std::decay_t<decltype(b)>;
            if constexpr (std::is_same_v<T, NodesLost>) return "NodesLost";
            if constexpr (std::is_same_v<T, ReportApplied>) return "ReportApplied";
            if constexpr (std::is_same_v<T, ShardsMoved>) return "ShardsMoved";
            return "other";
          },
          c.message.body));
  return out;
}

}  // namespace

// Failover under replicated:3: a primary's member leaves while training runs. Every member is
// told its nodes are lost before anything else; each live backup is asked how far it applied
// (ReportApplied), and the most advanced is promoted: the member holding the other backup takes
// the move first (ShardsMoved, then a ReportApplied whose answer says it was taken), and only then
// the chosen member is sent the ShardsMoved naming that backup. Answers not asked for, from
// another member or about other backups, are refused. A second loss then promotes the last
// backups at once, both of one member's shards in one ShardsMoved.
BOOST_AUTO_TEST_CASE(under_three_replicas_the_most_advanced_backup_is_promoted) {
  auto core = three_replicas();
  const std::string m1 = "tcp://10.0.0.2:7000", m2 = "tcp://10.0.0.3:7000";
  CoordinatorEffects left;
  core.on_message({0, Leave{"stopped by SIGTERM", true}}, 500, left);
  BOOST_REQUIRE(left.failed.ok());
  const auto lost = sent<NodesLost>(left);
  BOOST_REQUIRE_EQUAL(lost.size(), 3u);
  BOOST_TEST((lost[0].second.nodes == std::vector<NodeId>{0, 8, 9}));
  BOOST_TEST(sent<ShardsMoved>(left).empty());
  BOOST_TEST((kinds_to(left, m1) == std::vector<std::string>{"NodesLost", "ReportApplied"}));
  BOOST_TEST((kinds_to(left, m2) == std::vector<std::string>{"NodesLost", "ReportApplied"}));
  const auto asked = sent<ReportApplied>(left);
  BOOST_TEST((asked[0].second.backups == std::vector<NodeId>{5}));
  BOOST_TEST((asked[1].second.backups == std::vector<NodeId>{6}));

  // Lies: the worker, a member about a backup it was not asked of, the lost member.
  const uint64_t bad = core.totals().counters.bad_messages;
  for (const ControlMessage& lie :
       {ControlMessage{3, Applied{{5}, {40}}}, ControlMessage{1, Applied{{6}, {40}}},
        ControlMessage{0, Applied{{5}, {40}}}}) {
    CoordinatorEffects fx;
    core.on_message(lie, 600, fx);
    BOOST_TEST(fx.control.empty());
  }
  BOOST_TEST(core.totals().counters.bad_messages == bad + 3);

  // Each answer shows it took the NodesLost before the question (its epoch).
  const uint64_t detached = lost[0].second.epoch;
  CoordinatorEffects first;
  core.on_message({1, Applied{{5}, {10}, detached}}, 700, first);
  BOOST_TEST(first.control.empty());  // member 2 has not answered yet
  CoordinatorEffects second;
  core.on_message({2, Applied{{6}, {12}, detached + 1}}, 800, second);
  BOOST_TEST(logged(second, "promoting node 6"));
  // Member 1, holding the other backup, moves first; member 2 is not told yet.
  BOOST_TEST((kinds_to(second, m1) == std::vector<std::string>{"ShardsMoved", "ReportApplied"}));
  BOOST_TEST(kinds_to(second, m2).empty());
  const auto follow = sent<ShardsMoved>(second);
  BOOST_TEST((follow[0].second.shards == std::vector<NodeId>{0}));
  BOOST_TEST(follow[0].second.member == 2u);
  BOOST_TEST(follow[0].second.backups.empty());
  BOOST_TEST(core.totals().failovers == 0u);

  // Its answer after the move shows it took it.
  CoordinatorEffects taken;
  core.on_message({1, Applied{{5}, {10}, follow[0].second.epoch}}, 900, taken);
  const auto promote = sent<ShardsMoved>(taken);
  BOOST_REQUIRE_EQUAL(promote.size(), 1u);
  BOOST_TEST(promote[0].first == m2);
  BOOST_TEST((promote[0].second.backups == std::vector<NodeId>{5}));
  BOOST_TEST(promote[0].second.epoch > follow[0].second.epoch);

  BOOST_TEST(core.totals().failovers == 0u);  // counted once done
  CoordinatorEffects promoted;
  core.on_message({2, Promoted{{0}}}, 1'000, promoted);
  BOOST_TEST(core.totals().failovers == 1u);
  const auto rerouted = sent<ShardsMoved>(promoted);
  BOOST_REQUIRE_EQUAL(rerouted.size(), 1u);  // member 3: member 1 took the move already
  BOOST_TEST(rerouted[0].first == "tcp://10.0.0.4:7000");
  BOOST_REQUIRE_EQUAL(promoted.moved.size(), 1u);
  BOOST_TEST(promoted.moved[0].member == 2u);

  // Member 2 (serving shards 0 and 2) is lost: each has one live backup left, both on member 1
  // (nodes 5 and 10), which takes both in one ShardsMoved without being asked.
  CoordinatorEffects second_loss;
  for (uint64_t now = 1'000; now <= 8'000 && sent<NodesLost>(second_loss).empty(); now += 250) {
    second_loss = CoordinatorEffects{};
    core.on_message({1, Heartbeat{now}}, now, second_loss);
    core.on_message({3, Heartbeat{now}}, now, second_loss);
    core.on_timer(now, second_loss);
  }
  BOOST_REQUIRE(second_loss.failed.ok());
  BOOST_TEST(sent<ReportApplied>(second_loss).empty());
  const auto last = sent<ShardsMoved>(second_loss);
  BOOST_REQUIRE_EQUAL(last.size(), 1u);
  BOOST_TEST(last[0].first == m1);
  BOOST_TEST((last[0].second.shards == std::vector<NodeId>{0, 2}));
  BOOST_TEST(last[0].second.backups.empty());
}

// Losses during a failover under replicated:3. A backup's member lost while it is asked: the
// failover goes on with the answers it has. The chosen member lost before it promoted: the
// failover starts over among the backups left (its NodesLost detaches the shard again), and an
// answer to the earlier attempt that comes after is taken as stale, not as a lie or an answer.
BOOST_AUTO_TEST_CASE(a_failover_goes_on_past_losses_during_it) {
  const std::string m1 = "tcp://10.0.0.2:7000", m2 = "tcp://10.0.0.3:7000";
  auto heartbeats_until_lost = [](CoordinatorCore& core, std::vector<uint32_t> alive,
                                  uint64_t from) {
    CoordinatorEffects fx;
    for (uint64_t now = from; now <= from + 8'000 && sent<NodesLost>(fx).empty(); now += 250) {
      fx = CoordinatorEffects{};
      for (uint32_t i : alive) core.on_message({i, Heartbeat{now}}, now, fx);
      core.on_timer(now, fx);
    }
    return fx;
  };
  {
    // Member 0 leaves; member 2 is lost before it answers: shard 0 goes to node 5 (member 1)
    // once member 1 answers, with no backup left to name; shard 2 (member 2's) goes to node 10
    // at once.
    auto core = three_replicas();
    CoordinatorEffects left;
    core.on_message({0, Leave{"stopped by SIGTERM", true}}, 500, left);
    BOOST_TEST(sent<ReportApplied>(left).size() == 2u);
    CoordinatorEffects gone = heartbeats_until_lost(core, {1, 3}, 1'000);
    BOOST_REQUIRE(gone.failed.ok());
    const auto at_once = sent<ShardsMoved>(gone);
    BOOST_REQUIRE_EQUAL(at_once.size(), 1u);
    BOOST_TEST((at_once[0].second.shards == std::vector<NodeId>{2}));
    CoordinatorEffects answer;
    core.on_message({1, Applied{{5}, {7}, sent<NodesLost>(gone)[0].second.epoch}}, 9'500, answer);
    const auto promote = sent<ShardsMoved>(answer);
    BOOST_REQUIRE_EQUAL(promote.size(), 1u);
    BOOST_TEST(promote[0].first == m1);
    BOOST_TEST((promote[0].second.shards == std::vector<NodeId>{0}));
    BOOST_TEST(promote[0].second.backups.empty());
  }
  {
    // Member 0 leaves; node 5 (member 1) applied more and is chosen; member 1 is lost before
    // member 2 has taken the move: shard 0 goes to node 6 (member 2) at once.
    auto core = three_replicas();
    CoordinatorEffects left, answers;
    core.on_message({0, Leave{"stopped by SIGTERM", true}}, 500, left);
    const uint64_t detached = sent<NodesLost>(left)[0].second.epoch;
    core.on_message({1, Applied{{5}, {12}, detached}}, 600, answers);
    core.on_message({2, Applied{{6}, {10}, detached}}, 600, answers);
    BOOST_TEST((kinds_to(answers, m2) == std::vector<std::string>{"ShardsMoved", "ReportApplied"}));
    CoordinatorEffects gone = heartbeats_until_lost(core, {2, 3}, 1'000);
    BOOST_REQUIRE(gone.failed.ok());
    BOOST_TEST((sent<NodesLost>(gone)[0].second.nodes == std::vector<NodeId>{0, 1, 10}));
    const auto promote = sent<ShardsMoved>(gone);
    BOOST_REQUIRE_EQUAL(promote.size(), 1u);
    BOOST_TEST(promote[0].first == m2);
    BOOST_TEST((promote[0].second.shards == std::vector<NodeId>{0, 1}));
    // Member 2's answer to the move of the first attempt: stale.
    const uint64_t bad = core.totals().counters.bad_messages;
    CoordinatorEffects stale;
    core.on_message({2, Applied{{6}, {10}, detached}}, 9'500, stale);
    BOOST_TEST(stale.control.empty());
    BOOST_TEST(core.totals().counters.bad_messages == bad);
    CoordinatorEffects promoted;
    core.on_message({2, Promoted{{0, 1}}}, 9'600, promoted);
    BOOST_TEST(sent<ShardsMoved>(promoted).size() == 1u);  // to the worker member
  }
}

// A failover under replicated:3 never waits without end and never goes on unsafely: an answer
// from a member that did not take the NodesLost sent before the question (a control message to
// it was lost: its backup could still take the lost primary's forwards) ends the job, saying
// so; so does a failover not done within the join timeout, naming what it waits for: an answer
// of how far a backup applied, a member's answer that it took the move to the chosen backup, or
// the chosen member's Promoted.
BOOST_AUTO_TEST_CASE(a_failover_missing_a_message_or_an_answer_ends_the_job) {
  {
    auto core = three_replicas();
    CoordinatorEffects left, answer;
    core.on_message({0, Leave{"stopped by SIGTERM", true}}, 500, left);
    core.on_message({1, Applied{{5}, {10}, sent<NodesLost>(left)[0].second.epoch - 1}}, 600,
                    answer);
    BOOST_TEST(
        answer.failed.message().find("a control message to it was lost") != std::string::npos,
        answer.failed.message());
  }
  // Member 0 leaves at 500; members 1 and 2 answer `answers` of the questions they are sent
  // (node 6, member 2's, applied more and is chosen); every live member heartbeats until the
  // job fails: when, and why.
  auto stuck = [](size_t answers) {
    auto core = three_replicas();
    CoordinatorEffects fx;
    core.on_message({0, Leave{"stopped by SIGTERM", true}}, 500, fx);
    const uint64_t detached = sent<NodesLost>(fx)[0].second.epoch;
    if (answers >= 1) {
      core.on_message({1, Applied{{5}, {10}, detached}}, 600, fx);
      core.on_message({2, Applied{{6}, {12}, detached}}, 600, fx);
    }
    if (answers >= 2) core.on_message({1, Applied{{5}, {10}, detached + 1}}, 700, fx);
    BOOST_TEST(sent<ShardsMoved>(fx).size() == answers);
    Status failed;
    uint64_t now = 500;
    for (; now <= 70'000 && failed.ok(); now += 250) {
      CoordinatorEffects tick;
      for (uint32_t i : {1u, 2u, 3u}) core.on_message({i, Heartbeat{now}}, now, tick);
      core.on_timer(now, tick);
      failed = tick.failed;
    }
    BOOST_TEST(now > 60'500u);
    return failed.message();
  };
  const std::string within =
      "shard 0: its failover did not complete within 60 s (--join-timeout): ";
  const std::string asking = stuck(0), moving = stuck(1), promoting = stuck(2);
  BOOST_TEST(asking.find(within + "a backup's member never answered how far it applied") !=
                 std::string::npos,
             asking);
  BOOST_TEST(moving.find(within + "ps member 1 never confirmed it follows the new primary") !=
                 std::string::npos,
             moving);
  BOOST_TEST(
      promoting.find(within + "ps member 2 never said it promoted its backup") != std::string::npos,
      promoting);
}

// A failover's deadline and the heartbeat timeout of the member it waits on pass before the
// same timer (a join timeout no longer than the heartbeat timeout, or a driver late to call):
// the member is declared lost first and left out, and the failover goes on without its answer
// instead of ending the job.
BOOST_AUTO_TEST_CASE(a_member_lost_as_its_failover_times_out_is_left_out_first) {
  auto core = three_replicas(/*join_timeout_ms=*/5'000);
  CoordinatorEffects left, answer;
  core.on_message({0, Leave{"stopped by SIGTERM", true}}, 500, left);
  core.on_message({1, Applied{{5}, {10}, sent<NodesLost>(left)[0].second.epoch}}, 600, answer);
  BOOST_TEST(sent<ShardsMoved>(answer).empty());  // member 2 has not answered
  // At 6 s: member 2 silent since 0 (heartbeat timeout 5 s), the failover started at 0.5 s.
  CoordinatorEffects late;
  for (uint32_t i : {1u, 3u}) core.on_message({i, Heartbeat{6'000}}, 6'000, late);
  core.on_timer(6'000, late);
  BOOST_REQUIRE_MESSAGE(late.failed.ok(), late.failed.message());
  BOOST_TEST(core.gone(2));
  // Shard 2 (member 2's) goes to its last backup, node 10; shard 0 to node 5: both on member 1.
  const auto moved = sent<ShardsMoved>(late);
  BOOST_REQUIRE_EQUAL(moved.size(), 2u);
  BOOST_TEST(moved[0].first == "tcp://10.0.0.2:7000");
  BOOST_TEST((moved[0].second.shards == std::vector<NodeId>{2}));
  BOOST_TEST(moved[1].first == "tcp://10.0.0.2:7000");
  BOOST_TEST((moved[1].second.shards == std::vector<NodeId>{0}));
  // The loss gave it a fresh wait: the Promoted has until 11 s.
  CoordinatorEffects waits;
  core.on_message({1, Heartbeat{10'000}}, 10'000, waits);
  core.on_message({3, Heartbeat{10'000}}, 10'000, waits);
  core.on_timer(10'000, waits);
  BOOST_TEST(waits.failed.ok());
  CoordinatorEffects promoted;
  core.on_message({1, Promoted{{2}}}, 10'100, promoted);
  core.on_message({1, Promoted{{0}}}, 10'100, promoted);
  BOOST_TEST(core.totals().failovers == 2u);
}

// Only the loss of a member whose answer a failover waits for gives it a fresh wait. Member 1
// answers (and, once node 6 of member 2 is chosen, takes the move), then is lost in the timer that
// passes the failover's deadline: the job still ends, naming what it waited for, member 2's
// answer (asking) or its Promoted.
BOOST_AUTO_TEST_CASE(a_loss_the_failover_did_not_wait_on_does_not_extend_it) {
  for (const bool chosen : {false, true}) {
    auto core = three_replicas();
    CoordinatorEffects fx;
    core.on_message({0, Leave{"stopped by SIGTERM", true}}, 500, fx);
    const uint64_t detached = sent<NodesLost>(fx)[0].second.epoch;
    core.on_message({1, Applied{{5}, {10}, detached}}, 600, fx);
    if (chosen) {
      core.on_message({2, Applied{{6}, {12}, detached}}, 600, fx);
      core.on_message({1, Applied{{5}, {10}, detached + 1}}, 700, fx);
      BOOST_REQUIRE_EQUAL(sent<ShardsMoved>(fx).size(), 2u);  // member 2 is to promote
    }
    for (uint64_t now = 1'000; now <= 55'000; now += 1'000) {
      CoordinatorEffects tick;
      for (uint32_t i : {1u, 2u, 3u}) core.on_message({i, Heartbeat{now}}, now, tick);
      core.on_timer(now, tick);
      BOOST_REQUIRE(tick.failed.ok());
    }
    // At 61 s: member 1 silent since 55 s, the failover started at 0.5 s.
    CoordinatorEffects late;
    for (uint32_t i : {2u, 3u}) core.on_message({i, Heartbeat{61'000}}, 61'000, late);
    core.on_timer(61'000, late);
    BOOST_TEST(core.gone(1));
    const std::string waits = chosen ? "ps member 2 never said it promoted"
                                     : "a backup's member never answered how far it applied";
    BOOST_TEST(late.failed.message().find("shard 0: its failover did not complete within 60 s "
                                          "(--join-timeout): " +
                                          waits) != std::string::npos,
               late.failed.message());
  }
}

// A control message that changes what a member may do, which the driver could not send it (its
// queue stayed full), leaves the member acting on a cluster that has moved on: under
// replicated:3, a member that cannot be told of a move it must take before the promotion is lost
// at once, and the failover goes on without it (its answer would otherwise confirm a move it
// never took, once a later message's epoch reached it). A heartbeat that could not be sent
// changes nothing.
BOOST_AUTO_TEST_CASE(a_member_that_cannot_be_told_of_a_move_is_lost_at_once) {
  auto core = three_replicas();
  const std::string m2 = "tcp://10.0.0.3:7000";
  CoordinatorEffects left, answers;
  core.on_message({0, Leave{"stopped by SIGTERM", true}}, 500, left);
  const uint64_t detached = sent<NodesLost>(left)[0].second.epoch;
  core.on_message({1, Applied{{5}, {10}, detached}}, 600, answers);
  core.on_message({2, Applied{{6}, {12}, detached}}, 600, answers);
  const auto follow = sent<ShardsMoved>(answers);  // to member 1, which holds node 5
  BOOST_REQUIRE_EQUAL(follow.size(), 1u);
  // Nothing it needs: a heartbeat, and the loss of a worker's nodes (a ps only stops answering
  // them).
  CoordinatorEffects nothing;
  core.on_send_failed(1, Heartbeat{1}, 700, nothing);
  core.on_send_failed(1, NodesLost{{3}, "a worker was lost", detached + 1}, 700, nothing);
  BOOST_TEST(nothing.control.empty());
  BOOST_TEST(!core.gone(1));
  CoordinatorEffects unsent;
  core.on_send_failed(1, follow[0].second, 700, unsent);
  BOOST_REQUIRE(unsent.failed.ok());
  BOOST_TEST(core.gone(1));
  BOOST_TEST(logged(unsent, "a ShardsMoved could not be sent to it"));
  // Member 1's own shard goes to its last backup, node 7 (member 2), at once; shard 0 to the
  // chosen node 6, with no backup left to name.
  const auto moved = sent<ShardsMoved>(unsent);
  BOOST_REQUIRE_EQUAL(moved.size(), 2u);
  for (const auto& [to, m] : moved) {
    BOOST_TEST(to == m2);
    BOOST_TEST(m.backups.empty());
  }
  BOOST_TEST((moved[0].second.shards == std::vector<NodeId>{1}));
  BOOST_TEST((moved[1].second.shards == std::vector<NodeId>{0}));
  CoordinatorEffects again;
  core.on_send_failed(1, follow[0].second, 800, again);  // gone already
  BOOST_TEST(again.control.empty());

  // Under replication a ps needs a NodesLost naming shards or backups (it detaches them); a
  // worker member that has finished needs nothing more.
  auto fresh = three_replicas();
  CoordinatorEffects detach;
  fresh.on_send_failed(2, NodesLost{{0, 8, 9}, "ps 0 lost", 1}, 500, detach);
  BOOST_TEST(fresh.gone(2));
  CoordinatorEffects done, unsent_to_done;
  fresh.on_message({3, MemberDone{}}, 600, done);
  fresh.on_send_failed(3, ShardsMoved{{2}, 1, 9}, 700, unsent_to_done);
  BOOST_TEST(!fresh.gone(3));
}

// A worker member that finishes (here: drained on SIGTERM) and exits as its shard fails over:
// the ShardsMoved reached it too late to resync, and its MemberDone is read after the Promoted.
// The promoted shard waits for every sender's resync: the coordinator resyncs the finished
// member's sender as done on its behalf, or the other worker's pulls would wait for good.
BOOST_AUTO_TEST_CASE(a_worker_that_finishes_as_its_shard_fails_over_is_resynced_as_done) {
  CoordinatorConfig c = config(2, 2, /*hierarchical=*/false);
  c.job.replicas = 2;
  auto core = running_with(c, {member(MemberRole::ps, 1), member(MemberRole::ps, 2),
                               member(MemberRole::worker, 3), member(MemberRole::worker, 4)});
  // Shards 0-1, replicas 2 (member 2) and 3 (member 3).
  CoordinatorEffects left;
  core.on_message({1, Leave{"stopped by SIGTERM", true}}, 500, left);
  BOOST_REQUIRE_EQUAL(sent<ShardsMoved>(left).size(), 1u);
  CoordinatorEffects promoted;
  core.on_message({0, Promoted{{1}}}, 600, promoted);
  BOOST_TEST(promoted.ps.empty());  // every worker still runs: each resyncs itself
  CoordinatorEffects done;
  MemberDone drained;
  drained.drained = true;
  core.on_message({2, drained}, 700, done);
  BOOST_REQUIRE_EQUAL(done.ps.size(), 1u);
  BOOST_TEST(done.ps[0].to == 1u);
  const auto& resync = std::get<ClockAdvance>(done.ps[0].message);
  BOOST_TEST(resync.header.sender == 2u);
  BOOST_TEST(resync.clock == clock_done);
  BOOST_TEST(resync.resync);
  BOOST_TEST(core.totals().workers_drained == 1u);
}

// Every ps of a job starts from the same checkpoint step: two ps members given --resume-from
// roots whose newest complete steps differ (one was killed before it wrote its manifest), or one
// resuming and one not, would train from a cut of two steps. The job fails at the layout, naming
// both; the same step on both starts it. A ps restarted before the start from another step fails
// it too.
BOOST_AUTO_TEST_CASE(ps_members_resuming_from_different_steps_fail_the_job) {
  auto members = [](uint32_t a, uint32_t b) {
    MemberInfo p0 = member(MemberRole::ps, 1), p1 = member(MemberRole::ps, 2);
    p0.resumed_from = a;
    p1.resumed_from = b;
    return std::vector<MemberInfo>{p0, p1, member(MemberRole::worker, 3)};
  };
  for (auto [a, b] : {std::pair{100u, 75u}, std::pair{100u, 0u}}) {
    auto core = CoordinatorCore::make(config(2, 1, /*hierarchical=*/false), 0).value();
    CoordinatorEffects fx;
    for (const MemberInfo& m : members(a, b))
      core.on_message({control_from_unknown, Join{m}}, 0, fx);
    BOOST_TEST(fx.failed.message().find("every ps of a job must resume from the same step") !=
                   std::string::npos,
               fx.failed.message());
    BOOST_TEST(fx.failed.message().find(b ? "from the checkpoint of step 75" : "no checkpoint") !=
                   std::string::npos,
               fx.failed.message());
    BOOST_TEST(sent<Welcome>(fx).empty());
  }
  auto core = CoordinatorCore::make(config(2, 1, /*hierarchical=*/false), 0).value();
  form(core, members(100, 100), 0);
  BOOST_TEST((core.phase() == CoordinatorPhase::starting));
  MemberInfo again = members(100, 50)[1];
  again.incarnation = 9;
  CoordinatorEffects back;
  core.on_message({control_from_unknown, Join{again}}, 10, back);
  BOOST_TEST(back.failed.message().find("from the checkpoint of step 50") != std::string::npos,
             back.failed.message());
}

namespace {

// Replicated:2 over two ps members (shards 0 and 1) and a worker member (node 2); the
// coordinator's node 3; backups: shard 0's node 4 (on member 1), shard 1's node 5 (on member 0).
// Every member is ready, and ps member 1 goes silent at 2 s: shard 1 fails over to member 0,
// which says it promoted it. Returns the core at `now` (10 s).
CoordinatorCore lost_and_failed_over(uint64_t& now) {
  CoordinatorConfig c = config(2, 1, /*hierarchical=*/false);
  c.job.replicas = 2;
  auto core = CoordinatorCore::make(c, 0).value();
  form(core, {member(MemberRole::ps, 1), member(MemberRole::ps, 2), member(MemberRole::worker, 3)},
       0);
  for (uint32_t i = 0; i < 3; ++i) {
    CoordinatorEffects fx;
    core.on_message({i, Ready{}}, 0, fx);
  }
  bool moved = false;
  for (now = 0; now <= 9'000; now += 250) {
    CoordinatorEffects fx;
    core.on_message({0, Heartbeat{now}}, now, fx);
    core.on_message({2, Heartbeat{now}}, now, fx);
    if (now < 2'000) core.on_message({1, Heartbeat{now}}, now, fx);
    core.on_timer(now, fx);
    BOOST_REQUIRE(fx.failed.ok());
    moved = moved || !sent<ShardsMoved>(fx).empty();
  }
  BOOST_REQUIRE(moved);
  CoordinatorEffects promoted;
  core.on_message({0, Promoted{{1}}}, now, promoted);
  BOOST_REQUIRE(core.totals().failovers == 1u);
  return core;
}

// Member 1's next process joins.
MemberInfo restarted_ps(uint64_t incarnation) {
  MemberInfo m = member(MemberRole::ps, 2);
  m.incarnation = incarnation;
  return m;
}

// Keeps members 0 (and 1, when `both`) and the worker heard from, from `from` to `to`.
void heartbeats(CoordinatorCore& core, uint64_t from, uint64_t to, bool both) {
  for (uint64_t now = from; now <= to; now += 250) {
    CoordinatorEffects fx;
    core.on_message({0, Heartbeat{now}}, now, fx);
    if (both) core.on_message({1, Heartbeat{now}}, now, fx);
    core.on_message({2, Heartbeat{now}}, now, fx);
    core.on_timer(now, fx);
    BOOST_REQUIRE_MESSAGE(fx.failed.ok(), fx.failed.message());
  }
}

}  // namespace

// Re-replication: a ps member whose shards failed over joins again (a supervisor's restart). It
// is welcomed to hold backups only: the backup nodes no member holds, its own and the one spent on
// the promotion, with every move since the layout was placed, which its layout replays. Once it is
// Ready the other members are told where the backups are (the ps copies them); once it says they
// have their copies they are live, and losing the other member then fails its shards over to it.
BOOST_AUTO_TEST_CASE(a_ps_back_after_its_failover_holds_the_missing_backups) {
  uint64_t now = 0;
  auto core = lost_and_failed_over(now);
  CoordinatorEffects joined;
  core.on_message({control_from_unknown, Join{restarted_ps(77)}}, now, joined);
  const auto welcome = sent<Welcome>(joined);
  BOOST_REQUIRE_EQUAL(welcome.size(), 1u);
  const Welcome& w = welcome[0].second;
  BOOST_TEST(w.you == 1u);
  BOOST_TEST(w.backups_only);
  BOOST_TEST(!w.resume);
  BOOST_TEST(w.members[1].incarnation == 77u);
  BOOST_TEST((w.placed == std::vector<NodePlacement>{{1, 0}, {4, 1}, {5, 1}}));
  // Its layout has shard 1 served by member 0, and both backups on member 1.
  const ClusterLayout layout = ClusterLayout::make(w).value();
  BOOST_TEST((layout.owner(1) == std::optional<uint32_t>(0)));
  BOOST_TEST((layout.backup_nodes_of(1) == std::vector<NodeId>{4, 5}));
  BOOST_TEST(layout.backup_nodes_of(0).empty());
  BOOST_TEST(logged(joined, "sent it the layout to hold backup nodes 4, 5"));

  // A retried Join of the same process is no second welcome.
  CoordinatorEffects retry;
  core.on_message({control_from_unknown, Join{restarted_ps(77)}}, now + 10, retry);
  BOOST_TEST(sent<Welcome>(retry).empty());

  // Copies reported before it is even Ready are lies: nothing was copied to it yet.
  CoordinatorEffects early;
  core.on_message({1, BackupsCopied{{4, 5}}}, now + 50, early);
  BOOST_TEST(core.totals().backups_added == 0u);
  BOOST_TEST(core.totals().counters.bad_messages == 1u);

  CoordinatorEffects ready;
  core.on_message({1, Ready{}}, now + 100, ready);
  const auto placed = sent<BackupsPlaced>(ready);
  BOOST_REQUIRE_EQUAL(placed.size(), 2u);  // the other ps member and the worker
  BOOST_TEST(placed[0].first == "tcp://10.0.0.1:7000");
  BOOST_TEST(placed[1].first == "tcp://10.0.0.3:7000");
  BOOST_TEST((placed[0].second.placed == std::vector<NodePlacement>{{4, 1}, {5, 1}}));
  BOOST_TEST(placed[0].second.epoch > 0u);
  BOOST_TEST((ready.placed == std::vector<NodePlacement>{{4, 1}, {5, 1}}));
  BOOST_TEST(core.totals().ps_restarts == 0u);  // no shard restarted: it holds backups

  // Lies: a copy reported by the member the backups are not on, of a node not being copied, or
  // of one node twice.
  for (const ControlMessage& lie :
       {ControlMessage{0, BackupsCopied{{4}}}, ControlMessage{1, BackupsCopied{{6}}},
        ControlMessage{1, BackupsCopied{{4, 4}}}, ControlMessage{2, BackupsCopied{{5}}},
        ControlMessage{1, BackupsCopied{{}}}, ControlMessage{0, BackupsCopied{{}}}}) {
    CoordinatorEffects fx;
    const uint64_t bad = core.totals().counters.bad_messages;
    core.on_message(lie, now + 200, fx);
    BOOST_TEST(core.totals().counters.bad_messages == bad + 1);
  }
  BOOST_TEST(core.totals().backups_added == 0u);
  CoordinatorEffects copied;
  core.on_message({1, BackupsCopied{{4, 5}}}, now + 300, copied);
  BOOST_TEST(core.totals().backups_added == 2u);
  BOOST_TEST(logged(copied, "shard 1: backup node 5 on ps member 1 has its copy (2 of 2"));
  // Reported again: no longer being copied.
  CoordinatorEffects again;
  core.on_message({1, BackupsCopied{{4}}}, now + 400, again);
  BOOST_TEST(core.totals().backups_added == 2u);

  // Now member 0 goes silent: both shards fail over to member 1's new backups.
  CoordinatorEffects lost;
  for (uint64_t t = now + 500; t <= now + 9'000 && sent<ShardsMoved>(lost).empty(); t += 250) {
    lost = CoordinatorEffects{};
    if (t < now + 2'000) core.on_message({0, Heartbeat{t}}, t, lost);
    core.on_message({1, Heartbeat{t}}, t, lost);
    core.on_message({2, Heartbeat{t}}, t, lost);
    core.on_timer(t, lost);
    BOOST_REQUIRE_MESSAGE(lost.failed.ok(), lost.failed.message());
  }
  const auto promote = sent<ShardsMoved>(lost);
  BOOST_REQUIRE_EQUAL(promote.size(), 1u);
  BOOST_TEST(promote[0].first == "tcp://10.0.0.2:7000");
  BOOST_TEST((promote[0].second.shards == std::vector<NodeId>{0, 1}));
  BOOST_TEST(promote[0].second.member == 1u);
}

// A ps that joins again while its failover is under way is welcomed once it is done; the backups
// being copied are not live: a loss of the primary before the copy ends the job as before, and the
// member holding them lost during the copy is a loss of those nodes (NodesLost), so that their
// primaries stop waiting.
BOOST_AUTO_TEST_CASE(backups_being_copied_are_not_live_and_a_rejoin_waits_for_the_failover) {
  {
    CoordinatorConfig c = config(2, 1, /*hierarchical=*/false);
    c.job.replicas = 2;
    auto core = CoordinatorCore::make(c, 0).value();
    form(core,
         {member(MemberRole::ps, 1), member(MemberRole::ps, 2), member(MemberRole::worker, 3)}, 0);
    for (uint32_t i = 0; i < 3; ++i) {
      CoordinatorEffects fx;
      core.on_message({i, Ready{}}, 0, fx);
    }
    // Restarted at once: the Join of its next process is the loss, and the failover starts.
    CoordinatorEffects joined;
    core.on_message({control_from_unknown, Join{restarted_ps(78)}}, 500, joined);
    BOOST_TEST(sent<ShardsMoved>(joined).size() == 1u);
    BOOST_TEST(sent<Welcome>(joined).empty());
    BOOST_TEST(sent<Refuse>(joined).empty());
    CoordinatorEffects promoted;
    core.on_message({0, Promoted{{1}}}, 600, promoted);
    BOOST_REQUIRE_EQUAL(sent<Welcome>(promoted).size(), 1u);
    BOOST_TEST(sent<Welcome>(promoted)[0].second.backups_only);
  }
  {
    // Lost while its copies come: its nodes are lost, and a later process may take them again.
    uint64_t now = 0;
    auto core = lost_and_failed_over(now);
    CoordinatorEffects joined, ready;
    core.on_message({control_from_unknown, Join{restarted_ps(79)}}, now, joined);
    core.on_message({1, Ready{}}, now, ready);
    heartbeats(core, now, now + 1'000, true);
    CoordinatorEffects lost;
    for (uint64_t t = now + 1'250; t <= now + 9'000 && sent<NodesLost>(lost).empty(); t += 250) {
      lost = CoordinatorEffects{};
      core.on_message({0, Heartbeat{t}}, t, lost);
      core.on_message({2, Heartbeat{t}}, t, lost);
      core.on_timer(t, lost);
      BOOST_REQUIRE_MESSAGE(lost.failed.ok(), lost.failed.message());
    }
    const auto nodes_lost = sent<NodesLost>(lost);
    BOOST_REQUIRE(!nodes_lost.empty());
    BOOST_TEST((nodes_lost[0].second.nodes == std::vector<NodeId>{4, 5}));
    CoordinatorEffects back;
    core.on_message({control_from_unknown, Join{restarted_ps(80)}}, now + 9'500, back);
    BOOST_REQUIRE_EQUAL(sent<Welcome>(back).size(), 1u);
    BOOST_TEST((sent<Welcome>(back)[0].second.placed ==
                std::vector<NodePlacement>{{1, 0}, {4, 1}, {5, 1}, {4, 1}, {5, 1}}));
  }
  {
    // Training ends while it builds its backups: it is told there is nothing left to hold, and
    // the job ends as usual.
    uint64_t now = 0;
    auto core = lost_and_failed_over(now);
    CoordinatorEffects joined;
    core.on_message({control_from_unknown, Join{restarted_ps(82)}}, now, joined);
    BOOST_REQUIRE_EQUAL(sent<Welcome>(joined).size(), 1u);
    CoordinatorEffects done;
    core.on_message({2, MemberDone{}}, now + 10, done);
    BOOST_TEST(done.training_done);
    BOOST_REQUIRE_EQUAL(sent<Refuse>(done).size(), 1u);
    BOOST_TEST(sent<Refuse>(done)[0].first == "tcp://10.0.0.2:7000");
    BOOST_TEST(sent<ShardSummaryRequest>(done).size() == 1u);  // member 0's
    BOOST_TEST(core.totals().backups_copying == 0u);           // refused: it holds none of them
    CoordinatorEffects late;
    core.on_message({1, Ready{}}, now + 20, late);
    BOOST_TEST(sent<BackupsPlaced>(late).empty());
    for (uint64_t t = now + 100; t <= now + 80'000; t += 1'000) {
      CoordinatorEffects fx;
      core.on_message({0, Heartbeat{t}}, t, fx);
      core.on_timer(t, fx);
      BOOST_REQUIRE_MESSAGE(fx.failed.ok(), fx.failed.message());
    }
  }
  {
    // Training ends while its copies come (Ready, no BackupsCopied yet): the member stays to give
    // its summary, and its backups, which hold no rows yet, are not compared.
    uint64_t now = 0;
    auto core = lost_and_failed_over(now);
    CoordinatorEffects joined, ready, done;
    core.on_message({control_from_unknown, Join{restarted_ps(83)}}, now, joined);
    core.on_message({1, Ready{}}, now, ready);
    core.on_message({2, MemberDone{}}, now + 10, done);
    BOOST_TEST(done.training_done);
    BOOST_TEST(sent<Refuse>(done).empty());
    BOOST_TEST(sent<ShardSummaryRequest>(done).size() == 2u);
    BOOST_TEST(core.totals().backups_copying == 2u);
    BOOST_TEST(logged(done, "backup nodes 4, 5 on ps member 1 were still taking their copies"));
  }
  {
    // The primary lost before the copy completes: its shards have no live backup.
    uint64_t now = 0;
    auto core = lost_and_failed_over(now);
    CoordinatorEffects joined, ready;
    core.on_message({control_from_unknown, Join{restarted_ps(81)}}, now, joined);
    core.on_message({1, Ready{}}, now, ready);
    Status failed;
    for (uint64_t t = now; t <= now + 9'000 && failed.ok(); t += 250) {
      CoordinatorEffects fx;
      core.on_message({1, Heartbeat{t}}, t, fx);
      core.on_message({2, Heartbeat{t}}, t, fx);
      core.on_timer(t, fx);
      failed = fx.failed;
    }
    BOOST_TEST(failed.message().find("whose other replica is gone too") != std::string::npos,
               failed.message());
  }
}
