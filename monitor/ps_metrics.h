// The parameter server's live metrics, by the names Prometheus will see (docs/monitoring.md):
// what a shard's actor and a worker's actor record as they handle messages. The actors look
// their instruments up once, when they start, and then only touch atomics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "monitor/hot_keys.h"
#include "monitor/registry.h"

namespace colony::monitor {

// How many of each shard's hottest keys /metrics lists, and the share of pulls counted for
// them (one in hot_keys_sample_every; `colony bench metrics` measured counting every one).
inline constexpr size_t hot_keys_listed = 10;
inline constexpr uint32_t hot_keys_sample_every = 8;

struct ShardInstruments {
  Gauge* rows = nullptr;              // colony_shard_rows
  Gauge* bytes = nullptr;             // colony_shard_bytes: rows' parameters and optimizer state
  Gauge* queue = nullptr;             // colony_shard_queue_messages: waiting in its mailbox
  Counter* pulls = nullptr;           // colony_shard_requests_total{kind="pull"}
  Counter* pushes = nullptr;          // colony_shard_requests_total{kind="push"}
  Counter* clocks = nullptr;          // colony_shard_requests_total{kind="clock"}
  Counter* rows_pulled = nullptr;     // colony_shard_rows_pulled_total
  Counter* rows_pushed = nullptr;     // colony_shard_rows_pushed_total
  Counter* pulls_deferred = nullptr;  // colony_shard_pulls_deferred_total: held for the gate
  Counter* not_finite = nullptr;      // colony_shard_pushes_refused_total{reason="not_finite"}
  // colony_shard_pushes_refused_total{reason="keys_unknown"}: push parts that left out the keys
  // of a pull the shard did not hold (the client sends the push again with them).
  Counter* keys_unknown = nullptr;
  // colony_shard_updates_refused_total{reason="not_finite"}: row updates from finite gradients
  // that would have made a row NaN or infinite (the row kept as it was).
  Counter* updates_not_finite = nullptr;
  // colony_shard_messages_refused_total: replies sent to a shard, pulls past the waiting limit.
  Counter* refused = nullptr;
  // colony_shard_hot_key_pulls{shard, key}: the shard's most-pulled keys, counted as it serves.
  std::shared_ptr<HotKeys> hot_keys;
};
// The instruments of shard `index` (label shard="<index>"). A shard made again with the same
// index (restarted) counts its hot keys afresh.
ShardInstruments shard_instruments(Registry& registry, uint32_t index);

struct WorkerInstruments {
  Histogram* pull_seconds = nullptr;  // colony_pull_seconds: request sent to its reply
  Histogram* push_seconds = nullptr;  // colony_push_seconds: push sent to its acknowledgement
  // colony_read_staleness_steps: how many clocks behind the pull's step the slowest sender was
  // when the rows were read (0 under BSP; up to k under SSP(k)).
  Histogram* staleness = nullptr;
};
// One set for all the workers of a process (a histogram sums them anyway).
WorkerInstruments worker_instruments(Registry& registry);
// The bucket bounds of colony_read_staleness_steps (8: 0, 1, 2, 4, ... 64 steps) and of the
// latency histograms (16: 50 us doubling to 1.6 s); each histogram has a +Inf bucket more.
std::vector<double> staleness_bounds();
std::vector<double> latency_bounds();

// One of a shard's hot keys and its estimated pulls.
struct HotKeyCount {
  uint32_t shard = 0;
  uint64_t key = 0;
  uint64_t pulls = 0;
};
// The hot keys colony_shard_hot_key_pulls lists now: those of every shard made in this process
// (shard_instruments), by shard.
std::vector<HotKeyCount> shard_hot_keys(Registry& registry);

// colony_cluster_*: the load the members' heartbeats report, as the coordinator exports it for
// its dashboard (the members' own /metrics have the same numbers per process).
struct ClusterInstruments {
  Histogram* staleness = nullptr;     // colony_cluster_read_staleness_steps
  Histogram* pull_seconds = nullptr;  // colony_cluster_pull_seconds
  Histogram* push_seconds = nullptr;  // colony_cluster_push_seconds
  // colony_cluster_shard_rows_served_total{shard} and _pulled_total{shard}
  Counter& rows_served(uint32_t shard);
  Counter& rows_pulled(uint32_t shard);
  // colony_cluster_hot_key_pulls{shard, key}: replaces what it lists with `keys`.
  void list_hot_keys(std::vector<HotKeyCount> keys);

  Registry* registry = nullptr;
  std::shared_ptr<void> hot_keys{};  // the listing, shared with its reader
};
ClusterInstruments cluster_instruments(Registry& registry);

// colony_train_*: the job's progress, from its driver (`colony train`, the coordinator).
struct TrainInstruments {
  Counter* samples = nullptr;      // colony_train_samples_total
  Gauge* logloss = nullptr;        // colony_train_logloss: progressive, over recent batches
  Gauge* epoch = nullptr;          // colony_train_epoch
  Gauge* progress = nullptr;       // colony_train_progress_ratio: of all epochs, 0..1
  Gauge* test_logloss = nullptr;   // colony_test_logloss (NaN until evaluated)
  Gauge* test_auc = nullptr;       // colony_test_auc
  Gauge* valid_logloss = nullptr;  // colony_valid_logloss
  Gauge* valid_auc = nullptr;      // colony_valid_auc
  // colony_alerts_total{kind="not_finite_gradient"}: steps skipped under --on-nan skip.
  Counter* not_finite_alerts = nullptr;
};
TrainInstruments train_instruments(Registry& registry);
// colony_alerts_total{kind="not_finite_gradient"} (a worker's process, `colony train`).
Counter& not_finite_alerts(Registry& registry);
// colony_alerts_total{kind=`kind`}: leak_suspect, straggler, hot_shard (monitor/alerts.h).
Counter& alerts(Registry& registry, const std::string& kind);

// This process's resident memory in bytes, from /proc (NaN where it cannot be read).
double resident_bytes();

// process_resident_memory_bytes and process_start_time_seconds, read from /proc at each scrape
// (the names Prometheus's own clients use).
void add_process_metrics(Registry& registry);

// Adds to `counter` what a running total grew by since `last` (then `last` = `now`); a total
// that went back (a core replaced after a restart counts from zero) adds all of `now`.
inline void add_growth(Counter* counter, uint64_t now, uint64_t& last) {
  counter->inc(double(now >= last ? now - last : now));
  last = now;
}

}  // namespace colony::monitor
