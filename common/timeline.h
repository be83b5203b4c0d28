// Timelines: what each member of a job did and when, as Chrome trace events (the JSON that
// Perfetto and chrome://tracing open). The simulator writes its virtual-clock timeline in this
// format (`colony sim --timeline`), real runs theirs (`colony train --timeline`), and
// `colony profile` reads either back (monitor/profile.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace colony {

// One trace event: a complete event ("X", duration >= 0) or an instant ("i", duration < 0).
struct TimelineEvent {
  std::string name;      // what happened ("step 12", "pull from 3")
  std::string category;  // the phase: compute, read, pull wait, push, apply, gate wait, ...
  std::string role;      // worker, shard, aggregator; empty: none given (args.role)
  uint32_t pid = 0;      // the member: the simulator's host, a real run's node id
  uint32_t tid = 0;      // a track within it
  int64_t start_ns = 0;
  int64_t duration_ns = -1;
};

struct Timeline {
  std::vector<TimelineEvent> events;
  bool truncated = false;  // events were dropped past a bound (otherData.truncated)
  // A real run's: the wall-clock time (nanoseconds since the Unix epoch) of its time 0, which
  // lines up the timelines of several processes (merge_timelines); 0: none (the simulator's
  // virtual clock). otherData.origin_unix_ns in the document.
  int64_t origin_unix_ns = 0;
};

// The trace-event JSON document: {"traceEvents": [...], "displayTimeUnit": "ms"}, times in
// microseconds as the format wants, the role as args.role.
std::string timeline_json(const Timeline& timeline);

// Reads a trace-event document (the object form, or a bare array of events) back. Events of
// other phases than "X" and "i" (metadata, counters) are skipped. Fails with invalid_input
// naming `name` and the event ("trace.json: traceEvents[4].ts: must be a number") for text that
// is not such a document.
Expected<Timeline> parse_timeline(const std::string& text, const std::string& name);

// One timeline of several processes' (each daemon of a cluster writes its own), on the clock
// of the earliest: each one's events shifted by how much later its origin is. A pid found in
// more than one (each daemon's bridge has the same) is a process of each: in the second and
// later timelines it becomes a pid of its own, counting down from 0xFFFFFFFE. Fails with
// invalid_input naming the timeline (`names[i]`) that has no origin_unix_ns: a simulator's, or
// one written before origins were recorded.
Expected<Timeline> merge_timelines(const std::vector<Timeline>& timelines,
                                   const std::vector<std::string>& names);

}  // namespace colony
