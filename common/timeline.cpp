#include "common/timeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace colony {

std::string timeline_json(const Timeline& timeline) {
  nlohmann::json events = nlohmann::json::array();
  for (const TimelineEvent& e : timeline.events) {
    nlohmann::json j = {{"name", e.name},
                        {"cat", e.category},
                        {"pid", e.pid},
                        {"tid", e.tid},
                        {"ts", double(e.start_ns) / 1e3}};
    if (e.duration_ns >= 0) {
      j["ph"] = "X";
      j["dur"] = double(e.duration_ns) / 1e3;
    } else {
      j["ph"] = "i";
      j["s"] = "p";
    }
    if (!e.role.empty()) j["args"] = {{"role", e.role}};
    events.push_back(std::move(j));
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  if (timeline.truncated) doc["otherData"]["truncated"] = true;
  if (timeline.origin_unix_ns) doc["otherData"]["origin_unix_ns"] = timeline.origin_unix_ns;
  return doc.dump();
}

Expected<Timeline> parse_timeline(const std::string& text, const std::string& name) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::invalid_input(name + ": not JSON");
  Timeline t;
  const nlohmann::json* events = &doc;
  std::string where = "";
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it == doc.end() || !it->is_array())
      return Status::invalid_input(name + ": traceEvents: missing, or not an array");
    events = &*it;
    where = "traceEvents";
    if (auto other = doc.find("otherData"); other != doc.end() && other->is_object()) {
      auto tr = other->find("truncated");
      t.truncated = tr != other->end() && tr->is_boolean() && tr->get<bool>();
      if (auto origin = other->find("origin_unix_ns"); origin != other->end()) {
        if (!origin->is_number_integer() || origin->get<int64_t>() < 0)
          return Status::invalid_input(
              name +
              ": otherData.origin_unix_ns: must be a whole number of nanoseconds, 0 or more");
        t.origin_unix_ns = origin->get<int64_t>();
      }
    }
  } else if (!doc.is_array()) {
    return Status::invalid_input(name + ": expected a trace-event object or array");
  }
  for (size_t i = 0; i < events->size(); ++i) {
    const nlohmann::json& j = (*events)[i];
    auto bad = [&](const std::string& field, const std::string& why) {
      return Status::invalid_input(
          fmt::format("{}: {}[{}]{}{}: {}", name, where, i, field.empty() ? "" : ".", field, why));
    };
    if (!j.is_object()) return bad("", "not an object");
    auto ph = j.find("ph");
    if (ph == j.end() || !ph->is_string()) return bad("ph", "missing, or not a string");
    const std::string phase = ph->get<std::string>();
    if (phase != "X" && phase != "i" && phase != "I") continue;
    TimelineEvent e;
    auto number = [&](const char* field, bool required, double& out) -> Status {
      auto it = j.find(field);
      if (it == j.end()) return required ? bad(field, "missing") : Status();
      // 1e15 microseconds (31 years) keeps nanoseconds within int64_t.
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0 ||
          it->get<double>() > 1e15)
        return bad(field, "must be a number in 0..1e15");
      out = it->get<double>();
      return Status();
    };
    double ts = 0, dur = 0, pid = 0, tid = 0;
    if (Status s = number("ts", true, ts); !s.ok()) return s;
    if (Status s = number("dur", phase == "X", dur); !s.ok()) return s;
    if (Status s = number("pid", false, pid); !s.ok()) return s;
    if (Status s = number("tid", false, tid); !s.ok()) return s;
    if (pid > 4294967295.0) return bad("pid", "too large");
    if (tid > 4294967295.0) return bad("tid", "too large");
    for (const char* field : {"name", "cat"}) {
      auto it = j.find(field);
      if (it != j.end() && !it->is_string()) return bad(field, "must be a string");
    }
    e.name = j.value("name", "");
    e.category = j.value("cat", "");
    if (auto args = j.find("args"); args != j.end() && args->is_object()) {
      auto role = args->find("role");
      if (role != args->end() && role->is_string()) e.role = role->get<std::string>();
    }
    e.pid = uint32_t(pid);
    e.tid = uint32_t(tid);
    e.start_ns = int64_t(std::llround(ts * 1e3));
    e.duration_ns = phase == "X" ? int64_t(std::llround(dur * 1e3)) : -1;
    t.events.push_back(std::move(e));
  }
  return t;
}

Expected<Timeline> merge_timelines(const std::vector<Timeline>& timelines,
                                   const std::vector<std::string>& names) {
  COLONY_ASSERT(timelines.size() == names.size(), "{} timelines, {} names", timelines.size(),
                names.size());
  Timeline merged;
  if (timelines.empty()) return merged;
  for (size_t i = 0; i < timelines.size(); ++i)
    if (timelines[i].origin_unix_ns <= 0)
      return Status::invalid_input(fmt::format(
          "{}: no otherData.origin_unix_ns (a simulator's timeline, or one from an older colony): "
          "its clock cannot be lined up with the others'",
          names[i]));
  merged.origin_unix_ns = std::min_element(timelines.begin(), timelines.end(),
                                           [](const Timeline& a, const Timeline& b) {
                                             return a.origin_unix_ns < b.origin_unix_ns;
                                           })
                              ->origin_unix_ns;
  std::set<uint32_t> taken;  // pids of the timelines merged so far
  uint32_t next_free = 0xFFFFFFFEu;
  for (const Timeline& t : timelines) {
    std::set<uint32_t> own;
    for (const TimelineEvent& e : t.events) own.insert(e.pid);
    std::map<uint32_t, uint32_t> renamed;
    for (uint32_t pid : own) {
      if (!taken.count(pid)) continue;
      while (taken.count(next_free) || own.count(next_free)) --next_free;
      renamed[pid] = next_free--;
    }
    const int64_t shift = t.origin_unix_ns - merged.origin_unix_ns;
    for (TimelineEvent e : t.events) {
      if (auto it = renamed.find(e.pid); it != renamed.end()) e.pid = it->second;
      e.start_ns += shift;
      merged.events.push_back(std::move(e));
    }
    for (uint32_t pid : own) taken.insert(renamed.count(pid) ? renamed[pid] : pid);
    merged.truncated = merged.truncated || t.truncated;
  }
  std::stable_sort(
      merged.events.begin(), merged.events.end(),
      [](const TimelineEvent& a, const TimelineEvent& b) { return a.start_ns < b.start_ns; });
  return merged;
}

}  // namespace colony
