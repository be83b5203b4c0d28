// `--metrics-port` and `--metrics-host`: the live /metrics endpoint of `colony train` and of
// every daemon (docs/monitoring.md).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "monitor/alerts.h"
#include "monitor/http_server.h"
#include "monitor/registry.h"
#include "monitor/timeline_recorder.h"

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

// `--timeline FILE` (colony train, ps, worker): a recorder to hand the actors, once FILE is
// known to be writable (invalid_input naming the flag and the path when it is not: found out
// before the job, not after it).
Expected<std::shared_ptr<monitor::TimelineRecorder>> start_timeline(const std::string& path);
// Writes what `recorder` holds to `path` and says so through `say` ("timeline: N events in
// FILE ..."); false, and a message naming the path, when it cannot.
bool write_timeline(const std::string& path, const monitor::TimelineRecorder& recorder,
                    const std::function<void(const std::string&)>& say);

// The report's "alerts": one {kind, subject, message} object per alert, in order.
nlohmann::json alerts_json(const std::vector<monitor::Alert>& alerts);

}  // namespace colony::cli
