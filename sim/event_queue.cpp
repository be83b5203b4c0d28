#include "sim/event_queue.h"

#include "common/status.h"

namespace colony::sim {

uint64_t EventQueue::schedule(VirtualNanos at, Action action) {
  COLONY_ASSERT(at >= now_, "scheduling in the past: at={} now={}", at, now_);
  const uint64_t seq = next_seq_++;
  heap_.push(Event{at, seq, std::move(action)});
  return seq;
}

bool EventQueue::run_next() {
  if (heap_.empty()) return false;
  // Moving out of the top is safe: the heap orders by (at, seq) only, which the move keeps.
  Event e = std::move(const_cast<Event&>(heap_.top()));
  heap_.pop();
  now_ = e.at;
  ++executed_;
  e.action();
  return true;
}

void EventQueue::run_until(VirtualNanos until) {
  while (!heap_.empty() && heap_.top().at <= until) run_next();
  if (now_ < until) now_ = until;
}

}  // namespace colony::sim
