// A small HTTP server for a job's live pages: /metrics (Prometheus text) and whatever else a
// command adds. It serves from a thread of its own (cpp-httplib), never from an actor's.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace colony::monitor {

class Registry;

class HttpServer {
 public:
  // Binds `host`:`port` (port 0: a free port the system picks) and serves GET /metrics with
  // `registry`'s render(), and with `dashboard` GET / with the dashboard page (dashboard_html),
  // which draws what it reads from /metrics. Fails with invalid_input naming the address when
  // it cannot be bound (in use, not an address of this machine) and for a port outside
  // 0..65535.
  static Expected<std::unique_ptr<HttpServer>> start(const std::string& host, int port,
                                                     std::shared_ptr<const Registry> registry,
                                                     bool dashboard = false);
  // Stops serving: in-flight requests finish, the port is released.
  ~HttpServer();

  // The port bound (the one picked for port 0).
  int port() const;
  // "http://host:port".
  std::string url() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The live dashboard: one self-contained page (monitor/dashboard.html, built into the binary)
// that polls ./metrics and draws the loss and throughput curves, the shard load map, staleness,
// latencies and alerts. It fetches nothing from anywhere else.
const char* dashboard_html();

}  // namespace colony::monitor
