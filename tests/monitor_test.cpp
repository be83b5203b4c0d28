#define BOOST_TEST_MODULE monitor_test
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include <httplib.h>

#include "common/hash.h"
#include "common/timeline.h"
#include "monitor/alerts.h"
#include "monitor/hot_keys.h"
#include "monitor/http_server.h"
#include "monitor/profile.h"
#include "monitor/ps_metrics.h"
#include "monitor/registry.h"
#include "tests/prom_text.h"
#include "tests/temp_dir.h"

using namespace colony;
using namespace colony::monitor;
using colony::test::parse_prom_text;
namespace tt = boost::test_tools;

namespace {

// promtool (Prometheus's own checker, extracted from Debian's package by scripts/test.sh) when
// COLONY_PROMTOOL names it: its verdict on `text`, or "" when it has none to give.
std::string promtool_verdict(const std::string& text) {
  const char* tool = std::getenv("COLONY_PROMTOOL");
  if (!tool || !*tool) return "";
  colony::testing::TempDir dir("promtool");
  const std::string file = dir.sub("metrics.txt");
  std::ofstream(file) << text;
  const std::string cmd =
      std::string(tool) + " check metrics < " + file + " > " + file + ".out 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(file + ".out");
  std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return rc == 0 ? "ok" : "promtool failed: " + said;
}

}  // namespace

BOOST_AUTO_TEST_CASE(counters_gauges_and_histograms_render_in_the_text_format) {
  Registry r;
  r.counter("colony_samples_total", "Samples trained.").inc(3);
  r.counter("colony_samples_total", "Samples trained.").inc(2);  // the same child
  r.gauge("colony_rows", "Rows held.", {{"shard", "0"}}).set(7);
  r.gauge("colony_rows", "Rows held.", {{"shard", "1"}}).set(-1.5);
  Histogram& h = r.histogram("colony_pull_seconds", "Pull latency.", {0.001, 0.01, 0.1});
  for (double v : {0.0005, 0.001, 0.05, 3.0}) h.observe(v);
  r.gauge_reader("colony_rss_bytes", "Resident memory.", {}, [] { return 4096.0; });

  const std::string text = r.render();
  const auto parsed = parse_prom_text(text);
  BOOST_TEST_INFO(text);
  BOOST_TEST(parsed.error == "");
  BOOST_TEST(parsed.value("colony_samples_total") == 5);
  BOOST_TEST(parsed.value("colony_rows", {{"shard", "0"}}) == 7);
  BOOST_TEST(parsed.value("colony_rows", {{"shard", "1"}}) == -1.5);
  BOOST_TEST(parsed.value("colony_rss_bytes") == 4096);
  // le is inclusive: 0.001 counts in the 0.001 bucket; buckets are cumulative.
  BOOST_TEST(parsed.value("colony_pull_seconds_bucket", {{"le", "0.001"}}) == 2);
  BOOST_TEST(parsed.value("colony_pull_seconds_bucket", {{"le", "0.01"}}) == 2);
  BOOST_TEST(parsed.value("colony_pull_seconds_bucket", {{"le", "0.1"}}) == 3);
  BOOST_TEST(parsed.value("colony_pull_seconds_bucket", {{"le", "+Inf"}}) == 4);
  BOOST_TEST(parsed.value("colony_pull_seconds_count") == 4);
  BOOST_TEST(parsed.value("colony_pull_seconds_sum") == 3.0515, tt::tolerance(1e-12));
  BOOST_TEST(parsed.types.at("colony_pull_seconds") == "histogram");
  BOOST_TEST(parsed.types.at("colony_samples_total") == "counter");
  const std::string verdict = promtool_verdict(text);
  BOOST_TEST((verdict == "" || verdict == "ok"), verdict);
}

