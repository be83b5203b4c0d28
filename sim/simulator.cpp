#include "sim/simulator.h"

#include <algorithm>
#include <cmath>

#include "common/hash.h"

namespace colony::sim {

namespace {
constexpr uint32_t nodes_max = 100'000;
constexpr uint32_t ps_max = 4096;
constexpr uint32_t gpus_max = 64;
constexpr uint32_t steps_max = 10'000'000;
constexpr uint32_t batch_max = 1u << 24;
constexpr double days_max = 3650;
// New sites go last: each run draws every site in this order, so one added does not change what
// earlier ones draw.
const char* const fault_sites[] = {
    "skip_ssp_gate", "lose_log_tail", "skip_resync",       "garble_control",
    "forge_ps",      "forget_clocks", "replica_ack_early", "replica_forget_clocks"};
}  // namespace

Status validate(const SimOptions& o) {
  if (o.nodes < 1 || o.nodes > nodes_max)
    return Status::invalid_input(fmt::format("--nodes must be in 1..{}", nodes_max));
  if (o.gpus_per_node < 1 || o.gpus_per_node > gpus_max)
    return Status::invalid_input(fmt::format("--gpus-per-node must be in 1..{}", gpus_max));
  if (o.ps < 1 || o.ps > ps_max)
    return Status::invalid_input(fmt::format("--ps must be in 1..{}", ps_max));
  if (o.steps < 1 || o.steps > steps_max)
    return Status::invalid_input(fmt::format("--steps must be in 1..{}", steps_max));
  if (o.batch < 1 || o.batch > batch_max)
    return Status::invalid_input(fmt::format("--batch must be in 1..{}", batch_max));
  if (o.model.kind != ModelKind::lr && (o.model.dim < 1 || o.model.dim > max_fm_dim))
    return Status::invalid_input(fmt::format("--dim must be in 1..{}", max_fm_dim));
  if (o.model.deep()) {
    if (o.push == PushKind::flat && uint64_t{o.nodes} * o.gpus_per_node > 1)
      return Status::invalid_input(fmt::format(
          "--push flat: --model {} with more than one worker needs --push hierarchical (the "
          "node aggregators all-reduce its dense layers)",
          to_string(o.model.kind)));
    if (auto m = Model::make(o.model); !m.ok())
      return Status::invalid_input("--model: " + m.status().message());
  }
  if (Status s = validate(o.network); !s.ok()) return s;
  const ComputeSpec& c = o.compute;
  for (auto [v, flag] : {std::pair{c.cpu_lr_samples_per_sec, "--cpu-lr-samples-per-sec"},
                         std::pair{c.cpu_fm8_samples_per_sec, "--cpu-fm-samples-per-sec"},
                         std::pair{c.cpu_dense_flops_per_sec, "--cpu-dense-flops"},
                         std::pair{c.gpu_speedup, "--gpu-speedup"}})
    if (!(std::isfinite(v) && v > 0))
      return Status::invalid_input(fmt::format("{} must be a positive number", flag));
  if (o.cpus_per_host > 4096) return Status::invalid_input("--cpus-per-host must be in 0..4096");
  if (o.checkpoint.interval_s > 0 && o.numerics == Numerics::full && o.days == 0)
    return Status::invalid_input(
        "--checkpoint-interval needs --numerics modelled or --days (full numerics recover shards "
        "from their log)");
  if ((o.colocate || o.cpus_per_host > 0) && o.numerics != Numerics::full && o.days == 0)
    return Status::invalid_input("--colocate and --cpus-per-host need --numerics full");
  if (!(c.shard_ns_per_row >= 0 && c.shard_ns_per_row <= 1e9))
    return Status::invalid_input("--shard-ns-per-row must be in 0..1e9");
  if (!(c.worker_ns_per_sample >= 0 && c.worker_ns_per_sample <= 1e9))
    return Status::invalid_input("--worker-ns-per-sample must be in 0..1e9");
  if (!(c.jitter >= 0 && c.jitter <= 10)) return Status::invalid_input("--jitter must be in 0..10");
  if (o.heartbeat_ms < 1 || o.heartbeat_timeout_ms <= o.heartbeat_ms)
    return Status::invalid_input(
        fmt::format("--heartbeat-timeout-ms {} must be above --heartbeat-ms {} (at least 1)",
                    o.heartbeat_timeout_ms, o.heartbeat_ms));
  if (!(o.rto_s > 0 && o.rto_s <= 3600))
    return Status::invalid_input("--rto-seconds must be in (0, 3600]");
  if (!(o.checkpoint.interval_s >= 0 && std::isfinite(o.checkpoint.interval_s)))
    return Status::invalid_input("--checkpoint-interval must be zero or more");
  if (!(o.checkpoint.cost_s >= 0 && std::isfinite(o.checkpoint.cost_s)))
    return Status::invalid_input("--checkpoint-cost must be zero or more");
  if (o.checkpoint.interval_s > 0 && o.checkpoint.interval_s <= o.checkpoint.cost_s)
    return Status::invalid_input("--checkpoint-interval must be longer than --checkpoint-cost");
  if (!(o.days >= 0 && o.days <= days_max))
    return Status::invalid_input(fmt::format("--days must be in 0..{}", days_max));
  if (!(o.restart_s >= 0 && std::isfinite(o.restart_s)))
    return Status::invalid_input("--restart-seconds must be zero or more");
  if (!(o.progress_bound_s >= 0 && std::isfinite(o.progress_bound_s)))
    return Status::invalid_input("--progress-bound must be zero or more");
  for (const std::string& s : o.force_sites)
    if (std::find(std::begin(fault_sites), std::end(fault_sites), s) == std::end(fault_sites))
      return Status::invalid_input("--fault-site " + s +
                                   ": not one of skip_ssp_gate, lose_log_tail, skip_resync, "
                                   "garble_control, forge_ps, forget_clocks, replica_ack_early, "
                                   "replica_forget_clocks");
  if (o.replicas < 1 || o.replicas > o.ps)
    return Status::invalid_input(fmt::format(
        "--ps-store replicated:{}: the replicas must be in 1..--ps ({})", o.replicas, o.ps));
  if (o.replicas > 1 && o.colocate)
    return Status::invalid_input(
        "--ps-store replicated:K replicates shards between ps hosts: --colocate has one host");
  if (o.numerics == Numerics::full && o.days == 0 && uint64_t{o.nodes} * o.gpus_per_node > 4096)
    return Status::invalid_input(
        "--numerics full runs the real cores: at most 4096 workers (use modelled)");
  return Status();
}

double step_compute_seconds(const ComputeSpec& c, const ModelSpec& model, uint64_t samples) {
  // FM's per-sample work is about proportional to the row width (1 + dim); a deep model adds
  // 6 FLOPs a dense parameter (forward, and the backward's two products).
  double per_sample = model.kind == ModelKind::lr
                          ? 1.0 / c.cpu_lr_samples_per_sec
                          : double(1 + model.dim) / 9.0 / c.cpu_fm8_samples_per_sec;
  if (model.deep()) {
    auto m = Model::make(model);
    COLONY_ASSERT(m.ok(), "simulated model: {}", m.status().message());
    per_sample += 6.0 * double((*m)->dense_params()) / c.cpu_dense_flops_per_sec;
  }
  if (c.gpu) per_sample /= c.gpu_speedup;
  return double(samples) * per_sample;
}

namespace detail {
std::vector<std::string> enabled_sites(const SimOptions& o) {
  std::vector<std::string> on;
  SplitMix64 rng(hash_combine(o.seed, 0xb0661f1));
  for (const char* site : fault_sites) {
    const bool forced =
        std::find(o.force_sites.begin(), o.force_sites.end(), site) != o.force_sites.end();
    const bool drawn =
        rng.uniform() < 0.5;  // drawn for every site, so one site's choice does not shift another's
    if (forced || (o.buggify && drawn)) on.emplace_back(site);
  }
  return on;
}
}  // namespace detail

namespace {

// Job-level goodput: the step time from a short fault-free modelled run, then failures
// (crashes in the trace) and checkpoints over `days`, walked in time order (a job-level event
// loop: the next failure or checkpoint, whichever comes first). A failure loses the work since the
// last completed checkpoint and costs restart_s; a checkpoint pauses the job for its cost.
Expected<SimResult> simulate_goodput(const SimOptions& o,
                                     const std::function<void(double)>& progress) {
  SimOptions probe = o;
  probe.days = 0;
  probe.steps = std::min<uint32_t>(o.steps, 20);
  probe.trace = {};
  probe.checkpoint = {};
  probe.numerics = Numerics::modelled;
  auto step = detail::simulate_modelled(probe, nullptr);
  if (!step) return step.status();
  SimResult r;
  r.numerics = "goodput";
  r.sites_enabled = step->sites_enabled;
  r.invariant_violations = step->invariant_violations;
  r.step_seconds = step->simulated_seconds / probe.steps;
  r.comm_overhead_fraction = step->comm_overhead_fraction;
  r.gate_wait_fraction = step->gate_wait_fraction;
  r.dense_wait_fraction = step->dense_wait_fraction;
  const double horizon = o.days * 86400.0;
  const double interval = o.checkpoint.interval_s, cost = o.checkpoint.cost_s;
  std::vector<double> failures;
  for (const FaultEvent& e : o.trace.events)
    if (e.kind == FaultKind::crash && e.at_s < horizon) failures.push_back(e.at_s);
  uint64_t events = 0;  // job-level events: failures, checkpoints, the end
  uint64_t hash = 0;
  double saved = 0, since = 0;  // work (seconds) kept by checkpoints, and since the last one
  double t = 0;
  size_t next_failure = 0;
  // Walk the job's life: run until the next checkpoint or failure, whichever is first.
  while (t < horizon) {
    const bool failing = next_failure < failures.size();
    const double fail_at = failing ? failures[next_failure] : horizon;
    const double ckpt_at = interval > 0 ? t + (interval - since) : horizon;
    if (failing && (interval == 0 || fail_at < ckpt_at + cost)) {
      // A failure before the next checkpoint completes: the work since the last one is lost.
      since = 0;
      t = fail_at + o.restart_s;
      ++next_failure;
      ++r.failures_injected;
      // Failures while restarting restart the restart.
      while (next_failure < failures.size() && failures[next_failure] < t) {
        t = failures[next_failure] + o.restart_s;
        ++next_failure;
        ++r.failures_injected;
      }
    } else if (ckpt_at < horizon) {
      t = ckpt_at + cost;
      saved += interval;
      since = 0;
      ++r.checkpoints;
    } else {
      since += horizon - t;
      t = horizon;
    }
    ++events;
    hash = hash_combine(hash, hash_combine(static_cast<uint64_t>(t * 1e6), r.failures_injected));
    if (progress) progress(std::min(t, horizon) / horizon);
  }
  const double useful = std::min(horizon, saved + since);
  r.simulated_seconds = horizon;
  r.events = events;
  r.effective_training_time_ratio = horizon > 0 ? useful / horizon : 0.0;
  const uint64_t samples_per_step = uint64_t{o.nodes} * o.gpus_per_node * o.batch;
  r.steps = static_cast<uint64_t>(useful / r.step_seconds) * o.nodes * o.gpus_per_node;
  r.samples = static_cast<uint64_t>(useful / r.step_seconds) * samples_per_step;
  r.samples_per_sec_simulated = horizon > 0 ? double(r.samples) / horizon : 0.0;
  const double per_second = o.trace.events.empty() ? 0.0 : double(failures.size()) / horizon;
  r.mtbf_seconds = per_second > 0 ? 1.0 / per_second : 0.0;
  r.young_daly_interval_seconds = r.mtbf_seconds > 0 ? std::sqrt(2.0 * r.mtbf_seconds * cost) : 0.0;
  r.event_trace_hash = hash_combine(hash, r.events);
  return r;
}

}  // namespace

Expected<SimResult> simulate(const SimOptions& options,
                             const std::function<void(double)>& progress) {
  if (Status s = validate(options); !s.ok()) return s;
  if (options.days > 0) return simulate_goodput(options, progress);
  return options.numerics == Numerics::full ? detail::simulate_full(options, progress)
                                            : detail::simulate_modelled(options, progress);
}

std::string timeline_json(const SimResult& r) {
  return colony::timeline_json(Timeline{r.timeline, r.timeline_truncated});
}

}  // namespace colony::sim
