#include "monitor/alerts.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/status.h"

namespace colony::monitor {

double median_of_others(std::vector<double> values, size_t skip) {
  if (skip < values.size()) values.erase(values.begin() + static_cast<std::ptrdiff_t>(skip));
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2) return upper;
  return (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid)) +
          upper) /
         2.0;
}

AlertMonitor::AlertMonitor(AlertConfig config) : config_(config) {}

void AlertMonitor::decide(bool on, const std::string& kind, const std::string& subject,
                          const std::string& message, std::vector<Alert>& out) {
  const std::string id = kind + "/" + subject;
  if (!on) {
    raised_.erase(id);
  } else if (raised_.insert(id).second) {
    out.push_back({kind, subject, message});
  }
}

std::vector<Alert> AlertMonitor::observe(AlertSample sample) {
  if (!window_.empty()) {
    const AlertSample& last = window_.back();
    COLONY_ASSERT(sample.time_s >= last.time_s, "alert samples out of order");
    COLONY_ASSERT(sample.worker_busy_s.size() == last.worker_busy_s.size() &&
                      sample.worker_steps.size() == last.worker_steps.size() &&
                      sample.shard_rows.size() == last.shard_rows.size(),
                  "alert samples of different sizes");
  }
  COLONY_ASSERT(sample.worker_busy_s.size() == sample.worker_steps.size(),
                "busy times and steps of different workers");
  window_.push_back(std::move(sample));
  const AlertSample& now = window_.back();
  while (window_.size() > 2 && now.time_s - window_[1].time_s >= config_.window_s)
    window_.pop_front();
  const AlertSample& then = window_.front();
  const double span = now.time_s - then.time_s;
  std::vector<Alert> out;
  if (span < config_.window_s / 2) return out;
  auto name = [](const std::vector<std::string>& names, const char* what, size_t i) {
    return i < names.size() ? names[i] : fmt::format("{} {}", what, i);
  };

  // Leak suspect: memory the rows do not explain.
  const double unexplained =
      (now.rss_bytes - then.rss_bytes) - (now.rows_memory_bytes - then.rows_memory_bytes);
  decide(unexplained > config_.leak_bytes && unexplained > config_.leak_share * then.rss_bytes,
         "leak_suspect", now.process_name.empty() ? "process" : now.process_name,
         fmt::format("{}resident memory grew by {:.0f} MiB in {:.0f} s, {:.0f} MiB more than the "
                     "rows did ({:.0f} MiB to {:.0f} MiB)",
                     now.process_name.empty() ? "" : now.process_name + ": ",
                     (now.rss_bytes - then.rss_bytes) / 1048576.0, span, unexplained / 1048576.0,
                     then.rss_bytes / 1048576.0, now.rss_bytes / 1048576.0),
         out);

  // Straggler: busy seconds per step against the other workers' median.
  const size_t workers = now.worker_steps.size();
  if (workers >= 2) {
    std::vector<double> per_step(workers);
    for (size_t w = 0; w < workers; ++w) {
      const double steps = double(now.worker_steps[w] - then.worker_steps[w]);
      const double busy = now.worker_busy_s[w] - then.worker_busy_s[w];
      // A worker busy all along without finishing a step is as slow as it gets.
      per_step[w] = steps > 0 ? busy / steps : (busy > 0 ? INFINITY : 0.0);
    }
    for (size_t w = 0; w < workers; ++w) {
      const double others = median_of_others(per_step, w);
      const std::string worker = name(now.worker_names, "worker", w);
      decide(others > 0 && per_step[w] > config_.straggler_ratio * others, "straggler", worker,
             fmt::format("{} took {:.2f} ms a step over the last {:.0f} s, the other "
                         "workers' median {:.2f} ms",
                         worker, 1000.0 * per_step[w], span, 1000.0 * others),
             out);
    }
  }

  // Hot shard: rows served against the other shards' median.
  const size_t shards = now.shard_rows.size();
  if (shards >= 2) {
    std::vector<double> rows(shards);
    for (size_t s = 0; s < shards; ++s) rows[s] = double(now.shard_rows[s] - then.shard_rows[s]);
    for (size_t s = 0; s < shards; ++s) {
      const double others = median_of_others(rows, s);
      decide(rows[s] >= config_.hot_shard_min_rows &&
                 rows[s] > config_.hot_shard_ratio * std::max(others, 1.0),
             "hot_shard", name(now.shard_names, "shard", s),
             fmt::format("{} served {:.0f} rows in the last {:.0f} s, the other shards' "
                         "median {:.0f}",
                         name(now.shard_names, "shard", s), rows[s], span, others),
             out);
    }
  }
  return out;
}

ClusterAlertMonitor::ClusterAlertMonitor(AlertConfig config) : config_(config), cluster_(config) {}

std::vector<Alert> ClusterAlertMonitor::observe_cluster(AlertSample cluster) {
  cluster.rss_bytes = cluster.rows_memory_bytes = 0.0;
  return cluster_.observe(std::move(cluster));
}

std::vector<Alert> ClusterAlertMonitor::observe_processes(double time_s,
                                                          const std::vector<Process>& processes) {
  std::vector<Alert> out;
  for (const Process& p : processes) {
    AlertSample s;
    s.time_s = time_s;
    s.rss_bytes = p.rss_bytes;
    s.rows_memory_bytes = p.rows_memory_bytes;
    s.process_name = p.name;
    auto it = processes_.try_emplace(p.name, config_).first;
    for (Alert& a : it->second.observe(std::move(s))) out.push_back(std::move(a));
  }
  return out;
}

FaultLeak::~FaultLeak() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FaultLeak::start(double mb_per_s) {
  COLONY_ASSERT(mb_per_s > 0, "a leak of {} MiB a second", mb_per_s);
  if (total_mb_ == 0 || thread_.joinable()) return;
  thread_ = std::thread([this, mb_per_s] { run(mb_per_s); });
}

void FaultLeak::run(double mb_per_s) {
  using clock = std::chrono::steady_clock;
  const clock::time_point begin = clock::now();
  size_t kept = 0;
  while (kept < total_mb_) {
    const size_t mb = std::min<size_t>(64, total_mb_ - kept);
    kept_.push_back(std::make_unique_for_overwrite<char[]>(mb << 20));
    std::memset(kept_.back().get(), 1, mb << 20);
    kept += mb;
    kept_mb_.store(kept);
    // The next piece is due once `kept` MiB have been due (the first 64 at once).
    const auto due = begin + std::chrono::duration_cast<clock::duration>(
                                 std::chrono::duration<double>(double(kept) / mb_per_s));
    std::unique_lock lock(mu_);
    if (stop_cv_.wait_until(lock, due, [this] { return stop_; })) return;
  }
}

std::string not_finite_row_message(const std::string& last, uint64_t refused) {
  return fmt::format(
      "{}: the update would have made the row NaN or infinite; it keeps its last finite value "
      "({} update{} refused so far: try a lower --lr)",
      last, refused, refused == 1 ? "" : "s");
}

}  // namespace colony::monitor
