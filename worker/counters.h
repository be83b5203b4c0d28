// The training counters of a process's worker cores (ps/cluster_protocol.h's WorkerCounters),
// read the same way by the member daemon, the embedded cluster and the simulator.
#pragma once

#include <span>

#include "ps/cluster_protocol.h"
#include "worker/aggregator_core.h"
#include "worker/worker_core.h"

namespace colony {

// The counters of `replicas` and of their node aggregators (none under flat push): the replicas'
// samples, loss, steps, pulls, and everyone's re-sent pushes and unmatched replies; the pushes
// (messages and bytes) the shards received from these cores, which under hierarchical push are
// the aggregators' alone. Input lines, bad messages and CPU are the driver's to add (its readers
// and process know them).
WorkerCounters core_counters(std::span<const WorkerCore* const> replicas,
                             std::span<const AggregatorCore* const> aggregators);

}  // namespace colony