BOOST_AUTO_TEST_CASE(label_values_and_help_are_escaped_and_odd_values_spelled_as_the_format_says) {
  Registry r;
  r.gauge("colony_odd", "A help with \\ and a\nnewline.", {{"peer", "a\"b\\c\nd"}})
      .set(std::nan(""));
  r.gauge("colony_odd", "A help with \\ and a\nnewline.", {{"peer", "inf"}}).set(INFINITY);
  r.gauge("colony_odd", "A help with \\ and a\nnewline.", {{"peer", "tiny"}}).set(1e-300);
  const std::string text = r.render();
  BOOST_TEST_INFO(text);
  BOOST_TEST(text.find("# HELP colony_odd A help with \\\\ and a\\nnewline.\n") !=
             std::string::npos);
  BOOST_TEST(text.find("colony_odd{peer=\"a\\\"b\\\\c\\nd\"} NaN\n") != std::string::npos);
  const auto parsed = parse_prom_text(text);
  BOOST_TEST(parsed.error == "");
  BOOST_TEST(std::isnan(parsed.value("colony_odd", {{"peer", "a\"b\\c\nd"}})));
  BOOST_TEST(std::isinf(parsed.value("colony_odd", {{"peer", "inf"}})));
  BOOST_TEST(parsed.value("colony_odd", {{"peer", "tiny"}}) == 1e-300);  // round-trips
  const std::string verdict = promtool_verdict(text);
  BOOST_TEST((verdict == "" || verdict == "ok"), verdict);
}

BOOST_AUTO_TEST_CASE(a_family_reader_lists_its_children_at_each_scrape_in_label_order) {
  Registry r;
  std::vector<std::pair<std::string, double>> peers = {{"b", 2}, {"a", 1}};
  r.family_reader("colony_bad_messages_total", "Bad messages by peer.", true, [&] {
    Registry::Listing out;
    for (const auto& [peer, n] : peers) out.push_back({{{"peer", peer}}, n});
    return out;
  });
  std::string text = r.render();
  BOOST_TEST_INFO(text);
  BOOST_TEST(text.find("colony_bad_messages_total{peer=\"a\"} 1\n"
                       "colony_bad_messages_total{peer=\"b\"} 2\n") != std::string::npos);
  peers.push_back({"c", 5});  // a peer seen later appears at the next scrape
  const auto parsed = parse_prom_text(r.render());
  BOOST_TEST(parsed.error == "");
  BOOST_TEST(parsed.value("colony_bad_messages_total", {{"peer", "c"}}) == 5);
  BOOST_TEST(parsed.types.at("colony_bad_messages_total") == "counter");
}

// The coordinator's colony_cluster_* families: histograms of counts the members report (added
// bucket by bucket), per-shard row counters and the hot keys listed as last replaced.
BOOST_AUTO_TEST_CASE(cluster_instruments_export_what_the_members_report) {
  Registry r;
  ClusterInstruments c = cluster_instruments(r);
  BOOST_TEST(c.staleness->bounds() == staleness_bounds());
  BOOST_TEST(c.pull_seconds->bounds() == latency_bounds());
  std::vector<uint64_t> counts(staleness_bounds().size() + 1, 0);
  counts[0] = 7;      // at most 0 steps behind
  counts[3] = 2;      // 3 or 4 steps behind
  counts.back() = 1;  // over 64
  c.staleness->add(counts, 75.0);
  c.staleness->add(counts, 75.0);
  c.rows_pulled(1).inc(40);
  c.list_hot_keys({{1, 77, 30}, {0, 5, 12}});
  c.list_hot_keys({{1, 78, 31}});  // replaces the listing
  const std::string text = r.render();
  BOOST_TEST_INFO(text);
  const auto parsed = parse_prom_text(text);
  BOOST_TEST_REQUIRE(parsed.error == "");
  BOOST_TEST(parsed.value("colony_cluster_read_staleness_steps_bucket", {{"le", "0"}}) == 14);
  BOOST_TEST(parsed.value("colony_cluster_read_staleness_steps_bucket", {{"le", "4"}}) == 18);
  BOOST_TEST(parsed.value("colony_cluster_read_staleness_steps_bucket", {{"le", "+Inf"}}) == 20);
  BOOST_TEST(parsed.value("colony_cluster_read_staleness_steps_sum", {}) == 150);
  BOOST_TEST(parsed.value("colony_cluster_shard_rows_pulled_total", {{"shard", "1"}}) == 40);
  BOOST_TEST(parsed.value("colony_cluster_hot_key_pulls", {{"shard", "1"}, {"key", "78"}}) == 31);
  BOOST_TEST(text.find("key=\"77\"") == std::string::npos);
  if (const std::string verdict = promtool_verdict(text); !verdict.empty())
    BOOST_TEST(verdict == "ok");
}

