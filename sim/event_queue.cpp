#include "sim/event_queue.h"

#include <algorithm>

#include "common/status.h"

namespace colony::sim {

uint64_t EventQueue::schedule(VirtualNanos at, Action action) {
  COLONY_ASSERT(at >= now_, "scheduling in the past: at={} now={}", at, now_);
  const uint64_t seq = next_seq_++;
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    actions_[slot] = std::move(action);
  } else {
    slot = static_cast<uint32_t>(actions_.size());
    actions_.push_back(std::move(action));
  }
  heap_.push_back(Entry{at, seq, slot});
  std::push_heap(heap_.begin(), heap_.end(), Later{});
  return seq;
}

bool EventQueue::run_next() {
  if (heap_.empty()) return false;
  std::pop_heap(heap_.begin(), heap_.end(), Later{});
  const Entry e = heap_.back();
  heap_.pop_back();
  now_ = e.at;
  ++executed_;
  // Run in place: the deque keeps the slot where it is while the action schedules others, and
  // the slot is reused only once the action has returned.
  actions_[e.slot]();
  actions_[e.slot] = nullptr;
  free_slots_.push_back(e.slot);
  return true;
}

void EventQueue::run_until(VirtualNanos until) {
  while (!heap_.empty() && heap_.front().at <= until) run_next();
  if (now_ < until) now_ = until;
}

}  // namespace colony::sim
