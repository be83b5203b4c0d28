// The simulator's network: hosts in racks under top-of-rack switches, racks joined by a spine
// with configurable oversubscription, and an intra-host link (NVLink-class) for traffic between
// the cores of one host.
//
// Model (per-link FIFO serialization, store-and-forward free): every link has a bandwidth and
// the virtual time at which it is next free. A transfer of `bytes` from host a to host b uses
// the links on its path (a's NIC up, and when the racks differ a's rack uplink and b's rack
// downlink, then b's NIC down; a single intra-host link when a == b). On each link it starts
// when both the transfer and the link are ready, holds the link for bytes / bandwidth, and the
// transfer arrives when its slowest link is done plus the path's latency. Concurrent flows
// thus share a link by taking turns, which over a step gives each its fair share of the bytes
// without modelling TCP. A rack uplink carries nodes_per_rack x nic / oversubscription.
//
// Pure arithmetic on virtual time: no clock, no randomness. Callers must hand in transfers in
// non-decreasing `now` order (the simulator does: it calls from inside events).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/event_queue.h"

namespace colony::sim {

inline constexpr VirtualNanos ns_per_second = 1'000'000'000;
inline constexpr VirtualNanos ns_per_us = 1'000;

struct NetworkSpec {
  double nic_gbps = 100.0;        // each host's NIC, each direction (Gbit/s)
  double latency_us = 5.0;        // one way, host to host within a rack
  double spine_latency_us = 2.0;  // added when a path crosses the spine
  uint32_t nodes_per_rack = 32;   // hosts under one top-of-rack switch
  double oversubscription = 3.0;  // rack downlink capacity over uplink capacity (>= 1)
  double intra_gbps = 2400.0;     // intra-host link between a node's GPUs (NVLink-class)
  double intra_latency_us = 1.0;
};

// Checks ranges; fails with invalid_input naming the flag.
Status validate(const NetworkSpec& spec);

// Reads a topology file: a JSON object whose fields override `spec`'s (nic_gbps, latency_us,
// spine_latency_us, nodes_per_rack, oversubscription, intra_gbps, intra_latency_us), e.g.
// {"nodes_per_rack": 16, "oversubscription": 4, "nic_gbps": 200}. Fails with invalid_input
// naming the file and field for bad JSON, an unknown field, a value of the wrong type or out of
// range (see validate); not_found when the file cannot be read.
Status load_topology(const std::string& path, NetworkSpec& spec);

class Network {
 public:
  // `hosts` hosts, placed in racks of spec.nodes_per_rack in id order. Precondition: validate().
  Network(const NetworkSpec& spec, uint32_t hosts);

  // Sends `bytes` from host `from` to host `to` at `now`; returns the arrival time (> now).
  VirtualNanos transfer(uint32_t from, uint32_t to, uint64_t bytes, VirtualNanos now);
  // Divides the NIC bandwidth of `host` by `factor` (>= 1) until set again (clogged link).
  void set_clog(uint32_t host, double factor);

  uint32_t hosts() const { return hosts_; }
  uint32_t rack_of(uint32_t host) const { return host / spec_.nodes_per_rack; }
  uint64_t bytes_carried() const { return bytes_; }
  uint64_t transfers() const { return transfers_; }

 private:
  struct Link {
    double ns_per_byte = 0.0;
    double clog = 1.0;
    VirtualNanos free_at = 0;
  };
  static VirtualNanos use(Link& link, uint64_t bytes, VirtualNanos now);

  NetworkSpec spec_;
  uint32_t hosts_;
  std::vector<Link> up_, down_, intra_;    // per host
  std::vector<Link> rack_up_, rack_down_;  // per rack
  VirtualNanos latency_, spine_latency_, intra_latency_;
  uint64_t bytes_ = 0;
  uint64_t transfers_ = 0;
};

}  // namespace colony::sim
