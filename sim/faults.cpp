#include "sim/faults.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/hash.h"

namespace colony::sim {

const char* to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::crash:
      return "crash";
    case FaultKind::partition:
      return "partition";
    case FaultKind::clog:
      return "clog";
    case FaultKind::slow:
      return "slow";
    case FaultKind::lossy:
      return "lossy";
    case FaultKind::disk_full:
      return "disk_full";
    case FaultKind::stop:
      return "stop";
  }
  return "unknown";
}

namespace {

using nlohmann::json;

// Bounds on untrusted traces.
constexpr size_t trace_events_max = 1'000'000;
constexpr double trace_time_max_s = 1e9;

struct Parser {
  const std::string& name;
  uint32_t nodes, ps;

  Status bad(const std::string& field, const std::string& why) const {
    return Status::invalid_input(fmt::format("{}: {}: {}", name, field, why));
  }
  Status number(const json& obj, const std::string& path, const char* key, double& out, double lo,
                double hi, bool required) const {
    auto it = obj.find(key);
    if (it == obj.end()) return required ? bad(path + "." + key, "missing") : Status();
    if (!it->is_number()) return bad(path + "." + key, "must be a number");
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi)
      return bad(path + "." + key, fmt::format("{} is outside [{}, {}]", v, lo, hi));
    out = v;
    return Status();
  }
  Status host(const json& obj, const std::string& path, HostRef& out) const {
    const bool has_node = obj.contains("node"), has_shard = obj.contains("shard");
    if (has_node == has_shard) return bad(path, "needs exactly one of \"node\" or \"shard\"");
    const char* key = has_node ? "node" : "shard";
    const json& v = obj.at(key);
    const uint32_t limit = has_node ? nodes : ps;
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= limit)
      return bad(path + "." + key, fmt::format("must be an integer in [0, {})", limit));
    out = HostRef{has_shard, static_cast<uint32_t>(v.get<uint64_t>())};
    return Status();
  }
  Status side(const json& obj, const std::string& path, std::vector<HostRef>& out) const {
    if (!obj.is_object())
      return bad(
          path,
          "must be an object with \"nodes\" and/or \"shards\" lists and/or \"coordinator\": true");
    for (const char* key : {"nodes", "shards"}) {
      auto it = obj.find(key);
      if (it == obj.end()) continue;
      if (!it->is_array()) return bad(path + "." + key, "must be a list of integers");
      const bool shard = std::string(key) == "shards";
      const uint32_t limit = shard ? ps : nodes;
      for (size_t i = 0; i < it->size(); ++i) {
        const json& v = (*it)[i];
        if (!v.is_number_unsigned() || v.get<uint64_t>() >= limit)
          return bad(fmt::format("{}.{}[{}]", path, key, i),
                     fmt::format("must be an integer in [0, {})", limit));
        out.push_back(HostRef{shard, static_cast<uint32_t>(v.get<uint64_t>())});
      }
    }
    if (auto it = obj.find("coordinator"); it != obj.end()) {
      if (!it->is_boolean()) return bad(path + ".coordinator", "must be true or false");
      if (it->get<bool>()) out.push_back(HostRef{false, 0, true});
    }
    if (out.empty()) return bad(path, "names no host");
    return Status();
  }
  Status event(const json& e, const std::string& path, FaultEvent& out) const {
    if (!e.is_object()) return bad(path, "must be an object");
    auto kind = e.find("kind");
    if (kind == e.end() || !kind->is_string()) return bad(path + ".kind", "missing (a string)");
    const std::string k = kind->get<std::string>();
    if (Status s = number(e, path, "at", out.at_s, 0.0, trace_time_max_s, true); !s.ok()) return s;
    if (Status s = number(e, path, "duration", out.duration_s, 0.0, trace_time_max_s, true);
        !s.ok())
      return s;
    if (k == "crash" || k == "clog" || k == "slow" || k == "disk_full" || k == "stop") {
      out.kind = k == "crash"       ? FaultKind::crash
                 : k == "clog"      ? FaultKind::clog
                 : k == "slow"      ? FaultKind::slow
                 : k == "disk_full" ? FaultKind::disk_full
                                    : FaultKind::stop;
      HostRef h;
      if (Status s = host(e, path, h); !s.ok()) return s;
      if ((out.kind == FaultKind::disk_full || out.kind == FaultKind::stop) && !h.shard)
        return bad(path, k + " needs \"shard\"");
      out.hosts = {h};
      if (out.kind == FaultKind::clog || out.kind == FaultKind::slow)
        if (Status s = number(e, path, "factor", out.factor, 1.0, 1e6, true); !s.ok()) return s;
    } else if (k == "partition") {
      out.kind = FaultKind::partition;
      if (!e.contains("a") || !e.contains("b"))
        return bad(path, "partition needs sides \"a\" and \"b\"");
      if (Status s = side(e.at("a"), path + ".a", out.hosts); !s.ok()) return s;
      if (Status s = side(e.at("b"), path + ".b", out.side_b); !s.ok()) return s;
      for (const HostRef& h : out.hosts)
        if (std::find(out.side_b.begin(), out.side_b.end(), h) != out.side_b.end())
          return bad(path, "a host is on both sides of the partition");
    } else if (k == "lossy") {
      out.kind = FaultKind::lossy;
      for (auto [key, field] :
           {std::pair{"drop", &out.drop}, std::pair{"duplicate", &out.duplicate},
            std::pair{"reorder", &out.reorder}})
        if (Status s = number(e, path, key, *field, 0.0, 0.5, false); !s.ok()) return s;
    } else {
      return bad(
          path + ".kind",
          "\"" + k + "\" is not one of crash, partition, clog, slow, lossy, disk_full, stop");
    }
    return Status();
  }
};

}  // namespace

