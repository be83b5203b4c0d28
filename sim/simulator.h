// The discrete-event simulator of a Colony cluster: virtual clock, modelled network and
// compute, injected faults, invariants checked on every run.
//
// Two numerics:
//   - full: the real ShardCore, WorkerCore and AggregatorCore (the same classes the CAF actors
//     drive) exchange real PsMessages, with real rows and gradients, over the modelled network.
//     A core processes its messages one at a time (FIFO, like an actor); its replies leave
//     when its modelled compute is done. The real CoordinatorCore runs on a host of its own:
//     every host joins it, heartbeats, and is declared lost by its timeout (not colocated runs:
//     the embedded cluster has no coordinator). For small clusters.
//   - modelled: a stand-in per node (not the real cores) that follows the same protocol at the
//     granularity of a node-step: pull the node's rows from every shard (flat: every GPU its
//     own; hierarchical: the node's distinct keys once, fanned out over the intra-host link),
//     compute, push (flat: every GPU to every shard; hierarchical: reduce over the intra-host
//     link, then one push per shard), under the same consistency gate (SSP(k) over the slowest
//     node's pushed clock, plus read-my-writes). Key counts per step come from the real generator
//     and BatchIndex. For thousand-node runs.
// And a job-level goodput mode (days > 0): the step time is measured by a short modelled run,
// then failures and checkpoints are simulated over days (rollback to the last checkpoint).
//
// Determinism: every random choice derives from `seed` through SplitMix64 streams seeded from it
// (the run's events, the fault sites; generate_trace takes the same seed); nothing reads a clock
// or starts a thread. Same options, same result (wall time is not part of it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/timeline.h"
#include "common/value_format.h"
#include "data/generator.h"
#include "models/model.h"
#include "ps/protocol.h"
#include "sim/faults.h"
#include "sim/network.h"
#include "sim/throughput_recovery.h"

