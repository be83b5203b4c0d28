#include "sim/throughput_recovery.h"

#include <algorithm>

#include "common/status.h"

namespace colony::sim {

std::vector<ThroughputRecovery> throughput_recovery(std::vector<VirtualNanos> step_ends,
                                                    const std::vector<VirtualNanos>& crashes,
                                                    uint64_t window_steps, double fraction) {
  COLONY_ASSERT(window_steps >= 2 && fraction > 0.0 && fraction <= 1.0,
                "window of {} steps at {} of the rate", window_steps, fraction);
  std::sort(step_ends.begin(), step_ends.end());
  const size_t n = window_steps;
  std::vector<ThroughputRecovery> out;
  out.reserve(crashes.size());
  for (VirtualNanos crash : crashes) {
    ThroughputRecovery r;
    r.crash_s = double(crash) / 1e9;
    // Steps completed up to the crash (inclusive), and the first completed after it.
    const size_t after = static_cast<size_t>(
        std::upper_bound(step_ends.begin(), step_ends.end(), crash) - step_ends.begin());
    if (after < n) {
      r.why = "fewer than " + std::to_string(n) + " steps completed before the crash";
      out.push_back(std::move(r));
      continue;
    }
    const double before = double(step_ends[after - 1] - step_ends[after - n]);
    const double allowed = before / fraction;
    for (size_t i = after; i + n <= step_ends.size(); ++i) {
      if (double(step_ends[i + n - 1] - step_ends[i]) <= allowed) {
        r.back_s = double(step_ends[i] - crash) / 1e9;
        break;
      }
    }
    if (!r.back_s)
      r.why = "the run ended before " + std::to_string(n) + " steps completed at the rate";
    if (step_ends.size() - after >= n) {
      const double last = double(step_ends.back() - step_ends[step_ends.size() - n]);
      r.steady_rate = last > 0 ? before / last : 1.0;
      for (size_t i = after; i + n <= step_ends.size(); ++i)
        if (double(step_ends[i + n - 1] - step_ends[i]) <= last / fraction) {
          r.steady_s = double(step_ends[i] - crash) / 1e9;
          break;
        }
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<VirtualNanos> ps_crash_times(const FaultTrace& trace) {
  std::vector<VirtualNanos> out;
  for (const FaultEvent& e : trace.events)
    if (e.kind == FaultKind::crash && !e.hosts.empty() && e.hosts[0].shard)
      out.push_back(static_cast<VirtualNanos>(e.at_s * 1e9));
  return out;
}

}  // namespace colony::sim
