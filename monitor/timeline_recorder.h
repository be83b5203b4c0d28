// Records a real run's timeline (common/timeline.h) as its actors work: each span's start and
// end read from the steady clock, relative to when the recorder was made (whose wall-clock time
// is the timeline's origin_unix_ns). Thread-safe; past
// `events_max` events it drops the rest and marks the timeline truncated.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/timeline.h"

namespace colony::monitor {

class TimelineRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  explicit TimelineRecorder(size_t events_max = 500'000)
      : origin_(Clock::now()), events_max_(events_max) {
    // The wall clock at time 0, to line this process's timeline up with others'.
    timeline_.origin_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
  }

  // A span of `phase` (the event's category) by member `pid` of `role`, on track `tid`.
  // An end before its start records a span of length 0.
  void span(std::string name, const char* phase, const char* role, uint32_t pid, uint32_t tid,
            Clock::time_point start, Clock::time_point end) {
    const int64_t s = nanos(start), e = nanos(end);
    std::lock_guard lock(mutex_);
    if (timeline_.events.size() >= events_max_) {
      timeline_.truncated = true;
      return;
    }
    timeline_.events.push_back({std::move(name), phase, role, pid, tid, s, e > s ? e - s : 0});
  }

  // What has been recorded so far.
  Timeline snapshot() const {
    std::lock_guard lock(mutex_);
    return timeline_;
  }

 private:
  int64_t nanos(Clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin_).count();
  }
  const Clock::time_point origin_;
  const size_t events_max_;
  mutable std::mutex mutex_;
  Timeline timeline_;
};

}  // namespace colony::monitor