// The checker must be able to fail: each of these breaks one rule of the format.
BOOST_AUTO_TEST_CASE(the_format_checker_refuses_text_that_breaks_a_rule) {
  const char* broken[] = {
      "# TYPE a counter\na -1\n",               // counter below zero
      "a 1\nb 2\na 3\n",                        // family not together
      "# TYPE a gauge\n# TYPE a gauge\na 1\n",  // second TYPE
      "a{x=\"1} 2\n",                           // label not closed
      "a{x=\"\\q\"} 2\n",                       // bad escape
      "a one\n",                                // bad value
      "1a 2\n",                                 // bad name
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n",     // no +Inf bucket
      "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 2\n",  // count differs
      "a 1",                                                       // no final newline
      "a 1\na 2\n",                                                // the same sample twice
  };
  for (const char* text : broken) {
    BOOST_TEST_INFO(text);
    BOOST_TEST(parse_prom_text(text).error != "");
  }
}

BOOST_AUTO_TEST_CASE(histograms_stay_consistent_while_threads_observe) {
  Registry r;
  Histogram& h = r.histogram("colony_x_seconds", "x.", exponential_buckets(1e-4, 4, 8));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 20000; ++i) h.observe(1e-5 * double((i * 7 + t) % 1000));
    });
  for (int k = 0; k < 50; ++k) {
    const auto parsed = parse_prom_text(r.render());
    BOOST_TEST_REQUIRE(parsed.error == "");  // cumulative counts never fall mid-update
  }
  for (auto& t : threads) t.join();
  BOOST_TEST(h.count() == 80000u);
}

BOOST_AUTO_TEST_CASE(the_http_server_serves_metrics_and_refuses_a_port_in_use) {
  auto registry = std::make_shared<Registry>();
  registry->counter("colony_requests_total", "Requests.").inc(42);
  auto server = HttpServer::start("127.0.0.1", 0, registry);
  BOOST_TEST_REQUIRE(server.ok());
  httplib::Client client("127.0.0.1", (*server)->port());
  auto res = client.Get("/metrics");
  BOOST_TEST_REQUIRE(bool(res));
  BOOST_TEST(res->status == 200);
  BOOST_TEST(res->get_header_value("Content-Type").find("text/plain; version=0.0.4") == 0u);
  BOOST_TEST(parse_prom_text(res->body).value("colony_requests_total") == 42);
  BOOST_TEST(client.Get("/nothing-here")->status == 404);

  auto second = HttpServer::start("127.0.0.1", (*server)->port(), registry);
  BOOST_TEST_REQUIRE(!second.ok());
  BOOST_TEST(second.status().message().find(std::to_string((*server)->port())) !=
             std::string::npos);
  BOOST_TEST(!HttpServer::start("127.0.0.1", 70000, registry).ok());
  BOOST_TEST(!HttpServer::start("203.0.113.9", 0, registry).ok());  // not this machine's
}