Expected<FaultTrace> parse_trace(const std::string& text, const std::string& name, uint32_t nodes,
                                 uint32_t ps) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::invalid_input(name + ": not valid JSON");
  Parser p{name, nodes, ps};
  if (!doc.is_object() || !doc.contains("events") || !doc.at("events").is_array())
    return p.bad("events", "the file must be an object with an \"events\" list");
  const json& events = doc.at("events");
  if (events.size() > trace_events_max)
    return p.bad("events", fmt::format("more than {} events", trace_events_max));
  FaultTrace trace;
  for (size_t i = 0; i < events.size(); ++i) {
    FaultEvent e;
    if (Status s = p.event(events[i], fmt::format("events[{}]", i), e); !s.ok()) return s;
    trace.events.push_back(std::move(e));
  }
  std::stable_sort(trace.events.begin(), trace.events.end(),
                   [](const FaultEvent& a, const FaultEvent& b) { return a.at_s < b.at_s; });
  return trace;
}

Expected<FaultTrace> load_trace(const std::string& path, uint32_t nodes, uint32_t ps) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("--trace " + path + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_trace(text.str(), path, nodes, ps);
}

std::string trace_json(const FaultTrace& trace) {
  json events = json::array();
  auto host = [](json& j, const HostRef& h) { j[h.shard ? "shard" : "node"] = h.index; };
  auto side = [](const std::vector<HostRef>& hosts) {
    json nodes = json::array(), shards = json::array();
    bool coordinator = false;
    for (const HostRef& h : hosts) {
      if (h.coordinator)
        coordinator = true;
      else
        (h.shard ? shards : nodes).push_back(h.index);
    }
    json j = json::object();
    if (coordinator) j["coordinator"] = true;
    if (!nodes.empty()) j["nodes"] = nodes;
    if (!shards.empty()) j["shards"] = shards;
    return j;
  };
  for (const FaultEvent& e : trace.events) {
    json j = {{"at", e.at_s}, {"kind", to_string(e.kind)}, {"duration", e.duration_s}};
    switch (e.kind) {
      case FaultKind::partition:
        j["a"] = side(e.hosts);
        j["b"] = side(e.side_b);
        break;
      case FaultKind::lossy:
        j["drop"] = e.drop;
        j["duplicate"] = e.duplicate;
        j["reorder"] = e.reorder;
        break;
      case FaultKind::clog:
      case FaultKind::slow:
        j["factor"] = e.factor;
        host(j, e.hosts.at(0));
        break;
      case FaultKind::crash:
      case FaultKind::disk_full:
      case FaultKind::stop:
        host(j, e.hosts.at(0));
        break;
    }
    if (!e.cause.empty()) j["cause"] = e.cause;
    events.push_back(std::move(j));
  }
  return json{{"events", std::move(events)}}.dump(1);
}

FaultTrace merge(FaultTrace a, const FaultTrace& b) {
  a.events.insert(a.events.end(), b.events.begin(), b.events.end());
  std::stable_sort(a.events.begin(), a.events.end(),
                   [](const FaultEvent& x, const FaultEvent& y) { return x.at_s < y.at_s; });
  return a;
}

namespace {

// Exponential inter-arrival times of a Poisson process of `per_second`, bounded in count.
template <class F>
void poisson(SplitMix64& rng, double per_second, double horizon_s, F&& f) {
  if (per_second <= 0.0) return;
  constexpr size_t arrivals_max = 1'000'000;
  double t = 0.0;
  for (size_t n = 0; n < arrivals_max; ++n) {
    t += -std::log(1.0 - rng.uniform()) / per_second;
    if (t >= horizon_s) return;
    f(t);
  }
}

}  // namespace

