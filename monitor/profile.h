// `colony profile`: where a job's time went, per role and phase, read off a timeline
// (common/timeline.h) from a real run (`colony train --timeline`) or the simulator
// (`colony sim --timeline`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/timeline.h"

namespace colony::monitor {

// The phases a real run records (docs/monitoring.md says what each one covers). A timeline may
// hold others (the simulator's fault spans); they are profiled the same way.
inline constexpr const char* profile_phases[] = {"read",      "compute",   "pull wait", "push wait",
                                                 "pull",      "push",      "serve",     "apply",
                                                 "gate wait", "aggregate", "serialize", "network"};

struct ProfileRow {
  std::string role;      // the events' args.role, "member" where a timeline gives none
  std::string phase;     // the events' category
  uint32_t members = 0;  // distinct pids of the role that spent time in the phase
  uint64_t spans = 0;
  // The time the role's members spent in the phase, summed over members; each member's spans
  // are merged first, so overlapping ones (pulls to several shards at once) count once.
  double seconds = 0.0;
  // seconds / (the role's members x the timeline's wall time): the fraction of the role's time.
  double share = 0.0;
  double mean_span_ms = 0.0;
};

struct Profile {
  double wall_seconds = 0.0;                            // first span's start to the last one's end
  std::vector<std::pair<std::string, uint32_t>> roles;  // each role and its members, by name
  std::vector<ProfileRow> rows;                         // by role, then most time first
  uint64_t instants = 0;                                // instant events (faults), not timed
  bool truncated = false;  // the timeline was cut short: shares are of what it holds
};

// Profiles a timeline. A timeline without spans gives a profile without rows.
Profile profile(const Timeline& timeline);

// The profile as an aligned text table, with the phases of profile_phases the timeline did not
// record named after it.
std::string profile_table(const Profile& profile);

// The profile as a self-contained SVG, flame-style: a full-width bar per role, and under it a
// bar per phase as wide as its share of the role's time (each with a tooltip).
std::string profile_svg(const Profile& profile);

}  // namespace colony::monitor
