// The simulator's clock and agenda: events ordered by virtual time, ties broken by the order
// in which they were scheduled, so a run is a pure function of its inputs and seed.
//
// Thread-safety: none; the simulator is single-threaded by design.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace colony::sim {

using VirtualNanos = int64_t;

class EventQueue {
 public:
  using Action = std::function<void()>;

  // Schedules `action` at `at` (>= now(); asserted). Returns the event's sequence number.
  uint64_t schedule(VirtualNanos at, Action action);
  // Runs the earliest event, advancing now() to its time. Returns false when none is left.
  bool run_next();
  // Runs events until none is left or the next one is later than `until`; now() ends at
  // `until` (or at the last event's time if that is later, which cannot happen).
  void run_until(VirtualNanos until);

  VirtualNanos now() const { return now_; }
  size_t pending() const { return heap_.size(); }
  uint64_t executed() const { return executed_; }

 private:
  // The heap orders small plain entries; the actions stay put in slots (a deque, so that an
  // action scheduling others while it runs is not moved), which keeps each heap step cheap.
  struct Entry {
    VirtualNanos at;
    uint64_t seq;
    uint32_t slot;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    }
  };
  std::vector<Entry> heap_;
  std::deque<Action> actions_;
  std::vector<uint32_t> free_slots_;
  VirtualNanos now_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t executed_ = 0;
};

}  // namespace colony::sim