FaultTrace generate_trace(const TraceGenOptions& o, uint64_t seed) {
  SplitMix64 rng(hash_combine(seed, 0xfa017));
  FaultTrace trace;
  const FailureProfile& p = o.profile;
  const double per_second_all =
      p.per_gpu_day * p.rate_scale * o.nodes * std::max(1u, o.gpus_per_node) / 86400.0;
  auto pick_node = [&] { return HostRef{false, static_cast<uint32_t>(rng.next() % o.nodes)}; };
  auto any_host = [&] {
    const uint32_t h = static_cast<uint32_t>(rng.next() % (o.nodes + o.ps));
    return h < o.nodes ? HostRef{false, h} : HostRef{true, h - o.nodes};
  };
  auto add_crash = [&](double t, const char* cause) {
    FaultEvent e;
    e.at_s = t;
    e.kind = FaultKind::crash;
    const bool chaos = std::string_view(cause) == "chaos";
    e.duration_s = chaos ? (0.02 + 0.18 * rng.uniform()) * o.horizon_s : p.restart_s;
    // GPU and GPU-memory (HBM) failures take down a worker node; other causes any host.
    const bool gpu_host = std::string_view(cause) == "gpu" || std::string_view(cause) == "memory";
    e.hosts = {gpu_host ? pick_node() : any_host()};
    e.cause = cause;
    trace.events.push_back(std::move(e));
  };
  auto add_partition = [&](double t, bool chaos) {
    FaultEvent e;
    e.at_s = t;
    e.kind = FaultKind::partition;
    e.duration_s = chaos ? (0.02 + 0.18 * rng.uniform()) * o.horizon_s : p.network_heal_s;
    e.cause = "network";
    // One node cut off from everything else (shards and the coordinator included).
    const HostRef first = pick_node();
    e.hosts = {first};
    for (uint32_t n = 0; n < o.nodes; ++n)
      if (n != first.index) e.side_b.push_back({false, n});
    for (uint32_t s = 0; s < o.ps; ++s) e.side_b.push_back({true, s});
    e.side_b.push_back({false, 0, true});
    trace.events.push_back(std::move(e));
  };
  const double other_share = std::max(0.0, 1.0 - p.gpu_share - p.memory_share - p.network_share);
  poisson(rng, per_second_all * p.gpu_share, o.horizon_s, [&](double t) { add_crash(t, "gpu"); });
  poisson(rng, per_second_all * p.memory_share, o.horizon_s,
          [&](double t) { add_crash(t, "memory"); });
  poisson(rng, per_second_all * other_share, o.horizon_s, [&](double t) { add_crash(t, "other"); });
  poisson(rng, per_second_all * p.network_share, o.horizon_s,
          [&](double t) { add_partition(t, false); });
  auto count = [&](FaultKind k) {
    return static_cast<uint32_t>(std::count_if(trace.events.begin(), trace.events.end(),
                                               [&](const FaultEvent& e) { return e.kind == k; }));
  };
  for (uint32_t c = count(FaultKind::crash); c < o.min_crashes; ++c)
    add_crash(rng.uniform() * o.horizon_s, "chaos");
  for (uint32_t c = count(FaultKind::partition); c < o.min_partitions; ++c)
    add_partition(rng.uniform() * o.horizon_s, true);
  if (o.chaos_extras) {
    for (FaultKind k : {FaultKind::slow, FaultKind::clog, FaultKind::lossy, FaultKind::disk_full}) {
      if (k == FaultKind::disk_full && o.ps == 0) continue;
      FaultEvent e;
      e.kind = k;
      e.at_s = rng.uniform() * o.horizon_s;
      e.duration_s = (0.05 + 0.2 * rng.uniform()) * o.horizon_s;
      const double factor = 1.0 + 9.0 * rng.uniform();
      if (k == FaultKind::slow || k == FaultKind::clog) e.factor = factor;
      e.cause = "chaos";
      if (k == FaultKind::lossy) {
        e.drop = 0.05 * rng.uniform();
        e.duplicate = 0.05 * rng.uniform();
        e.reorder = 0.2 * rng.uniform();
      } else if (k == FaultKind::disk_full) {
        e.hosts = {HostRef{true, static_cast<uint32_t>(rng.next() % o.ps)}};
      } else {
        e.hosts = {any_host()};
      }
      trace.events.push_back(std::move(e));
    }
  }
  std::stable_sort(trace.events.begin(), trace.events.end(),
                   [](const FaultEvent& a, const FaultEvent& b) { return a.at_s < b.at_s; });
  return trace;
}

}  // namespace colony::sim
