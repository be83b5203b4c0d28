// Time back to full throughput after a crash, read off a run's step completion times.
//
// The rate before the crash is how long the last `window_steps` steps completed before it took
// (a span W). Full throughput is back at the first step completed after the crash that starts
// `window_steps` consecutive completions taking at most W / fraction; the time back is from the
// crash to that step. A run of one worker or a thousand is measured the same way: the window is
// counted in steps of every worker together (the simulator uses 20 rounds of every worker's
// steps), so it adapts to the run's own pace and needs no absolute rate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/event_queue.h"
#include "sim/faults.h"

namespace colony::sim {

struct ThroughputRecovery {
  double crash_s = 0.0;  // when the host went down
  // Seconds from the crash to full throughput; empty when not measured, and `why` says why:
  // fewer than window_steps steps completed before the crash, or the run ended before a full
  // window completed at the rate.
  std::optional<double> back_s;
  std::string why;
  // The rate the run settled at after the crash, which may stay below the full one (a failover
  // leaves a ps host serving two shards): that of its last window_steps steps, as a fraction of
  // the rate before the crash, and the seconds from the crash to the first window_steps
  // consecutive completions at that rate (within `fraction`). Empty when either window is
  // missing (fewer than window_steps steps before the crash or after it). The run's end is every
  // crash's: a later crash's effect is in an earlier one's steady rate.
  std::optional<double> steady_rate;
  std::optional<double> steady_s;
};

// One entry per crash in `crashes` (virtual times, any order), in that order. `step_ends` are
// the completion times of every step of the run (any order; taken by value to sort).
// `window_steps` must be at least 2 and `fraction` in (0, 1] (asserted: the simulator chooses
// them, not its input). O((steps + crashes) log steps).
std::vector<ThroughputRecovery> throughput_recovery(std::vector<VirtualNanos> step_ends,
                                                    const std::vector<VirtualNanos>& crashes,
                                                    uint64_t window_steps, double fraction = 0.95);

// The times of `trace`'s crashes of ps hosts, in the trace's order.
std::vector<VirtualNanos> ps_crash_times(const FaultTrace& trace);

}  // namespace colony::sim
