#include "monitor/ps_metrics.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

namespace colony::monitor {

namespace {

// The hot-key sketches of a process's shards, listed together at each scrape.
struct HotKeyBoard {
  std::mutex mutex;
  std::map<uint32_t, std::shared_ptr<HotKeys>> shards;
};

}  // namespace

ShardInstruments shard_instruments(Registry& r, uint32_t index) {
  const std::string s = std::to_string(index);
  const char* requests = "Requests a shard handled, by kind.";
  const char* refused = "Pushes a shard refused whole, by reason.";
  ShardInstruments in;
  in.rows = &r.gauge("colony_shard_rows", "Rows a shard holds.", {{"shard", s}});
  in.bytes = &r.gauge("colony_shard_bytes",
                      "Bytes of a shard's rows: parameters and optimizer state.", {{"shard", s}});
  in.queue = &r.gauge("colony_shard_queue_messages",
                      "Messages waiting in a shard's mailbox after its last one.", {{"shard", s}});
  in.pulls = &r.counter("colony_shard_requests_total", requests, {{"shard", s}, {"kind", "pull"}});
  in.pushes = &r.counter("colony_shard_requests_total", requests, {{"shard", s}, {"kind", "push"}});
  in.clocks =
      &r.counter("colony_shard_requests_total", requests, {{"shard", s}, {"kind", "clock"}});
  in.rows_pulled = &r.counter("colony_shard_rows_pulled_total",
                              "Rows a shard sent in answer to pulls.", {{"shard", s}});
  in.rows_pushed = &r.counter("colony_shard_rows_pushed_total", "Rows a shard updated from pushes.",
                              {{"shard", s}});
  in.pulls_deferred =
      &r.counter("colony_shard_pulls_deferred_total",
                 "Pulls a shard held back for the consistency gate.", {{"shard", s}});
  in.not_finite = &r.counter("colony_shard_pushes_refused_total", refused,
                             {{"shard", s}, {"reason", "not_finite"}});
  in.keys_unknown = &r.counter("colony_shard_pushes_refused_total", refused,
                               {{"shard", s}, {"reason", "keys_unknown"}});
  in.updates_not_finite = &r.counter(
      "colony_shard_updates_refused_total",
      "Row updates a shard refused, by reason: not_finite, a finite gradient that would have made "
      "the row NaN or infinite (the row keeps its last finite value).",
      {{"shard", s}, {"reason", "not_finite"}});
  in.refused = &r.counter("colony_shard_messages_refused_total",
                          "Messages a shard dropped or refused: replies sent to it, pulls past "
                          "its waiting limit.",
                          {{"shard", s}});
  auto board = std::static_pointer_cast<HotKeyBoard>(
      r.keep("colony_shard_hot_key_pulls", [] { return std::make_shared<HotKeyBoard>(); }));
  in.hot_keys = std::make_shared<HotKeys>(hot_keys_listed, hot_keys_sample_every);
  {
    std::lock_guard lock(board->mutex);
    board->shards[index] = in.hot_keys;
  }
  r.family_reader(
      "colony_shard_hot_key_pulls",
      "Estimated pulls of each shard's most-pulled keys since it started (count-min "
      "sketch: may count high, never low).",
      false, [board] {
        Registry::Listing out;
        std::lock_guard lock(board->mutex);
        for (const auto& [shard, sketch] : board->shards)
          for (const auto& [key, count] : sketch->top())
            out.push_back(
                {{{"shard", std::to_string(shard)}, {"key", std::to_string(key)}}, double(count)});
        return out;
      });
  return in;
}

std::vector<double> staleness_bounds() {
  return {0, 1, 2, 4, 8, 16, 32, 64};
}

std::vector<double> latency_bounds() {
  return exponential_buckets(50e-6, 2, 16);  // 50 us .. 1.6 s
}

WorkerInstruments worker_instruments(Registry& r) {
  WorkerInstruments in;
  in.pull_seconds =
      &r.histogram("colony_pull_seconds", "Pull latency: request sent to reply.", latency_bounds());
  in.push_seconds = &r.histogram(
      "colony_push_seconds", "Push latency: push sent to its acknowledgement.", latency_bounds());
  in.staleness =
      &r.histogram("colony_read_staleness_steps",
                   "Steps the slowest sender was behind a pull's step when its rows were read.",
                   staleness_bounds());
  return in;
}

std::vector<HotKeyCount> shard_hot_keys(Registry& r) {
  auto board = std::static_pointer_cast<HotKeyBoard>(
      r.keep("colony_shard_hot_key_pulls", [] { return std::make_shared<HotKeyBoard>(); }));
  std::vector<HotKeyCount> out;
  std::lock_guard lock(board->mutex);
  for (const auto& [shard, sketch] : board->shards)
    for (const auto& [key, count] : sketch->top()) out.push_back({shard, key, count});
  return out;
}

namespace {

struct HotKeyListing {
  std::mutex mutex;
  std::vector<HotKeyCount> keys;
};

}  // namespace

ClusterInstruments cluster_instruments(Registry& r) {
  ClusterInstruments in;
  in.registry = &r;
  in.staleness = &r.histogram(
      "colony_cluster_read_staleness_steps",
      "Steps the slowest sender was behind a pull's step when its rows were read, over every "
      "worker member (from their heartbeats).",
      staleness_bounds());
  in.pull_seconds = &r.histogram(
      "colony_cluster_pull_seconds",
      "Pull latency, request sent to reply, over every worker member (from their heartbeats).",
      latency_bounds());
  in.push_seconds =
      &r.histogram("colony_cluster_push_seconds",
                   "Push latency, push sent to its acknowledgement, over every worker member "
                   "(from their heartbeats).",
                   latency_bounds());
  auto listing = std::make_shared<HotKeyListing>();
  in.hot_keys = listing;
  r.family_reader(
      "colony_cluster_hot_key_pulls",
      "Estimated pulls of each shard's most-pulled keys since its process started, "
      "as the ps members' heartbeats list them (count-min sketch: may count high, "
      "never low).",
      false, [listing] {
        Registry::Listing out;
        std::lock_guard lock(listing->mutex);
        for (const HotKeyCount& h : listing->keys)
          out.push_back({{{"shard", std::to_string(h.shard)}, {"key", std::to_string(h.key)}},
                         double(h.pulls)});
        return out;
      });
  return in;
}

Counter& ClusterInstruments::rows_served(uint32_t shard) {
  return registry->counter("colony_cluster_shard_rows_served_total",
                           "Rows each shard has served (pulled and pushed), as the ps members' "
                           "heartbeats report them.",
                           {{"shard", std::to_string(shard)}});
}

Counter& ClusterInstruments::rows_pulled(uint32_t shard) {
  return registry->counter("colony_cluster_shard_rows_pulled_total",
                           "Rows each shard has sent in answer to pulls, as the ps members' "
                           "heartbeats report them.",
                           {{"shard", std::to_string(shard)}});
}

void ClusterInstruments::list_hot_keys(std::vector<HotKeyCount> keys) {
  auto listing = std::static_pointer_cast<HotKeyListing>(hot_keys);
  std::lock_guard lock(listing->mutex);
  listing->keys = std::move(keys);
}

Counter& alerts(Registry& r, const std::string& kind) {
  return r.counter("colony_alerts_total", "Alerts raised (each also logged), by kind.",
                   {{"kind", kind}});
}

Counter& not_finite_alerts(Registry& r) {
  return alerts(r, "not_finite_gradient");
}

TrainInstruments train_instruments(Registry& r) {
  TrainInstruments in;
  in.samples = &r.counter("colony_train_samples_total", "Training samples trained.");
  in.logloss = &r.gauge("colony_train_logloss",
                        "Progressive logloss of recent training batches (each sample scored "
                        "before it was learned).");
  in.epoch = &r.gauge("colony_train_epoch", "The epoch being trained (1-based).");
  in.progress = &r.gauge("colony_train_progress_ratio", "Share of the job's epochs done, 0..1.");
  in.test_logloss = &r.gauge("colony_test_logloss", "Logloss on the test set (NaN until scored).");
  in.test_auc = &r.gauge("colony_test_auc", "AUC on the test set (NaN until scored).");
  in.valid_logloss =
      &r.gauge("colony_valid_logloss", "Logloss on the held-out rows (NaN until scored).");
  in.valid_auc = &r.gauge("colony_valid_auc", "AUC on the held-out rows (NaN until scored).");
  in.not_finite_alerts = &not_finite_alerts(r);
  for (Gauge* g : {in.test_logloss, in.test_auc, in.valid_logloss, in.valid_auc})
    g->set(std::nan(""));
  return in;
}

double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double size = 0, resident = 0;
  if (!(statm >> size >> resident)) return std::nan("");
  return resident * double(::sysconf(_SC_PAGESIZE));
}

void add_process_metrics(Registry& r) {
  r.gauge_reader("process_resident_memory_bytes", "Resident memory size in bytes.", {},
                 resident_bytes);
  const double start =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  r.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.")
      .set(std::floor(start));
}

}  // namespace colony::monitor