namespace {

// A job sampled every second: `workers` workers of `step_ms` busy milliseconds a step (times
// `slow` for worker `slow_worker`), `shards` shards serving `rows_per_s` rows a second each
// (times `hot` for shard `hot_shard`), memory growing by `leak` bytes a second beyond rows
// whose bytes grow by `table_growth` a second. Returns every alert raised, in order.
struct JobShape {
  size_t workers = 3, shards = 4;
  double step_ms = 10.0, slow = 1.0, rows_per_s = 50000, hot = 1.0, leak = 0.0;
  double table_growth = 2e6, jitter = 0.2;
  size_t slow_worker = 1, hot_shard = 2;
  int seconds = 120;
  uint64_t seed = 1;
};
std::vector<colony::monitor::Alert> alerts_of(
    const JobShape& j, const std::function<bool(int)>& slow_at = [](int) { return true; }) {
  colony::monitor::AlertMonitor m;
  colony::monitor::AlertSample s;
  s.worker_busy_s.assign(j.workers, 0.0);
  s.worker_steps.assign(j.workers, 0);
  s.shard_rows.assign(j.shards, 0);
  s.rss_bytes = 500e6;
  s.rows_memory_bytes = 100e6;
  colony::SplitMix64 rng(j.seed);
  auto noise = [&] { return 1.0 + j.jitter * (double(rng.next() % 2001) / 1000.0 - 1.0); };
  std::vector<colony::monitor::Alert> all;
  for (int t = 0; t <= j.seconds; ++t) {
    s.time_s = t;
    for (size_t w = 0; w < j.workers; ++w) {
      const bool slow = w == j.slow_worker && slow_at(t);
      const double ms = j.step_ms * (slow ? j.slow : 1.0) * noise();
      s.worker_steps[w] += 50;  // BSP: every worker takes the same steps
      s.worker_busy_s[w] += 50 * ms / 1000.0;
    }
    for (size_t k = 0; k < j.shards; ++k)
      s.shard_rows[k] += uint64_t(j.rows_per_s * (k == j.hot_shard ? j.hot : 1.0) * noise());
    s.rows_memory_bytes += j.table_growth * noise();
    s.rss_bytes += j.table_growth * noise() + j.leak;
    for (auto& a : m.observe(s)) all.push_back(a);
  }
  return all;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_steady_job_raises_no_alert) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    JobShape j;
    j.seed = seed;
    const auto alerts = alerts_of(j);
    BOOST_TEST(alerts.empty(),
               "seed " << seed << ": " << (alerts.empty() ? "" : alerts[0].message));
  }
}

BOOST_AUTO_TEST_CASE(memory_the_rows_do_not_explain_raises_a_leak_suspect_once) {
  JobShape j;
  j.leak = 20e6;  // 20 MB a second beyond the rows
  const auto alerts = alerts_of(j);
  BOOST_REQUIRE(alerts.size() == 1u);
  BOOST_TEST(alerts[0].kind == "leak_suspect");
  BOOST_TEST(alerts[0].subject == "process");
  BOOST_TEST(alerts[0].message.find("more than the rows did") != std::string::npos);
  // Rows growing as fast are not a leak.
  j.leak = 0;
  j.table_growth = 20e6;
  BOOST_TEST(alerts_of(j).empty());
}

BOOST_AUTO_TEST_CASE(a_slow_worker_is_a_straggler_until_it_recovers) {
  JobShape j;
  j.slow = 5.0;
  const auto alerts = alerts_of(j, [](int t) { return t >= 30 && t < 60; });
  BOOST_REQUIRE(alerts.size() == 1u);
  BOOST_TEST(alerts[0].kind == "straggler");
  BOOST_TEST(alerts[0].subject == "worker 1");
  BOOST_TEST(alerts[0].message.find("worker 1 took") != std::string::npos);
  // Two slow spells far apart: raised twice (it cleared in between), not once per sample.
  JobShape two = j;
  two.seconds = 200;
  size_t raised = 0;
  for (const auto& a : alerts_of(two, [](int t) { return (t >= 30 && t < 60) || t >= 140; }))
    raised += a.kind == "straggler";
  BOOST_TEST(raised == 2u);
  // With two workers, the other's steps are the median.
  JobShape pair = j;
  pair.workers = 2;
  const auto p = alerts_of(pair);
  BOOST_REQUIRE(p.size() == 1u);
  BOOST_TEST(p[0].subject == "worker 1");
}

BOOST_AUTO_TEST_CASE(a_shard_serving_far_more_rows_is_hot) {
  JobShape j;
  j.hot = 10.0;
  const auto alerts = alerts_of(j);
  BOOST_REQUIRE(alerts.size() == 1u);
  BOOST_TEST(alerts[0].kind == "hot_shard");
  BOOST_TEST(alerts[0].subject == "shard 2");
  // Twice the others' load is skew, not an alert.
  j.hot = 2.0;
  BOOST_TEST(alerts_of(j).empty());
  // An idle job (no rows) raises nothing.
  j.rows_per_s = 0;
  j.hot = 10;
  BOOST_TEST(alerts_of(j).empty());
}

