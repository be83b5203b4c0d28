// Alerts on a running job that no single number shows: memory growing faster than the rows
// explain (a leak suspect), a worker whose steps take far longer than the others' (a
// straggler), a shard serving far more rows than the others (a hot shard).
//
// A sans-I/O core: the driver samples the job (times, counters) and hands each sample to
// observe(); the monitor keeps the samples of the last window and returns the alerts they
// raise. An alert is raised once per kind and subject, and again only after its condition has
// cleared. Decisions use the change over the window, so a job's start-up is not mistaken for
// its steady state.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace colony::monitor {

struct AlertConfig {
  // How far back growth and rates are measured; nothing is decided on less than half of it.
  double window_s = 20.0;
  // Leak suspect: resident memory grew over the window by more than both of these beyond what
  // the rows' bytes grew.
  double leak_bytes = 256.0 * 1024 * 1024;
  double leak_share = 0.25;  // of the resident memory at the window's start
  // Straggler (2 workers or more): a worker whose busy seconds per step over the window are
  // more than this many times the median of the other workers'.
  double straggler_ratio = 3.0;
  // Hot shard (2 shards or more): a shard that served more than this many times the rows of the
  // median other shard over the window, and at least hot_shard_min_rows.
  double hot_shard_ratio = 4.0;
  double hot_shard_min_rows = 10000;
};

// One sample of the job. Counters are totals since the job started; a vector's size is the
// number of workers or shards (it must not change between samples).
struct AlertSample {
  double time_s = 0.0;
  double rss_bytes = 0.0;
  double rows_memory_bytes = 0.0;        // memory the rows hold (their stores' memory_bytes)
  std::vector<double> worker_busy_s{};   // seconds each worker has spent on its steps
  std::vector<uint64_t> worker_steps{};  // steps each worker has taken
  std::vector<uint64_t> shard_rows{};    // rows each shard has served (pulled and pushed)
  // What the alerts call the process and each worker and shard (their subjects, and in their
  // messages); empty: "process", "worker i", "shard i". Taken from the latest sample.
  std::string process_name{};
  std::vector<std::string> worker_names{}, shard_names{};
};

struct Alert {
  std::string kind;     // leak_suspect, straggler or hot_shard
  std::string subject;  // "process", "worker 3", "shard 1" (or the sample's names)
  std::string message;  // what was seen, with the numbers
};

class AlertMonitor {
 public:
  explicit AlertMonitor(AlertConfig config = {});
  // Takes a sample (later than the last) and returns the alerts it raises.
  std::vector<Alert> observe(AlertSample sample);

 private:
  // Raises `kind` for `subject` when `on` and it is not raised yet; clears it when not `on`.
  void decide(bool on, const std::string& kind, const std::string& subject,
              const std::string& message, std::vector<Alert>& out);

  AlertConfig config_;
  std::deque<AlertSample> window_;
  std::set<std::string> raised_;  // kind/subject
};

// The load alerts of a cluster of processes (the coordinator's, over `colony ps` and `colony
// worker` daemons): straggler and hot shard over every worker and shard of the cluster, and a
// leak suspect for each process on its own.
class ClusterAlertMonitor {
 public:
  explicit ClusterAlertMonitor(AlertConfig config = {});
  struct Process {
    std::string name;  // the leak alert's subject, e.g. "ps member 1 (tcp://10.0.0.2:7101)"
    double rss_bytes = 0.0;
    double rows_memory_bytes = 0.0;
  };
  // Takes a sample of the cluster's workers and shards (its rss and rows memory are ignored);
  // returns the straggler and hot-shard alerts it raises. Samples compare members with each
  // other, so take one only while every member's load is fresh.
  std::vector<Alert> observe_cluster(AlertSample cluster);
  // Takes the memory of each process that has reported at `time_s` (later than the last), each
  // watched under its name on its own (one that stops reporting is no longer sampled); returns
  // the leak suspects raised. A process is compared only with itself, so its samples may be
  // taken however late the other members' loads are: a leak seen through samples far apart is
  // still named.
  std::vector<Alert> observe_processes(double time_s, const std::vector<Process>& processes);

 private:
  AlertConfig config_;
  AlertMonitor cluster_;
  std::map<std::string, AlertMonitor> processes_;
};

// How fast `--fault-leak-mb` leaks in `colony train` and the member daemons.
constexpr double fault_leak_mb_per_s = 320.0;

// A leak for tests and drills (`--fault-leak-mb`): memory allocated, touched (so it is
// resident) and kept until the object goes, in pieces of 64 MiB up to `total_mb`, by a thread of
// its own: the caller's thread (a daemon's heartbeats, colony train's progress) never waits on
// the page faults, which on a virtual machine were measured at about 2.7 s a GiB unloaded and
// several times that on a loaded one (a daemon that leaked on its heartbeat thread missed its
// heartbeats for 10 s and was declared lost).
// Thread-safety: start() and kept_mb() may be called from any thread.
class FaultLeak {
 public:
  explicit FaultLeak(size_t total_mb) : total_mb_(total_mb) {}
  // Stops the thread (between two pieces) and frees what was kept.
  ~FaultLeak();
  FaultLeak(const FaultLeak&) = delete;
  FaultLeak& operator=(const FaultLeak&) = delete;

  // Starts the leak at the first call (nothing when total_mb is 0; later calls do nothing):
  // 64 MiB at once, then `mb_per_s` MiB a second, or as fast as the memory comes when slower.
  void start(double mb_per_s);
  // MiB kept so far.
  size_t kept_mb() const { return kept_mb_.load(); }

 private:
  void run(double mb_per_s);

  const size_t total_mb_;
  std::atomic<size_t> kept_mb_{0};
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;                          // under mu_
  std::vector<std::unique_ptr<char[]>> kept_;  // the thread's
  std::thread thread_;
};

// The median of `values` without the one at `skip` (0 when nothing is left).
double median_of_others(std::vector<double> values, size_t skip);

// The not_finite_row alert's text, logged by `colony train` and the ps daemons: `last` names
// the last update refused ("shard 1: key 77 from node 3 at step 12"), `refused` counts them.
std::string not_finite_row_message(const std::string& last, uint64_t refused);

}  // namespace colony::monitor
