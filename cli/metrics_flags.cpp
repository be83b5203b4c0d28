#include "cli/metrics_flags.h"

#include <fstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "monitor/ps_metrics.h"

namespace colony::cli {

void add_metrics_flags(CLI::App* cmd, MetricsFlags& flags, bool dashboard_flag) {
  cmd->add_option("--metrics-port", flags.port,
                  "Serve live Prometheus metrics at http://HOST:PORT/metrics while it runs (0: a "
                  "free port, printed; docs/monitoring.md)");
  cmd->add_option("--metrics-host", flags.host,
                  "The address --metrics-port listens on (0.0.0.0: every interface)")
      ->capture_default_str();
  if (dashboard_flag)
    cmd->add_flag("--dashboard", flags.dashboard,
                  "With --metrics-port: also serve a live dashboard at http://HOST:PORT/ (loss and "
                  "throughput curves, shard load map, staleness, latencies, alerts)");
}

Expected<MetricsEndpoint> start_metrics(const MetricsFlags& flags,
                                        const std::function<void(const std::string&)>& say) {
  MetricsEndpoint e;
  if (flags.dashboard && flags.port < 0)
    return Status::invalid_input("--dashboard: give --metrics-port too (the page is served there)");
  if (flags.port < 0) return e;
  e.registry = std::make_shared<monitor::Registry>();
  monitor::add_process_metrics(*e.registry);
  auto started = monitor::HttpServer::start(flags.host, flags.port, e.registry, flags.dashboard);
  if (!started) return started.status();
  e.server = std::move(*started);
  say("metrics: " + e.server->url() + "/metrics");
  if (flags.dashboard) say("dashboard: " + e.server->url() + "/");
  return e;
}

Expected<std::shared_ptr<monitor::TimelineRecorder>> start_timeline(const std::string& path) {
  if (!std::ofstream(path))
    return Status::invalid_input("--timeline " + path + ": cannot write the file");
  return std::make_shared<monitor::TimelineRecorder>();
}

bool write_timeline(const std::string& path, const monitor::TimelineRecorder& recorder,
                    const std::function<void(const std::string&)>& say) {
  const Timeline timeline = recorder.snapshot();
  if (!write_file("--timeline", path, timeline_json(timeline))) return false;
  say(fmt::format("timeline: {} events{} in {} (open it in Perfetto, or: colony profile {})",
                  timeline.events.size(), timeline.truncated ? " (truncated)" : "", path, path));
  return true;
}

nlohmann::json alerts_json(const std::vector<monitor::Alert>& alerts) {
  nlohmann::json list = nlohmann::json::array();
  for (const monitor::Alert& alert : alerts)
    list.push_back({{"kind", alert.kind}, {"subject", alert.subject}, {"message", alert.message}});
  return list;
}

}  // namespace colony::cli
