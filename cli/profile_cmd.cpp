// colony profile: where a job's time went, per role and phase, from a timeline that
// `colony train --timeline` or `colony sim --timeline` wrote.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "monitor/profile.h"

namespace colony::cli {

Runner add_profile(CLI::App& app) {
  struct Args {
    std::string timeline, svg;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Where a job's time went, per role and phase, from a timeline written by colony train "
      "--timeline or colony sim --timeline: a text table, and a flame-style SVG chart");
  cmd->add_option("timeline", a->timeline, "The timeline (Chrome trace-event JSON)")->required();
  cmd->add_option("--svg", a->svg, "Write the chart to this SVG file");
  add_config_option(cmd);
  return [a]() -> int {
    std::ifstream in(a->timeline, std::ios::binary);
    if (!in) return fail(Status::not_found(a->timeline + ": cannot open the timeline"));
    std::stringstream text;
    text << in.rdbuf();
    auto timeline = parse_timeline(text.str(), a->timeline);
    if (!timeline) return fail(timeline.status());
    const monitor::Profile p = monitor::profile(*timeline);
    if (p.rows.empty())
      return fail(Status::invalid_input(a->timeline + ": the timeline holds no timed spans"));
    std::printf("%s", monitor::profile_table(p).c_str());
    if (!a->svg.empty() && !write_file("--svg", a->svg, monitor::profile_svg(p))) return 1;
    return 0;
  };
}

}  // namespace colony::cli
