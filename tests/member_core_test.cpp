// The member core on its own, and members with the real coordinator core: joining, the layout
// check, serving, the end of the job, and control messages out of place (no sockets, no
// threads, a fake clock).
#define BOOST_TEST_MODULE member_core_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "common/hash.h"
#include "ps/coordinator_core.h"
#include "ps/member_core.h"

using namespace colony;

BOOST_TEST_DONT_PRINT_LOG_VALUE(colony::MemberPhase)
BOOST_TEST_DONT_PRINT_LOG_VALUE(colony::CoordinatorPhase)

namespace {

MemberInfo info(MemberRole role, int i, uint32_t count = 1, bool durable = false) {
  MemberInfo m;
  m.role = role;
  m.endpoint = "tcp://10.0.0." + std::to_string(i) + ":7000";
  m.count = count;
  m.data = role == MemberRole::worker ? "/data/train" : "";
  m.durable = durable;
  m.incarnation = 100 + i;
  return m;
}

MemberConfig config(const MemberInfo& me) {
  MemberConfig c;
  c.me = me;
  c.join_timeout_ms = 30'000;
  c.join_retry_ms = 1'000;
  c.notice_ms = 5'000;
  c.coordinator = "tcp://10.0.0.1:7000";
  return c;
}

template <class T>
size_t count_of(const MemberEffects& fx) {
  return std::count_if(fx.control.begin(), fx.control.end(),
                       [](const ControlBody& b) { return std::holds_alternative<T>(b); });
}

bool logged(const MemberEffects& fx, const std::string& text) {
  return std::any_of(fx.log.begin(), fx.log.end(),
                     [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

// The layout of `members` training `job`, as the coordinator would hand it out, addressed to
// member `you` (heartbeats every second, lost after 5 s).
Welcome planned(const std::vector<MemberInfo>& members, const JobSpec& job, uint32_t you) {
  Welcome w = plan_layout(members, job, ShardMapSpec{});
  w.you = you;
  w.heartbeat_ms = 1'000;
  w.heartbeat_timeout_ms = 5'000;
  return w;
}

// A layout of one ps (two shards) and one worker (two replicas, an aggregator), addressed to
// member `you`.
Welcome layout(uint32_t you, bool durable = false) {
  JobSpec job;
  job.hierarchical = true;
  return planned({info(MemberRole::ps, 2, 2, durable), info(MemberRole::worker, 3, 2)}, job, you);
}

MemberCore welcomed(const MemberInfo& me, const Welcome& w, uint64_t now = 0) {
  auto core = MemberCore::make(config(me), now);
  BOOST_REQUIRE(core.ok());
  MemberEffects fx;
  core->start(now, fx);
  core->on_message({control_from_coordinator, Joined{"waiting"}}, now, fx);
  core->on_message({control_from_coordinator, w}, now, fx);
  BOOST_REQUIRE(fx.build.has_value());
  MemberEffects built;
  core->built(Status(), now, built);
  BOOST_REQUIRE_EQUAL(count_of<Ready>(built), 1u);
  return std::move(core.value());
}

}  // namespace

BOOST_AUTO_TEST_CASE(joins_again_until_answered_and_times_out_naming_what_it_waited_for) {
  auto core = MemberCore::make(config(info(MemberRole::worker, 3, 2)), 0);
  BOOST_REQUIRE(core.ok());
  MemberEffects fx;
  core->start(0, fx);
  BOOST_TEST(count_of<Join>(fx) == 1u);
  BOOST_TEST(core->next_deadline() == 1'000u);
  fx = {};
  core->on_timer(1'000, fx);
  BOOST_TEST(count_of<Join>(fx) == 1u);
  fx = {};
  core->on_timer(30'000, fx);
  BOOST_REQUIRE(fx.exit.has_value());
  BOOST_TEST(fx.exit->message().find("no answer from the coordinator at tcp://10.0.0.1:7000") !=
             std::string::npos);
  // Answered: no more Joins, and the timeout says the cluster did not fill.
  auto answered = MemberCore::make(config(info(MemberRole::worker, 3, 2)), 0);
  BOOST_REQUIRE(answered.ok());
  fx = {};
  answered->start(0, fx);
  answered->on_message({control_from_coordinator, Joined{"waiting for 1 ps"}}, 10, fx);
  fx = {};
  answered->on_timer(5'000, fx);
  BOOST_TEST(count_of<Join>(fx) == 0u);
  BOOST_TEST(logged(fx, "waiting for 1 ps"));
  fx = {};
  answered->on_timer(30'000, fx);
  BOOST_REQUIRE(fx.exit.has_value());
  BOOST_TEST(fx.exit->message().find("did not fill") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_welcome_that_does_not_add_up_or_names_another_member_is_dropped) {
  auto core = MemberCore::make(config(info(MemberRole::worker, 3, 2)), 0);
  BOOST_REQUIRE(core.ok());
  MemberEffects fx;
  core->start(0, fx);
  // Forged: node ids far outside the layout.
  Welcome forged = layout(1);
  forged.members[1].first_node = 1u << 30;
  fx = {};
  core->on_message({control_from_coordinator, forged}, 1, fx);
  BOOST_TEST(!fx.build.has_value());
  BOOST_TEST(core->bad_messages() == 1u);
  BOOST_TEST(logged(fx, "dropped a control message"));
  // Well formed, but `you` is the ps: not this member.
  fx = {};
  core->on_message({control_from_coordinator, layout(0)}, 2, fx);
  BOOST_TEST(!fx.build.has_value());
  BOOST_TEST(core->bad_messages() == 2u);
  BOOST_TEST(fx.log.empty());  // logged at most once a minute
  // Out of place before a Welcome.
  core->on_message({control_from_coordinator, Start{}}, 3, fx);
  core->on_message({control_from_coordinator, ShardsRestarted{{0}}}, 3, fx);
  BOOST_TEST(core->bad_messages() == 4u);
  BOOST_TEST(core->phase() == MemberPhase::joining);
  // The real one is taken.
  fx = {};
  core->on_message({control_from_coordinator, layout(1)}, 4, fx);
  BOOST_TEST(fx.build.has_value());
  BOOST_TEST(core->phase() == MemberPhase::building);
}

BOOST_AUTO_TEST_CASE(a_serving_worker_drops_what_makes_no_sense_and_starts_once) {
  MemberCore core = welcomed(info(MemberRole::worker, 3, 2), layout(1));
  MemberEffects fx;
  core.on_message({control_from_coordinator, ShardsRestarted{{0}}}, 10, fx);  // ps not durable
  core.on_message({control_from_coordinator, NodesLost{{999}, "lies"}}, 10, fx);
  core.on_message({control_from_coordinator, ShardSummaryRequest{}}, 10, fx);
  core.on_message({control_from_coordinator, CheckpointComplete{}}, 10, fx);
  core.on_message({control_from_coordinator, layout(1)}, 10, fx);
  BOOST_TEST(core.bad_messages() == 5u);
  BOOST_TEST(fx.restarted.empty());
  BOOST_TEST(fx.lost.empty());
  BOOST_TEST(fx.control.empty());
  fx = {};
  core.on_message({control_from_coordinator, Start{}}, 11, fx);
  core.on_message({control_from_coordinator, Start{}}, 12, fx);
  BOOST_TEST(fx.start);
  BOOST_TEST(std::count_if(fx.log.begin(), fx.log.end(), [](const std::string& l) {
               return l.find("training starts") != std::string::npos;
             }) == 1);
  // Two replicas and the aggregator report; then MemberDone, and the member stays until
  // Shutdown.
  fx = {};
  core.node_done(2, Status(), fx);
  core.node_done(3, Status(), fx);
  BOOST_TEST(count_of<MemberDone>(fx) == 0u);
  core.node_done(4, Status(), fx);
  BOOST_REQUIRE_EQUAL(count_of<MemberDone>(fx), 1u);
  BOOST_TEST(std::get<MemberDone>(fx.control.back()).counters.bad_messages == 5u);
  BOOST_TEST(!fx.exit.has_value());
  fx = {};
  core.on_message({control_from_coordinator, Shutdown{}}, 30, fx);
  BOOST_REQUIRE(fx.exit.has_value());
  BOOST_TEST(fx.exit->ok());
}

// Issue 14: a deep model's dense layers around the start. A ps built from a checkpoint sends
// them ahead of its Ready; a worker takes them from the coordinator only before Start (a ps
// never), and hands a checkpoint's dense layers to the coordinator.
BOOST_AUTO_TEST_CASE(dense_layers_go_ahead_of_ready_and_come_only_before_start) {
  const DenseState dense{"deepfm test", 40, {1.0f, 2.0f}, {0.0f, 0.0f}, 40};
  auto ps = MemberCore::make(config(info(MemberRole::ps, 2, 2)), 0);
  BOOST_REQUIRE(ps.ok());
  MemberEffects fx;
  ps->start(0, fx);
  ps->on_message({control_from_coordinator, layout(0)}, 0, fx);
  BOOST_REQUIRE(fx.build.has_value());
  MemberEffects built;
  ps->built(Status(), 1, built, dense);
  BOOST_REQUIRE_EQUAL(built.control.size(), 2u);
  BOOST_REQUIRE(std::holds_alternative<DenseStart>(built.control[0]));
  BOOST_TEST((std::get<DenseStart>(built.control[0]).state == dense));
  BOOST_TEST(std::holds_alternative<Ready>(built.control[1]));
  MemberEffects to_ps;
  ps->on_message({control_from_coordinator, DenseStart{dense}}, 2, to_ps);
  BOOST_TEST(!to_ps.dense_start.has_value());
  BOOST_TEST(ps->bad_messages() == 1u);

  MemberCore worker = welcomed(info(MemberRole::worker, 3, 2), layout(1));
  MemberEffects before;
  worker.on_message({control_from_coordinator, DenseStart{dense}}, 10, before);
  worker.on_message({control_from_coordinator, Start{}}, 10, before);
  BOOST_REQUIRE(before.dense_start.has_value());
  BOOST_TEST((*before.dense_start == dense));
  BOOST_TEST(before.start);
  MemberEffects after;
  worker.on_message({control_from_coordinator, DenseStart{dense}}, 11, after);
  BOOST_TEST(!after.dense_start.has_value());
  BOOST_TEST(worker.bad_messages() == 1u);
  MemberEffects checkpointed;
  worker.dense_checkpointed(dense, checkpointed);
  BOOST_REQUIRE_EQUAL(count_of<DenseCheckpointed>(checkpointed), 1u);
  BOOST_TEST((std::get<DenseCheckpointed>(checkpointed.control[0]).state == dense));
}

BOOST_AUTO_TEST_CASE(a_failed_replica_reports_and_ends_the_member) {
  MemberCore core = welcomed(info(MemberRole::worker, 3, 2), layout(1));
  MemberEffects fx;
  core.on_message({control_from_coordinator, Start{}}, 1, fx);
  fx = {};
  core.node_done(3, Status::io_error("disk"), fx);
  BOOST_REQUIRE_EQUAL(count_of<MemberDone>(fx), 1u);
  BOOST_TEST(std::get<MemberDone>(fx.control.front()).error == "node 3: disk");
  BOOST_REQUIRE(fx.exit.has_value());
  BOOST_TEST(fx.exit->message() == "node 3: disk");
  fx = {};
  core.node_done(2, Status(), fx);  // after the end: nothing more
  BOOST_TEST(fx.control.empty());
}

BOOST_AUTO_TEST_CASE(heartbeats_go_out_and_a_silent_coordinator_ends_the_member) {
  MemberCore core = welcomed(info(MemberRole::ps, 2, 2), layout(0), 100);
  MemberEffects fx;
  core.on_timer(100, fx);
  BOOST_TEST(count_of<Heartbeat>(fx) == 1u);
  fx = {};
  core.on_message({control_from_coordinator, Heartbeat{}}, 4'000, fx);
  core.on_timer(8'000, fx);
  BOOST_TEST(!fx.exit.has_value());
  core.on_timer(9'001, fx);
  BOOST_REQUIRE(fx.exit.has_value());
  BOOST_TEST(fx.exit->message().find("lost the coordinator") != std::string::npos);
  BOOST_TEST(core.next_deadline() == UINT64_MAX);
}

BOOST_AUTO_TEST_CASE(a_stopped_ps_drains_then_leaves_and_a_ps_takes_its_requests) {
  MemberCore core = welcomed(info(MemberRole::ps, 2, 2, true), layout(0, true));
  MemberEffects fx;
  core.on_message({control_from_coordinator, ShardSummaryRequest{}}, 1, fx);
  BOOST_TEST(count_of<ShardSummary>(fx) == 1u);
  core.on_message({control_from_coordinator, Start{}}, 1, fx);  // to a ps: out of place
  BOOST_TEST(core.bad_messages() == 1u);
  fx = {};
  core.stop(fx);
  BOOST_TEST(fx.drain);
  BOOST_TEST(!fx.exit.has_value());
  fx = {};
  core.drained(fx);
  BOOST_REQUIRE_EQUAL(count_of<Leave>(fx), 1u);
  BOOST_TEST(std::get<Leave>(fx.control.back()).drained);  // its rows are in its store
  BOOST_TEST(core.incarnation() == 102u);                  // the name its driver sends it in
  BOOST_REQUIRE(fx.exit.has_value());
  BOOST_TEST(fx.exit->ok());
}

// A durable ps stopped while it builds its shards (a restarted ps stopped again at once) has
// served nothing: its store is as its last process left it, and it leaves drained. One in memory
// does not.
BOOST_AUTO_TEST_CASE(a_durable_ps_stopped_while_building_leaves_drained) {
  for (bool durable : {true, false}) {
    BOOST_TEST_CONTEXT((durable ? "durable" : "in memory")) {
      auto core = MemberCore::make(config(info(MemberRole::ps, 2, 2, durable)), 0);
      BOOST_REQUIRE(core.ok());
      MemberEffects fx;
      core->start(0, fx);
      core->on_message({control_from_coordinator, layout(0, durable)}, 0, fx);
      BOOST_REQUIRE(fx.build.has_value());
      fx = {};
      core->stop(fx);
      BOOST_REQUIRE_EQUAL(count_of<Leave>(fx), 1u);
      BOOST_TEST(std::get<Leave>(fx.control.back()).drained == durable);
      BOOST_TEST(fx.exit.has_value());
    }
  }
}

// A ps whose drain fails (a store it cannot write) leaves with the error, not drained, and says
// nothing more when the drain ends; nor is a ps that fails while serving drained.
BOOST_AUTO_TEST_CASE(a_ps_that_fails_leaves_not_drained) {
  for (bool stopped : {true, false}) {
    BOOST_TEST_CONTEXT((stopped ? "while draining" : "while serving")) {
      MemberCore core = welcomed(info(MemberRole::ps, 2, 2, true), layout(0, true));
      MemberEffects fx;
      if (stopped) core.stop(fx);
      fx = {};
      core.fail(Status::io_error("shard node 0 could not write its cached rows"), fx);
      BOOST_REQUIRE_EQUAL(count_of<Leave>(fx), 1u);
      const Leave& leave = std::get<Leave>(fx.control.back());
      BOOST_TEST(!leave.drained);
      BOOST_TEST(leave.reason.find("could not write") != std::string::npos, leave.reason);
      fx = {};
      core.drained(fx);
      BOOST_TEST(fx.control.empty());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_worker_stopped_before_the_start_leaves_and_after_it_drains) {
  MemberCore before = welcomed(info(MemberRole::worker, 3, 2), layout(1));
  MemberEffects fx;
  before.stop(fx);
  BOOST_TEST(count_of<Leave>(fx) == 1u);
  BOOST_TEST(fx.exit.has_value());
  MemberCore after = welcomed(info(MemberRole::worker, 3, 2), layout(1));
  fx = {};
  after.on_message({control_from_coordinator, Start{}}, 1, fx);
  fx = {};
  after.stop(fx);
  BOOST_TEST(fx.stop_feeding);
  BOOST_TEST(!fx.exit.has_value());
  for (NodeId n : {2u, 3u, 4u}) after.node_done(n, Status(), fx);
  BOOST_REQUIRE_EQUAL(count_of<MemberDone>(fx), 1u);
  BOOST_TEST(std::get<MemberDone>(fx.control.back()).drained);
  BOOST_TEST(fx.exit.has_value());
}

BOOST_AUTO_TEST_CASE(a_durable_ps_restart_reaches_the_workers_as_shards_restarted) {
  MemberCore worker = welcomed(info(MemberRole::worker, 3, 2), layout(1, true));
  MemberEffects fx;
  worker.on_message({control_from_coordinator, NodesLost{{0, 1}, "ps lost", 1}}, 1, fx);
  worker.on_message({control_from_coordinator, ShardsRestarted{{0, 1}, 2}}, 2, fx);
  BOOST_TEST(fx.lost == std::vector<NodeId>({0, 1}), boost::test_tools::per_element());
  BOOST_TEST(fx.restarted == std::vector<NodeId>({0, 1}), boost::test_tools::per_element());
  BOOST_TEST(worker.bad_messages() == 0u);
  // The NodesLost again, late or repeated: it must not stop the workers sending to the shards
  // that are back. Nor may the ShardsRestarted repeat (the clients would resync again).
  fx = {};
  worker.on_message({control_from_coordinator, NodesLost{{0, 1}, "ps lost", 1}}, 3, fx);
  worker.on_message({control_from_coordinator, ShardsRestarted{{0, 1}, 2}}, 3, fx);
  BOOST_TEST(fx.lost.empty());
  BOOST_TEST(fx.restarted.empty());
  BOOST_TEST(worker.bad_messages() == 2u);
  // A Welcome with `resume` for a ps that keeps nothing on disk is refused.
  auto ps = MemberCore::make(config(info(MemberRole::ps, 2, 2)), 0);
  BOOST_REQUIRE(ps.ok());
  Welcome w = layout(0);
  w.resume = true;
  fx = {};
  ps->on_message({control_from_coordinator, w}, 1, fx);
  BOOST_TEST(!fx.build.has_value());
  BOOST_TEST(ps->bad_messages() == 1u);
}

// Failover (replicated:2): ShardsMoved to the ps holding the backups asks it to promote them,
// and it answers Promoted once they serve; to any other member it re-routes the shards (its
// layout takes their messages from the new member) and its clients resync with them. One naming
// a member that holds no backup of a shard, or a worker, or an old epoch, is dropped.
BOOST_AUTO_TEST_CASE(shards_moved_promotes_at_the_backup_and_reroutes_everyone_else) {
  // Two ps members of one shard each (0 and 1), one worker (replicas 2, 3); backups of shard 0
  // on member 1 (node 5), of shard 1 on member 0 (node 6).
  std::vector<MemberInfo> members = {info(MemberRole::ps, 2), info(MemberRole::ps, 4),
                                     info(MemberRole::worker, 3, 2)};
  JobSpec job;
  job.replicas = 2;
  Welcome w = planned(members, job, 0);
  MemberCore ps0 = welcomed(members[0], w);
  w.you = 2;
  MemberCore worker = welcomed(members[2], w);
  BOOST_REQUIRE_EQUAL(*worker.layout()->owner(1), 1u);

  // Lies first: member 1 holds no backup of shard 1; a worker cannot serve; no such member.
  MemberEffects fx;
  for (ShardsMoved lie : {ShardsMoved{{1}, 1, 1}, ShardsMoved{{1}, 2, 1}, ShardsMoved{{0}, 9, 1},
                          ShardsMoved{{5}, 0, 1}}) {
    ps0.on_message({control_from_coordinator, lie}, 1, fx);
    worker.on_message({control_from_coordinator, lie}, 1, fx);
  }
  BOOST_TEST(ps0.bad_messages() == 4u);
  BOOST_TEST(worker.bad_messages() == 4u);
  BOOST_TEST(fx.promote.empty());
  BOOST_TEST(!fx.moved.has_value());

  // Member 1 was lost; member 0 is told to promote its backup of shard 1.
  fx = {};
  ps0.on_message({control_from_coordinator, NodesLost{{1, 5}, "ps lost", 1}}, 2, fx);
  ps0.on_message({control_from_coordinator, ShardsMoved{{1}, 0, 2}}, 2, fx);
  BOOST_TEST(fx.promote == std::vector<NodeId>({1}), boost::test_tools::per_element());
  BOOST_TEST(!fx.moved.has_value());
  BOOST_TEST(fx.restarted.empty());
  BOOST_TEST(*ps0.layout()->owner(1) == 0u);
  MemberEffects answered;
  ps0.promoted(fx.promote, answered);
  BOOST_REQUIRE_EQUAL(count_of<Promoted>(answered), 1u);
  BOOST_TEST((std::get<Promoted>(answered.control.front()).shards == std::vector<NodeId>{1}));

  // The worker hears of it once member 0 serves the shard: it re-routes and resyncs, once.
  fx = {};
  worker.on_message({control_from_coordinator, NodesLost{{1, 5}, "ps lost", 1}}, 3, fx);
  worker.on_message({control_from_coordinator, ShardsMoved{{1}, 0, 3}}, 3, fx);
  worker.on_message({control_from_coordinator, ShardsMoved{{1}, 0, 3}}, 3, fx);  // repeated
  BOOST_REQUIRE(fx.moved.has_value());
  BOOST_TEST(fx.moved->member == 0u);
  BOOST_TEST(fx.restarted == std::vector<NodeId>({1}), boost::test_tools::per_element());
  BOOST_TEST(fx.promote.empty());
  BOOST_TEST(*worker.layout()->owner(1) == 0u);
  BOOST_TEST(worker.bad_messages() == 5u);
}

// Failover under replicated:3. A NodesLost naming a shard detaches it (nothing more is taken in
// its name), so that a ReportApplied for the backups this ps holds is answered with where they
// stopped; a ShardsMoved then re-points the shard to the chosen member, and to the chosen member
// itself it names the shard's other backups to forward to. A ReportApplied naming a node that is
// not a backup of this ps, or one node twice, and a ShardsMoved naming backups that are not the
// moved shards' or are the promoting member's own, or naming any to another member, are dropped.
BOOST_AUTO_TEST_CASE(under_three_replicas_backups_report_and_follow_the_chosen_one) {
  // Three ps members of one shard each, a worker member (node 3), the coordinator's node 4;
  // backups of shard 0: nodes 5 (member 1) and 6 (member 2); of shard 1: 7 (member 2), 8
  // (member 0); of shard 2: 9 (member 0), 10 (member 1).
  std::vector<MemberInfo> members = {info(MemberRole::ps, 2), info(MemberRole::ps, 4),
                                     info(MemberRole::ps, 5), info(MemberRole::worker, 3)};
  JobSpec job;
  job.replicas = 3;
  Welcome w = planned(members, job, 1);
  MemberCore ps1 = welcomed(members[1], w);
  w.you = 2;
  MemberCore ps2 = welcomed(members[2], w);
  BOOST_REQUIRE((ps1.layout()->backup_nodes_of(1) == std::vector<NodeId>{5, 10}));

  MemberEffects fx;
  ps1.on_message({control_from_coordinator, NodesLost{{0, 8, 9}, "ps 0 left", 1}}, 1, fx);
  BOOST_TEST(fx.detach == std::vector<NodeId>({0}), boost::test_tools::per_element());
  BOOST_TEST(!ps1.layout()->owner(0).has_value());

  fx = {};
  for (ControlBody lie :
       {ControlBody{ReportApplied{{6}}}, ControlBody{ReportApplied{{0}}},
        ControlBody{ReportApplied{{5, 5}}}, ControlBody{ShardsMoved{{0}, 2, 2, {5}}},
        ControlBody{ShardsMoved{{0}, 1, 2, {5}}}, ControlBody{ShardsMoved{{0}, 1, 2, {7}}}})
    ps1.on_message({control_from_coordinator, lie}, 2, fx);
  BOOST_TEST(ps1.bad_messages() == 6u);
  BOOST_TEST(fx.report_applied.empty());
  BOOST_TEST(fx.promote.empty());
  BOOST_TEST(!fx.moved.has_value());

  ps1.on_message({control_from_coordinator, ReportApplied{{5}}}, 3, fx);
  BOOST_TEST(fx.report_applied == std::vector<NodeId>({5}), boost::test_tools::per_element());
  MemberEffects answered;
  ps1.applied(Applied{{5}, {17}}, answered);
  BOOST_REQUIRE_EQUAL(count_of<Applied>(answered), 1u);
  BOOST_TEST((std::get<Applied>(answered.control.front()).applied == std::vector<uint64_t>{17}));
  BOOST_TEST(std::get<Applied>(answered.control.front()).epoch == 1u);  // it took the NodesLost

  // Node 6 (member 2) is chosen: member 1 follows it, member 2 promotes and forwards to node 5.
  fx = {};
  ps1.on_message({control_from_coordinator, ShardsMoved{{0}, 2, 3}}, 4, fx);
  BOOST_REQUIRE(fx.moved.has_value());
  BOOST_TEST(*ps1.layout()->owner(0) == 2u);
  BOOST_TEST(ps1.bad_messages() == 6u);
  fx = {};
  ps2.on_message({control_from_coordinator, NodesLost{{0, 8, 9}, "ps 0 left", 1}}, 1, fx);
  ps2.on_message({control_from_coordinator, ShardsMoved{{0}, 2, 4, {5}}}, 4, fx);
  BOOST_TEST(fx.promote == std::vector<NodeId>({0}), boost::test_tools::per_element());
  BOOST_TEST(fx.promote_backups == std::vector<NodeId>({5}), boost::test_tools::per_element());
  BOOST_TEST(ps2.bad_messages() == 0u);
}

// Members and the real coordinator core, wired through a queue: every seed runs a job to the
// end while control messages are duplicated, replayed and garbled on the way to the members.
// Each member ends with the job (none fails), and every message the member core refuses is
// counted.
BOOST_AUTO_TEST_CASE(members_and_the_coordinator_finish_a_job_under_garbled_control_messages) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    SplitMix64 rng(seed);
    CoordinatorConfig cc;
    cc.shards = 2;
    cc.workers = 2;
    cc.job.hierarchical = seed % 2 == 0;
    cc.heartbeat_ms = 1'000;
    cc.heartbeat_timeout_ms = 5'000;
    auto coordinator = CoordinatorCore::make(cc, 0);
    BOOST_REQUIRE(coordinator.ok());
    std::vector<MemberInfo> infos = {info(MemberRole::ps, 2, 2), info(MemberRole::worker, 3, 1),
                                     info(MemberRole::worker, 4, 1)};
    std::vector<MemberCore> members;
    std::map<std::string, size_t> by_endpoint;
    for (size_t i = 0; i < infos.size(); ++i) {
      auto m = MemberCore::make(config(infos[i]), 0);
      BOOST_REQUIRE(m.ok());
      members.push_back(std::move(m.value()));
      by_endpoint[infos[i].endpoint] = i;
    }
    std::vector<std::optional<Status>> exits(members.size());
    std::vector<ControlMessage> history;  // what the coordinator sent, for replays
    uint64_t garbled = 0;
    uint64_t now = 0;
    std::vector<std::pair<size_t, ControlMessage>> to_members;
    auto member_effects = [&](size_t i, MemberEffects& fx) {
      while (true) {
        MemberEffects e = std::exchange(fx, MemberEffects{});
        if (e.build) members[i].built(Status(), now, fx);
        if (e.start)
          for (NodeId n = 0; n < infos[i].count + (cc.job.hierarchical ? 1 : 0); ++n)
            members[i].node_done(n, Status(), fx);
        if (e.drain) members[i].drained(fx);
        for (ControlBody& b : e.control) {
          CoordinatorEffects out;
          coordinator->on_message({i < members.size() && members[i].phase() != MemberPhase::joining
                                       ? members[i].you()
                                       : control_from_unknown,
                                   std::move(b)},
                                  now, out);
          for (ControlOut& c : out.control)
            to_members.emplace_back(by_endpoint.at(c.endpoint), std::move(c.message));
          if (out.training_done) {
            CoordinatorEffects end;
            coordinator->finish("", end);
            for (ControlOut& c : end.control)
              to_members.emplace_back(by_endpoint.at(c.endpoint), std::move(c.message));
          }
        }
        if (e.exit) exits[i] = e.exit;
        if (fx.empty()) return;
      }
    };
    for (size_t i = 0; i < members.size(); ++i) {
      MemberEffects fx;
      members[i].start(now, fx);
      member_effects(i, fx);
    }
    for (int round = 0; round < 200 && coordinator->phase() != CoordinatorPhase::ended; ++round) {
      now += 100;
      auto batch = std::exchange(to_members, {});
      for (auto& [i, m] : batch) {
        history.push_back(m);
        // A duplicate, a replay of an older message, or a garbled copy goes first.
        const uint64_t r = rng.next() % 8;
        std::optional<ControlMessage> extra;
        if (r == 0) extra = m;
        if (r == 1) extra = history[rng.next() % history.size()];
        if (r == 2) {
          ControlMessage g = m;
          if (auto* w = std::get_if<Welcome>(&g.body)) {
            if (!w->members.empty()) w->members[rng.next() % w->members.size()].first_node += 7;
          } else {
            g.body = NodesLost{{static_cast<NodeId>(1000 + rng.next() % 1000)}, "garbled"};
          }
          extra = g;
        }
        if (extra && !exits[i]) {
          garbled += r == 2;
          MemberEffects fx;
          members[i].on_message(*extra, now, fx);
          member_effects(i, fx);
        }
        if (exits[i]) continue;
        MemberEffects fx;
        members[i].on_message(m, now, fx);
        member_effects(i, fx);
      }
      CoordinatorEffects out;
      coordinator->on_timer(now, out);
      for (ControlOut& c : out.control)
        to_members.emplace_back(by_endpoint.at(c.endpoint), std::move(c.message));
      for (size_t i = 0; i < members.size(); ++i) {
        if (exits[i] || now < members[i].next_deadline()) continue;
        MemberEffects fx;
        members[i].on_timer(now, fx);
        member_effects(i, fx);
      }
    }
    // The final Shutdowns.
    for (auto& [i, m] : to_members) {
      MemberEffects fx;
      members[i].on_message(m, now, fx);
      member_effects(i, fx);
    }
    BOOST_TEST(coordinator->phase() == CoordinatorPhase::ended, "seed " << seed);
    BOOST_TEST(coordinator->totals().workers_lost == 0u, "seed " << seed);
    uint64_t refused = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      BOOST_REQUIRE_MESSAGE(exits[i].has_value(), "seed " << seed << ": member " << i);
      BOOST_TEST(exits[i]->ok(), "seed " << seed << ": " << exits[i]->message());
      refused += members[i].bad_messages();
    }
    BOOST_TEST(refused >= garbled, "seed " << seed);
  }
}

// A ps writes the manifest of each checkpoint step the coordinator completes, once: a
// CheckpointComplete of step 0, of a step that is no checkpoint step, or of a step not after the
// last one taken (it would overwrite that step's manifest, or name copies never taken) is dropped
// and counted.
BOOST_AUTO_TEST_CASE(a_ps_writes_each_checkpoint_steps_manifest_once) {
  Welcome w = layout(0);
  w.job.checkpoint_every = 25;
  MemberConfig c = config(info(MemberRole::ps, 2, 2));
  c.takes_checkpoints = true;
  auto made = MemberCore::make(c, 0);
  BOOST_REQUIRE(made.ok());
  MemberCore& core = made.value();
  MemberEffects fx;
  core.start(0, fx);
  core.on_message({control_from_coordinator, w}, 0, fx);
  BOOST_REQUIRE(fx.build.has_value());
  core.built(Status(), 0, fx);
  auto complete = [](uint32_t step) {
    return CheckpointComplete{step, {{0, "shard-0", 1, {}}, {1, "shard-1", 1, {}}}};
  };
  fx = {};
  core.on_message({control_from_coordinator, complete(25)}, 10, fx);
  BOOST_REQUIRE(fx.manifest.has_value());
  BOOST_TEST(fx.manifest->step == 25u);
  for (uint32_t step : {25u, 0u, 30u, 10u}) {
    fx = {};
    core.on_message({control_from_coordinator, complete(step)}, 11, fx);
    BOOST_TEST(!fx.manifest.has_value(), "step " << step);
  }
  BOOST_TEST(core.bad_messages() == 4u);
  fx = {};
  core.on_message({control_from_coordinator, complete(50)}, 12, fx);
  BOOST_TEST(fx.manifest.has_value());
}

// Re-replication. A ps member welcomed to hold backups only (its shards failed over) takes a
// layout with the moves since it was placed and answers Ready; it reports copies done once
// serving. The other members take BackupsPlaced, in epoch order, unless it places a backup on
// themselves or where a shard would have two replicas on one member.
BOOST_AUTO_TEST_CASE(backups_placed_on_a_member_that_rejoined_reroute_the_primaries) {
  // Two ps members of one shard each (0 and 1), one worker (replicas 2, 3); backups of shard 0
  // on member 1 (node 5), of shard 1 on member 0 (node 6).
  std::vector<MemberInfo> members = {info(MemberRole::ps, 2), info(MemberRole::ps, 4),
                                     info(MemberRole::worker, 3, 2)};
  JobSpec job;
  job.replicas = 2;
  Welcome w = planned(members, job, 0);
  MemberCore ps0 = welcomed(members[0], w);
  w.you = 2;
  MemberCore worker = welcomed(members[2], w);

  // Member 1 came back to hold backups: shard 1 moved to member 0, backups 5 and 6 are its.
  Welcome back = planned(members, job, 1);
  back.backups_only = true;
  back.placed = {{1, 0}, {5, 1}, {6, 1}};
  MemberCore ps1 = welcomed(members[1], back);
  BOOST_TEST((ps1.layout()->backup_nodes_of(1) == std::vector<NodeId>{5, 6}));
  BOOST_TEST(*ps1.layout()->owner(1) == 0u);
  MemberEffects copied;
  ps1.backups_copied({5, 6}, copied);
  BOOST_REQUIRE_EQUAL(count_of<BackupsCopied>(copied), 1u);
  BOOST_TEST((std::get<BackupsCopied>(copied.control[0]).backups == std::vector<NodeId>{5, 6}));
  // A worker, or a ps given no backups, is not told to hold backups only.
  for (uint32_t you : {2u, 0u}) {
    Welcome odd = back;
    odd.you = you;
    odd.placed = {{1, 0}, {5, 1}, {6, 1}};
    auto core = MemberCore::make(config(members[you]), 0).value();
    MemberEffects fx;
    core.start(0, fx);
    core.on_message({control_from_coordinator, odd}, 0, fx);
    BOOST_TEST(!fx.build.has_value());
    BOOST_TEST(core.bad_messages() == 1u);
  }

  // Member 0 hears of the placements after the failover (epochs 1 and 2).
  MemberEffects fx;
  ps0.on_message({control_from_coordinator, NodesLost{{1, 5}, "ps lost", 1}}, 1, fx);
  ps0.on_message({control_from_coordinator, ShardsMoved{{1}, 0, 2}}, 1, fx);
  ps0.promoted(fx.promote, fx);
  // Lies: placements on itself (one of a shard it serves), on a worker, and one of an epoch
  // not after the last it took.
  const uint64_t bad = ps0.bad_messages();
  for (const BackupsPlaced& lie :
       {BackupsPlaced{{{5, 0}}, 3}, BackupsPlaced{{{6, 0}}, 3}, BackupsPlaced{{{5, 2}}, 3},
        BackupsPlaced{{{6, 1}, {5, 1}, {6, 1}}, 2}}) {
    fx = {};
    ps0.on_message({control_from_coordinator, lie}, 2, fx);
    BOOST_TEST(fx.placed.empty());
  }
  BOOST_TEST(ps0.bad_messages() == bad + 4);
  fx = {};
  ps0.on_message({control_from_coordinator, BackupsPlaced{{{5, 1}, {6, 1}}, 3}}, 3, fx);
  BOOST_TEST((fx.placed == std::vector<NodePlacement>{{5, 1}, {6, 1}}));
  BOOST_TEST(*ps0.layout()->owner(6) == 1u);
  // Repeated: an epoch not after the last.
  fx = {};
  ps0.on_message({control_from_coordinator, BackupsPlaced{{{5, 1}, {6, 1}}, 3}}, 3, fx);
  BOOST_TEST(fx.placed.empty());
  // A worker takes them into its layout: a later move of shard 1 to member 1 is checked
  // against it.
  fx = {};
  worker.on_message({control_from_coordinator, NodesLost{{1, 5}, "ps lost", 1}}, 3, fx);
  worker.on_message({control_from_coordinator, ShardsMoved{{1}, 0, 2}}, 3, fx);
  worker.on_message({control_from_coordinator, BackupsPlaced{{{5, 1}, {6, 1}}, 3}}, 3, fx);
  BOOST_TEST((fx.placed == std::vector<NodePlacement>{{5, 1}, {6, 1}}));
  BOOST_TEST(worker.layout()->check_move(1, 1).ok());
}
