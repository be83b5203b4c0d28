#include "sim/network.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace colony::sim {

Status validate(const NetworkSpec& s) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0.0; };
  if (!positive(s.nic_gbps)) return Status::invalid_input("--nic-gbps must be a positive number");
  if (!positive(s.intra_gbps))
    return Status::invalid_input("--intra-gbps must be a positive number");
  if (!(s.latency_us >= 0.0 && std::isfinite(s.latency_us)))
    return Status::invalid_input("--latency-us must be zero or more");
  if (!(s.spine_latency_us >= 0.0 && std::isfinite(s.spine_latency_us)))
    return Status::invalid_input("--spine-latency-us must be zero or more");
  if (!(s.intra_latency_us >= 0.0 && std::isfinite(s.intra_latency_us)))
    return Status::invalid_input("intra-host latency must be zero or more");
  if (s.nodes_per_rack < 1) return Status::invalid_input("--nodes-per-rack must be at least 1");
  if (!(s.oversubscription >= 1.0 && std::isfinite(s.oversubscription)))
    return Status::invalid_input("--oversubscription must be at least 1");
  return Status();
}

Status load_topology(const std::string& path, NetworkSpec& spec) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("--topology " + path + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  const auto doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return Status::invalid_input(path + ": not a JSON object of topology fields");
  NetworkSpec s = spec;
  for (const auto& [key, value] : doc.items()) {
    double* field = key == "nic_gbps"           ? &s.nic_gbps
                    : key == "latency_us"       ? &s.latency_us
                    : key == "spine_latency_us" ? &s.spine_latency_us
                    : key == "oversubscription" ? &s.oversubscription
                    : key == "intra_gbps"       ? &s.intra_gbps
                    : key == "intra_latency_us" ? &s.intra_latency_us
                                                : nullptr;
    if (key == "nodes_per_rack") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() < 1 ||
          value.get<uint64_t>() > 1'000'000)
        return Status::invalid_input(path + ": nodes_per_rack: must be an integer in 1..1000000");
      s.nodes_per_rack = static_cast<uint32_t>(value.get<uint64_t>());
      continue;
    }
    if (!field) return Status::invalid_input(path + ": " + key + ": not a topology field");
    if (!value.is_number()) return Status::invalid_input(path + ": " + key + ": must be a number");
    *field = value.get<double>();
  }
  if (Status st = validate(s); !st.ok()) return Status::invalid_input(path + ": " + st.message());
  spec = s;
  return Status();
}

namespace {
double ns_per_byte(double gbps) {
  return 8.0 / gbps;
}  // Gbit/s = bits per ns
}  // namespace

Network::Network(const NetworkSpec& spec, uint32_t hosts) : spec_(spec), hosts_(hosts) {
  COLONY_ASSERT(validate(spec).ok(), "invalid network spec");
  const uint32_t racks = (hosts + spec.nodes_per_rack - 1) / spec.nodes_per_rack;
  up_.assign(hosts, Link{ns_per_byte(spec.nic_gbps)});
  down_ = up_;
  intra_.assign(hosts, Link{ns_per_byte(spec.intra_gbps)});
  const double uplink_gbps = spec.nic_gbps * spec.nodes_per_rack / spec.oversubscription;
  rack_up_.assign(racks, Link{ns_per_byte(uplink_gbps)});
  rack_down_ = rack_up_;
  latency_ = static_cast<VirtualNanos>(std::llround(spec.latency_us * ns_per_us));
  spine_latency_ = static_cast<VirtualNanos>(std::llround(spec.spine_latency_us * ns_per_us));
  intra_latency_ = static_cast<VirtualNanos>(std::llround(spec.intra_latency_us * ns_per_us));
}

VirtualNanos Network::use(Link& link, uint64_t bytes, VirtualNanos now) {
  const VirtualNanos start = std::max(now, link.free_at);
  const auto hold =
      static_cast<VirtualNanos>(std::ceil(double(bytes) * link.ns_per_byte * link.clog));
  link.free_at = start + hold;
  return link.free_at;
}

VirtualNanos Network::transfer(uint32_t from, uint32_t to, uint64_t bytes, VirtualNanos now) {
  COLONY_ASSERT(from < hosts_ && to < hosts_, "transfer between hosts {} and {} of {}", from, to,
                hosts_);
  bytes_ += bytes;
  ++transfers_;
  if (from == to) return use(intra_[from], bytes, now) + intra_latency_ + 1;
  VirtualNanos done = std::max(use(up_[from], bytes, now), use(down_[to], bytes, now));
  VirtualNanos latency = latency_;
  const uint32_t ra = rack_of(from), rb = rack_of(to);
  if (ra != rb) {
    done = std::max({done, use(rack_up_[ra], bytes, now), use(rack_down_[rb], bytes, now)});
    latency += spine_latency_;
  }
  return done + latency + 1;
}

void Network::set_clog(uint32_t host, double factor) {
  COLONY_ASSERT(host < hosts_ && factor >= 1.0, "clog host {} factor {}", host, factor);
  up_[host].clog = factor;
  down_[host].clog = factor;
}

}  // namespace colony::sim
