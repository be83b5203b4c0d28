// Live metrics of a running job, in Prometheus's text exposition format (version 0.0.4).
//
// A Registry holds metric families (counters, gauges, histograms), each a name, a help text and
// one child per label set. Recording is lock-free (relaxed atomics): actors on any thread call
// inc/set/observe on the children they looked up once. render() writes the whole registry for
// a scrape; it reads the atomics as they are at that moment (a scrape during a step may see
// half of that step's updates, as with any Prometheus client).
//
// Names follow Prometheus's conventions: base units (seconds, bytes), counters end in _total.
// Registering the same name with another type, help or bucket list is a bug in our code and
// asserts; the same name and labels twice returns the same child.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace colony::monitor {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Only goes up (reset when the process starts again, as Prometheus expects).
class Counter {
 public:
  void inc(double by = 1.0) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double by) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into buckets with upper bounds `bounds` (sorted, finite) and +Inf.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Adds observations counted elsewhere: counts[i] to bucket i (counts has one per bucket,
  // +Inf's last: asserted) and `sum` to the sum. For totals that other processes report.
  void add(std::span<const uint64_t> counts, double sum);
  const std::vector<double>& bounds() const { return bounds_; }
  // Observations in bucket i: above bounds()[i-1] (when i > 0) and at most bounds()[i] (when
  // i < bounds().size(); bucket bounds().size() is +Inf's).
  uint64_t bucket(size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }
  uint64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

// Bucket bounds start, start*factor, ... (`count` of them): for latencies and sizes.
std::vector<double> exponential_buckets(double start, double factor, size_t count);
// Bucket bounds start, start+width, ... (`count` of them).
std::vector<double> linear_buckets(double start, double width, size_t count);

class Registry {
 public:
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help,
                       const std::vector<double>& bounds, const Labels& labels = {});
  // A gauge whose value `read` returns at each scrape (called from the scraping thread, under
  // the registry's lock: it must not call back into the registry). Replaces an earlier reader
  // of the same name and labels.
  void gauge_reader(const std::string& name, const std::string& help, const Labels& labels,
                    std::function<double()> read);

  // A family whose children `list` names at each scrape (each a label set and its value), for
  // totals kept elsewhere per peer or per member: called from the scraping thread, under the
  // registry's lock. Replaces an earlier list of the same name. `counter` picks the type
  // (counter or gauge).
  using Listing = std::vector<std::pair<Labels, double>>;
  void family_reader(const std::string& name, const std::string& help, bool counter,
                     std::function<Listing()> list);

  // The object kept with the registry under `name`, made by `make` (called without the
  // registry's lock) the first time: state that several instruments' readers share, such as
  // the hot-key sketches of a process's shards. Later calls return the same object.
  std::shared_ptr<void> keep(const std::string& name,
                             const std::function<std::shared_ptr<void>()>& make);

  // The registry in the text format: families in name order, each with # HELP and # TYPE
  // lines, children in label order; label values and help escaped as the format says.
  std::string render() const;

 private:
  enum class Type { counter, gauge, histogram };
  struct Child {
    Labels labels;
    Counter* counter = nullptr;
    Gauge* gauge = nullptr;
    Histogram* histogram = nullptr;
    std::function<double()> read{};
  };
  struct Family {
    Type type = Type::counter;
    std::string help;
    std::vector<double> bounds;
    std::map<std::string, Child> children;  // by rendered label set
    std::function<Listing()> list{};        // instead of children (family_reader)
  };
  Child& child(const std::string& name, Type type, const std::string& help,
               const std::vector<double>& bounds, const Labels& labels);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
  std::map<std::string, std::shared_ptr<void>> kept_;
  // Children's metrics never move once made (the callers keep references).
  std::deque<Counter> counters_;
  std::deque<Gauge> gauges_;
  std::deque<Histogram> histograms_;
};

// A sample value as the text format writes it: shortest round-trip decimal, +Inf, -Inf, NaN.
std::string format_value(double v);

}  // namespace colony::monitor
