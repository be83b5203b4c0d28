#include "worker/counters.h"

namespace colony {

WorkerCounters core_counters(std::span<const WorkerCore* const> replicas,
                             std::span<const AggregatorCore* const> aggregators) {
  WorkerCounters c;
  for (const WorkerCore* w : replicas) {
    const WorkerStats& st = w->stats();
    c.samples += st.samples;
    c.loss_sum += st.loss_sum;
    c.steps += st.steps;
    c.pull_messages += st.pull_messages;  // 0 under hierarchical push: the aggregator pulls
    c.pushes_resent += w->pushes_resent();
    c.replies_dropped += st.replies_dropped;
    c.steps_skipped += st.steps_skipped;
    if (aggregators.empty()) {
      c.push_messages += st.push_messages;
      c.push_bytes += st.push_bytes;
      c.pull_bytes += w->pull_bytes();
    }
  }
  for (const AggregatorCore* a : aggregators) {
    c.pull_messages += a->stats().pull_messages;
    c.push_messages += a->stats().push_messages;
    c.push_bytes += a->stats().push_bytes;
    c.pull_bytes += a->pull_bytes();
    c.pushes_resent += a->pushes_resent();
    c.replies_dropped += a->stats().replies_dropped;
    c.bad_messages += a->stats().dense_refused;
  }
  return c;
}

}  // namespace colony
