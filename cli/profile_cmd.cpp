// colony profile: where a job's time went, per role and phase, from a timeline that
// `colony train --timeline` or `colony sim --timeline` wrote, or from the timelines of a
// cluster's daemons (`colony ps|worker --timeline`), lined up into one.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "monitor/profile.h"

namespace colony::cli {

Runner add_profile(CLI::App& app) {
  struct Args {
    std::vector<std::string> timelines;
    std::string svg, merged;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Where a job's time went, per role and phase, from a timeline written by colony train "
      "--timeline or colony sim --timeline, or from those of a cluster's daemons together: a "
      "text table, and a flame-style SVG chart");
  cmd->add_option("timelines", a->timelines,
                  "The timeline (Chrome trace-event JSON), or several daemons' timelines of one "
                  "job, lined up by the wall clock each recorded at its start")
      ->required();
  cmd->add_option("--svg", a->svg, "Write the chart to this SVG file");
  cmd->add_option("--merged", a->merged,
                  "Write the timelines lined up into one trace (opens in Perfetto) to this file");
  add_config_option(cmd);
  return [a]() -> int {
    std::vector<Timeline> read;
    for (const std::string& path : a->timelines) {
      std::ifstream in(path, std::ios::binary);
      if (!in) return fail(Status::not_found(path + ": cannot open the timeline"));
      std::stringstream text;
      text << in.rdbuf();
      auto timeline = parse_timeline(text.str(), path);
      if (!timeline) return fail(timeline.status());
      read.push_back(std::move(timeline.value()));
    }
    auto merged = read.size() == 1 ? Expected<Timeline>(std::move(read.front()))
                                   : merge_timelines(read, a->timelines);
    if (!merged) return fail(merged.status());
    const Timeline& timeline = *merged;
    const monitor::Profile p = monitor::profile(timeline);
    if (p.rows.empty())
      return fail(Status::invalid_input(
          fmt::format("{}: the timeline{} no timed spans", fmt::join(a->timelines, ", "),
                      a->timelines.size() == 1 ? " holds" : "s hold")));
    std::printf("%s", monitor::profile_table(p).c_str());
    if (!a->svg.empty() && !write_file("--svg", a->svg, monitor::profile_svg(p))) return 1;
    if (!a->merged.empty() && !write_file("--merged", a->merged, timeline_json(timeline))) return 1;
    return 0;
  };
}

}  // namespace colony::cli
