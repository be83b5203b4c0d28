#include "monitor/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/status.h"

namespace colony::monitor {

namespace {

bool valid_name(const std::string& name, bool label) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return !(label && name.rfind("__", 0) == 0);  // reserved for Prometheus itself
}

// Help text: backslash and newline escaped. Label values: also the double quote.
std::string escape(const std::string& s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string label_text(const Labels& labels) {
  if (labels.empty()) return {};
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first + "=\"" + escape(labels[i].second, true) + '"';
  }
  return out + '}';
}

// `labels` with one more label (le) at the end, for a histogram bucket.
std::string bucket_labels(const Labels& labels, const std::string& le) {
  Labels with = labels;
  with.emplace_back("le", le);
  return label_text(with);
}

}  // namespace

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  // Whole numbers (counts, bytes) in full; others in the shortest form that reads back exactly.
  const auto r = v == std::trunc(v) && std::fabs(v) < 1e15
                     ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                     : std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  COLONY_ASSERT(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram bounds not sorted");
  for (double b : bounds_) COLONY_ASSERT(std::isfinite(b), "histogram bound {} not finite", b);
}

void Histogram::observe(double v) {
  // The first bucket whose bound is >= v (the format's "le"); NaN counts in +Inf only.
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

void Histogram::add(std::span<const uint64_t> counts, double sum) {
  COLONY_ASSERT(counts.size() == bounds_.size() + 1, "{} bucket counts for a histogram of {}",
                counts.size(), bounds_.size() + 1);
  for (size_t i = 0; i < counts.size(); ++i)
    buckets_[i].fetch_add(counts[i], std::memory_order_relaxed);
  sum_.fetch_add(sum, std::memory_order_relaxed);
}

uint64_t Histogram::count() const {
  uint64_t n = 0;
  for (size_t b = 0; b <= bounds_.size(); ++b) n += bucket(b);
  return n;
}

std::vector<double> exponential_buckets(double start, double factor, size_t count) {
  COLONY_ASSERT(start > 0 && factor > 1, "exponential buckets need start > 0, factor > 1");
  std::vector<double> out;
  for (double b = start; out.size() < count; b *= factor) out.push_back(b);
  return out;
}

std::vector<double> linear_buckets(double start, double width, size_t count) {
  COLONY_ASSERT(width > 0, "linear buckets need width > 0");
  std::vector<double> out;
  for (size_t i = 0; i < count; ++i) out.push_back(start + width * double(i));
  return out;
}

Registry::Child& Registry::child(const std::string& name, Type type, const std::string& help,
                                 const std::vector<double>& bounds, const Labels& labels) {
  COLONY_ASSERT(valid_name(name, false), "metric name '{}' is not valid", name);
  for (const auto& [k, v] : labels) {
    COLONY_ASSERT(valid_name(k, true) && k != "le" && k != "quantile",
                  "label name '{}' of {} is not valid", k, name);
  }
  auto [it, made] = families_.try_emplace(name);
  Family& f = it->second;
  if (made) {
    f.type = type;
    f.help = help;
    f.bounds = bounds;
  }
  COLONY_ASSERT(f.type == type && f.help == help && f.bounds == bounds && !f.list,
                "metric {} registered twice with different types, help or buckets", name);
  return f.children.try_emplace(label_text(labels), Child{labels}).first->second;
}

Counter& Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  Child& c = child(name, Type::counter, help, {}, labels);
  if (!c.counter) c.counter = &counters_.emplace_back();
  return *c.counter;
}

Gauge& Registry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  Child& c = child(name, Type::gauge, help, {}, labels);
  COLONY_ASSERT(!c.read, "gauge {} already has a reader", name);
  if (!c.gauge) c.gauge = &gauges_.emplace_back();
  return *c.gauge;
}

Histogram& Registry::histogram(const std::string& name, const std::string& help,
                               const std::vector<double>& bounds, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  Child& c = child(name, Type::histogram, help, bounds, labels);
  if (!c.histogram) c.histogram = &histograms_.emplace_back(bounds);
  return *c.histogram;
}

void Registry::gauge_reader(const std::string& name, const std::string& help, const Labels& labels,
                            std::function<double()> read) {
  std::lock_guard<std::mutex> lock(mutex_);
  Child& c = child(name, Type::gauge, help, {}, labels);
  COLONY_ASSERT(!c.gauge, "gauge {} is already set directly", name);
  c.read = std::move(read);
}

void Registry::family_reader(const std::string& name, const std::string& help, bool counter,
                             std::function<Listing()> list) {
  std::lock_guard<std::mutex> lock(mutex_);
  COLONY_ASSERT(valid_name(name, false), "metric name '{}' is not valid", name);
  auto [it, made] = families_.try_emplace(name);
  Family& f = it->second;
  if (made) {
    f.type = counter ? Type::counter : Type::gauge;
    f.help = help;
  }
  COLONY_ASSERT(
      f.children.empty() && f.type == (counter ? Type::counter : Type::gauge) && f.help == help,
      "metric {} registered twice with different types or help", name);
  f.list = std::move(list);
}

std::shared_ptr<void> Registry::keep(const std::string& name,
                                     const std::function<std::shared_ptr<void>()>& make) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = kept_.find(name); it != kept_.end()) return it->second;
  }
  std::shared_ptr<void> made = make();
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.try_emplace(name, std::move(made)).first->second;  // the first one made wins
}

std::string Registry::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  for (const auto& [name, f] : families_) {
    static const char* const type_names[] = {"counter", "gauge", "histogram"};
    out += "# HELP " + name + ' ' + escape(f.help, false) + '\n';
    out += "# TYPE " + name + ' ' + type_names[int(f.type)] + '\n';
    if (f.list) {
      std::map<std::string, double> children;  // in label order, as the other families
      for (const auto& [labels, v] : f.list()) {
        for (const auto& [k, _] : labels)
          COLONY_ASSERT(valid_name(k, true) && k != "le", "label name '{}' of {} is not valid", k,
                        name);
        children[label_text(labels)] = v;
      }
      for (const auto& [labels, v] : children) out += name + labels + ' ' + format_value(v) + '\n';
    }
    for (const auto& [labels, c] : f.children) {
      if (c.counter) {
        out += name + labels + ' ' + format_value(c.counter->value()) + '\n';
      } else if (c.gauge || c.read) {
        out += name + labels + ' ' + format_value(c.gauge ? c.gauge->value() : c.read()) + '\n';
      } else {
        const Histogram& h = *c.histogram;
        // One pass over the buckets, so the cumulative counts never decrease even while
        // observations arrive; _count is the +Inf bucket's.
        uint64_t n = 0;
        for (size_t i = 0; i <= h.bounds().size(); ++i) {
          n += h.bucket(i);
          const std::string le = i < h.bounds().size() ? format_value(h.bounds()[i]) : "+Inf";
          out += name + "_bucket" + bucket_labels(c.labels, le) + ' ' + std::to_string(n) + '\n';
        }
        out += name + "_sum" + labels + ' ' + format_value(h.sum()) + '\n';
        out += name + "_count" + labels + ' ' + std::to_string(n) + '\n';
      }
    }
  }
  return out;
}

}  // namespace colony::monitor
