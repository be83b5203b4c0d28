#include "monitor/profile.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

namespace colony::monitor {

namespace {

// The length of the union of [start, end) intervals.
int64_t union_length(std::vector<std::pair<int64_t, int64_t>>& spans) {
  std::sort(spans.begin(), spans.end());
  int64_t total = 0, open = std::numeric_limits<int64_t>::min(), close = open;
  for (const auto& [s, e] : spans) {
    if (s > close) {
      total += close - open;
      open = s;
      close = e;
    } else {
      close = std::max(close, e);
    }
  }
  return total + (close - open);
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

Profile profile(const Timeline& timeline) {
  Profile p;
  p.truncated = timeline.truncated;
  struct Cell {
    std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> by_member;
    uint64_t spans = 0;
    int64_t raw_ns = 0;
  };
  std::map<std::pair<std::string, std::string>, Cell> cells;
  std::map<std::string, std::set<uint32_t>> members;
  int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
  for (const TimelineEvent& e : timeline.events) {
    if (e.duration_ns < 0) {
      ++p.instants;
      continue;
    }
    const std::string role = e.role.empty() ? "member" : e.role;
    Cell& c = cells[{role, e.category}];
    c.by_member[e.pid].push_back({e.start_ns, e.start_ns + e.duration_ns});
    ++c.spans;
    c.raw_ns += e.duration_ns;
    members[role].insert(e.pid);
    first = std::min(first, e.start_ns);
    last = std::max(last, e.start_ns + e.duration_ns);
  }
  if (cells.empty()) return p;
  p.wall_seconds = double(last - first) / 1e9;
  for (const auto& [role, pids] : members) p.roles.push_back({role, uint32_t(pids.size())});
  for (auto& [key, cell] : cells) {
    ProfileRow row{key.first, key.second};
    row.members = uint32_t(cell.by_member.size());
    row.spans = cell.spans;
    int64_t ns = 0;
    for (auto& [pid, spans] : cell.by_member) ns += union_length(spans);
    row.seconds = double(ns) / 1e9;
    const double role_seconds = p.wall_seconds * double(members[key.first].size());
    row.share = role_seconds > 0 ? row.seconds / role_seconds : 0.0;
    row.mean_span_ms = double(cell.raw_ns) / 1e6 / double(cell.spans);
    p.rows.push_back(std::move(row));
  }
  std::stable_sort(p.rows.begin(), p.rows.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return a.role != b.role ? a.role < b.role : a.seconds > b.seconds;
  });
  return p;
}

std::string profile_table(const Profile& p) {
  std::string out = fmt::format("wall {:.3f} s", p.wall_seconds);
  for (const auto& [role, n] : p.roles)
    out += fmt::format(", {} {}{}", n, role, n == 1 || role.ends_with('s') ? "" : "s");
  if (p.truncated) out += " (timeline truncated: shares are of the part recorded)";
  out += "\n";
  out += fmt::format("{:<12} {:<10} {:>10} {:>7} {:>9} {:>9}\n", "role", "phase", "seconds",
                     "share", "spans", "mean ms");
  for (const ProfileRow& r : p.rows)
    out += fmt::format("{:<12} {:<10} {:>10.3f} {:>6.1f}% {:>9} {:>9.3f}\n", r.role, r.phase,
                       r.seconds, 100.0 * r.share, r.spans, r.mean_span_ms);
  std::string missing;
  for (const char* phase : profile_phases)
    if (std::none_of(p.rows.begin(), p.rows.end(),
                     [&](const ProfileRow& r) { return r.phase == phase; }))
      missing += (missing.empty() ? "" : ", ") + std::string(phase);
  if (!missing.empty()) out += "not in this timeline: " + missing + "\n";
  if (p.instants > 0) out += fmt::format("instant events (not timed): {}\n", p.instants);
  return out;
}

std::string profile_svg(const Profile& p) {
  constexpr int width = 960, bar = 22, gap = 4, margin = 10;
  int rows = 0;
  for (const auto& [role, n] : p.roles) {
    (void)n;
    rows += 1 + int(std::count_if(p.rows.begin(), p.rows.end(),
                                  [&](const ProfileRow& r) { return r.role == role; }));
  }
  const int height = margin * 2 + 24 + rows * (bar + gap) + int(p.roles.size()) * gap * 2;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
      "<text x=\"{}\" y=\"{}\" font-size=\"14\">colony profile: wall {:.3f} s{}</text>\n",
      width, height, margin, margin + 14, p.wall_seconds, p.truncated ? " (truncated)" : "");
  static constexpr const char* colours[] = {"#e4572e", "#f3a712", "#a8c686", "#669bbc", "#9bc1e6",
                                            "#db2b39", "#8d6a9f", "#c5d86d", "#f0a6ca", "#3c91e6"};
  int y = margin + 24;
  const double span = width - 2 * margin;
  for (const auto& [role, n] : p.roles) {
    const std::string title = fmt::format("{} ({} member{})", role, n, n == 1 ? "" : "s");
    out += fmt::format(
        "<g><title>{}: 100% of {:.3f} s each</title><rect x=\"{}\" y=\"{}\" width=\"{}\" "
        "height=\"{}\" fill=\"#d0d0d0\"/><text x=\"{}\" y=\"{}\">{}</text></g>\n",
        xml_escape(title), p.wall_seconds, margin, y, span, bar, margin + 4, y + bar - 7,
        xml_escape(title));
    y += bar + gap;
    int colour = 0;
    for (const ProfileRow& r : p.rows) {
      if (r.role != role) continue;
      const double w = std::max(1.0, span * std::min(1.0, r.share));
      const std::string label = fmt::format("{} {:.1f}%", r.phase, 100.0 * r.share);
      out += fmt::format(
          "<g><title>{} {}: {:.3f} s, {:.1f}% of its time, {} spans, mean {:.3f} ms</title>"
          "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>"
          "<text x=\"{}\" y=\"{}\">{}</text></g>\n",
          xml_escape(role), xml_escape(r.phase), r.seconds, 100.0 * r.share, r.spans,
          r.mean_span_ms, margin, y, w, bar, colours[colour++ % std::size(colours)], margin + 4,
          y + bar - 7, xml_escape(label));
      y += bar + gap;
    }
    y += gap * 2;
  }
  out += "</svg>\n";
  return out;
}

}  // namespace colony::monitor
