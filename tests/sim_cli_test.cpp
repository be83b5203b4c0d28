// `colony sim` end to end: report keys, replay, exit codes, timeline.
#define BOOST_TEST_MODULE sim_cli_test
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_fixture.h"

namespace fs = std::filesystem;

namespace {

using colony::testing::Run;
using colony::testing::slurp;

// The report without its wall_seconds line: the one key that differs between equal runs.
std::string without_wall(const std::string& report) {
  std::istringstream in(report);
  std::string line, kept;
  while (std::getline(in, line))
    if (line.find("\"wall_seconds\"") == std::string::npos) kept += line + "\n";
  return kept;
}

// Every run is `colony sim ARGS`.
struct Fixture : colony::testing::CliFixture {
  Fixture() : CliFixture("colony-sim-cli-test") {}
  Run run(const std::string& args) { return CliFixture::run("sim " + args); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(sim_cli, Fixture)

BOOST_AUTO_TEST_CASE(report_has_the_contract_keys_and_replays_byte_for_byte) {
  const std::string args =
      "--nodes 3 --gpus-per-node 2 --ps 2 --steps 8 --batch 32 --faults chaos --seed 5";
  const fs::path a = dir / "a.json", b = dir / "b.json", timeline = dir / "t.json";
  Run r = run(args + " --report " + a.string() + " --timeline " + timeline.string());
  BOOST_TEST_REQUIRE(r.code == 0, r.out << r.err);
  BOOST_TEST(r.out.find("invariants: all held") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("--seed 5") != std::string::npos);
  BOOST_TEST_REQUIRE(run(args + " --report " + b.string()).code == 0);
  const auto report = nlohmann::json::parse(slurp(a));
  for (const char* key :
       {"simulated_seconds", "wall_seconds", "events", "samples_per_sec_simulated",
        "comm_overhead_fraction", "effective_training_time_ratio", "failures_injected",
        "invariant_violations"})
    BOOST_TEST(report.contains(key), key);
  BOOST_TEST(report["invariant_violations"].is_array());
  BOOST_TEST(report["invariant_violations"].empty());
  BOOST_TEST(report["failures_injected"].get<int>() >= 2);
  BOOST_TEST(report["numerics"] == "full");
  BOOST_TEST(report["coordinator_members"] == 5);  // three worker nodes, two ps hosts
  // The chaos crash either loses a worker member (its restart is refused) or restarts a ps,
  // which resumes from its durable store.
  BOOST_TEST(report["ps_store"] == "durable");
  BOOST_TEST(report["workers_lost"].get<int>() + report["ps_restarts"].get<int>() >= 1,
             report.dump());
  for (const char* key :
       {"clients_resynced", "control_messages_garbled", "ps_messages_forged", "bad_messages"})
    BOOST_TEST(report.contains(key), key);
  BOOST_TEST(report["job_error"] == "");
  BOOST_TEST(without_wall(slurp(a)) == without_wall(slurp(b)));
  const auto trace = nlohmann::json::parse(slurp(timeline));
  BOOST_TEST(trace["traceEvents"].size() > 10u);
  bool step = false, crash = false;
  for (const auto& e : trace["traceEvents"]) {
    step |= e["name"].get<std::string>().rfind("step", 0) == 0;
    crash |= e["name"] == "crash";
  }
  BOOST_TEST(step);
  BOOST_TEST(crash);
}

// --ps-store replicated:K: the shards' rows in memory on K ps hosts (docs/simulation.md). The
// report names it; K beyond --ps, a K that is not a number, or one host (--colocate) exit 2.
BOOST_AUTO_TEST_CASE(replicated_ps_stores_are_simulated_and_bad_ones_refused) {
  const fs::path a = dir / "r.json";
  Run r =
      run("--nodes 3 --ps 2 --steps 8 --batch 32 --faults chaos --seed 5 --numerics full "
          "--ps-store replicated:2 --report " +
          a.string());
  BOOST_TEST_REQUIRE(r.code == 0, r.out << r.err);
  BOOST_TEST(r.out.find("2 ps (replicated:2)") != std::string::npos, r.out);
  const auto report = nlohmann::json::parse(slurp(a));
  BOOST_TEST(report["ps_store"] == "replicated:2");
  BOOST_TEST(report["invariant_violations"].empty());
  // New backups in place of those a crash took (none when no ps crashed), reported.
  BOOST_TEST(report["backups_rebuilt"].get<int>() >= 0);
  for (const char* bad :
       {"--numerics full --ps-store replicated:3", "--ps-store replicated:two",
        "--ps-store replicated:", "--ps-store replicated:1", "--ps-store replicated:9",
        "--colocate --ps-store replicated:2", "--ps-store disk"}) {
    Run b = run(std::string("--nodes 3 --ps 2 --steps 8 ") + bad);
    BOOST_TEST(b.code == 2, bad << ": " << b.out << b.err);
    BOOST_TEST(b.err.find("--ps-store") != std::string::npos, bad << ": " << b.err);
  }
}

// A trace that crashes a ps host: the report and the summary give the time back to full
// throughput after it (no sooner than the restart, as every step pulls from every shard).
BOOST_AUTO_TEST_CASE(a_ps_crash_reports_its_time_back_to_full_throughput) {
  const std::string args = "--nodes 20 --gpus-per-node 2 --ps 4 --steps 100 --seed 3 ";
  const fs::path clean = dir / "clean.json", crashed = dir / "crashed.json",
                 trace = dir / "crash.json";
  BOOST_TEST_REQUIRE(run(args + "--report " + clean.string()).code == 0);
  const double length = nlohmann::json::parse(slurp(clean))["simulated_seconds"].get<double>();
  BOOST_TEST(!nlohmann::json::parse(slurp(clean)).contains("ps_crash_recovery"));
  const double at = length / 2, restart = length / 10;
  std::ofstream(trace) << nlohmann::json{
      {"events", {{{"at", at}, {"kind", "crash"}, {"shard", 1}, {"duration", restart}}}}};
  Run r = run(args + "--trace " + trace.string() + " --report " + crashed.string());
  BOOST_TEST_REQUIRE(r.code == 0, r.out << r.err);
  BOOST_TEST(r.out.find("time back to full throughput after ps crashes: ") != std::string::npos,
             r.out);
  const auto report = nlohmann::json::parse(slurp(crashed));
  BOOST_TEST_REQUIRE(report["ps_crash_recovery"].size() == 1u, report.dump());
  const auto& t = report["ps_crash_recovery"][0];
  BOOST_TEST(t["crash_seconds"].get<double>() == at, boost::test_tools::tolerance(1e-9));
  BOOST_TEST_REQUIRE(t["time_back_seconds"].is_number(), t.dump());
  BOOST_TEST(t["time_back_seconds"].get<double>() >= restart, t.dump());
  BOOST_TEST(t["not_measured"] == "");
}

// Replicated, the same crash fails the shard over to its backup's host after the heartbeat
// timeout: the report counts the failover and gives the rate the job settled at.
BOOST_AUTO_TEST_CASE(a_replicated_ps_crash_reports_its_failover) {
  const std::string args =
      "--nodes 20 --gpus-per-node 2 --ps 4 --steps 100 --seed 3 --ps-store replicated:2 ";
  const fs::path clean = dir / "clean-r.json", crashed = dir / "crashed-r.json",
                 trace = dir / "crash-r.json";
  BOOST_TEST_REQUIRE(run(args + "--report " + clean.string()).code == 0);
  const auto before = nlohmann::json::parse(slurp(clean));
  BOOST_TEST(before["ps_failovers"] == 0);
  const double length = before["simulated_seconds"].get<double>();
  std::ofstream(trace) << nlohmann::json{
      {"events", {{{"at", length / 2}, {"kind", "crash"}, {"shard", 1}, {"duration", length}}}}};
  const int timeout_ms = std::max(2, static_cast<int>(length / 20 * 1e3));
  Run r = run(args + "--heartbeat-ms " + std::to_string(timeout_ms / 2) +
              " --heartbeat-timeout-ms " + std::to_string(timeout_ms) + " --trace " +
              trace.string() + " --report " + crashed.string());
  BOOST_TEST_REQUIRE(r.code == 0, r.out << r.err);
  BOOST_TEST(r.out.find("failover: 1 shard moved to a backup's host") != std::string::npos, r.out);
  const auto report = nlohmann::json::parse(slurp(crashed));
  BOOST_TEST(report["ps_failovers"] == 1);
  BOOST_TEST(report["job_error"] == "");
  BOOST_TEST_REQUIRE(report["ps_crash_recovery"].size() == 1u, report.dump());
  const auto& t = report["ps_crash_recovery"][0];
  BOOST_TEST_REQUIRE(t["time_to_steady_seconds"].is_number(), t.dump());
  BOOST_TEST(t["time_to_steady_seconds"].get<double>() >= timeout_ms / 1e3, t.dump());
  BOOST_TEST(t["time_to_steady_seconds"].get<double>() < length / 2, t.dump());
  BOOST_TEST(t["steady_rate"].is_number(), t.dump());
}

BOOST_AUTO_TEST_CASE(modelled_numerics_for_large_clusters) {
  const fs::path a = dir / "m.json";
  Run r = run("--nodes 200 --gpus-per-node 8 --ps 16 --steps 20 --seed 2 --report " + a.string());
  BOOST_TEST_REQUIRE(r.code == 0, r.out << r.err);
  const auto report = nlohmann::json::parse(slurp(a));
  BOOST_TEST(report["numerics"] == "modelled");
  BOOST_TEST(report["samples"].get<uint64_t>() == 200ull * 8 * 20 * 8192);
  BOOST_TEST(report["simulated_seconds"].get<double>() > 0);
}

// --wire-format and --push-format: the report names them, and 8-bit replies with 16-bit pushes
// move fewer bytes than fp32 over the same run (modelled numerics, 100 nodes), which takes less
// time where the network is what the steps wait for (the shards' CPU left out).
BOOST_AUTO_TEST_CASE(compact_wire_formats_send_fewer_bytes) {
  const std::string args =
      "--nodes 100 --gpus-per-node 8 --ps 16 --steps 10 --push flat --seed 3 --shard-ns-per-row 0";
  const fs::path a = dir / "fp32.json", b = dir / "int8.json";
  Run r = run(args + " --report " + a.string());
  BOOST_TEST_REQUIRE(r.code == 0, r.out << r.err);
  r = run(args + " --wire-format int8 --push-format bf16 --report " + b.string());
  BOOST_TEST_REQUIRE(r.code == 0, r.out << r.err);
  BOOST_TEST(r.out.find("wire int8/bf16") != std::string::npos, r.out);
  const auto fp32 = nlohmann::json::parse(slurp(a)), compact = nlohmann::json::parse(slurp(b));
  BOOST_TEST(fp32["wire_format"] == "fp32");
  BOOST_TEST(fp32["push_format"] == "fp32");
  BOOST_TEST(compact["wire_format"] == "int8");
  BOOST_TEST(compact["push_format"] == "bf16");
  BOOST_TEST(compact["bytes"].get<double>() < 0.6 * fp32["bytes"].get<double>());
  BOOST_TEST(compact["comm_overhead_fraction"].get<double>() <
             fp32["comm_overhead_fraction"].get<double>());
}

// --model deepfm: the real cores on Criteo-shaped rows for a small cluster, the modelled stand-in
// (with its dense wait) for a large one.
BOOST_AUTO_TEST_CASE(a_deep_model_runs_on_either_numerics) {
  const fs::path a = dir / "deep.json";
  Run r = run("--nodes 2 --gpus-per-node 2 --ps 2 --steps 4 --batch 64 --model deepfm --report " +
              a.string());
  BOOST_TEST_REQUIRE(r.code == 0, r.out << r.err);
  const auto report = nlohmann::json::parse(slurp(a));
  BOOST_TEST(report["numerics"] == "full");
  BOOST_TEST(report["model"] == "deepfm");
  BOOST_TEST(report["samples"].get<uint64_t>() == 2ull * 2 * 4 * 64);
  BOOST_TEST(report["invariant_violations"].empty());
  r =
      run("--nodes 200 --gpus-per-node 8 --ps 16 --steps 10 --model dcn --consistency asp "
          "--report " +
          a.string());
  BOOST_TEST_REQUIRE(r.code == 0, r.out << r.err);
  BOOST_TEST(r.out.find("dense wait") != std::string::npos, r.out);
  const auto large = nlohmann::json::parse(slurp(a));
  BOOST_TEST(large["numerics"] == "modelled");
  BOOST_TEST(large["dense_wait_fraction"].get<double>() > 0.0);
}

BOOST_AUTO_TEST_CASE(bad_input_exits_2_naming_flag_or_field) {
  Run r = run("--nodes 0");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("--nodes") != std::string::npos, r.err);
  r = run("--nodes 2 --trace " + (dir / "missing.json").string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("missing.json") != std::string::npos, r.err);
  const fs::path bad =
      write("bad.json", R"({"events": [{"at": 1, "kind": "crash", "node": 9, "duration": 1}]})");
  r = run("--nodes 2 --trace " + bad.string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("events[0].node") != std::string::npos, r.err);
  r = run("--nodes 2 --consistency ssp:x");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("--consistency") != std::string::npos, r.err);
  r = run("--nodes 2 --wire-format int4");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("--wire-format") != std::string::npos, r.err);
  r = run("--nodes 2 --push-format fp64");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("--push-format") != std::string::npos, r.err);
  r = run("--nodes 2 --model dlrm --push flat");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("--push hierarchical") != std::string::npos, r.err);
  r = run("--nodes 2 --push sideways");
  BOOST_TEST(r.code == 2);
  r = run("--nodes 2 --heartbeat-ms 10 --heartbeat-timeout-ms 10");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("--heartbeat-timeout-ms") != std::string::npos, r.err);
}

BOOST_AUTO_TEST_CASE(violated_invariants_exit_1_with_the_report_written) {
  const fs::path a = dir / "v.json";
  Run r =
      run("--nodes 3 --gpus-per-node 2 --ps 2 --steps 8 --batch 32 --fault-site skip_ssp_gate "
          "--report " +
          a.string());
  BOOST_TEST(r.code == 1);
  const auto report = nlohmann::json::parse(slurp(a));
  BOOST_TEST(!report["invariant_violations"].empty());
  BOOST_TEST(report["fault_sites_enabled"][0] == "skip_ssp_gate");
}

BOOST_AUTO_TEST_SUITE_END()
