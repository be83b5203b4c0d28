// `--metrics-port` and `--metrics-host`: the live /metrics endpoint of `colony train` and of
// every daemon (docs/monitoring.md).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "monitor/http_server.h"
#include "monitor/registry.h"

namespace colony::cli {

struct MetricsFlags {
  int port = -1;  // -1: no endpoint
  std::string host = "127.0.0.1";
  bool dashboard = false;  // also serve the dashboard at /
};
// `dashboard_flag`: add --dashboard (colony train); without it the command serves the
// dashboard whenever it serves metrics (the coordinator) or never (ps, worker), as `flags`
// says.
void add_metrics_flags(CLI::App* cmd, MetricsFlags& flags, bool dashboard_flag = false);

// The registry a command records into and the server that serves it; both null without
// --metrics-port.
struct MetricsEndpoint {
  std::shared_ptr<monitor::Registry> registry;
  std::unique_ptr<monitor::HttpServer> server;
};
// Starts serving when --metrics-port was given (with the process metrics registered) and says
// where through `say` ("metrics: http://HOST:PORT/metrics", and "dashboard: http://HOST:PORT/").
// Fails with invalid_input naming the address when it cannot listen there, and for --dashboard
// without --metrics-port.
Expected<MetricsEndpoint> start_metrics(const MetricsFlags& flags,
                                        const std::function<void(const std::string&)>& say);

}  // namespace colony::cli
