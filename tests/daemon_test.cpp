// The cluster daemons as real processes: `colony coordinator`, `colony ps` and `colony worker`
// on 127.0.0.1 (and across network namespaces where the test may create them), with CURVE keys
// from `colony keygen`. Waits are bounded; nothing here asserts on time.
#define BOOST_TEST_MODULE daemon_test
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/curve_keys.h"
#include "actors/envelope.h"
#include "actors/zmq_transport.h"
#include "common/hash.h"
#include "monitor/ps_metrics.h"
#include "tests/child_process.h"
#include "tests/chromium.h"
#include "tests/cli_fixture.h"
#include "tests/prom_text.h"
#include "tests/skewed_data.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

using colony::testing::bin;
using colony::testing::Child;
using colony::testing::slurp;
using colony::testing::wait_bound;

int run(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// How close the daemons' test logloss must come to the embedded cluster's on the suite's small
// data (60k rows, 1 epoch). With one aggregator per worker process the shards apply two
// senders' pushes in whatever order they arrive, which moves this small run's logloss: quiet
// runs land at +0.4-0.5%, and one run under a loaded ctest -j2 at +1.5%. On 1M rows the
// difference is 0.03-0.06% (docs/benchmarks.md).
constexpr double small_run_tolerance = 0.02;

// Data and keys made once for the whole suite.
struct Suite {
  fs::path dir = fs::temp_directory_path() / ("colony-daemon-test-" + std::to_string(::getpid()));
  fs::path data, test, keys, intruder_keys, role_keys;
  double embedded_logloss = 0.0;
  uint64_t embedded_table_rows = 0;
  Suite() {
    fs::create_directories(dir);
    data = dir / "d" / "train.libsvm";
    test = dir / "d" / "test.libsvm";
    keys = dir / "keys";
    intruder_keys = dir / "intruder";
    role_keys = dir / "role-keys";
    const std::string b = bin();
    BOOST_REQUIRE(run(b + " gen --rows 60000 --test-rows 15000 --seed 5 --out " +
                      (dir / "d").string() + " >/dev/null 2>&1") == 0);
    BOOST_REQUIRE(run(b + " keygen --out " + keys.string() + " --nodes 8 >/dev/null 2>&1") == 0);
    BOOST_REQUIRE(run(b + " keygen --out " + role_keys.string() +
                      " --ps 2 --workers 2 >/dev/null 2>&1") == 0);
    // The intruder knows the coordinator's public key but holds a key pair nobody listed.
    BOOST_REQUIRE(
        run(b + " keygen --out " + intruder_keys.string() + " --nodes 1 >/dev/null 2>&1") == 0);
    fs::copy_file(keys / "server.pub", intruder_keys / "server.pub",
                  fs::copy_options::overwrite_existing);
    // The embedded cluster's result on the same data and layout: what the daemons must match.
    const fs::path report = dir / "embedded.json";
    BOOST_REQUIRE(run(b + " train --data " + data.string() + " --test " + test.string() +
                      " --shards 2 --workers 2 --no-cache --optimizer ftrl --report " +
                      report.string() + " >/dev/null 2>&1") == 0);
    const auto embedded = nlohmann::json::parse(slurp(report));
    embedded_logloss = embedded["test_logloss"].get<double>();
    embedded_table_rows = embedded["table_rows"].get<uint64_t>();
  }
  // COLONY_KEEP_TEST_DIR=1 keeps every process's log and report (to read a failure's).
  ~Suite() {
    if (!std::getenv("COLONY_KEEP_TEST_DIR")) fs::remove_all(dir);
  }
};

Suite& suite() {
  static Suite s;
  return s;
}

std::vector<std::string> secure(const std::string& key) {
  return {"--keys", suite().keys.string(), "--key", key};
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Starts a coordinator on a free port chosen by the kernel and returns it with its endpoint.
std::pair<std::unique_ptr<Child>, std::string> start_coordinator(
    const std::string& name, std::vector<std::string> args, const std::string& host = "127.0.0.1",
    std::vector<std::string> prefix = {}) {
  std::vector<std::string> argv = prefix;
  argv.push_back(bin());
  argv.push_back("coordinator");
  argv.push_back("--listen");
  argv.push_back("tcp://" + host + ":*");
  argv = cat(argv, args);
  auto c = std::make_unique<Child>(argv, suite().dir / (name + ".log"));
  const std::string endpoint = c->await("coordinator listening on (tcp://[0-9.]+:[0-9]+)");
  return {std::move(c), endpoint};
}

std::unique_ptr<Child> start_member(const std::string& name, const std::string& role,
                                    const std::string& coordinator, std::vector<std::string> args,
                                    std::vector<std::string> prefix = {}, fs::path data = {}) {
  std::vector<std::string> argv = prefix;
  argv.push_back(bin());
  argv.push_back(role);
  argv.push_back("--coordinator");
  argv.push_back(coordinator);
  if (role == "worker") {
    argv.push_back("--data");
    argv.push_back((data.empty() ? suite().data : data).string());
  }
  return std::make_unique<Child>(cat(argv, args), suite().dir / (name + ".log"));
}

// Worker members with the keys node-2 and node-3 (logs <name>-w0, <name>-w1) of the job at
// `coordinator`, returned a second after both started training: early in the job (well before
// it could end), which is where a test's fault lands. Not a timing assertion.
std::pair<std::unique_ptr<Child>, std::unique_ptr<Child>> two_workers_a_second_in(
    const std::string& name, const std::string& coordinator) {
  auto w0 = start_member(name + "-w0", "worker", coordinator, secure("node-2"));
  auto w1 = start_member(name + "-w1", "worker", coordinator, secure("node-3"));
  w0->await("training starts");
  w1->await("training starts");
  std::this_thread::sleep_for(1s);
  return {std::move(w0), std::move(w1)};
}

// A coordinator of a --durability replicated:3 job (3 shards, 2 workers, `epochs`, heartbeats
// every 200 ms, lost after `timeout_ms`, CURVE) and its three ps members (keys node-0, node-1 and
// node-4; ps[i] is member i and hosts shard i), then its two worker members, training for a
// second (two_workers_a_second_in); logs and report (<name>.json) named by `name`.
struct ReplicatedCluster {
  std::unique_ptr<Child> coord;
  std::string endpoint;
  std::vector<std::unique_ptr<Child>> ps;
  std::unique_ptr<Child> w0, w1;
};
ReplicatedCluster three_replicas(const std::string& name, int epochs, int timeout_ms) {
  ReplicatedCluster c;
  std::tie(c.coord, c.endpoint) = start_coordinator(
      name + "-coordinator",
      cat(secure("server"),
          {"--shards", "3", "--workers", "2", "--epochs", std::to_string(epochs), "--no-cache",
           "--durability", "replicated:3", "--heartbeat-ms", "200", "--heartbeat-timeout-ms",
           std::to_string(timeout_ms), "--test", suite().test.string(), "--report",
           (suite().dir / (name + ".json")).string()}));
  for (const char* key : {"node-0", "node-1", "node-4"}) {
    c.ps.push_back(
        start_member(name + "-ps" + std::to_string(c.ps.size()), "ps", c.endpoint, secure(key)));
    c.ps.back()->await("the coordinator took my join");  // joined in order: member i
  }
  std::tie(c.w0, c.w1) = two_workers_a_second_in(name, c.endpoint);
  return c;
}

nlohmann::json report(const std::string& name) {
  return nlohmann::json::parse(slurp(suite().dir / name));
}

// The report <name>.json of a daemon job that failed over `failovers` times, checked: nothing
// acknowledged lost, nothing refused as a lie (what a lost ps sent before it died is late, not a
// lie), `samples` trained, and the test logloss within `tolerance` (1%; 0: exactly) of `expected`
// (logged, after `what`). Returned for the test's own checks.
nlohmann::json failed_over(const std::string& name, int failovers, uint64_t samples,
                           double expected, const std::string& what, double tolerance = 0.01) {
  const auto r = report(name + ".json");
  BOOST_TEST(r["failovers"].get<int>() == failovers);
  BOOST_TEST(r["pushes_lost"].get<uint64_t>() == 0u);
  BOOST_TEST(r["bad_messages"].get<uint64_t>() == 0u);
  BOOST_TEST(r["train_samples"].get<uint64_t>() == samples);
  const double logloss = r["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("daemons " << what << ": " << std::setprecision(10) << logloss
                                << " vs embedded " << expected << ", pushes re-sent "
                                << r["pushes_resent"].get<uint64_t>());
  BOOST_TEST(std::abs(logloss / expected - 1.0) <= tolerance);
  return r;
}

// The report of the embedded cluster (2 shards, `workers` workers) on the suite's data with
// `flags`: what a daemon run of the same job is compared with. Made once per name.
// The daemons train with FTRL's defaults (they try no settings): the embedded run the
// daemons are compared with names that optimizer, where `colony train` would choose by trial.
nlohmann::json embedded_report(const std::string& name, const std::string& flags, int workers = 2) {
  const fs::path path = suite().dir / (name + ".json");
  if (!fs::exists(path))
    BOOST_REQUIRE(run(bin() + " train --data " + suite().data.string() + " --test " +
                      suite().test.string() + " --shards 2 --workers " + std::to_string(workers) +
                      " --no-cache " + "--optimizer ftrl " + flags + " --report " + path.string() +
                      " >/dev/null 2>&1") == 0);
  return nlohmann::json::parse(slurp(path));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(daemons)

// (a) and (c): a coordinator, 2 ps and 2 workers on 127.0.0.1 with CURVE, the job flags from a
// TOML config file, train to the embedded cluster's logloss; a client whose key is not listed is
// refused (logged with its address) and the job does not notice. The rows and gradients cross
// the processes in int8 with a scale a row (--wire-format int8, issue 16), the gradients in bf16
// (--push-format bf16, with error feedback), and the ps members
// keep rows and optimizer state in int8 (--row-format, --state-format).
BOOST_AUTO_TEST_CASE(loopback_cluster_matches_embedded_and_refuses_an_unlisted_key) {
  Suite& s = suite();
  std::ofstream(s.dir / "coordinator.toml")
      << "shards = 2\nworkers = 2\nno-cache = true\nwire-format = \"int8\"\n"
      << "push-format = \"bf16\"\nerror-feedback = 100000\nrow-format = \"int8\"\nstate-format = "
         "\"int8\"\n"
      << "test = \"" << s.test.string() << "\"\n";
  auto [coord, endpoint] =
      start_coordinator("loopback-coordinator",
                        cat(secure("server"), {"--config", (s.dir / "coordinator.toml").string(),
                                               "--report", (s.dir / "loopback.json").string()}));
  Child intruder({bin(), "worker", "--coordinator", endpoint, "--data", s.data.string(), "--keys",
                  s.intruder_keys.string(), "--key", "node-0", "--join-timeout", "3"},
                 s.dir / "intruder.log");
  coord->await("refused a connection from (127\\.0\\.0\\.1)");
  const fs::path ps_trace = s.dir / "ps0-timeline.json", worker_trace = s.dir / "w0-timeline.json";
  auto ps0 = start_member("loopback-ps0", "ps", endpoint,
                          cat(secure("node-0"), {"--timeline", ps_trace.string()}));
  auto ps1 = start_member("loopback-ps1", "ps", endpoint, secure("node-1"));
  auto w0 = start_member("loopback-w0", "worker", endpoint,
                         cat(secure("node-2"), {"--timeline", worker_trace.string()}));
  auto w1 = start_member("loopback-w1", "worker", endpoint, secure("node-3"));
  BOOST_TEST(coord->wait() == 0, coord->log());
  for (Child* c : {ps0.get(), ps1.get(), w0.get(), w1.get()}) BOOST_TEST(c->wait() == 0, c->log());
  BOOST_TEST(intruder.wait() == 1);
  BOOST_TEST(intruder.log().find("no answer from the coordinator") != std::string::npos,
             intruder.log());
  const auto r = report("loopback.json");
  BOOST_TEST(r["train_samples"].get<uint64_t>() == 60000u);
  BOOST_TEST(r["wire_format"].get<std::string>() == "int8");
  BOOST_TEST(r["push_format"].get<std::string>() == "bf16");
  BOOST_TEST(r["error_feedback_rows"].get<uint64_t>() == 100000u);
  BOOST_TEST(r["row_format"].get<std::string>() == "int8");
  BOOST_TEST(r["state_format"].get<std::string>() == "int8");
  // FM dim 8 with FTRL: four vectors of 9 values (the row, z, n, w0), 9 codes and a scale each.
  BOOST_TEST(r["bytes_per_row"].get<double>() == 52.0);
  BOOST_TEST(r["refused_peers"].get<uint64_t>() >= 1u);
  BOOST_TEST(r["bad_messages"].get<uint64_t>() == 0u);
  const double logloss = r["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("daemons " << logloss << " vs embedded " << s.embedded_logloss);
  BOOST_TEST(std::abs(logloss / s.embedded_logloss - 1.0) < small_run_tolerance);
  // The ps members' summaries: the same rows as the embedded cluster made from the same data.
  BOOST_TEST(r["ps_summaries"].get<uint32_t>() == 2u);
  BOOST_TEST(r["replies_dropped"].get<uint64_t>() == 0u);  // every reply answered a request
  BOOST_TEST(r["table_rows"].get<uint64_t>() == s.embedded_table_rows);
  BOOST_TEST(r["table_bytes"].get<uint64_t>() > r["table_rows"].get<uint64_t>());
  const std::regex summarized("training is over: [0-9]+ rows in 1 shard");
  BOOST_TEST(std::regex_search(ps0->log(), summarized), ps0->log());
  BOOST_TEST(std::regex_search(ps1->log(), summarized), ps1->log());

  // The timelines of a ps and a worker process (--timeline): each member's phases and its
  // bridge's serialize and network spans, which `colony profile` tabulates.
  auto phases_in = [](const fs::path& trace) {
    std::set<std::string> seen;  // "role phase"
    const auto doc = nlohmann::json::parse(slurp(trace));
    for (const auto& e : doc["traceEvents"])
      seen.insert(e["args"]["role"].get<std::string>() + " " + e["cat"].get<std::string>());
    return seen;
  };
  const auto ps_phases = phases_in(ps_trace), worker_phases = phases_in(worker_trace);
  for (const char* want : {"shard serve", "shard apply", "bridge serialize", "bridge network"})
    BOOST_TEST(ps_phases.count(want) == 1u, want);
  for (const char* want : {"worker read", "worker compute", "worker pull", "aggregator aggregate",
                           "bridge serialize", "bridge network"})
    BOOST_TEST(worker_phases.count(want) == 1u, want);
  BOOST_TEST(ps0->log().find("timeline: ") != std::string::npos, ps0->log());
  Child profile({bin(), "profile", worker_trace.string()}, s.dir / "profile.log");
  BOOST_TEST(profile.wait() == 0, profile.log());
  BOOST_TEST(std::regex_search(profile.log(), std::regex("bridge +serialize +[0-9.]+")),
             profile.log());
  // Both processes' timelines lined up into one trace: every role of both, two bridges.
  const fs::path merged = s.dir / "merged-timeline.json";
  Child both(
      {bin(), "profile", ps_trace.string(), worker_trace.string(), "--merged", merged.string()},
      s.dir / "profile-both.log");
  BOOST_TEST(both.wait() == 0, both.log());
  for (const char* role : {"shard", "worker", "aggregator", "bridge"})
    BOOST_TEST(std::regex_search(both.log(), std::regex(std::string(role) + " +[a-z]+")), role);
  const auto merged_phases = phases_in(merged);
  for (const auto& phase : ps_phases) BOOST_TEST(merged_phases.count(phase) == 1u, phase);
  for (const auto& phase : worker_phases) BOOST_TEST(merged_phases.count(phase) == 1u, phase);
  std::set<uint32_t> bridges;
  const auto merged_doc = nlohmann::json::parse(slurp(merged));
  for (const auto& e : merged_doc["traceEvents"])
    if (e["args"]["role"] == "bridge") bridges.insert(e["pid"].get<uint32_t>());
  BOOST_TEST(bridges.size() == 2u);
}

// Hybrid training over real processes: DeepFM on Criteo-shaped data with 2 ps and 2 worker
// processes of 2 replicas each (rows on the PS, dense layers all-reduced through the two node
// aggregators over the bridge) lands within 0.5% of one embedded worker's test logloss on the
// same samples in the same steps (the one worker's batch holds the four workers' batches).
BOOST_AUTO_TEST_CASE(deepfm_on_two_worker_processes_matches_one_worker) {
  Suite& s = suite();
  const fs::path d = s.dir / "deep";
  BOOST_REQUIRE(run(bin() + " gen --format criteo --rows 200000 --test-rows 20000 --seed 2 --out " +
                    d.string() + " >/dev/null 2>&1") == 0);
  const fs::path train = d / "train.criteo", test = d / "test.criteo";
  const fs::path one = s.dir / "deep-one.json", many = s.dir / "deep-daemons.json";
  BOOST_REQUIRE(run(bin() + " train --model deepfm --optimizer ftrl --data " + train.string() +
                    " --test " + test.string() + " --workers 1 --batch 512 --no-cache --report " +
                    one.string() + " >/dev/null 2>&1") == 0);
  auto [coord, endpoint] = start_coordinator(
      "deep-coordinator", cat(secure("server"), {"--model", "deepfm", "--shards", "2", "--workers",
                                                 "4", "--batch", "128", "--no-cache", "--test",
                                                 test.string(), "--report", many.string()}));
  auto ps0 = start_member("deep-ps0", "ps", endpoint, secure("node-0"));
  auto ps1 = start_member("deep-ps1", "ps", endpoint, secure("node-1"));
  auto w0 = start_member("deep-w0", "worker", endpoint, cat(secure("node-2"), {"--replicas", "2"}),
                         {}, train);
  // One process shares each replica's batches between 2 threads, the other does not: the
  // all-reduce keeps their dense layers equal all the same.
  auto w1 =
      start_member("deep-w1", "worker", endpoint,
                   cat(secure("node-3"), {"--replicas", "2", "--compute-threads", "2"}), {}, train);
  BOOST_TEST(coord->wait() == 0, coord->log());
  for (Child* c : {ps0.get(), ps1.get(), w0.get(), w1.get()}) BOOST_TEST(c->wait() == 0, c->log());
  const auto r = report("deep-daemons.json");
  BOOST_TEST(r["train_samples"].get<uint64_t>() == 200000u);
  BOOST_TEST(r["bad_messages"].get<uint64_t>() == 0u);
  BOOST_TEST(r["fields"].get<int>() == 26);
  const double a = report("deep-one.json")["test_logloss"].get<double>();
  const double b = r["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("DeepFM: 4 replicas in 2 processes " << b << ", one embedded worker " << a);
  BOOST_TEST(std::abs(b / a - 1.0) < 0.005);
}

// (e) and the signals: of three workers, one is killed with SIGKILL and one drained with SIGTERM
// mid-job; the coordinator notices the first by its heartbeats, releases its clocks, and the job
// finishes with the third.
BOOST_AUTO_TEST_CASE(killed_worker_is_noticed_and_the_job_goes_on) {
  Suite& s = suite();
  auto [coord, endpoint] = start_coordinator(
      "kill-coordinator",
      cat(secure("server"),
          {"--shards", "1", "--workers", "3", "--epochs", "30", "--no-cache", "--consistency",
           "ssp:2", "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "3000", "--test",
           s.test.string(), "--report", (s.dir / "kill.json").string()}));
  auto ps = start_member("kill-ps", "ps", endpoint, secure("node-0"));
  auto w0 = start_member("kill-w0", "worker", endpoint, secure("node-1"));
  auto w1 = start_member("kill-w1", "worker", endpoint, secure("node-2"));
  auto w2 = start_member("kill-w2", "worker", endpoint, secure("node-3"));
  w0->await("training starts");
  w1->await("training starts");
  coord->await("trained [1-9][0-9]* samples");  // heartbeats show progress
  w0->signal(SIGKILL);
  w1->signal(SIGTERM);
  BOOST_TEST(w0->wait() == 128 + SIGKILL);
  BOOST_TEST(w1->wait() == 0, w1->log());
  BOOST_TEST(w1->log().find("drained") != std::string::npos, w1->log());
  BOOST_TEST(coord->wait() == 0, coord->log());
  BOOST_TEST(coord->log().find("was lost: no heartbeat") != std::string::npos, coord->log());
  BOOST_TEST(ps->wait() == 0, ps->log());
  BOOST_TEST(w2->wait() == 0, w2->log());
  const auto r = report("kill.json");
  BOOST_TEST(r["workers_lost"].get<int>() == 1);
  BOOST_TEST(r["workers_drained"].get<int>() == 1);
  BOOST_TEST(r["train_samples"].get<uint64_t>() > 0u);
  BOOST_TEST(std::isfinite(r["test_logloss"].get<double>()));
}

// A ps whose shards take longer to summarize themselves when training ends (each a digest of a
// large store) than the coordinator waits for a silent member: it keeps sending heartbeats
// meanwhile, so the job that trained finishes well, its summary left out of the counts. Before,
// its silence had it declared lost after training, and the job failed.
BOOST_AUTO_TEST_CASE(a_ps_slow_to_summarize_is_not_lost) {
  Suite& s = suite();
  auto [coord, endpoint] = start_coordinator(
      "slow-summary-coordinator",
      cat(secure("server"), {"--shards", "2", "--workers", "1", "--epochs", "2", "--no-cache",
                             "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "2000", "--test",
                             s.test.string(), "--report", (s.dir / "slow-summary.json").string()}));
  // Two shards, each 2.5 s to summarize (the member waits up to 2 s for each): silent for 4 s.
  auto ps = start_member("slow-summary-ps", "ps", endpoint,
                         cat(secure("node-0"), {"--shards", "2", "--fault-slow-ms", "2500"}));
  auto w = start_member("slow-summary-w", "worker", endpoint, secure("node-2"));
  BOOST_TEST(coord->wait() == 0, coord->log());
  BOOST_TEST(coord->log().find("was lost") == std::string::npos, coord->log());
  BOOST_TEST(coord->log().find("sent no shard summary") != std::string::npos, coord->log());
  BOOST_TEST(ps->wait() == 0, ps->log());
  BOOST_TEST(w->wait() == 0, w->log());
  const auto r = report("slow-summary.json");
  BOOST_TEST(r["ps_summaries"].get<int>() == 0);
  BOOST_TEST(std::isfinite(r["test_logloss"].get<double>()));
}

// Issue 5: kill -9 of a ps whose shards keep their rows in RocksDB, then the same ps started
// again (same --listen, same --store): it rejoins, the workers resync with it, and the job
// finishes within 1% of the embedded cluster's logloss on the same data and epochs. The job
// checkpoints every 25 steps, before the kill and after the restart.
BOOST_AUTO_TEST_CASE(killed_ps_restarts_from_its_store_and_the_job_finishes) {
  Suite& s = suite();
  const double expected =
      embedded_report("restart-embedded", "--epochs 4")["test_logloss"].get<double>();
  auto [coord, endpoint] = start_coordinator(
      "restart-coordinator",
      cat(secure("server"),
          {"--shards", "2", "--workers", "2", "--epochs", "4", "--no-cache", "--heartbeat-ms",
           "200", "--heartbeat-timeout-ms", "3000", "--checkpoint-every", "25", "--test",
           s.test.string(), "--report", (s.dir / "restart.json").string()}));
  const std::string store0 = "rocksdb:" + (s.dir / "restart-store-0").string();
  const std::string store1 = "rocksdb:" + (s.dir / "restart-store-1").string();
  auto ps0 =
      start_member("restart-ps0", "ps", endpoint, cat(secure("node-0"), {"--store", store0}));
  auto ps1 =
      start_member("restart-ps1", "ps", endpoint, cat(secure("node-1"), {"--store", store1}));
  const std::string ps1_endpoint = ps1->await("ps listening on (tcp://[0-9.]+:[0-9]+)");
  auto [w0, w1] = two_workers_a_second_in("restart", endpoint);
  // Killed after a complete checkpoint: the restarted shard's rows are past that step, which it
  // must not copy again (its folder holds the complete one; before, the ps then failed the job).
  ps1->await("checkpoint of step [0-9]+ complete");
  ps1->signal(SIGKILL);
  BOOST_TEST(ps1->wait() == 128 + SIGKILL);
  coord->await("its rows are on disk: waiting");
  auto again = start_member("restart-ps1-again", "ps", endpoint,
                            cat(secure("node-1"), {"--store", store1, "--listen", ps1_endpoint}));
  BOOST_TEST(coord->wait() == 0, coord->log());
  BOOST_TEST(coord->log().find("has resumed shards") != std::string::npos, coord->log());
  for (Child* c : {ps0.get(), again.get(), w0.get(), w1.get()})
    BOOST_TEST(c->wait() == 0, c->log());
  const auto r = report("restart.json");
  BOOST_TEST(r["ps_restarts"].get<int>() == 1);
  BOOST_TEST(r["train_samples"].get<uint64_t>() == 240000u);
  BOOST_TEST(r["checkpoints"].get<uint32_t>() >= 2u);  // one before the kill, one after at least
  const double logloss = r["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("restarted ps " << logloss << " vs embedded " << expected
                                     << ", pushes re-sent " << r["pushes_resent"].get<uint64_t>());
  BOOST_TEST(std::abs(logloss / expected - 1.0) < 0.01);
}

// Replication (--durability replicated:2) across real processes with CURVE: each of the two ps
// members holds the other's shard as a backup, every push and clock goes to it before the push
// is acknowledged, and the job trains as the unreplicated one does: the same rows, the same
// logloss within the small run's tolerance, and every backup's rows equal to its primary's when
// training ends (their digests).
BOOST_AUTO_TEST_CASE(replicated_shards_end_equal_to_their_backups) {
  Suite& s = suite();
  auto [coord, endpoint] = start_coordinator(
      "replicated-coordinator",
      cat(secure("server"),
          {"--shards", "2", "--workers", "2", "--no-cache", "--durability", "replicated:2",
           "--test", s.test.string(), "--report", (s.dir / "replicated.json").string()}));
  // One ps on disk (its backup under DIR/backups), joining first: it hosts shard 0. One in
  // memory.
  const fs::path disk = s.dir / "replicated-store-1";
  auto ps1 = start_member("replicated-ps1", "ps", endpoint,
                          cat(secure("node-1"), {"--store", "rocksdb:" + disk.string()}));
  ps1->await("the coordinator took my join");
  auto ps0 = start_member("replicated-ps0", "ps", endpoint, secure("node-0"));
  auto w0 = start_member("replicated-w0", "worker", endpoint, secure("node-2"));
  auto w1 = start_member("replicated-w1", "worker", endpoint, secure("node-3"));
  BOOST_TEST(coord->wait() == 0, coord->log());
  for (Child* c : {ps0.get(), ps1.get(), w0.get(), w1.get()}) BOOST_TEST(c->wait() == 0, c->log());
  const auto r = report("replicated.json");
  BOOST_TEST(r["durability"].get<std::string>() == "replicated:2");
  BOOST_TEST(r["replicas"].get<uint32_t>() == 2u);
  BOOST_TEST(r["backups_equal"].get<bool>());
  BOOST_TEST(r["train_samples"].get<uint64_t>() == 60000u);
  BOOST_TEST(r["bad_messages"].get<uint64_t>() == 0u);
  BOOST_TEST(r["table_rows"].get<uint64_t>() == s.embedded_table_rows);
  const double logloss = r["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("replicated daemons " << logloss << " vs embedded " << s.embedded_logloss);
  BOOST_TEST(std::abs(logloss / s.embedded_logloss - 1.0) < small_run_tolerance);
  for (Child* ps : {ps0.get(), ps1.get()})
    BOOST_TEST(ps->log().find("holding 1 backup of other members' shards (replicas 2)") !=
                   std::string::npos,
               ps->log());
  BOOST_TEST(fs::exists(disk / "shard-0"));
  BOOST_TEST(fs::exists(disk / "backups" / "shard-1"));

  // A replica's store holding an earlier run's rows is refused: its backups start empty.
  auto [again, again_endpoint] =
      start_coordinator("replicated-again-coordinator",
                        cat(secure("server"), {"--shards", "2", "--workers", "1", "--durability",
                                               "replicated:2", "--join-timeout", "20"}));
  auto a1 = start_member("replicated-again-ps1", "ps", again_endpoint,
                         cat(secure("node-1"), {"--store", "rocksdb:" + disk.string()}));
  a1->await("the coordinator took my join");
  auto a0 = start_member("replicated-again-ps0", "ps", again_endpoint, secure("node-0"));
  auto aw = start_member("replicated-again-w0", "worker", again_endpoint, secure("node-2"));
  BOOST_TEST(a1->wait() != 0);
  BOOST_TEST(a1->log().find("rows of an earlier run") != std::string::npos, a1->log());
  BOOST_TEST(again->wait() != 0);
  for (Child* c : {a0.get(), aw.get()}) c->wait();
}

// Failover and re-replication (issue 14): kill -9 of a ps mid-job under --durability
// replicated:2, then the same ps started again at once, as systemd would. The coordinator declares
// it lost, the other ps promotes its backup of the lost shard, the worker re-sends what the lost
// primary had not acknowledged; the restarted ps joins again to hold backups: once the failover is
// done the coordinator places on it the backups the cluster lacks (both shards'), and the other
// ps copies its rows to it. Then the other ps is killed too: both shards fail over to the
// restarted one, whose rows came from the copies and the forwards after them. The job finishes:
// every sample trained, no acknowledged push missing from a promoted backup (pushes_lost, counted
// by its resync), checkpoints going on (the promoted shard's beside the other's), and the test
// logloss of the uninterrupted job to every digit. One worker: with two, the order in which a
// step's two pushes reach a shard is timing (BSP does not fix it), the optimizer's result depends
// on it, and a failover re-sends the step it cuts in the order the workers resync, so only a band
// could be checked (docs/storage.md); with one, an update lost, applied twice, applied out of
// order or read stale anywhere on the way changes the logloss.
BOOST_AUTO_TEST_CASE(killed_primary_fails_over_to_its_backup_and_the_job_finishes) {
  Suite& s = suite();
  const double expected =
      embedded_report("rebackup-embedded", "--epochs 6", 1)["test_logloss"].get<double>();
  auto [coord, endpoint] = start_coordinator(
      "failover-coordinator",
      cat(secure("server"),
          {"--shards", "2", "--workers", "1", "--epochs", "6", "--no-cache", "--durability",
           "replicated:2", "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "3000", "--test",
           s.test.string(), "--checkpoint-every", "100", "--report",
           (s.dir / "failover.json").string()}));
  // Checkpoints go on after the failover, the promoted shard's from ps 0's folder.
  const fs::path checkpoints = s.dir / "failover-checkpoints";
  auto ps0 = start_member("failover-ps0", "ps", endpoint,
                          cat(secure("node-0"), {"--checkpoint-dir", checkpoints.string()}));
  ps0->await("the coordinator took my join");
  const std::vector<std::string> ps1_flags =
      cat(secure("node-1"), {"--checkpoint-dir", checkpoints.string() + "-1"});
  auto ps1 = start_member("failover-ps1", "ps", endpoint, ps1_flags);
  const std::string ps1_endpoint = ps1->await("ps listening on (tcp://[0-9.]+:[0-9]+)");
  // The worker slowed (20 ms a step: the results do not change), so that the job outlasts two
  // failovers and a copy: where in the job the crashes land.
  auto w0 = start_member("failover-w0", "worker", endpoint,
                         cat(secure("node-2"), {"--fault-slow-ms", "20"}));
  w0->await("training starts");
  std::this_thread::sleep_for(1s);
  ps1->signal(SIGKILL);
  BOOST_TEST(ps1->wait() == 128 + SIGKILL);
  auto again = start_member("failover-ps1-again", "ps", endpoint,
                            cat(ps1_flags, {"--listen", ps1_endpoint}));
  again->await("holding 2 backups of other members' shards");
  coord->await("shard 0: backup node [0-9]+ on ps member 1 has its copy");
  coord->await("shard 1: backup node [0-9]+ on ps member 1 has its copy");
  BOOST_TEST(ps0->log().find("shard 1: promoted its backup") != std::string::npos, ps0->log());
  ps0->signal(SIGKILL);
  BOOST_TEST(ps0->wait() == 128 + SIGKILL);
  BOOST_TEST(coord->wait() == 0, coord->log());
  BOOST_TEST(coord->log().find("failover: its shards' backups are promoted") != std::string::npos,
             coord->log());
  BOOST_TEST(again->log().find("shard 0: promoted its backup") != std::string::npos, again->log());
  BOOST_TEST(again->log().find("shard 1: promoted its backup") != std::string::npos, again->log());
  for (Child* c : {again.get(), w0.get()}) BOOST_TEST(c->wait() == 0, c->log());
  const auto r = failed_over("failover", 2, 360000, expected,
                             "after a kill, a rejoin to hold backups and a second kill", 0.0);
  BOOST_TEST(r["checkpoints"].get<int>() > 0);
  BOOST_TEST(r["backups_added"].get<int>() == 2);
  // A promoted shard checkpoints beside the other into its new server's folder (before, each
  // into its own ps's): ps 0's for shard 1 after the first failover, the restarted ps's for both
  // after the second.
  bool took_over = false;
  for (const fs::path& folder : {checkpoints, fs::path(checkpoints.string() + "-1")})
    if (fs::exists(folder))
      for (const auto& step : fs::directory_iterator(folder))
        took_over |= fs::exists(step.path() / "shard-1") && fs::exists(step.path() / "shard-0");
  BOOST_TEST(took_over);
  // One ps left at the end: nothing is replicated, nothing compared.
  BOOST_TEST(r["backups_equal"].is_null());
}

// Failover under --durability replicated:3 (issue 14): three ps members, each shard's primary on
// one and its two backups on the others; kill -9 of one mid-job. The coordinator asks the two
// backups of its shard how far each applied, promotes the most advanced, and has the other follow
// it (the new primary first sends it what it may lack), so the shard keeps a backup. The job
// finishes: every sample trained, no acknowledged push missing, the logloss of the uninterrupted
// job within 1%, and every shard's remaining backup holding its primary's rows at the end
// (backups_equal: the promoted shard's too).
BOOST_AUTO_TEST_CASE(under_three_replicas_a_killed_primary_leaves_its_shard_a_backup) {
  const double expected =
      embedded_report("leave-embedded", "--epochs 6")["test_logloss"].get<double>();
  auto c = three_replicas("three", 6, 3000);
  c.ps[1]->signal(SIGKILL);
  BOOST_TEST(c.ps[1]->wait() == 128 + SIGKILL);
  BOOST_TEST(c.coord->wait() == 0, c.coord->log());
  BOOST_TEST(c.coord->log().find("shard 1: forwards its backups applied") != std::string::npos,
             c.coord->log());
  for (Child* m : {c.ps[0].get(), c.ps[2].get(), c.w0.get(), c.w1.get()})
    BOOST_TEST(m->wait() == 0, m->log());
  const std::string promoted = c.ps[0]->log() + c.ps[2]->log();
  BOOST_TEST(promoted.find("shard 1: promoted its backup") != std::string::npos, promoted);
  BOOST_TEST(promoted.find("its backups are nodes") != std::string::npos, promoted);
  const auto r = failed_over("three", 1, 360000, expected, "after a failover under replicated:3");
  BOOST_TEST(r["backups_equal"].get<bool>());
}

// Kill twice under --durability replicated:3: once the first failover is done, a second ps is
// killed. Its shards (its own, and the one it took over) go to the last ps, which holds their
// last backups, and the job still finishes: every sample trained, nothing acknowledged lost, the
// uninterrupted logloss within 1%.
BOOST_AUTO_TEST_CASE(under_three_replicas_two_ps_killed_one_after_the_other_leave_the_job_going) {
  const double expected =
      embedded_report("twice-embedded", "--epochs 10")["test_logloss"].get<double>();
  auto c = three_replicas("twice", 10, 1000);
  c.ps[1]->signal(SIGKILL);
  BOOST_TEST(c.ps[1]->wait() == 128 + SIGKILL);
  const std::string first = c.coord->await("ps member ([0-9]) serves shards 1 now");
  c.ps[first == "2" ? 2 : 0]->signal(SIGKILL);
  Child* last = c.ps[first == "2" ? 0 : 2].get();
  BOOST_TEST(c.coord->wait() == 0, c.coord->log());
  BOOST_TEST(last->wait() == 0, last->log());
  for (Child* m : {c.w0.get(), c.w1.get()}) BOOST_TEST(m->wait() == 0, m->log());
  const auto r =
      failed_over("twice", 2, 600000, expected, "after two failovers under replicated:3");
  BOOST_TEST(r["backups_equal"].is_null());  // one ps left: no backups
}

// Kill two at once under --durability replicated:3: two of the three ps die together, so their
// losses come in one heartbeat check or close together, while the failover of the first lost
// one's shard may still be asking the other's backup how far it applied. The last ps takes both
// shards (each failover goes on without the lost member's answer) and the job finishes: every
// sample trained, nothing acknowledged lost, the uninterrupted logloss within 1%.
BOOST_AUTO_TEST_CASE(under_three_replicas_two_ps_killed_at_once_leave_the_job_going) {
  const double expected =
      embedded_report("leave-embedded", "--epochs 6")["test_logloss"].get<double>();
  auto c = three_replicas("together", 6, 1000);
  c.ps[1]->signal(SIGKILL);
  c.ps[2]->signal(SIGKILL);
  BOOST_TEST(c.ps[1]->wait() == 128 + SIGKILL);
  BOOST_TEST(c.ps[2]->wait() == 128 + SIGKILL);
  BOOST_TEST(c.coord->wait() == 0, c.coord->log());
  for (Child* m : {c.ps[0].get(), c.w0.get(), c.w1.get()}) BOOST_TEST(m->wait() == 0, m->log());
  for (const char* shard : {"shard 1: promoted its backup", "shard 2: promoted its backup"})
    BOOST_TEST(c.ps[0]->log().find(shard) != std::string::npos, c.ps[0]->log());
  failed_over("together", 2, 360000, expected, "after two ps killed at once under replicated:3");
}

// A ps removed mid-job (issue 14): SIGTERM to a ps under --durability replicated:2 while
// training runs. It drains its shards and leaves; the coordinator fails its shard over at once
// (no heartbeat timeout to wait for), the other ps promotes its backup, and the job finishes:
// every sample trained, no acknowledged push missing from the promoted backup, and the logloss
// of the uninterrupted job within 1%.
BOOST_AUTO_TEST_CASE(a_ps_stopped_with_sigterm_hands_its_shard_to_its_backup) {
  Suite& s = suite();
  const double expected =
      embedded_report("leave-embedded", "--epochs 6")["test_logloss"].get<double>();
  auto [coord, endpoint] = start_coordinator(
      "leave-coordinator",
      cat(secure("server"), {"--shards", "2", "--workers", "2", "--epochs", "6", "--no-cache",
                             "--durability", "replicated:2", "--test", s.test.string(), "--report",
                             (s.dir / "leave.json").string()}));
  auto ps0 = start_member("leave-ps0", "ps", endpoint, secure("node-0"));
  ps0->await("the coordinator took my join");
  auto ps1 = start_member("leave-ps1", "ps", endpoint, secure("node-1"));
  auto [w0, w1] = two_workers_a_second_in("leave", endpoint);
  ps1->signal(SIGTERM);
  BOOST_TEST(ps1->wait() == 0, ps1->log());
  BOOST_TEST(ps1->log().find("the coordinator hands them to their backups") != std::string::npos,
             ps1->log());
  BOOST_TEST(coord->wait() == 0, coord->log());
  BOOST_TEST(coord->log().find("left (stopped by SIGTERM); failover") != std::string::npos,
             coord->log());
  BOOST_TEST(coord->log().find("was lost") == std::string::npos, coord->log());
  BOOST_TEST(ps0->log().find("shard 1: promoted its backup") != std::string::npos, ps0->log());
  for (Child* c : {ps0.get(), w0.get(), w1.get()}) BOOST_TEST(c->wait() == 0, c->log());
  failed_over("leave", 1, 360000, expected, "after a ps left");
}

BOOST_AUTO_TEST_CASE(killed_worker_fails_the_job_when_all_are_required) {
  auto [coord, endpoint] = start_coordinator(
      "strict-coordinator",
      {"--insecure", "--shards", "1", "--workers", "2", "--epochs", "30", "--no-cache",
       "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "3000", "--require-all-workers"});
  auto ps = start_member("strict-ps", "ps", endpoint, {"--insecure"});
  auto w0 = start_member("strict-w0", "worker", endpoint, {"--insecure"});
  auto w1 = start_member("strict-w1", "worker", endpoint, {"--insecure"});
  w0->await("training starts");
  w0->signal(SIGKILL);
  BOOST_TEST(coord->wait() == 1);
  BOOST_TEST(coord->log().find("--require-all-workers is set") != std::string::npos, coord->log());
  BOOST_TEST(coord->log().find("WARNING: --insecure") != std::string::npos);
  // The others are told the job failed, and say so.
  BOOST_TEST(ps->wait() == 1, ps->log());
  BOOST_TEST(w1->wait() == 1, w1->log());
  BOOST_TEST(w1->log().find("the coordinator ended the job") != std::string::npos, w1->log());
}

BOOST_AUTO_TEST_CASE(start_up_gives_up_with_a_clear_message) {
  // A member with no coordinator to reach.
  Child lonely(
      {bin(), "ps", "--coordinator", "tcp://127.0.0.1:9", "--insecure", "--join-timeout", "1"},
      suite().dir / "lonely.log");
  BOOST_TEST(lonely.wait() == 1);
  BOOST_TEST(lonely.log().find("no answer from the coordinator at tcp://127.0.0.1:9 within 1 s") !=
                 std::string::npos,
             lonely.log());
  // A coordinator whose members never come.
  auto [coord, endpoint] = start_coordinator(
      "empty-coordinator", {"--insecure", "--shards", "2", "--join-timeout", "1"});
  BOOST_TEST(coord->wait() == 1);
  BOOST_TEST(
      coord->log().find("gave up after 1 s (--join-timeout): 0/2 shards") != std::string::npos,
      coord->log());
  // Ctrl-C while waiting: it stops cleanly.
  Child patient({bin(), "worker", "--coordinator", "tcp://127.0.0.1:9", "--insecure", "--data",
                 suite().data.string()},
                suite().dir / "patient.log");
  patient.await("joining the coordinator");
  patient.signal(SIGINT);
  BOOST_TEST(patient.wait() == 0, patient.log());
  BOOST_TEST(patient.log().find("stopped by a signal before the job started") != std::string::npos,
             patient.log());
  // A loopback listener cannot serve a coordinator on another host.
  Child local({bin(), "ps", "--coordinator", "tcp://10.0.0.1:7100", "--insecure"},
              suite().dir / "local.log");
  BOOST_TEST(local.wait() == 2);
  BOOST_TEST(local.log().find("only this host can reach") != std::string::npos, local.log());
  // Neither keys nor --insecure.
  Child bare({bin(), "worker", "--coordinator", endpoint, "--data", suite().data.string()},
             suite().dir / "bare.log");
  BOOST_TEST(bare.wait() == 2);
  BOOST_TEST(bare.log().find("--insecure") != std::string::npos, bare.log());
}

// (b) Two hosts: network namespaces joined by a veth pair, the coordinator, a ps and a worker on
// one, a ps and a worker on the other. Needs root (CAP_NET_ADMIN); skipped with the reason
// otherwise.
namespace {
struct Netns {
  std::string a = "colony-a-" + std::to_string(::getpid()),
              b = "colony-b-" + std::to_string(::getpid());
  std::string va = "cva" + std::to_string(::getpid() % 100000),
              vb = "cvb" + std::to_string(::getpid() % 100000);
  bool made = false;
  std::string why;
  Netns() {
    const std::string q = " >/dev/null 2>&1";
    if (::geteuid() != 0) {
      why = "not root: cannot create network namespaces";
      return;
    }
    made = run("ip netns add " + a + q) == 0;
    if (!made) {
      why = "`ip netns add` failed (no iproute2 or no CAP_SYS_ADMIN here)";
      return;
    }
    const bool ok = run("ip netns add " + b + q) == 0 &&
                    run("ip link add " + va + " type veth peer name " + vb + q) == 0 &&
                    run("ip link set " + va + " netns " + a + q) == 0 &&
                    run("ip link set " + vb + " netns " + b + q) == 0 &&
                    run("ip -n " + a + " addr add 10.231.0.1/24 dev " + va + q) == 0 &&
                    run("ip -n " + b + " addr add 10.231.0.2/24 dev " + vb + q) == 0 &&
                    run("ip -n " + a + " link set " + va + " up" + q) == 0 &&
                    run("ip -n " + b + " link set " + vb + " up" + q) == 0 &&
                    run("ip -n " + a + " link set lo up" + q) == 0 &&
                    run("ip -n " + b + " link set lo up" + q) == 0;
    if (!ok) why = "could not create the veth pair between the namespaces";
    made = ok;
  }
  ~Netns() {
    run("ip netns del " + a + " >/dev/null 2>&1");
    run("ip netns del " + b + " >/dev/null 2>&1");  // deleting a namespace deletes its veth end
  }
};

struct CanMakeNetns {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    Netns n;
    boost::test_tools::assertion_result r(n.made);
    if (!n.made) {
      r.message() << "skipped: " << n.why;
      std::printf("two_hosts_across_network_namespaces skipped: %s\n", n.why.c_str());
    }
    return r;
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(two_hosts_across_network_namespaces,
                     *boost::unit_test::precondition(CanMakeNetns())) {
  Suite& s = suite();
  Netns n;
  BOOST_REQUIRE_MESSAGE(n.made, n.why);
  const std::vector<std::string> on_a = {"ip", "netns", "exec", n.a},
                                 on_b = {"ip", "netns", "exec", n.b};
  auto [coord, endpoint] = start_coordinator(
      "netns-coordinator",
      cat(secure("server"), {"--shards", "2", "--workers", "2", "--no-cache", "--test",
                             s.test.string(), "--report", (s.dir / "netns.json").string()}),
      "10.231.0.1", on_a);
  auto ps0 = start_member("netns-ps0", "ps", endpoint,
                          cat(secure("node-0"), {"--listen", "tcp://10.231.0.1:*"}), on_a);
  auto w0 = start_member("netns-w0", "worker", endpoint,
                         cat(secure("node-1"), {"--listen", "tcp://10.231.0.1:*"}), on_a);
  auto ps1 = start_member("netns-ps1", "ps", endpoint,
                          cat(secure("node-2"), {"--listen", "tcp://10.231.0.2:*"}), on_b);
  auto w1 = start_member("netns-w1", "worker", endpoint,
                         cat(secure("node-3"), {"--listen", "tcp://10.231.0.2:*"}), on_b);
  BOOST_TEST(coord->wait() == 0, coord->log());
  for (Child* c : {ps0.get(), ps1.get(), w0.get(), w1.get()}) BOOST_TEST(c->wait() == 0, c->log());
  const auto r = report("netns.json");
  BOOST_TEST(r["train_samples"].get<uint64_t>() == 60000u);
  const double logloss = r["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("two hosts " << logloss << " vs embedded " << s.embedded_logloss);
  BOOST_TEST(std::abs(logloss / s.embedded_logloss - 1.0) < small_run_tolerance);
}

// Failover across hosts: the same kill -9 of a replicated:2 primary as
// killed_primary_fails_over_to_its_backup_and_the_job_finishes, with the killed ps and a worker
// on the other network namespace, so the promotion's re-routing crosses the veth pair.
BOOST_AUTO_TEST_CASE(a_primary_on_another_host_fails_over,
                     *boost::unit_test::precondition(CanMakeNetns())) {
  Suite& s = suite();
  Netns n;
  BOOST_REQUIRE_MESSAGE(n.made, n.why);
  const double expected =
      embedded_report("failover-embedded", "--epochs 8")["test_logloss"].get<double>();
  const std::vector<std::string> on_a = {"ip", "netns", "exec", n.a},
                                 on_b = {"ip", "netns", "exec", n.b};
  auto [coord, endpoint] = start_coordinator(
      "netns-failover-coordinator",
      cat(secure("server"),
          {"--shards", "2", "--workers", "2", "--epochs", "8", "--no-cache", "--durability",
           "replicated:2", "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "3000", "--test",
           s.test.string(), "--report", (s.dir / "netns-failover.json").string()}),
      "10.231.0.1", on_a);
  auto ps0 = start_member("netns-failover-ps0", "ps", endpoint,
                          cat(secure("node-0"), {"--listen", "tcp://10.231.0.1:*"}), on_a);
  auto w0 = start_member("netns-failover-w0", "worker", endpoint,
                         cat(secure("node-1"), {"--listen", "tcp://10.231.0.1:*"}), on_a);
  auto ps1 = start_member("netns-failover-ps1", "ps", endpoint,
                          cat(secure("node-2"), {"--listen", "tcp://10.231.0.2:*"}), on_b);
  auto w1 = start_member("netns-failover-w1", "worker", endpoint,
                         cat(secure("node-3"), {"--listen", "tcp://10.231.0.2:*"}), on_b);
  w0->await("training starts");
  std::this_thread::sleep_for(1s);  // where in the job the crash lands, not a timing assertion
  ps1->signal(SIGKILL);
  BOOST_TEST(ps1->wait() == 128 + SIGKILL);
  BOOST_TEST(coord->wait() == 0, coord->log());
  for (Child* c : {ps0.get(), w0.get(), w1.get()}) BOOST_TEST(c->wait() == 0, c->log());
  failed_over("netns-failover", 1, 480000, expected, "failed over across hosts");
}

BOOST_AUTO_TEST_SUITE_END()

// Issue 11: a listed key lies. A process holding worker-0's key (a member of the job) and one
// holding the coordinator's send well-formed messages that speak for others, name nodes that do
// not exist or come from the wrong role. Every target keeps running, nothing is applied (the job
// ends at the uninterrupted run's logloss), every lie is counted in the report's bad_messages,
// and a hundred refused joins leave the coordinator's threads and descriptors where they were.
namespace {

std::vector<std::string> role_key(const std::string& key) {
  return {"--keys", suite().role_keys.string(), "--key", key};
}

// A client of `endpoint`, the process holding key `server`, with key pair `name` of the
// role-key directory.
std::unique_ptr<colony::ZmqClient> liar(const std::string& endpoint, const std::string& server,
                                        const std::string& name) {
  colony::ZmqClientOptions o;
  o.endpoint = endpoint;
  o.curve =
      colony::ZmqClientCurve{colony::read_key_pair(suite().role_keys.string(), name).value(),
                             colony::read_public_key(suite().role_keys.string(), server).value()};
  return std::move(colony::ZmqClient::open(o).value());
}

void send_ps(colony::ZmqClient& c, const colony::PsMessage& m, colony::NodeId to) {
  BOOST_REQUIRE(c.send(colony::encode_ps_message(m, 1, to).value()).ok());
}
void send_control(colony::ZmqClient& c, colony::ControlMessage m) {
  BOOST_REQUIRE(c.send(colony::encode_control_message(m, 1).value()).ok());
}

size_t entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}));
}

}  // namespace

BOOST_AUTO_TEST_CASE(lies_from_listed_keys_are_dropped_and_counted) {
  using namespace colony;
  Suite& s = suite();
  const double expected =
      embedded_report("lies-embedded", "--epochs 10")["test_logloss"].get<double>();
  auto [coord, endpoint] = start_coordinator(
      "lies-coordinator",
      cat(role_key("server"),
          {"--shards", "2", "--workers", "2", "--epochs", "10", "--no-cache", "--test",
           s.test.string(), "--report", (s.dir / "lies.json").string(), "--metrics-port", "0"}));
  auto ps0 =
      start_member("lies-ps0", "ps", endpoint, cat(role_key("ps-0"), {"--metrics-port", "0"}));
  auto ps1 = start_member("lies-ps1", "ps", endpoint, role_key("ps-1"));
  auto w0 = start_member("lies-w0", "worker", endpoint,
                         cat(role_key("worker-0"), {"--metrics-port", "0"}));
  auto w1 = start_member("lies-w1", "worker", endpoint, role_key("worker-1"));
  const std::string ps0_endpoint = ps0->await("ps listening on (tcp://[0-9.]+:[0-9]+)");
  const std::string w1_endpoint = w1->await("worker listening on (tcp://[0-9.]+:[0-9]+)");
  const NodeId shard0 = NodeId(std::stoul(ps0->await("built my cores \\(nodes ([0-9]+)")));
  const NodeId w0_node = NodeId(std::stoul(w0->await("built my cores \\(nodes ([0-9]+)")));
  const NodeId w1_node = NodeId(std::stoul(w1->await("built my cores \\(nodes ([0-9]+)")));
  w0->await("training starts");
  w1->await("training starts");

  // With worker-0's key (a member): to ps-0, a ClockAdvance in worker-1's name far ahead (applied,
  // it would make worker-1's pushes look like duplicates), a pull naming a sender that does not
  // exist, and a reply (only clients take replies).
  auto as_w0_to_ps = liar(ps0_endpoint, "ps-0", "worker-0");
  send_ps(*as_w0_to_ps, ClockAdvance{{w1_node, 1, 0}, 5, false}, shard0);
  send_ps(*as_w0_to_ps, PullRequest{{1'000'000, 2, 0}, 0, 1'000'000, {1, 2, 3}}, shard0);
  send_ps(*as_w0_to_ps, PullRequest{{w0_node, 3, 0}, 0, w1_node, {1, 2, 3}},
          shard0);  // another's writer
  send_ps(*as_w0_to_ps, PullReply{{w0_node, 4, 0}, 0, {}}, shard0);
  // Every daemon serves /metrics in the text format: the coordinator its members, a worker its
  // requests' latencies.
  auto scrape = [](Child& c) {
    const int port = std::stoi(c.await("metrics: http://127\\.0\\.0\\.1:(\\d+)/metrics"));
    auto res = httplib::Client("127.0.0.1", port).Get("/metrics");
    BOOST_REQUIRE_MESSAGE(res && res->status == 200, "no /metrics; the log:\n" << c.log());
    auto parsed = colony::test::parse_prom_text(res->body);
    BOOST_REQUIRE_MESSAGE(parsed.error.empty(), parsed.error);
    return parsed;
  };
  std::set<std::string> families;  // every metric family the three daemons serve
  auto note_families = [&families](const colony::test::PromText& t) {
    for (const auto& [name, type] : t.types) families.insert(name);
  };
  const auto coord_metrics = scrape(*coord);
  note_families(coord_metrics);
  BOOST_TEST(coord_metrics.value("colony_cluster_members") == 4);
  {  // and the coordinator its dashboard
    const int port = std::stoi(coord->await("dashboard: http://127\\.0\\.0\\.1:(\\d+)/"));
    auto page = httplib::Client("127.0.0.1", port).Get("/");
    BOOST_REQUIRE(page);
    BOOST_TEST(page->status == 200);
    BOOST_TEST(page->body.find("<title>Colony job</title>") != std::string::npos);
  }
  double pulls_timed = 0;  // training has started; the first replies may still be on their way
  for (auto deadline = std::chrono::steady_clock::now() + wait_bound;
       !(pulls_timed > 0) && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(20ms)) {
    const auto w0_metrics = scrape(*w0);
    note_families(w0_metrics);
    pulls_timed = w0_metrics.value("colony_pull_seconds_count");
  }
  BOOST_TEST(pulls_timed > 0);
  // ps-0's /metrics counts the lies its bridge dropped under the key that sent them.
  {
    const int port = std::stoi(ps0->await("metrics: http://127\\.0\\.0\\.1:(\\d+)/metrics"));
    const std::string w0_key = read_public_key(s.role_keys.string(), "worker-0").value();
    double counted = 0;
    const auto deadline = std::chrono::steady_clock::now() + wait_bound;
    while (counted < 4 && std::chrono::steady_clock::now() < deadline) {
      httplib::Client client("127.0.0.1", port);
      auto res = client.Get("/metrics");
      BOOST_REQUIRE_MESSAGE(res && res->status == 200, "ps-0 stopped serving; its log:\n"
                                                           << ps0->log());
      const auto parsed = colony::test::parse_prom_text(res->body);
      note_families(parsed);
      BOOST_REQUIRE_MESSAGE(parsed.error.empty(), parsed.error);
      counted = parsed.value("colony_bad_messages_total", {{"peer", w0_key}});
      if (std::isnan(counted)) counted = 0;
      std::this_thread::sleep_for(20ms);
    }
    BOOST_TEST_MESSAGE("ps-0's bridge dropped " << counted << " messages from worker-0's key");
    BOOST_TEST(counted == 4);  // all four, under the key that sent them
  }
  // The Grafana dashboard in docs/ asks only for metrics that the daemons serve.
  const std::string grafana = slurp(fs::path(COLONY_SOURCE_DIR) / "docs/grafana-dashboard.json");
  const std::regex metric_name("\\b((colony|process)_[a-z_]+)");
  size_t asked = 0;
  for (std::sregex_iterator it(grafana.begin(), grafana.end(), metric_name), end; it != end; ++it) {
    std::string name = (*it)[1].str();
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (name.size() > std::strlen(suffix) &&
          name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0 &&
          families.count(name.substr(0, name.size() - std::strlen(suffix))))
        name = name.substr(0, name.size() - std::strlen(suffix));
    BOOST_TEST(families.count(name) == 1u, "the Grafana dashboard asks for " << name);
    ++asked;
  }
  BOOST_TEST(asked >= 14u);
  // To worker-1: control messages from a key that is not the coordinator's (a Welcome whose
  // ids are far out of range, a ShardsRestarted, a Shutdown).
  auto as_w0_to_w1 = liar(w1_endpoint, "worker-1", "worker-0");
  Welcome forged;
  forged.you = 0;
  MemberInfo big;
  big.role = MemberRole::worker;
  big.first_node = 4'000'000'000u;
  big.count = 4096;
  forged.members = {big};
  forged.workers_total = 4096;
  forged.coordinator_node = 4'000'004'096u;
  send_control(*as_w0_to_w1, {control_from_coordinator, forged});
  send_control(*as_w0_to_w1, {control_from_coordinator, ShardsRestarted{{0, 1}}});
  send_control(*as_w0_to_w1, {control_from_coordinator, Shutdown{"lie"}});
  // With the coordinator's own key: a ShardsRestarted for shards that are not durable, and a
  // layout while training (a member checks what even the coordinator says).
  auto as_coordinator = liar(w1_endpoint, "worker-1", "server");
  send_control(*as_coordinator, {control_from_coordinator, ShardsRestarted{{0, 1}}});
  send_control(*as_coordinator, {control_from_coordinator, forged});
  // To the coordinator, with worker-0's key: a heartbeat in another member's name, and a hundred
  // joins as a ps (its key is a worker's).
  auto as_w0_to_coord = liar(endpoint, "server", "worker-0");
  send_control(*as_w0_to_coord, {99, Heartbeat{1'000'000'000}});
  // And heartbeats whose load cannot be a worker member's of one replica: rows served by a
  // shard, and busy times for three replicas. Sent in every member's name, so one of each goes
  // with the right index and key (and is dropped for its load); the others for their key.
  for (uint32_t member = 0; member < 4; ++member) {
    send_control(*as_w0_to_coord,
                 {member, Heartbeat{0, MemberLoad{1, 0, {1}, {1}, {1'000'000'000'000}}}});
    send_control(*as_w0_to_coord, {member, Heartbeat{0, MemberLoad{1, 0, {1, 2, 3}, {1, 2, 3}}}});
  }
  const fs::path proc = "/proc/" + std::to_string(coord->pid());
  const size_t threads_before = entries(proc / "task"), fds_before = entries(proc / "fd");
  const std::string w0_public = read_public_key(s.role_keys.string(), "worker-0").value();
  for (int i = 0; i < 100; ++i) {
    MemberInfo m;
    m.role = MemberRole::ps;
    m.endpoint = "tcp://127.0.0.1:" + std::to_string(20000 + i);
    m.public_key = w0_public;
    m.incarnation = 1;
    send_control(*as_w0_to_coord, {control_from_unknown, Join{m}});
  }
  coord->await("refused a ps joining from tcp://127.0.0.1:20099: its key is a worker key");
  // Not a timing assertion: the refusals' links close in the background; the bound holds once
  // they have, which the loop waits for (up to the suite's wait bound).
  const size_t thread_bound = threads_before + 2, fd_bound = fds_before + 8;
  const auto deadline = std::chrono::steady_clock::now() + wait_bound;
  while ((entries(proc / "task") > thread_bound || entries(proc / "fd") > fd_bound) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  BOOST_TEST(entries(proc / "task") <= thread_bound);
  BOOST_TEST(entries(proc / "fd") <= fd_bound);

  BOOST_TEST(coord->wait() == 0, coord->log());
  for (Child* c : {ps0.get(), ps1.get(), w0.get(), w1.get()}) BOOST_TEST(c->wait() == 0, c->log());
  const auto r = report("lies.json");
  BOOST_TEST(r["train_samples"].get<uint64_t>() == 600000u);
  // 4 at ps-0, 5 at worker-1, 1 + 8 + 100 at the coordinator.
  BOOST_TEST(r["bad_messages"].get<uint64_t>() == 118u, r.dump());
  BOOST_TEST(r["ps_summaries"].get<uint32_t>() == 2u);
  const double logloss = r["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("lied to " << logloss << " vs embedded " << expected << ", bad messages "
                                << r["bad_messages"].get<uint64_t>());
  BOOST_TEST(std::abs(logloss / expected - 1.0) < small_run_tolerance);
  BOOST_TEST(ps0->log().find("dropped a bad message") != std::string::npos, ps0->log());
  BOOST_TEST(w1->log().find("dropped a") != std::string::npos, w1->log());
}

namespace {

// What restart_ps_mid_job saw.
struct Restarted {
  std::string coordinator_log, stopped_log;  // the coordinator's, and the stopped ps's
  nlohmann::json report;
  double expected = 0;  // the embedded cluster's logloss on the same data and epochs
};

// A job of 2 ps members over RocksDB and 2 worker members (role keys), 4 epochs: 1 s into
// training ps-1 gets `sig` and exits with `exit_code`; once the coordinator's log matches `then`
// (or 2 s later, a supervisor's gap, without one), it is started again with the same flags. Checks
// that every process ends with 0, the job trained every sample and the coordinator resumed the ps's
// shards.
Restarted restart_ps_mid_job(const std::string& name, int sig, int exit_code,
                             const std::optional<std::string>& then) {
  Suite& s = suite();
  Restarted out;
  out.expected = embedded_report("restart-embedded", "--epochs 4")["test_logloss"].get<double>();
  const std::string report_path = (s.dir / (name + ".json")).string();
  auto [coord, endpoint] = start_coordinator(
      name + "-coordinator",
      cat(role_key("server"), {"--shards", "2", "--workers", "2", "--epochs", "4", "--no-cache",
                               "--test", s.test.string(), "--report", report_path}));
  const std::string store1 = "rocksdb:" + (s.dir / (name + "-store-1")).string();
  auto ps0 = start_member(
      name + "-ps0", "ps", endpoint,
      cat(role_key("ps-0"), {"--store", "rocksdb:" + (s.dir / (name + "-store-0")).string()}));
  auto ps1 =
      start_member(name + "-ps1", "ps", endpoint, cat(role_key("ps-1"), {"--store", store1}));
  const std::string ps1_endpoint = ps1->await("ps listening on (tcp://[0-9.]+:[0-9]+)");
  auto w0 = start_member(name + "-w0", "worker", endpoint, role_key("worker-0"));
  auto w1 = start_member(name + "-w1", "worker", endpoint, role_key("worker-1"));
  w0->await("training starts");
  w1->await("training starts");
  std::this_thread::sleep_for(1s);  // where in the job the stop lands, not a timing assertion
  ps1->signal(sig);
  BOOST_TEST(ps1->wait() == exit_code, ps1->log());
  out.stopped_log = ps1->log();
  if (then)
    coord->await(*then);
  else
    std::this_thread::sleep_for(2s);
  auto again = start_member(name + "-ps1-again", "ps", endpoint,
                            cat(role_key("ps-1"), {"--store", store1, "--listen", ps1_endpoint}));
  BOOST_TEST(coord->wait() == 0, coord->log());
  out.coordinator_log = coord->log();
  BOOST_TEST(out.coordinator_log.find("has resumed shards") != std::string::npos,
             out.coordinator_log);
  for (Child* c : {ps0.get(), again.get(), w0.get(), w1.get()})
    BOOST_TEST(c->wait() == 0, c->log());
  out.report = report(name + ".json");
  BOOST_TEST(out.report["ps_restarts"].get<int>() == 1);
  BOOST_TEST(out.report["train_samples"].get<uint64_t>() == 240000u);
  return out;
}

}  // namespace

// A ps killed with -9 and started again 2 s later with the same flags (what systemd does), well
// within the heartbeat timeout: the coordinator knows the new incarnation at once, the ps
// resumes from its store, and the job ends within 1% of the uninterrupted run's logloss.
BOOST_AUTO_TEST_CASE(a_ps_restarted_at_once_is_recognised_and_resumes) {
  const Restarted r = restart_ps_mid_job("again", SIGKILL, 128 + SIGKILL, std::nullopt);
  BOOST_TEST(r.coordinator_log.find("it restarted (a new incarnation joined)") != std::string::npos,
             r.coordinator_log);
  const double logloss = r.report["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("ps restarted at once: " << logloss << " vs embedded " << r.expected);
  BOOST_TEST(std::abs(logloss / r.expected - 1.0) < 0.01);
}

// A ps over RocksDB stopped with SIGTERM mid-job and started again with the same flags (a
// supervisor's restart, a rolling upgrade): it drains and leaves (exit 0), the coordinator waits
// for it as for a crashed one, it resumes from its store, and the job loses nothing acknowledged
// and ends within 1% of the uninterrupted run's logloss. It used to end the job.
BOOST_AUTO_TEST_CASE(a_durable_ps_stopped_with_sigterm_and_started_again_resumes) {
  const Restarted r = restart_ps_mid_job(
      "term", SIGTERM, 0, "left \\(stopped by SIGTERM\\); its rows are on disk: waiting");
  BOOST_TEST(
      r.stopped_log.find("the coordinator waits up to its --join-timeout") != std::string::npos,
      r.stopped_log);
  BOOST_TEST(r.report["pushes_lost"].get<uint64_t>() == 0u);
  BOOST_TEST(r.report["bad_messages"].get<uint64_t>() == 0u);
  const double logloss = r.report["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("ps stopped and started again: " << logloss << " vs embedded " << r.expected);
  BOOST_TEST(std::abs(logloss / r.expected - 1.0) < 0.01);
}

// Issue 11: the coordinator takes the job flags of `colony train` (admission, eviction,
// checkpoints) across real daemons, and its report has every key train's has.
BOOST_AUTO_TEST_CASE(coordinator_takes_trains_job_flags_and_writes_its_report_keys) {
  Suite& s = suite();
  const std::vector<std::string> job = {"--epochs",      "2",  "--admit-after",      "2",
                                        "--evict-after", "40", "--checkpoint-every", "25"};
  std::string flags;
  for (const auto& f : job) flags += " " + f;
  const auto train = embedded_report(
      "flags-embedded", "--store rocksdb:" + (s.dir / "flags-embedded-store").string() + flags);
  auto [coord, endpoint] = start_coordinator(
      "flags-coordinator", cat(cat(role_key("server"), job),
                               {"--shards", "2", "--workers", "2", "--no-cache", "--test",
                                s.test.string(), "--report", (s.dir / "flags.json").string()}));
  const std::string checkpoints = (s.dir / "flags-checkpoints").string();
  auto ps0 =
      start_member("flags-ps0", "ps", endpoint,
                   cat(role_key("ps-0"), {"--store", "rocksdb:" + (s.dir / "flags-store").string(),
                                          "--checkpoint-dir", checkpoints}));
  auto ps1 = start_member("flags-ps1", "ps", endpoint,
                          cat(role_key("ps-1"), {"--checkpoint-dir", checkpoints}));
  auto w0 = start_member("flags-w0", "worker", endpoint, role_key("worker-0"));
  auto w1 = start_member("flags-w1", "worker", endpoint, role_key("worker-1"));
  BOOST_TEST(coord->wait() == 0, coord->log());
  for (Child* c : {ps0.get(), ps1.get(), w0.get(), w1.get()}) BOOST_TEST(c->wait() == 0, c->log());
  const auto r = report("flags.json");
  // `device` and `compute_threads` are each worker member's own flags (colony worker --device,
  // --compute-threads), not the coordinator's.
  for (const auto& [key, value] : train.items())
    BOOST_TEST((r.contains(key) || key == "device" || key == "compute_threads"),
               "the coordinator's report lacks " << key);
  for (const char* own :
       {"workers_lost", "ps_restarts", "members", "bad_messages", "refused_peers"})
    BOOST_TEST(r.contains(own), own);
  BOOST_TEST(r["admit_after"].get<int>() == 2);
  BOOST_TEST(r["evict_after"].get<int>() == 40);
  BOOST_TEST(r["rows_not_admitted"].get<uint64_t>() > 0u);
  BOOST_TEST(r["rows_evicted"].get<uint64_t>() > 0u);
  BOOST_TEST(train["rows_evicted"].get<uint64_t>() > 0u);
  // 60k rows, 2 epochs, batch 512, 2 replicas: 118 steps each, so checkpoints at 25, 50, 75, 100.
  BOOST_TEST(r["checkpoints"].get<int>() == train["checkpoints"].get<int>());
  BOOST_TEST(r["checkpoints"].get<int>() >= 1);
  BOOST_TEST(r["store"].get<std::string>().find("rocksdb:") != std::string::npos);
  // Both ps wrote into one folder here: each step is a complete checkpoint, that verifies.
  const std::string last =
      checkpoints + "/step-" + std::to_string(25 * r["checkpoints"].get<int>());
  BOOST_TEST(run(bin() + " checkpoint verify " + last + " > " + (s.dir / "verify.log").string() +
                 " 2>&1") == 0,
             slurp(s.dir / "verify.log"));
  const double logloss = r["test_logloss"].get<double>(),
               expected = train["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("flags: daemons " << logloss << " vs embedded " << expected << ", "
                                       << r["checkpoints"] << " checkpoints, "
                                       << r["rows_not_admitted"] << " rows not admitted");
  BOOST_TEST(std::abs(logloss / expected - 1.0) < small_run_tolerance);
}

// Issue 15: --on-nan skip over the daemons: a diverging model's steps are skipped by the worker
// members, each logged and counted, and the job ends well with the count in its report.
BOOST_AUTO_TEST_CASE(the_daemons_skip_steps_with_a_gradient_not_finite_under_on_nan_skip) {
  Suite& s = suite();
  auto [coord, endpoint] = start_coordinator(
      "nan-coordinator",
      cat(role_key("server"),
          {"--shards", "1", "--workers", "1", "--no-cache", "--optimizer", "sgd", "--lr", "1e38",
           "--on-nan", "skip", "--report", (s.dir / "nan.json").string()}));
  auto ps0 = start_member("nan-ps0", "ps", endpoint, role_key("ps-0"));
  auto w0 = start_member("nan-w0", "worker", endpoint, role_key("worker-0"));
  BOOST_TEST(coord->wait() == 0, coord->log());
  for (Child* c : {ps0.get(), w0.get()}) BOOST_TEST(c->wait() == 0, c->log());
  const auto r = report("nan.json");
  BOOST_TEST(r["on_nan"].get<std::string>() == "skip");
  BOOST_TEST(r["steps_skipped"].get<uint64_t>() > 0u, r.dump());
  BOOST_TEST(std::regex_search(w0->log(), std::regex("warning: worker [0-9]+: step [0-9]+ made a "
                                                     "gradient of (-?nan|-?inf) for key [0-9]+: "
                                                     "skipped")),
             w0->log());
}

// Issue 15's load alerts over daemons: the members' heartbeats carry their load, and the
// coordinator names a worker slowed by a flag (straggler), a ps leaking by a flag (leak
// suspect) and the shard a skewed key stream lands on (hot shard): each logged, counted in its
// colony_alerts_total{kind} and listed in the report, and nobody else is named. The members'
// loads are all taken (no bad messages). The job would train for long; once the alerts are in,
// a SIGTERM ends it (the report is still written).
BOOST_AUTO_TEST_CASE(the_coordinator_names_a_straggler_a_leaking_member_and_a_hot_shard) {
  Suite& s = suite();
  const fs::path skewed = s.dir / "skewed.libsvm";
  {
    std::ofstream out(skewed);
    out << colony::test::skewed_libsvm(2, 20000);
  }
  auto [coord, endpoint] = start_coordinator(
      "alerts-coordinator",
      cat(role_key("server"), {"--shards", "2", "--workers", "2", "--epochs", "1000", "--no-cache",
                               "--heartbeat-ms", "200", "--alert-window", "4", "--metrics-port",
                               "0", "--report", (s.dir / "alerts.json").string()}));
  auto ps0 = start_member("alerts-ps0", "ps", endpoint, role_key("ps-0"));
  auto ps1 = start_member("alerts-ps1", "ps", endpoint,
                          cat(role_key("ps-1"), {"--fault-leak-mb", "1024"}));
  auto w0 = start_member("alerts-w0", "worker", endpoint, role_key("worker-0"), {}, skewed);
  auto w1 = start_member("alerts-w1", "worker", endpoint,
                         cat(role_key("worker-1"), {"--fault-slow-ms", "20"}), {}, skewed);
  const int port = std::stoi(coord->await("metrics: http://127\\.0\\.0\\.1:(\\d+)/metrics"));
  const std::string ps1_endpoint = ps1->await("ps listening on (tcp://[0-9.]+:[0-9]+)");
  const std::string w1_node = w1->await("built my cores \\(nodes ([0-9]+)");
  const std::string straggler = coord->await(
      "warning: alert straggler: (worker node [0-9]+ \\(member [0-9]+\\)) took [0-9.]+ ms a step");
  BOOST_TEST(straggler.find("worker node " + w1_node + " ") == 0u, straggler);
  const std::string leaker = coord->await(
      "warning: alert leak_suspect: (ps member [0-9]+ \\(tcp://[0-9.:]+\\)): resident memory grew");
  BOOST_TEST(leaker.find(ps1_endpoint) != std::string::npos, leaker);
  coord->await("warning: alert hot_shard: shard 0 served [0-9]+ rows");
  // Counted where the dashboard reads its alerts. The hot keys are read once the listings have
  // settled: a shard's first sampled pulls count every key alike, and the bias row can tie out
  // of the listing until the next ones (seen once in ten runs beside two busy loops), so the
  // metrics are scraped until shard 1's listing names it, for a minute at most.
  colony::test::PromText metrics;
  auto bias_listed = [&metrics] {
    for (const auto& sample : metrics.samples)
      if (sample.name == "colony_cluster_hot_key_pulls" && sample.labels.at("shard") == "1" &&
          std::stoull(sample.labels.at("key")) == colony::bias_key)
        return true;
    return false;
  };
  for (int tries = 0; tries < 240 && (tries == 0 || !bias_listed()); ++tries) {
    if (tries) std::this_thread::sleep_for(std::chrono::milliseconds(250));
    auto res = httplib::Client("127.0.0.1", port).Get("/metrics");
    BOOST_REQUIRE_MESSAGE(res && res->status == 200, "no /metrics; the log:\n" << coord->log());
    metrics = colony::test::parse_prom_text(res->body);
    BOOST_REQUIRE_MESSAGE(metrics.error.empty(), metrics.error);
  }
  for (const char* kind : {"straggler", "leak_suspect", "hot_shard"})
    BOOST_TEST(metrics.value("colony_alerts_total", {{"kind", kind}}) >= 1, kind);
  // The shards' load as the heartbeats report it, which the coordinator's dashboard maps.
  const double served0 = metrics.value("colony_cluster_shard_rows_served_total", {{"shard", "0"}}),
               served1 = metrics.value("colony_cluster_shard_rows_served_total", {{"shard", "1"}});
  BOOST_TEST(served1 > 0);
  BOOST_TEST(served0 > 4 * served1);
  for (const char* shard : {"0", "1"})
    BOOST_TEST(metrics.value("colony_cluster_shard_rows_pulled_total", {{"shard", shard}}) <=
               metrics.value("colony_cluster_shard_rows_served_total", {{"shard", shard}}));
  // The workers' reads and requests and the shards' hot keys, as the heartbeats report them,
  // each under the shard that holds it. The bias row is in every batch, so no key is pulled more
  // (the sketch never counts low, and shard 1's 2,000 keys are too few to collide much): it leads
  // shard 1 (where the default --seed 1 places it), and shard 0 lists the stream's keys. (Across
  // shards the counts do not order: shard 0's 200,000 keys collide in the sketch, and early in
  // the job its estimates can reach the bias row's.)
  for (const char* h : {"colony_cluster_read_staleness_steps_count",
                        "colony_cluster_pull_seconds_count", "colony_cluster_push_seconds_count"})
    BOOST_TEST(metrics.value(h) > 0, h);
  std::map<std::string, std::map<uint64_t, double>> hot;  // shard -> key -> estimated pulls
  for (const auto& sample : metrics.samples)
    if (sample.name == "colony_cluster_hot_key_pulls")
      hot[sample.labels.at("shard")][std::stoull(sample.labels.at("key"))] = sample.value;
  BOOST_TEST(hot.size() == 2u);
  BOOST_TEST(hot["0"].size() == colony::monitor::hot_keys_listed);
  BOOST_TEST(!hot["0"].contains(colony::bias_key));
  BOOST_REQUIRE(hot["1"].contains(colony::bias_key));
  for (const auto& [key, pulls] : hot["1"])
    BOOST_TEST(pulls <= hot["1"][colony::bias_key], "shard 1 key " << key);
  // Its dashboard, in headless Chromium: one cell of the load map per shard, the alerts listed,
  // no script error and nothing on the console.
  const int page = std::stoi(coord->await("dashboard: http://127\\.0\\.0\\.1:(\\d+)/"));
  std::string console;
  const std::string dom = colony::testing::chromium(
      s.dir, "http://127.0.0.1:" + std::to_string(page) + "/?interval=250", "--dump-dom", console);
  BOOST_TEST_INFO("the page as Chromium left it:\n" << dom);
  BOOST_TEST(colony::testing::attribute(dom, "loadmap", "data-cells") == "2");
  BOOST_TEST(std::stoi("0" + colony::testing::attribute(dom, "alerts", "data-count")) >= 3);
  // Staleness, latency and hot keys, from the members' heartbeats.
  BOOST_TEST(std::stod("0" + colony::testing::attribute(dom, "staleness", "data-reads")) > 0);
  BOOST_TEST(std::stod("0" + colony::testing::attribute(dom, "latency", "data-pulls")) > 0);
  BOOST_TEST(std::stod("0" + colony::testing::attribute(dom, "latency", "data-pushes")) > 0);
  BOOST_TEST(std::stoi("0" + colony::testing::attribute(dom, "hotkeys", "data-rows")) > 0);
  BOOST_TEST(std::regex_search(dom, std::regex("<body[^>]*data-errors=\"0\"")));
  BOOST_TEST(console.find(":CONSOLE") == std::string::npos, console);
  coord->signal(SIGTERM);
  BOOST_TEST(coord->wait() == 0, coord->log());
  for (Child* c : {ps0.get(), ps1.get(), w0.get(), w1.get()}) c->wait();
  const auto r = report("alerts.json");
  BOOST_TEST_MESSAGE("the coordinator's alerts: " << r["alerts"].dump(1));
  BOOST_TEST(r["stopped_by_signal"].get<bool>());
  BOOST_TEST(r["bad_messages"].get<uint64_t>() == 0u, r.dump());
  std::map<std::string, std::set<std::string>> named;  // kind -> subjects
  for (const auto& a : r["alerts"]) named[a["kind"].get<std::string>()].insert(a["subject"]);
  BOOST_TEST(named["straggler"] == std::set<std::string>{straggler}, r["alerts"].dump());
  BOOST_TEST(named["leak_suspect"] == std::set<std::string>{leaker}, r["alerts"].dump());
  BOOST_TEST(named["hot_shard"] == std::set<std::string>{"shard 0"}, r["alerts"].dump());
  BOOST_TEST(named.size() == 3u, r["alerts"].dump());
}

// Issue 14: a tiered ps store (rows in memory over RocksDB) holds every row once the job has
// ended: each ps writes its cached rows back before it exits, as colony train does. The cache
// here holds every row, so before the fix the store on disk was empty. The job runs with
// --wire-format bf16: its rows and gradients cross the processes in two bytes a value, and it
// scores as the embedded cluster does in fp32. And with --part-bytes 1024 (issue 16): every pull
// and push of more than 39 rows (26 bytes each in bf16) travels in parts, the tiered stores take
// each push's parts in one batch, and the test set's evaluation pulls in parts too.
BOOST_AUTO_TEST_CASE(a_tiered_ps_store_holds_every_row_after_the_job) {
  Suite& s = suite();
  auto [coord, endpoint] = start_coordinator(
      "tiered-coordinator",
      cat(role_key("server"),
          {"--shards", "2", "--workers", "2", "--no-cache", "--wire-format", "bf16", "--part-bytes",
           "1024", "--test", s.test.string(), "--report", (s.dir / "tiered.json").string()}));
  const fs::path store = s.dir / "tiered-store";
  std::vector<std::unique_ptr<Child>> members;
  for (const char* ps : {"ps-0", "ps-1"})
    members.push_back(start_member(
        std::string("tiered-") + ps, "ps", endpoint,
        cat(role_key(ps), {"--store", "rocksdb:" + store.string(), "--cache-bytes", "500000000"})));
  for (const char* w : {"worker-0", "worker-1"})
    members.push_back(start_member(std::string("tiered-") + w, "worker", endpoint, role_key(w)));
  BOOST_TEST(coord->wait() == 0, coord->log());
  for (auto& c : members) BOOST_TEST(c->wait() == 0, c->log());
  const fs::path log = s.dir / "tiered-export.log";
  BOOST_REQUIRE_MESSAGE(
      run(bin() + " export --store " + store.string() + " --value-floats 9 --out " +
          (s.dir / "tiered.rows").string() + " > " + log.string() + " 2>&1") == 0,
      slurp(log));
  std::smatch m;
  const std::string text = slurp(log);
  BOOST_REQUIRE(std::regex_search(text, m, std::regex("exported ([0-9]+) rows")));
  const uint64_t exported = std::stoull(m[1]);
  // The rows trained (the shards' count when training ended), and no more: the test set's
  // evaluation, which pulls through the shards afterwards, only reads (it used to give every key
  // only the test set has an initial row).
  const auto r = report("tiered.json");
  BOOST_TEST(r["wire_format"].get<std::string>() == "bf16");
  BOOST_TEST(r["part_bytes"].get<uint64_t>() == 1024u);
  // The members' pull bytes reach the report (MemberDone): bf16 rows of 9 values and 8-byte keys.
  const double pulled = r["pull_bytes_per_sample"].get<double>();
  BOOST_TEST(pulled > 0);
  BOOST_TEST(
      r["wire_bytes_per_sample"].get<double>() == pulled + r["push_bytes_per_sample"].get<double>(),
      boost::test_tools::tolerance(1e-9));
  BOOST_TEST(r["bad_messages"].get<uint64_t>() == 0u);
  BOOST_TEST(std::abs(r["test_logloss"].get<double>() / s.embedded_logloss - 1.0) <
             small_run_tolerance);
  const uint64_t trained = r["table_rows"].get<uint64_t>();
  BOOST_TEST_MESSAGE("tiered ps stores: " << trained << " rows trained, " << exported
                                          << " exported");
  BOOST_TEST(trained == s.embedded_table_rows);
  BOOST_TEST(exported == trained);
}

// Issue 14: under --durability log a tiered ps (rows dirty in a cache far smaller than the table,
// over RocksDB) appends every push to its push log before acknowledging it. kill -9 of that ps
// mid-job, then the same ps started again: it replays its log, reports no acknowledged step
// missing (pushes_lost), the worker's re-sent pushes are recognised as duplicates, and one BSP
// worker ends with exactly the logloss of the same job uninterrupted: nothing lost, nothing
// applied twice. (Under --durability none the same kill loses the steps since the last
// write-back: pushes_lost counts them.) The worker hints its next 2 batches to the shards
// (--read-ahead-batches): the hints cross the wire, pass the layout's checks (no bad message),
// are dropped while the restarted shards resync, and change nothing.
BOOST_AUTO_TEST_CASE(a_tiered_ps_killed_mid_job_under_durability_log_loses_no_acknowledged_push) {
  Suite& s = suite();
  auto job = [&](const std::string& name, bool kill) {
    auto [coord, endpoint] = start_coordinator(
        name + "-coordinator",
        cat(role_key("server"), {"--shards", "2", "--workers", "1", "--epochs", "4", "--durability",
                                 "log", "--no-cache", "--read-ahead-batches", "2", "--heartbeat-ms",
                                 "200", "--heartbeat-timeout-ms", "3000", "--test", s.test.string(),
                                 "--report", (s.dir / (name + ".json")).string()}));
    // With read-ahead and LRU: rows read on the store's thread must change nothing either.
    const std::vector<std::string> ps_flags = {"--shards",
                                               "2",
                                               "--store",
                                               "rocksdb:" + (s.dir / (name + "-store")).string(),
                                               "--cache-bytes",
                                               "2000000",
                                               "--read-ahead",
                                               "--eviction",
                                               "lru"};
    auto ps = start_member(name + "-ps", "ps", endpoint, cat(role_key("ps-0"), ps_flags));
    const std::string ps_endpoint = ps->await("ps listening on (tcp://[0-9.]+:[0-9]+)");
    auto w = start_member(name + "-w", "worker", endpoint, role_key("worker-0"));
    std::unique_ptr<Child> again;
    if (kill) {
      w->await("training starts");
      std::this_thread::sleep_for(1s);  // where in the job the crash lands, not a timing assertion
      ps->signal(SIGKILL);
      BOOST_TEST(ps->wait() == 128 + SIGKILL);
      coord->await("its rows are on disk: waiting");
      again = start_member(name + "-ps-again", "ps", endpoint,
                           cat(role_key("ps-0"), cat(ps_flags, {"--listen", ps_endpoint})));
    }
    BOOST_TEST(coord->wait() == 0, coord->log());
    for (Child* c : {kill ? again.get() : ps.get(), w.get()}) BOOST_TEST(c->wait() == 0, c->log());
    if (kill) {
      BOOST_TEST(again->log().find("replayed") != std::string::npos, again->log());
      BOOST_TEST(coord->log().find("has resumed shards") != std::string::npos, coord->log());
    }
    return report(name + ".json");
  };
  const auto plain = job("durable-plain", false);
  const auto killed = job("durable-killed", true);
  BOOST_TEST(killed["ps_restarts"].get<int>() == 1);
  BOOST_TEST(killed["durability"].get<std::string>() == "log");
  BOOST_TEST(killed["store"].get<std::string>().find("lru, read-ahead") != std::string::npos,
             killed["store"]);
  BOOST_TEST(killed["pushes_lost"].get<uint64_t>() == 0u);
  BOOST_TEST(killed["train_samples"].get<uint64_t>() == 240000u);
  for (const auto* r : {&plain, &killed}) BOOST_TEST((*r)["bad_messages"].get<uint64_t>() == 0u);
  BOOST_TEST_MESSAGE("tiered ps killed under --durability log: logloss "
                     << killed["test_logloss"] << " vs " << plain["test_logloss"]
                     << " uninterrupted; pushes re-sent " << killed["pushes_resent"]);
  BOOST_TEST(killed["test_logloss"].get<double>() == plain["test_logloss"].get<double>());
}

// Issue 14: a daemon cluster restored from its checkpoints. A job checkpoints every 25 steps
// (both ps into one folder); the same job started again with `colony ps --resume-from ROOT`
// starts each shard from the newest complete checkpoint's copy, every row of it, over a fresh
// store (here memory), and trains on.
BOOST_AUTO_TEST_CASE(a_daemon_cluster_resumes_from_its_checkpoints) {
  Suite& s = suite();
  const fs::path root = s.dir / "resume-from-checkpoints";
  auto job = [&](const std::string& name, const std::vector<std::string>& coordinator_flags,
                 const std::vector<std::string>& ps_flags) {
    auto [coord, endpoint] =
        start_coordinator(name + "-coordinator",
                          cat(cat(role_key("server"), coordinator_flags),
                              {"--shards", "2", "--workers", "2", "--no-cache", "--test",
                               s.test.string(), "--report", (s.dir / (name + ".json")).string()}));
    std::vector<std::unique_ptr<Child>> members;
    for (const char* ps : {"ps-0", "ps-1"})
      members.push_back(start_member(name + "-" + ps, "ps", endpoint, cat(role_key(ps), ps_flags)));
    for (const char* w : {"worker-0", "worker-1"})
      members.push_back(start_member(name + "-" + w, "worker", endpoint, role_key(w)));
    BOOST_TEST(coord->wait() == 0, coord->log());
    for (auto& c : members) BOOST_TEST(c->wait() == 0, c->log());
    return members;
  };
  job("checkpointed", {"--checkpoint-every", "25"}, {"--checkpoint-dir", root.string()});
  const fs::path verify = s.dir / "resume-from-verify.log";
  BOOST_REQUIRE_MESSAGE(
      run(bin() + " checkpoint verify " + root.string() + " > " + verify.string() + " 2>&1") == 0,
      slurp(verify));
  std::smatch m;
  const std::string verified = slurp(verify);
  BOOST_REQUIRE(std::regex_search(verified, m, std::regex("ok, ([0-9]+) rows")));
  const uint64_t checkpointed = std::stoull(m[1]);
  auto resumed = job("resumed", {}, {"--resume-from", root.string()});
  uint64_t restored = 0;
  const std::regex line("shard [0-9]+: restored ([0-9]+) rows from");
  for (size_t i = 0; i < 2; ++i) {
    const std::string log = resumed[i]->log();
    for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
         ++it)
      restored += std::stoull((*it)[1]);
  }
  BOOST_TEST_MESSAGE("resumed from " << checkpointed << " checkpointed rows: " << restored
                                     << " restored");
  BOOST_TEST(checkpointed > 0u);
  BOOST_TEST(restored == checkpointed);
  BOOST_TEST(report("resumed.json")["table_rows"].get<uint64_t>() >= checkpointed);
  // A folder that holds no checkpoint is refused before the ps joins anything.
  auto bad = start_member("resume-from-bad", "ps", "tcp://127.0.0.1:1",
                          cat(role_key("ps-0"), {"--resume-from", (s.dir / "nowhere").string()}));
  BOOST_TEST(bad->wait() == 2);
  BOOST_TEST(bad->log().find("--resume-from: ") != std::string::npos, bad->log());
}

// Issue 14: a deep model's daemon checkpoints hold its dense layers. DeepFM on one ps and one
// worker checkpoints every 10 steps: each step's dense.bin is byte for byte the one `colony
// train` writes for the same job, and the cluster started again from the newest checkpoint
// (`colony ps --resume-from`) ends at the very test logloss of `colony train` continuing a store
// restored from its own checkpoint. A checkpoint without its dense.bin is refused by name.
BOOST_AUTO_TEST_CASE(a_deep_models_daemon_checkpoints_hold_and_resume_its_dense_layers) {
  Suite& s = suite();
  const fs::path d = s.dir / "deep-checkpoints";
  BOOST_REQUIRE(run(bin() + " gen --format criteo --rows 20000 --test-rows 4000 --seed 2 --out " +
                    d.string() + " >/dev/null 2>&1") == 0);
  const fs::path train = d / "train.criteo", test = d / "test.criteo";
  const std::string same =
      " --model deepfm --optimizer ftrl --batch 512 --no-cache --test " + test.string();
  auto train_job = [&](const std::string& name, const std::string& flags) {
    const fs::path r = d / (name + ".json");
    BOOST_REQUIRE(run(bin() + " train --data " + train.string() + same +
                      " --shards 1 --workers 1 " + flags + " --report " + r.string() + " > " +
                      (d / (name + ".log")).string() + " 2>&1") == 0);
    return nlohmann::json::parse(slurp(r))["test_logloss"].get<double>();
  };
  // Returns the coordinator's exit code; the members' logs stay in the suite's folder.
  auto daemon_job = [&](const std::string& name, const std::vector<std::string>& coordinator_flags,
                        const std::vector<std::string>& ps_flags) {
    auto [coord, endpoint] = start_coordinator(
        name + "-coordinator",
        cat(cat(secure("server"), coordinator_flags),
            {"--model", "deepfm", "--shards", "1", "--workers", "1", "--batch", "512", "--no-cache",
             "--test", test.string(), "--report", (d / (name + ".json")).string()}));
    auto ps = start_member(name + "-ps", "ps", endpoint, cat(secure("node-0"), ps_flags));
    auto w = start_member(name + "-w", "worker", endpoint, secure("node-2"), {}, train);
    const int code = coord->wait();
    ps->wait();
    w->wait();
    return code;
  };
  const fs::path embedded = d / "E", daemons = d / "DC";
  train_job("embedded", "--checkpoint-every 10 --store rocksdb:" + embedded.string());
  BOOST_REQUIRE(daemon_job("checkpointed", {"--checkpoint-every", "10"},
                           {"--checkpoint-dir", daemons.string()}) == 0);
  // 20000 rows in batches of 512: 40 steps, a checkpoint every 10.
  for (int step : {10, 20, 30, 40}) {
    const std::string mine = slurp(daemons / ("step-" + std::to_string(step)) / "dense.bin");
    const std::string train_s =
        slurp(embedded / "checkpoints" / ("step-" + std::to_string(step)) / "dense.bin");
    BOOST_TEST(!mine.empty(), "step " << step);
    BOOST_TEST((mine == train_s), "step " << step << ": the daemons' dense.bin differs");
  }
  const fs::path verify = d / "verify.log";
  BOOST_TEST(run(bin() + " checkpoint verify " + daemons.string() + " > " + verify.string() +
                 " 2>&1") == 0,
             slurp(verify));
  // Both continue from step 40: the daemons from their checkpoint, train from a store restored
  // from its own.
  BOOST_REQUIRE(daemon_job("deep-resumed", {}, {"--resume-from", daemons.string()}) == 0);
  BOOST_REQUIRE(run(bin() + " checkpoint restore " + (embedded / "checkpoints").string() +
                    " --store rocksdb:" + (d / "R").string() + " >/dev/null 2>&1") == 0);
  const double continued = train_job("continued", "--store rocksdb:" + (d / "R").string());
  const double resumed = report("deep-checkpoints/deep-resumed.json")["test_logloss"].get<double>();
  const double first = report("deep-checkpoints/checkpointed.json")["test_logloss"].get<double>();
  BOOST_TEST_MESSAGE("DeepFM resumed from step 40: daemons " << resumed << ", train " << continued
                                                             << " (first run " << first << ")");
  BOOST_TEST(resumed == continued);
  BOOST_TEST(resumed != first);
  const std::string log = slurp(s.dir / "deep-resumed-w.log");
  BOOST_TEST(log.find("the replicas start from the dense layers of step 40") != std::string::npos,
             log);
  // A checkpoint that lost its dense.bin is refused, naming what is missing.
  const fs::path bare = d / "bare";
  fs::create_directories(bare);
  fs::copy(daemons / "step-40", bare / "step-40", fs::copy_options::recursive);
  fs::remove(bare / "step-40" / "dense.bin");
  BOOST_TEST(daemon_job("deep-bare", {}, {"--resume-from", bare.string()}) != 0);
  const std::string bare_log = slurp(s.dir / "deep-bare-ps.log");
  BOOST_TEST(
      bare_log.find("--model deepfm needs the checkpoint's dense layers") != std::string::npos,
      bare_log);
}

// Issue 14: a ps store remembers the job that wrote it (model, width, optimizer, seed), not only
// the cluster id: another job over it, here under the same default cluster id, is refused naming
// the store, never silently continued. Runs after the test above, whose store it reuses.
BOOST_AUTO_TEST_CASE(a_ps_store_of_another_job_is_refused_naming_it) {
  Suite& s = suite();
  const fs::path store = s.dir / "tiered-store";
  BOOST_REQUIRE(fs::exists(store / "shard-0"));
  auto [coord, endpoint] =
      start_coordinator("other-job-coordinator",
                        cat(role_key("server"), {"--shards", "2", "--workers", "1", "--seed", "2",
                                                 "--no-cache", "--test", s.test.string()}));
  auto ps0 = start_member("other-job-ps0", "ps", endpoint,
                          cat(role_key("ps-0"), {"--store", "rocksdb:" + store.string()}));
  auto ps1 = start_member("other-job-ps1", "ps", endpoint,
                          cat(role_key("ps-1"), {"--store", "rocksdb:" + store.string()}));
  auto w0 = start_member("other-job-w0", "worker", endpoint, role_key("worker-0"));
  BOOST_TEST(coord->wait() != 0);
  BOOST_TEST(ps0->wait() != 0);
  BOOST_TEST(ps1->wait() != 0);
  w0->wait();
  const std::string said = ps0->log() + ps1->log();  // which ps got which shard: join order
  BOOST_TEST(std::regex_search(
                 said, std::regex(store.string() + "/shard-[01]: this store was written by")),
             said);
  BOOST_TEST(said.find("seed=1") != std::string::npos, said);
  // The same job with its rows in int8 (storage/rocks_table.h): the ps members give the store
  // the job's row parts, and the store, written in fp32, refuses them naming both.
  auto [coord2, endpoint2] = start_coordinator(
      "int8-job-coordinator",
      cat(role_key("server"), {"--shards", "2", "--workers", "1", "--no-cache", "--row-format",
                               "int8", "--state-format", "int8", "--test", s.test.string()}));
  auto ps2 = start_member("int8-job-ps0", "ps", endpoint2,
                          cat(role_key("ps-0"), {"--store", "rocksdb:" + store.string()}));
  auto ps3 = start_member("int8-job-ps1", "ps", endpoint2,
                          cat(role_key("ps-1"), {"--store", "rocksdb:" + store.string()}));
  auto w1 = start_member("int8-job-w0", "worker", endpoint2, role_key("worker-0"));
  BOOST_TEST(coord2->wait() != 0);
  BOOST_TEST(ps2->wait() != 0);
  BOOST_TEST(ps3->wait() != 0);
  w1->wait();
  const std::string refused = ps2->log() + ps3->log();
  BOOST_TEST(
      std::regex_search(refused, std::regex(store.string() +
                                            "/shard-[01]: this store keeps its rows in fp32; this "
                                            "job keeps them in int8:9,")),
      refused);
}

BOOST_AUTO_TEST_CASE(coordinator_refuses_train_only_flags_naming_where_they_go) {
  Child c({bin(), "coordinator", "--listen", "tcp://127.0.0.1:*", "--insecure", "--store",
           "rocksdb:/tmp/x"},
          suite().dir / "refuse-store.log");
  BOOST_TEST(c.wait() == 2);
  BOOST_TEST(
      c.log().find("--store is not a coordinator option: give each `colony ps` its --store") !=
          std::string::npos,
      c.log());
  Child t({bin(), "coordinator", "--listen", "tcp://127.0.0.1:*", "--insecure", "--timeline",
           (suite().dir / "t.json").string()},
          suite().dir / "refuse-timeline.log");
  BOOST_TEST(t.wait() == 2);
  BOOST_TEST(t.log().find("--timeline is not a coordinator option: give each `colony ps` and "
                          "`colony worker` its --timeline") != std::string::npos,
             t.log());
}