// The coordinator's monitor over a cluster of processes: each process's memory is watched on
// its own (a leak in one names it, and only it), workers and shards by the names given.
BOOST_AUTO_TEST_CASE(a_cluster_monitor_names_the_leaking_process_the_straggler_and_the_hot_shard) {
  using colony::monitor::AlertSample;
  using colony::monitor::ClusterAlertMonitor;
  ClusterAlertMonitor m;
  AlertSample s;
  s.worker_busy_s.assign(3, 0.0);
  s.worker_steps.assign(3, 0);
  s.shard_rows.assign(2, 0);
  s.worker_names = {"worker node 2 (member 1)", "worker node 3 (member 2)",
                    "worker node 4 (member 3)"};
  double leaking_rss = 400e6;
  std::vector<colony::monitor::Alert> all;
  for (int t = 0; t <= 60; ++t) {
    s.time_s = t;
    for (size_t w = 0; w < 3; ++w) {
      s.worker_steps[w] += 50;
      s.worker_busy_s[w] += 50 * (w == 2 ? 0.05 : 0.01);  // member 3's is five times slower
    }
    s.shard_rows[0] += 10000;
    s.shard_rows[1] += 100000;  // ten times shard 0's
    // Cluster-wide rss is ignored: only each process's own counts.
    s.rss_bytes = 1e12 * t;
    leaking_rss += 30e6;
    std::vector<ClusterAlertMonitor::Process> processes = {
        {"ps member 0 (tcp://10.0.0.1:7000)", 500e6 + 2e6 * t, 100e6 + 2e6 * t},
        {"worker member 3 (tcp://10.0.0.4:7000)", leaking_rss, 0}};
    for (auto& a : m.observe_cluster(s)) all.push_back(a);
    for (auto& a : m.observe_processes(s.time_s, processes)) all.push_back(a);
  }
  std::map<std::string, std::string> raised;  // kind -> subject
  for (const auto& a : all) BOOST_TEST(raised.emplace(a.kind, a.subject).second, a.message);
  BOOST_TEST(raised.size() == 3u);
  BOOST_TEST(raised["leak_suspect"] == "worker member 3 (tcp://10.0.0.4:7000)");
  BOOST_TEST(raised["straggler"] == "worker node 4 (member 3)");
  BOOST_TEST(raised["hot_shard"] == "shard 1");
  for (const auto& a : all) BOOST_TEST(a.message.find(a.subject) == 0u, a.message);
}

// A process's memory sampled far apart (the coordinator's samples of it are late, its
// heartbeats are): a leak that grew between two samples further apart than the window is named
// all the same, and a process whose memory holds still beside it is not.
BOOST_AUTO_TEST_CASE(a_leak_seen_through_samples_far_apart_is_still_named) {
  using colony::monitor::ClusterAlertMonitor;
  colony::monitor::AlertConfig config;
  config.window_s = 2;
  ClusterAlertMonitor m(config);
  std::vector<colony::monitor::Alert> all;
  double t = 0;
  for (double leaked_mb : {0.0, 0.0, 1024.0, 1024.0}) {
    std::vector<ClusterAlertMonitor::Process> processes = {
        {"ps member 1 (tcp://127.0.0.1:7001)", 200e6 + leaked_mb * 1048576.0, 10e6},
        {"ps member 0 (tcp://127.0.0.1:7000)", 200e6, 10e6}};
    for (auto& a : m.observe_processes(t, processes)) all.push_back(a);
    t += 0.25;
    if (leaked_mb == 0.0 && t > 0.3) t += 5;  // five seconds with no sample while it leaks
  }
  BOOST_REQUIRE_EQUAL(all.size(), 1u);
  BOOST_TEST(all[0].kind == "leak_suspect");
  BOOST_TEST(all[0].subject == "ps member 1 (tcp://127.0.0.1:7001)");
}

BOOST_AUTO_TEST_CASE(the_median_of_the_others_leaves_one_out) {
  using colony::monitor::median_of_others;
  BOOST_TEST(median_of_others({1, 2, 3, 100}, 3) == 2.0);
  BOOST_TEST(median_of_others({1, 2, 3, 100}, 0) == 3.0);
  BOOST_TEST(median_of_others({5, 7}, 0) == 7.0);
  BOOST_TEST(median_of_others({5}, 0) == 0.0);
  BOOST_TEST(median_of_others({4, 1, 3, 2}, 9) == 2.5);
}

