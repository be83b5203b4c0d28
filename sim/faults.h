// Fault traces: timed failures the simulator injects, read from a JSON file or generated from
// per-component failure rates. The format is documented in docs/simulation.md.
//
// Hosts are named by role and index: worker node n (0..nodes-1) or PS shard s (0..ps-1).
// Times and durations are simulated seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/event_queue.h"

namespace colony::sim {

struct HostRef {
  bool shard = false;  // false: worker node
  uint32_t index = 0;
  // The coordinator's host (full numerics runs it on a host of its own). Only a partition side
  // may name it; `shard` and `index` are then unused.
  bool coordinator = false;
  bool operator==(const HostRef&) const = default;
};

enum class FaultKind : uint8_t {
  crash,      // host down for `duration`, then restarts (restart_after)
  partition,  // no traffic between side_a and side_b for `duration`
  clog,       // host's NIC bandwidth divided by `factor` for `duration`
  slow,       // host computes `factor` times slower for `duration`
  lossy,      // messages dropped / duplicated / reordered at these rates for `duration`
  disk_full,  // a shard cannot log pushes for `duration` (pushes wait; pulls go on)
  stop,       // a ps host gets SIGTERM: it drains and leaves; started again `duration` later
};
const char* to_string(FaultKind kind);

struct FaultEvent {
  double at_s = 0.0;
  FaultKind kind = FaultKind::crash;
  double duration_s = 0.0;
  std::vector<HostRef> hosts;   // crash, clog, slow, disk_full, stop: one; partition: side a
  std::vector<HostRef> side_b;  // partition only
  double factor = 1.0;          // clog, slow
  double drop = 0.0, duplicate = 0.0, reorder = 0.0;  // lossy
  std::string cause;  // generated traces: gpu, memory, network, other
};

struct FaultTrace {
  std::vector<FaultEvent> events;  // sorted by at_s (stable)
};

// Parses a trace file. Fails with invalid_input naming the file and the field (e.g.
// "trace.json: events[3].duration: must be a number >= 0") for malformed JSON, unknown kinds,
// missing or out-of-range fields, or hosts outside [0, nodes) / [0, ps); not_found when the
// file cannot be read. Never crashes on any input.
Expected<FaultTrace> load_trace(const std::string& path, uint32_t nodes, uint32_t ps);
// The same from JSON text; `name` is used in messages in place of the file name.
Expected<FaultTrace> parse_trace(const std::string& text, const std::string& name, uint32_t nodes,
                                 uint32_t ps);

// Per-component failure rates. The default profile: about 4.7e-4 unexpected interruptions per
// GPU-day (Meta's Llama 3 report: 419 in 54 days on 16,384 GPUs), of which 30% GPU, 17% GPU
// memory (HBM), 8% network, the rest other causes.
struct FailureProfile {
  double per_gpu_day = 4.7e-4;
  double gpu_share = 0.30, memory_share = 0.17, network_share = 0.08;
  double rate_scale = 1.0;       // multiplies every rate (short runs need large ones)
  double restart_s = 600.0;      // a crashed host is back after this
  double network_heal_s = 60.0;  // a network failure (partition) lasts this long
};

struct TraceGenOptions {
  uint32_t nodes = 1, gpus_per_node = 1, ps = 1;
  double horizon_s = 1.0;  // events fall in [0, horizon_s)
  FailureProfile profile;
  // Chaos additions for tests: at least this many crashes and partitions, at random times.
  uint32_t min_crashes = 0, min_partitions = 0;
  // Also add random slow/clog/lossy episodes (chaos testing).
  bool chaos_extras = false;
};

// A trace drawn from the profile (Poisson arrivals per component) and the chaos minimums, a
// pure function of (options, seed). GPU and GPU-memory failures crash a worker node; other
// failures crash any host (worker node or PS shard, uniformly); network failures cut one node
// off from every other host, the coordinator's included. Chaos crashes and partitions hit any host
// and last 2% to 20% of the horizon.
FaultTrace generate_trace(const TraceGenOptions& options, uint64_t seed);

// The trace as a trace file that parse_trace reads back to the same events (generated events
// keep their cause as an extra "cause" field, which the parser ignores).
std::string trace_json(const FaultTrace& trace);

// Concatenates and re-sorts (stable) two traces.
FaultTrace merge(FaultTrace a, const FaultTrace& b);

}  // namespace colony::sim
