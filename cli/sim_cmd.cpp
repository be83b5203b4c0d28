// colony sim: simulate a cluster on a virtual clock (sim/simulator.h, docs/simulation.md).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress.h"
#include "common/value_format.h"
#include "ps/cluster_protocol.h"
#include "sim/simulator.h"

namespace colony::cli {

namespace {

// Above this many samples in a run, --numerics auto picks modelled: full numerics compute
// every gradient for real.
constexpr uint64_t auto_full_samples_max = 2'000'000;

struct SimArgs {
  sim::SimOptions o;
  std::string push = "hierarchical";
  std::string ps_store = "durable";
  std::string numerics = "auto";
  std::string model = "fm";
  std::string consistency = "bsp";
  std::string device = "gpu";
  std::string faults = "none";
  std::string wire_format = "fp32";
  std::string push_format;  // empty: as --wire-format
  std::string trace, report, timeline, save_trace, topology;
  double partition_s = 60.0;
  CLI::App* cmd = nullptr;
};

}  // namespace

Runner add_sim(CLI::App& app) {
  auto a = std::make_shared<SimArgs>();
  sim::SimOptions& o = a->o;
  o.batch = 8192;
  CLI::App* cmd = app.add_subcommand(
      "sim", "Simulate a cluster on a virtual clock and network, with faults replayed from a seed");
  a->cmd = cmd;
  cmd->add_option("--nodes", o.nodes, "Worker nodes")->required();
  cmd->add_option("--gpus-per-node", o.gpus_per_node, "Devices (worker replicas) per node")
      ->capture_default_str();
  cmd->add_option("--ps", o.ps, "Parameter-server shards, one host each")->capture_default_str();
  cmd->add_option("--steps", o.steps, "Steps per worker")->capture_default_str();
  cmd->add_option("--push", a->push, "hierarchical (node aggregator) or flat")
      ->check(CLI::IsMember({"flat", "hierarchical"}))
      ->capture_default_str();
  cmd->add_option("--trace", a->trace, "Fault trace file (JSON, docs/simulation.md)");
  cmd->add_option("--save-trace", a->save_trace,
                  "Write the run's fault trace (given and generated events) as a trace file");
  cmd->add_option("--seed", o.seed, "Seed of every random choice: same seed, same run")
      ->capture_default_str();
  cmd->add_option("--report", a->report, "Write a JSON report to this file");
  cmd->add_option("--timeline", a->timeline,
                  "Write a Chrome trace-event timeline (opens in Perfetto)");
  cmd->add_option("--numerics", a->numerics,
                  "full (the real cores, real gradients), modelled (keys and sizes only) or auto "
                  "(full up to 2M samples)")
      ->check(CLI::IsMember({"auto", "full", "modelled"}))
      ->capture_default_str();
  cmd->add_option("--model", a->model,
                  "lr, fm, or a deep model with its default layers: deepfm, dlrm or dcn (on 26 "
                  "categorical fields and 13 dense features a row)")
      ->check(CLI::IsMember({"lr", "fm", "deepfm", "dlrm", "dcn"}))
      ->capture_default_str();
  cmd->add_option("--dim", o.model.dim, "FM factor and embedding dimension")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Samples per device per step")->capture_default_str();
  cmd->add_option("--consistency", a->consistency, "bsp, ssp:K or asp")->capture_default_str();
  cmd->add_option("--wire-format", a->wire_format,
                  "How pull replies and pushes carry rows and gradients, as colony train's: fp32, "
                  "bf16, fp16 or int8 (a byte a value and a scale a row)")
      ->capture_default_str();
  cmd->add_option("--push-format", a->push_format,
                  "How pushes carry gradients, when not as --wire-format says: fp32, bf16, fp16 "
                  "or int8");
  cmd->add_option("--device", a->device, "gpu or cpu (each device a CPU core)")
      ->check(CLI::IsMember({"gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--gpu-speedup", o.compute.gpu_speedup,
                  "One GPU's samples/s over one CPU core's (assumed)")
      ->capture_default_str();
  cmd->add_option("--cpu-lr-samples-per-sec", o.compute.cpu_lr_samples_per_sec,
                  "LR samples/s of one core")
      ->capture_default_str();
  cmd->add_option("--cpu-dense-flops", o.compute.cpu_dense_flops_per_sec,
                  "FLOP/s of one CPU core on a deep model's dense layers")
      ->capture_default_str();
  cmd->add_option("--cpu-fm-samples-per-sec", o.compute.cpu_fm8_samples_per_sec,
                  "FM dim 8 samples/s of one core")
      ->capture_default_str();
  cmd->add_option("--shard-ns-per-row", o.compute.shard_ns_per_row,
                  "A shard's CPU time per row read or updated")
      ->capture_default_str();
  cmd->add_option(
      "--worker-ns-per-sample", o.compute.worker_ns_per_sample,
      "Full numerics: a worker's CPU per sample beyond its compute (default 0; with --colocate "
      "the embedded cluster's calibrated 1500)");
  cmd->add_option("--jitter", o.compute.jitter, "Coefficient of variation of a step's compute time")
      ->capture_default_str();
  cmd->add_option("--nic-gbps", o.network.nic_gbps, "NIC bandwidth per host, Gbit/s")
      ->capture_default_str();
  cmd->add_option("--latency-us", o.network.latency_us, "One-way latency within a rack, us")
      ->capture_default_str();
  cmd->add_option("--spine-latency-us", o.network.spine_latency_us,
                  "Added latency across the spine, us")
      ->capture_default_str();
  cmd->add_option("--nodes-per-rack", o.network.nodes_per_rack, "Hosts per top-of-rack switch")
      ->capture_default_str();
  cmd->add_option("--oversubscription", o.network.oversubscription,
                  "Rack downlink over uplink capacity")
      ->capture_default_str();
  cmd->add_option("--intra-gbps", o.network.intra_gbps,
                  "Intra-node (NVLink-class) bandwidth, Gbit/s")
      ->capture_default_str();
  cmd->add_option(
      "--topology", a->topology,
      "JSON file of network fields (nic_gbps, latency_us, nodes_per_rack, ...); flags given "
      "on the command line win");
  cmd->add_option("--rto-seconds", o.rto_s, "Re-send delay of a dropped message")
      ->capture_default_str();
  cmd->add_option("--faults", a->faults,
                  "none, profile (failures drawn from per-component rates) or chaos (profile plus "
                  "at least one "
                  "crash and partition and random slow/clog/lossy/disk-full episodes)")
      ->check(CLI::IsMember({"none", "profile", "chaos"}))
      ->capture_default_str();
  auto profile = std::make_shared<sim::FailureProfile>();
  cmd->add_option("--failures-per-gpu-day", profile->per_gpu_day,
                  "Unexpected interruptions per GPU-day")
      ->capture_default_str();
  cmd->add_option("--failure-rate-scale", profile->rate_scale, "Multiplies every failure rate")
      ->capture_default_str();
  cmd->add_option("--restart-seconds", o.restart_s,
                  "Time for a crashed host (or, with --days, the job) to restart")
      ->capture_default_str();
  cmd->add_option("--partition-seconds", a->partition_s,
                  "How long a generated network failure lasts")
      ->capture_default_str();
  cmd->add_option("--checkpoint-interval", o.checkpoint.interval_s,
                  "Seconds between checkpoints (0: none)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-cost", o.checkpoint.cost_s, "Seconds the job pauses per checkpoint")
      ->capture_default_str();
  cmd->add_option("--days", o.days,
                  "Goodput mode: simulate this many days of failures and checkpoints")
      ->capture_default_str();
  cmd->add_option(
         "--progress-bound", o.progress_bound_s,
         "Seconds within which a live worker must step after the last fault heals (0: derived)")
      ->capture_default_str();
  cmd->add_flag("--colocate", o.colocate,
                "Full numerics: every core on one host, as in colony train's embedded cluster");
  cmd->add_option("--cpus-per-host", o.cpus_per_host,
                  "Full numerics: CPUs the cores of a host share (0: one per core)")
      ->capture_default_str();
  cmd->add_option("--heartbeat-ms", o.heartbeat_ms,
                  "Full numerics: the coordinator's and members' heartbeat interval (simulated ms)")
      ->capture_default_str();
  cmd->add_option(
         "--heartbeat-timeout-ms", o.heartbeat_timeout_ms,
         "Silence after which the coordinator declares a member lost (simulated ms; modelled "
         "numerics: a replicated ps host's failover)")
      ->capture_default_str();
  cmd->add_flag("--buggify", o.buggify, "Switch each seeded fault site on with probability 1/2");
  cmd->add_option("--fault-site", o.force_sites,
                  "Force a fault site on: skip_ssp_gate, lose_log_tail, skip_resync, "
                  "garble_control, forge_ps, forget_clocks, replica_ack_early, "
                  "replica_forget_clocks");
  cmd->add_option("--ps-store", a->ps_store,
                  "Full numerics: durable (a crashed ps resumes from its store, as with --store "
                  "rocksdb:DIR), memory (a crashed ps fails the job) or replicated:K (in memory "
                  "on K ps hosts: a crashed ps resumes from a replica)")
      ->capture_default_str();
  return [a, profile]() {
    sim::SimOptions o = a->o;
    o.push = a->push == "flat" ? sim::PushKind::flat : sim::PushKind::hierarchical;
    o.durable_ps = a->ps_store == "durable";
    if (a->ps_store.rfind("replicated:", 0) == 0) {
      // As the daemons' --durability: the simulator plans clusters they can run.
      auto k = parse_replicated("--ps-store", a->ps_store, shard_replicas_max);
      if (!k) return fail(k.status());
      o.replicas = *k;
      o.durable_ps = false;
    } else if (a->ps_store != "durable" && a->ps_store != "memory") {
      return fail(Status::invalid_input("--ps-store " + a->ps_store +
                                        ": not durable, memory or replicated:K"));
    }
    auto model = parse_model(a->model);
    if (!model) return fail(Status::invalid_input("--model: " + model.status().message()));
    o.model.kind = *model;
    if (o.model.deep()) {
      o.model.fields = gen_cat_fields;
      o.model.dense = gen_int_fields;
      o.model = with_model_defaults(o.model);
    }
    auto consistency = parse_consistency(a->consistency);
    if (!consistency)
      return fail(Status::invalid_input("--consistency: " + consistency.status().message()));
    o.consistency = *consistency;
    auto wire = parse_value_format(a->wire_format, "format");
    if (!wire) return fail(Status::invalid_input("--wire-format: " + wire.status().message()));
    o.wire_format = o.push_format = *wire;
    if (!a->push_format.empty()) {
      auto push = parse_value_format(a->push_format, "format");
      if (!push) return fail(Status::invalid_input("--push-format: " + push.status().message()));
      o.push_format = *push;
    }
    o.compute.gpu = a->device == "gpu";
    if (o.colocate && a->cmd->count("--worker-ns-per-sample") == 0)
      o.compute.worker_ns_per_sample = sim::embedded_worker_ns_per_sample;
    const uint64_t samples = uint64_t{o.nodes} * o.gpus_per_node * o.steps * o.batch;
    o.numerics = a->numerics == "full" ||
                         (a->numerics == "auto" && samples <= auto_full_samples_max && o.days == 0)
                     ? sim::Numerics::full
                     : sim::Numerics::modelled;
    o.record_timeline = !a->timeline.empty();
    if (!a->topology.empty()) {
      // The file sets the network; network flags given explicitly override it.
      sim::NetworkSpec from_file = o.network;
      if (Status s = sim::load_topology(a->topology, from_file); !s.ok()) return fail(s);
      const sim::NetworkSpec flags = o.network;
      o.network = from_file;
      auto given = [&](const char* flag) { return a->cmd->count(flag) > 0; };
      if (given("--nic-gbps")) o.network.nic_gbps = flags.nic_gbps;
      if (given("--latency-us")) o.network.latency_us = flags.latency_us;
      if (given("--spine-latency-us")) o.network.spine_latency_us = flags.spine_latency_us;
      if (given("--nodes-per-rack")) o.network.nodes_per_rack = flags.nodes_per_rack;
      if (given("--oversubscription")) o.network.oversubscription = flags.oversubscription;
      if (given("--intra-gbps")) o.network.intra_gbps = flags.intra_gbps;
    }
    if (Status s = sim::validate(o); !s.ok()) return fail(s);
    if (!(profile->per_gpu_day >= 0 && profile->rate_scale >= 0))
      return fail(Status::invalid_input(
          "--failures-per-gpu-day and --failure-rate-scale must be zero or more"));
    if (!(a->partition_s >= 0))
      return fail(Status::invalid_input("--partition-seconds must be zero or more"));
    if (!a->trace.empty()) {
      auto trace = sim::load_trace(a->trace, o.nodes, o.ps);
      if (!trace) return fail(trace.status());
      o.trace = std::move(trace.value());
    }
    // Wall time counts the whole command's simulating, the fault-free length probe included.
    const auto start = std::chrono::steady_clock::now();
    if (a->faults != "none") {
      sim::TraceGenOptions g;
      g.nodes = o.nodes;
      g.gpus_per_node = o.gpus_per_node;
      g.ps = o.ps;
      g.profile = *profile;
      g.profile.restart_s = o.restart_s;
      g.profile.network_heal_s = a->partition_s;
      // The horizon: the length of the same run without faults (faults drawn past the end of
      // the run would never be injected), found by running it once first.
      if (o.days > 0) {
        g.horizon_s = o.days * 86400.0;
      } else {
        sim::SimOptions probe = o;
        probe.trace = {};
        probe.record_timeline = false;
        auto length = sim::simulate(probe);
        if (!length) return fail(length.status());
        g.horizon_s = std::max(length->simulated_seconds, 1e-6);
      }
      if (a->faults == "chaos") {
        g.min_crashes = 1;
        g.min_partitions = 1;
        g.chaos_extras = true;
      }
      o.trace = sim::merge(std::move(o.trace), sim::generate_trace(g, o.seed));
    }
    if (!a->save_trace.empty()) {
      std::ofstream out(a->save_trace);
      out << sim::trace_json(o.trace) << "\n";
      out.close();
      if (!out) {
        std::fprintf(stderr, "colony: error: --save-trace %s: cannot write the file\n",
                     a->save_trace.c_str());
        return 1;
      }
    }
    std::fprintf(stderr,
                 "colony sim: %u node%s x %u %s, %u ps, %u steps, %s push, %s, seed %llu, %zu "
                 "fault event%s\n",
                 o.nodes, o.nodes == 1 ? "" : "s", o.gpus_per_node, a->device.c_str(), o.ps,
                 o.steps, a->push.c_str(), to_string(o.consistency).c_str(),
                 static_cast<unsigned long long>(o.seed), o.trace.events.size(),
                 o.trace.events.size() == 1 ? "" : "s");
    Progress progress(stderr);
    auto result =
        sim::simulate(o, [&](double f) { progress.update(f, f * 100.0, "%", "simulating"); });
    progress.finish();
    if (!result) return fail(result.status());
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const sim::SimResult& r = *result;
    nlohmann::json violations = r.invariant_violations;
    nlohmann::json rep = {
        {"simulated_seconds", r.simulated_seconds},
        {"events", r.events},
        {"samples_per_sec_simulated", r.samples_per_sec_simulated},
        {"comm_overhead_fraction", r.comm_overhead_fraction},
        {"effective_training_time_ratio", r.effective_training_time_ratio},
        {"failures_injected", r.failures_injected},
        {"invariant_violations", violations},
        {"gate_wait_fraction", r.gate_wait_fraction},
        {"dense_wait_fraction", r.dense_wait_fraction},
        {"numerics", r.numerics},
        {"nodes", o.nodes},
        {"gpus_per_node", o.gpus_per_node},
        {"ps", o.ps},
        {"steps", o.steps},
        {"push", a->push},
        {"consistency", to_string(o.consistency)},
        {"wire_format", to_string(o.wire_format)},
        {"push_format", to_string(o.push_format)},
        {"model", a->model},
        {"batch", o.batch},
        {"worker_ns_per_sample", o.compute.worker_ns_per_sample},
        {"device", a->device},
        {"seed", o.seed},
        {"samples", r.samples},
        {"worker_steps", r.steps},
        {"messages", r.messages},
        {"bytes", r.bytes},
        {o.days > 0 ? "step_seconds" : "step_compute_seconds", r.step_seconds},
        {"checkpoints", r.checkpoints},
        {"fault_events", o.trace.events.size()},
        {"fault_sites_enabled", r.sites_enabled},
        {"event_trace_hash", fmt::format("{:016x}", r.event_trace_hash)},
    };
    if (r.members > 0) {
      rep["coordinator_members"] = r.members;
      rep["workers_lost"] = r.workers_lost;
      rep["job_error"] = r.job_error;
      rep["ps_store"] = o.replicas > 1 ? fmt::format("replicated:{}", o.replicas)
                        : o.durable_ps ? "durable"
                                       : "memory";
      rep["ps_restarts"] = r.ps_restarts;
      rep["clients_resynced"] = r.resyncs;
      if (o.replicas > 1) rep["backups_rebuilt"] = r.backups_rebuilt;
      rep["acked_commits_lost"] = r.acked_commits_lost;
      rep["pushes_applied_twice"] = r.pushes_applied_twice;
      rep["control_messages_garbled"] = r.control_faults;
      rep["ps_messages_forged"] = r.ps_forged;
      rep["bad_messages"] = r.bad_messages;
      rep["heartbeat_ms"] = o.heartbeat_ms;
      rep["heartbeat_timeout_ms"] = o.heartbeat_timeout_ms;
    }
    if (r.members == 0 && o.replicas > 1 && o.days == 0) {  // modelled numerics' failover
      rep["ps_failovers"] = r.ps_failovers;
      rep["job_error"] = r.job_error;
    }
    if (!r.ps_crash_recovery.empty()) {
      nlohmann::json recoveries = nlohmann::json::array();
      for (const sim::ThroughputRecovery& t : r.ps_crash_recovery)
        recoveries.push_back(
            {{"crash_seconds", t.crash_s},
             {"time_back_seconds", t.back_s ? nlohmann::json(*t.back_s) : nlohmann::json()},
             {"not_measured", t.why},
             {"steady_rate", t.steady_rate ? nlohmann::json(*t.steady_rate) : nlohmann::json()},
             {"time_to_steady_seconds",
              t.steady_s ? nlohmann::json(*t.steady_s) : nlohmann::json()}});
      rep["ps_crash_recovery"] = recoveries;
    }
    if (o.days > 0) {
      rep["days"] = o.days;
      rep["checkpoint_interval_seconds"] = o.checkpoint.interval_s;
      rep["checkpoint_cost_seconds"] = o.checkpoint.cost_s;
      rep["mtbf_seconds"] = r.mtbf_seconds;
      rep["young_daly_interval_seconds"] = r.young_daly_interval_seconds;
    }
    // Last, on its own line: the one key that differs between two runs of the same command.
    std::string text = rep.dump(2);
    text.insert(text.size() - 2, fmt::format(",\n  \"wall_seconds\": {:.3f}", wall));
    std::printf(
        "colony sim  seed %llu  numerics %s  %u nodes x %u %s  %u ps%s  %s push  %s  wire "
        "%s/%s\n",
        static_cast<unsigned long long>(o.seed), r.numerics.c_str(), o.nodes, o.gpus_per_node,
        a->device.c_str(), o.ps,
        // The ps store matters to the real cores, and replication to both numerics.
        r.numerics == "full" || o.replicas > 1 ? fmt::format(" ({})", a->ps_store).c_str() : "",
        a->push.c_str(), to_string(o.consistency).c_str(), to_string(o.wire_format).c_str(),
        to_string(o.push_format).c_str());
    std::printf("  simulated %s (%.6f s) in %.2f s wall (%.0fx), %s events\n",
                human_duration(r.simulated_seconds).c_str(), r.simulated_seconds, wall,
                wall > 0 ? r.simulated_seconds / wall : 0.0, human_count(double(r.events)).c_str());
    std::printf("  samples/s simulated %s  (%s samples, %s %.3f ms)\n",
                human_count(r.samples_per_sec_simulated).c_str(),
                human_count(double(r.samples)).c_str(), o.days > 0 ? "whole step" : "step compute",
                r.step_seconds * 1e3);
    std::printf("  comm overhead %.1f%%  gate wait %.1f%%%s  effective training time %.1f%%\n",
                100 * r.comm_overhead_fraction, 100 * r.gate_wait_fraction,
                o.model.deep() && r.numerics == "modelled"
                    ? fmt::format("  dense wait {:.1f}%", 100 * r.dense_wait_fraction).c_str()
                    : "",
                100 * r.effective_training_time_ratio);
    std::printf("  failures injected %llu  checkpoints %llu",
                static_cast<unsigned long long>(r.failures_injected),
                static_cast<unsigned long long>(r.checkpoints));
    if (o.days > 0)
      std::printf("  MTBF %.0f s  Young/Daly interval %.0f s", r.mtbf_seconds,
                  r.young_daly_interval_seconds);
    if (r.members > 0)
      std::printf(
          "\n  coordinator: %u members, %u worker member%s lost, %u ps restart%s (%llu clients "
          "resynced), %llu messages refused%s%s",
          r.members, r.workers_lost, r.workers_lost == 1 ? "" : "s", r.ps_restarts,
          r.ps_restarts == 1 ? "" : "s", static_cast<unsigned long long>(r.resyncs),
          static_cast<unsigned long long>(r.bad_messages),
          r.job_error.empty() ? "" : ", job failed: ", r.job_error.c_str());
    if (r.members == 0 && o.replicas > 1 && o.days == 0)
      std::printf("\n  failover: %u shard%s moved to a backup's host%s%s", r.ps_failovers,
                  r.ps_failovers == 1 ? "" : "s",
                  r.job_error.empty() ? "" : ", job failed: ", r.job_error.c_str());
    if (!r.ps_crash_recovery.empty()) {
      std::string times;
      for (const sim::ThroughputRecovery& t : r.ps_crash_recovery)
        times += t.back_s
                     ? fmt::format("{}{:.3f} s (crash at {:.3f} s)", times.empty() ? "" : ", ",
                                   *t.back_s, t.crash_s)
                     : fmt::format("{}not measured at {:.3f} s: {}{}", times.empty() ? "" : ", ",
                                   t.crash_s, t.why,
                                   t.steady_rate ? fmt::format(" (it settled at {:.2f} of the "
                                                               "rate {:.3f} s after the crash)",
                                                               *t.steady_rate, *t.steady_s)
                                                 : "");
      std::printf("\n  time back to full throughput after ps crashes: %s", times.c_str());
    }
    std::printf("\n  invariants: %s\n",
                r.invariant_violations.empty()
                    ? "all held"
                    : fmt::format("{} violated", r.invariant_violations.size()).c_str());
    for (size_t i = 0; i < std::min<size_t>(5, r.invariant_violations.size()); ++i)
      std::printf("    %s\n", r.invariant_violations[i].c_str());
    std::printf("  replay: colony sim ... --seed %llu  (event trace hash %016llx)\n",
                static_cast<unsigned long long>(o.seed),
                static_cast<unsigned long long>(r.event_trace_hash));
    if (!a->report.empty() && !write_report(a->report, text)) return 1;
    if (!a->timeline.empty() && !write_file("--timeline", a->timeline, sim::timeline_json(r)))
      return 1;
    // Violated invariants are a failed run: scripts and CI must notice.
    return r.invariant_violations.empty() ? 0 : 1;
  };
}

}  // namespace colony::cli