// Timelines and the profile read off them (common/timeline.h, monitor/profile.h).
BOOST_AUTO_TEST_CASE(a_timeline_reads_back_to_the_events_it_was_written_from) {
  colony::Timeline t;
  t.events.push_back({"step 1", "compute", "worker", 3, 0, 1'000, 2'500'000});
  t.events.push_back({"crash", "fault", "", 7, 0, 9'000, -1});
  t.truncated = true;
  auto back = colony::parse_timeline(colony::timeline_json(t), "t.json");
  BOOST_REQUIRE(back.ok());
  BOOST_REQUIRE(back->events.size() == 2u);
  const colony::TimelineEvent& e = back->events[0];
  BOOST_TEST(e.name == "step 1");
  BOOST_TEST(e.category == "compute");
  BOOST_TEST(e.role == "worker");
  BOOST_TEST(e.pid == 3u);
  BOOST_TEST(e.start_ns == 1'000);
  BOOST_TEST(e.duration_ns == 2'500'000);
  BOOST_TEST(back->events[1].duration_ns == -1);
  BOOST_TEST(back->events[1].role.empty());
  BOOST_TEST(back->truncated);
  BOOST_TEST(back->origin_unix_ns == 0);
  t.origin_unix_ns = 1'764'620'000'123'456'789;
  BOOST_TEST(colony::parse_timeline(colony::timeline_json(t), "t.json")->origin_unix_ns ==
             t.origin_unix_ns);
  BOOST_TEST(colony::parse_timeline(R"({"traceEvents": [], "otherData": {"origin_unix_ns": -5}})",
                                    "o.json")
                 .status()
                 .message()
                 .find("o.json: otherData.origin_unix_ns") == 0u);
}

// Several daemons' timelines lined up into one: each shifted by its origin, a pid that two
// share (each daemon's bridge) made two, and a timeline without an origin refused by name.
BOOST_AUTO_TEST_CASE(daemons_timelines_line_up_by_their_origins) {
  const uint32_t bridge = 0xFFFFFFFFu;
  colony::Timeline ps, worker;
  ps.origin_unix_ns = 5'000'000'000;
  ps.events = {{"pull", "serve", "shard", 0, 0, 2'000, 1'000},
               {"send", "network", "bridge", bridge, 2, 2'500, 500}};
  worker.origin_unix_ns = 5'000'001'000;  // started 1 us later
  worker.events = {{"pull", "pull wait", "worker", 2, 0, 500, 2'000},
                   {"send", "serialize", "bridge", bridge, 0, 600, 100}};
  worker.truncated = true;
  auto merged = colony::merge_timelines({ps, worker}, {"ps.json", "worker.json"});
  BOOST_REQUIRE(merged.ok());
  BOOST_TEST(merged->origin_unix_ns == ps.origin_unix_ns);
  BOOST_TEST(merged->truncated);
  BOOST_REQUIRE(merged->events.size() == 4u);
  std::map<std::string, colony::TimelineEvent> by_phase;
  for (const auto& e : merged->events) by_phase[e.category] = e;
  BOOST_TEST(by_phase["pull wait"].start_ns == 1'500);  // 500 ns on a clock 1 us later
  BOOST_TEST(by_phase["serve"].start_ns == 2'000);
  BOOST_TEST(by_phase["network"].pid == bridge);
  BOOST_TEST(by_phase["serialize"].pid == bridge - 1);  // the worker's bridge, a process of its own
  BOOST_TEST(by_phase["pull wait"].pid == 2u);
  for (size_t i = 1; i < merged->events.size(); ++i)
    BOOST_TEST(merged->events[i - 1].start_ns <= merged->events[i].start_ns);
  colony::Timeline sim = worker;
  sim.origin_unix_ns = 0;
  const auto refused = colony::merge_timelines({ps, sim}, {"ps.json", "sim.json"});
  BOOST_TEST(refused.status().message().find("sim.json: no otherData.origin_unix_ns") == 0u,
             refused.status().message());
}

BOOST_AUTO_TEST_CASE(a_malformed_timeline_is_refused_naming_the_event_and_field) {
  auto error = [](const std::string& text) {
    auto t = colony::parse_timeline(text, "t.json");
    return t.ok() ? std::string() : t.status().message();
  };
  BOOST_TEST(error("{").find("t.json: not JSON") != std::string::npos);
  BOOST_TEST(error("{}").find("t.json: traceEvents") != std::string::npos);
  BOOST_TEST(error(R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", "ts": "a"}]})")
                 .find("t.json: traceEvents[1].ts") != std::string::npos);
  BOOST_TEST(error(R"([{"ph": "X", "ts": 1}])").find("[0].dur: missing") != std::string::npos);
  BOOST_TEST(error(R"([{"ph": "X", "ts": 1, "dur": -4}])").find("[0].dur") != std::string::npos);
  BOOST_TEST(error(R"([{"ph": "i", "ts": 1e300}])").find("[0].ts") != std::string::npos);
  BOOST_TEST(error(R"([7])").find("[0]: not an object") != std::string::npos);
  // Metadata and counter events are not spans: skipped, not refused.
  BOOST_TEST(error(R"([{"ph": "M", "name": "process_name"}, {"ph": "C", "ts": 4}])").empty());
}

BOOST_AUTO_TEST_CASE(a_profile_counts_each_members_overlapping_spans_once) {
  colony::Timeline t;
  const int64_t ms = 1'000'000;
  // Worker 1: computes 0-4 ms and 6-8 ms; waits for two pulls at once, 4-6 and 5-6 ms.
  t.events.push_back({"step 1", "compute", "worker", 1, 0, 0, 4 * ms});
  t.events.push_back({"step 2", "compute", "worker", 1, 0, 6 * ms, 2 * ms});
  t.events.push_back({"pull", "pull wait", "worker", 1, 1, 4 * ms, 2 * ms});
  t.events.push_back({"pull", "pull wait", "worker", 1, 1, 5 * ms, 1 * ms});
  // Worker 2 computes 0-2 ms; the shard applies 2-10 ms.
  t.events.push_back({"step 1", "compute", "worker", 2, 0, 0, 2 * ms});
  t.events.push_back({"push", "apply", "shard", 9, 0, 2 * ms, 8 * ms});
  t.events.push_back({"crash", "fault", "shard", 9, 0, 3 * ms, -1});
  const colony::monitor::Profile p = colony::monitor::profile(t);
  BOOST_TEST(p.wall_seconds == 0.010, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(p.instants == 1u);
  BOOST_REQUIRE(p.rows.size() == 3u);
  auto row = [&](const std::string& role, const std::string& phase) {
    for (const auto& r : p.rows)
      if (r.role == role && r.phase == phase) return r;
    BOOST_FAIL("no row " + role + " " + phase);
    return colony::monitor::ProfileRow{};
  };
  const auto compute = row("worker", "compute");
  BOOST_TEST(compute.seconds == 0.008, boost::test_tools::tolerance(1e-12));  // 4 + 2 + 2 ms
  BOOST_TEST(compute.share == 0.4, boost::test_tools::tolerance(1e-12));      // of 2 x 10 ms
  BOOST_TEST(compute.spans == 3u);
  BOOST_TEST(compute.members == 2u);
  const auto pulls = row("worker", "pull wait");
  BOOST_TEST(pulls.seconds == 0.002, boost::test_tools::tolerance(1e-12));  // 4-6 ms once
  BOOST_TEST(pulls.mean_span_ms == 1.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(row("shard", "apply").share == 0.8, boost::test_tools::tolerance(1e-12));
  // By role, then most time first.
  BOOST_TEST(p.rows[0].phase == "apply");
  BOOST_TEST(p.rows[1].phase == "compute");
  const std::string table = colony::monitor::profile_table(p);
  BOOST_TEST(table.find("worker       compute") != std::string::npos, table);
  BOOST_TEST(table.find("not in this timeline: read, push wait, pull, push, serve, gate wait") !=
                 std::string::npos,
             table);
  const std::string svg = colony::monitor::profile_svg(p);
  BOOST_TEST(svg.rfind("<svg", 0) == 0u);
  BOOST_TEST(svg.find("pull wait 10.0%") != std::string::npos, svg);
  BOOST_TEST(svg.find("apply 80.0%") != std::string::npos, svg);
  // Nothing timed, nothing profiled.
  BOOST_TEST(colony::monitor::profile(colony::Timeline{}).rows.empty());
}

BOOST_AUTO_TEST_CASE(hot_keys_finds_the_most_pulled_keys_among_many_cold_ones) {
  colony::monitor::HotKeys hot(10);
  std::vector<uint64_t> truth(51, 0);
  std::vector<uint64_t> batch;
  uint64_t cold = 1'000'000, rng = 7;
  // Keys 1..50 pulled 2000/i times each, interleaved with 200,000 keys pulled once.
  for (int round = 0; round < 2000; ++round) {
    batch.clear();
    for (uint64_t key = 1; key <= 50; ++key)
      if (uint64_t(round) % key == 0) {
        batch.push_back(key);
        ++truth[key];
      }
    for (int c = 0; c < 100; ++c) batch.push_back(cold++);
    rng = colony::mix64(rng);
    std::swap(batch[0], batch[rng % batch.size()]);  // the hot ones not always first
    hot.add(batch);
  }
  const auto top = hot.top();
  BOOST_REQUIRE(top.size() == 10u);
  const double slack = 2.0 * double(hot.total()) / double(1 << 14);  // count-min's bound
  for (size_t i = 0; i < top.size(); ++i) {
    BOOST_TEST(top[i].first == i + 1);  // keys 1..10, most first
    BOOST_TEST(top[i].second >= truth[i + 1]);
    BOOST_TEST(double(top[i].second) <= double(truth[i + 1]) + slack);
  }
  // Fewer distinct keys than k: each of them, exactly.
  colony::monitor::HotKeys few(10);
  const std::vector<uint64_t> keys = {5, 5, 9};
  few.add(keys);
  BOOST_REQUIRE(few.top().size() == 2u);
  BOOST_TEST(few.top()[0].first == 5u);
  BOOST_TEST(few.top()[0].second == 2u);
  // Sampled: the first call of every 8 counts, each key 8 times.
  colony::monitor::HotKeys sampled(10, 8);
  const std::vector<uint64_t> seven = {7};
  for (int call = 0; call < 9; ++call) sampled.add(call == 1 ? keys : seven);
  BOOST_REQUIRE(sampled.top().size() == 1u);  // calls 0 and 8 counted; {5, 5, 9} was call 1
  BOOST_TEST(sampled.top()[0].first == 7u);
  BOOST_TEST(sampled.top()[0].second == 16u);
  BOOST_TEST(sampled.total() == 16u);
}

// --fault-leak-mb leaks on a thread of its own, so the thread that starts it (a daemon's
// heartbeats) never waits on the page faults: start() comes back at once, and the leak goes on
// to its total, resident, the last piece smaller. A leak of nothing starts nothing, and one
// stopped halfway (the job over) goes with what it kept.
BOOST_AUTO_TEST_CASE(a_fault_leak_keeps_its_total_resident_on_a_thread_of_its_own) {
  const double before = colony::monitor::resident_bytes();
  {
    colony::monitor::FaultLeak leak(300);
    BOOST_TEST(leak.kept_mb() == 0u);
    leak.start(1e6);
    leak.start(1e6);                                        // once only
    for (int i = 0; i < 6000 && leak.kept_mb() < 300; ++i)  // up to a minute
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    BOOST_REQUIRE(leak.kept_mb() == 300u);
    BOOST_TEST(colony::monitor::resident_bytes() - before >= 300.0 * 1048576 * 0.95);
  }
  colony::monitor::FaultLeak none(0);
  none.start(1e6);
  BOOST_TEST(none.kept_mb() == 0u);
  colony::monitor::FaultLeak slow(1024);
  slow.start(1.0);  // 64 MiB at once, then a MiB a second: ended by its destructor
  for (int i = 0; i < 6000 && slow.kept_mb() < 64; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  BOOST_TEST(slow.kept_mb() == 64u);
}
