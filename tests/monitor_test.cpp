#define BOOST_TEST_MODULE monitor_test
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#include <httplib.h>

#include "monitor/http_server.h"
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