namespace colony::sim {

enum class Numerics : uint8_t { full, modelled };
enum class PushKind : uint8_t { flat, hierarchical };

struct ComputeSpec {
  // Samples per second of one CPU core, measured with `colony bench train` on the machine the
  // defaults were taken on (docs/simulation.md); FM cost grows with (1 + dim) from dim 8.
  double cpu_lr_samples_per_sec = 1.41e6;
  double cpu_fm8_samples_per_sec = 0.64e6;
  // One GPU's samples per second over one CPU core's, for these sparse models: an assumed
  // profile, not a measurement (docs/simulation.md says where it comes from).
  double gpu_speedup = 25.0;
  // FLOP/s of one CPU core on a deep model's dense layers, forward and backward (6 FLOPs a
  // dense parameter a sample); its embeddings cost what FM's of the same width do. Calibrated on
  // `colony bench train --model deepfm` (docs/simulation.md).
  double cpu_dense_flops_per_sec = 92e9;
  bool gpu = true;                     // the per-node devices are GPUs (else CPU cores)
  double shard_ns_per_row = 40.0;      // a shard reading or updating one row
  double aggregator_ns_per_row = 5.0;  // summing one row of one replica
  // Full numerics: a worker core's CPU per sample beyond the step's compute (handling pull
  // replies and building pushes in an actor). 0 unless given; `colony sim --colocate` uses
  // embedded_worker_ns_per_sample.
  double worker_ns_per_sample = 0.0;
  double jitter = 0.0;  // coefficient of variation of a step's compute time (lognormal)
};

// The embedded cluster's worker overhead, calibrated in CPU time (not wall time, so the load of
// the machine does not enter): `colony train --shards 2 --workers 2` spent 3.60 us of CPU a
// sample, `colony train --engine local` 1.56 us on the same data, and the model's shards 0.5 us;
// the remaining 1.5 us is charged to the worker core (docs/simulation.md, Fidelity).
inline constexpr double embedded_worker_ns_per_sample = 1500.0;

struct CheckpointSpec {
  double interval_s = 0.0;  // 0: no checkpoints
  double cost_s = 60.0;     // the job pauses this long per checkpoint
};

struct SimOptions {
  uint32_t nodes = 2;
  uint32_t gpus_per_node = 1;
  uint32_t ps = 2;
  uint32_t steps = 100;  // per worker
  PushKind push = PushKind::hierarchical;
  Numerics numerics = Numerics::full;
  Consistency consistency;  // BSP by default
  // FM dim 8 by default. A deep model (DeepFM, DLRM, DCN-v2: full numerics only) trains on the
  // generator's rows as Criteo TSV reads them: 26 categorical fields and 13 dense features.
  ModelSpec model;
  uint32_t batch = 512;  // samples per worker (GPU) per step
  // How rows travel (as `colony train --wire-format` and `--push-format`): pull replies in
  // `wire_format`, pushes (to the shards, and a replica's to its aggregator) in `push_format`.
  // Full numerics run the real cores' rounding; both numerics charge the network a row's bytes
  // in its format (common/value_format.h row_bytes: int8 with its scale).
  ValueFormat wire_format = ValueFormat::fp32;
  ValueFormat push_format = ValueFormat::fp32;
  // Full numerics: every core (shards too) on one host, as in `colony train`'s embedded
  // cluster; messages cross the intra-host link.
  bool colocate = false;
  // Full numerics: the cores of a host share this many CPUs; a core holds one while it handles a
  // message (compute included). 0: every core has a CPU of its own.
  uint32_t cpus_per_host = 0;
  uint64_t seed = 1;
  NetworkSpec network;
  ComputeSpec compute;
  FaultTrace trace;
  CheckpointSpec checkpoint;
  double rto_s = 0.2;  // a dropped message is re-sent after this
  // Seeded fault sites (BUGGIFY): each is switched on for a run with probability 1/2 drawn
  // from the seed when `buggify` is set, or forced on by name.
  bool buggify = false;
  // "skip_ssp_gate", "lose_log_tail", "skip_resync", "garble_control", "forge_ps",
  // "forget_clocks"
  std::vector<std::string> force_sites;
  // A live worker must complete a step within this long after the last fault heals (0: a
  // bound derived from the step time).
  double progress_bound_s = 0.0;
  // Job-level goodput mode: simulate this many days of failures and checkpoints.
  double days = 0.0;
  double restart_s = 600.0;  // goodput mode: time to restart the job after a failure
  // The data of full numerics (batches of rows from the planted-model generator). Null: one is
  // made from `seed` with Criteo-sized vocabularies, as `colony train` generates. Sharing one
  // between runs saves its calibration (tens of ms); its rows are a pure function of its config.
  std::shared_ptr<const Generator> generator;
  bool record_timeline = false;
  uint64_t events_max = 200'000'000;  // bound on events; exceeding it is a reported failure
  // Full numerics, not colocated: the coordinator core's heartbeat interval and the silence after
  // which it declares a member lost (as `colony coordinator
  // --heartbeat-ms/--heartbeat-timeout-ms`). Modelled numerics under replication: the timeout
  // after which a crashed ps host's shards fail over.
  uint32_t heartbeat_ms = 1000;
  uint32_t heartbeat_timeout_ms = 10'000;
  // Full numerics, not colocated: the ps members keep their rows in a durable store (as
  // `colony ps --store rocksdb:DIR`), so a crashed one resumes; false: in memory (--store
  // memory), so a crashed ps fails the job.
  bool durable_ps = true;
  // Not colocated: each shard's rows on this many ps hosts (1..ps), its own and the next
  // replicas - 1, kept in memory (durable_ps is ignored): a push is acknowledged once every live
  // replica has applied it (ps/replication.h). Full numerics run it on the real cores: a crashed
  // ps host that joins again takes its shards back from their most advanced live backup
  // (ShardBackup::promote), as the durable store's restart does, with no disk, and a shard whose
  // every replica is lost fails the job. Modelled numerics charge what it costs: the forwards'
  // bytes, the backups' CPU, the acknowledgements' round trip before a push completes; and they
  // fail a ps host that crashes (after heartbeat_timeout_ms) or stops (at once) over as the
  // daemons' coordinator does: each shard it served moves to the next of its replicas on a host
  // still in the job, which serves it beside its own from then on, and the host serves nothing
  // again; a shard with no replica left fails the job.
  uint32_t replicas = 1;
};

// Checks options; fails with invalid_input naming the flag.
Status validate(const SimOptions& options);

struct SimResult {
  double simulated_seconds = 0.0;
  uint64_t events = 0;
  uint64_t samples = 0;
  uint64_t steps = 0;  // over all workers (GPUs)
  double samples_per_sec_simulated = 0.0;
  double comm_overhead_fraction = 0.0;  // worker-time not spent computing
  // Worker-time its pulls were held by the shards (SSP gate or read-my-writes); full numerics
  // take the longest hold among a step's pulls, modelled numerics the time a node waits.
  double gate_wait_fraction = 0.0;
  // Modelled numerics, a deep model: node-time spent ready to compute but waiting for the dense
  // all-reduce's sum of the previous step (0 otherwise).
  double dense_wait_fraction = 0.0;
  double effective_training_time_ratio = 1.0;  // worker-time not lost to failures or checkpoints
  uint64_t failures_injected = 0;
  std::vector<std::string> invariant_violations;
  uint64_t messages = 0;
  uint64_t bytes = 0;
  uint64_t event_trace_hash = 0;  // over every event's time and kind: equal runs, equal hash
  std::string numerics;
  std::vector<std::string> sites_enabled;
  // The fault-free compute time of one step; goodput mode: the whole step (compute and
  // communication) measured by its probe run.
  double step_seconds = 0.0;
  double mtbf_seconds = 0.0;                 // goodput mode
  double young_daly_interval_seconds = 0.0;  // goodput mode: sqrt(2 x MTBF x cost)
  uint64_t checkpoints = 0;
  // Full numerics with a coordinator: the members it took, the worker members it declared lost
  // (heartbeat timeout), and why it failed the job (empty: it did not).
  uint32_t members = 0;
  uint32_t workers_lost = 0;
  std::string job_error;
  // Full numerics with a coordinator: durable ps members welcomed back after a crash, and the
  // clients that resynced with their restarted shards (the real recovery path:
  // ShardCore::begin_resync, KvClient::resync on ShardsRestarted).
  uint32_t ps_restarts = 0;
  uint64_t resyncs = 0;
  // Replicated shards (replicas > 1): backups made anew from a live primary in place of one lost
  // or promoted (re-replication).
  uint32_t backups_rebuilt = 0;
  // Modelled numerics, replicated: shards moved to a backup's host after their ps host went down
  // (failover). Full numerics take a crashed host's shards back on it when it restarts instead.
  uint32_t ps_failovers = 0;
  // What the invariants count across ps crashes (each is a violation too): store commits a
  // shard had acknowledged pushes of and its store did not hold at the crash, and pushes a
  // restarted shard committed a second time (a re-sent one its store already held).
  uint64_t acked_commits_lost = 0;
  uint64_t pushes_applied_twice = 0;
  // For each crash of a ps host in the trace: the time back to full throughput
  // (sim/throughput_recovery.h), over windows of 20 steps of every worker (modelled numerics:
  // of every node).
  std::vector<ThroughputRecovery> ps_crash_recovery;
  // The garble_control and forge_ps sites: control messages duplicated, replayed, garbled or
  // sent in another member's name; ps messages forged in another member's name. Every forged or
  // garbled one must be refused: bad_messages counts what the coordinator, the member cores and
  // the bridges' checks refused.
  uint64_t control_faults = 0;
  uint64_t ps_forged = 0;
  uint64_t bad_messages = 0;
  // Chrome trace events (common/timeline.h): role worker or ps by host, phase as category.
  std::vector<TimelineEvent> timeline;
  bool timeline_truncated = false;
};

// Runs the simulation. Fails with invalid_input for bad options; a run that deadlocks, hits
// events_max or whose cores fail is not an error: it is reported in invariant_violations.
// `progress(fraction)` is called now and then when given.
Expected<SimResult> simulate(const SimOptions& options,
                             const std::function<void(double)>& progress = nullptr);

// Writes the timeline as Chrome trace-event JSON (opens in Perfetto / chrome://tracing).
std::string timeline_json(const SimResult& result);

// Seconds of compute for `samples` samples of `model` on one device (CPU core or GPU).
double step_compute_seconds(const ComputeSpec& compute, const ModelSpec& model, uint64_t samples);

namespace detail {
// The two step-level engines behind simulate().
Expected<SimResult> simulate_full(const SimOptions& options,
                                  const std::function<void(double)>& progress);
Expected<SimResult> simulate_modelled(const SimOptions& options,
                                      const std::function<void(double)>& progress);
// Fault sites switched on for this run (from the seed and force_sites).
std::vector<std::string> enabled_sites(const SimOptions& options);
}  // namespace detail

}  // namespace colony::sim
