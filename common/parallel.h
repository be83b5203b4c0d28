// Threads kept for splitting one computation into parts: a deep model's batch into shares of
// its samples (models/model.h, ModelSpec::compute_threads), its optimizer's parameters into
// ranges.
//
// PartThreads(n) starts n - 1 threads once; run(f) calls f(0) on the caller's thread and
// f(1) .. f(n - 1) on those threads, and returns when every call has returned. What a part
// computes must depend on its index only, never on which thread or when, so that a result is
// the same in every run (callers combine the parts in index order).
//
// Waiting: the threads, and run() for the last part, spin for about 50 us before they block, so
// that the runs of one training step, a few microseconds apart, wake no one through the kernel.
//
// Errors: none; f must not throw (this codebase reports errors as values). Creating the threads
// is the only thing that can fail (std::system_error, as std::thread does).
// Thread-safety: one caller at a time; run() is not reentrant.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace colony {

class PartThreads {
 public:
  explicit PartThreads(size_t parts);
  // Stops and joins the threads.
  ~PartThreads();
  PartThreads(const PartThreads&) = delete;
  PartThreads& operator=(const PartThreads&) = delete;

  size_t parts() const { return threads_.size() + 1; }
  // f(0) .. f(parts() - 1), part 0 on this thread; returns when all have returned.
  void run(const std::function<void(size_t part)>& f);

 private:
  void loop(size_t part);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(size_t)>* work_ = nullptr;
  std::atomic<uint64_t> generation_ = 0;  // a run's number; written under mu_
  std::atomic<size_t> pending_ = 0;       // parts of the current run not finished
  bool stop_ = false;
};

// For callers whose threads may be absent (nullptr: one part, on the caller's thread): how many
// parts, and threads->run(f) or f(0) alone.
inline size_t parts_of(const PartThreads* threads) {
  return threads != nullptr ? threads->parts() : 1;
}
void run_parts(PartThreads* threads, const std::function<void(size_t part)>& f);

// Part `part` of [0, count) cut into `parts` contiguous ranges of (nearly) equal size.
inline std::pair<size_t, size_t> part_range(size_t count, size_t part, size_t parts) {
  return {count * part / parts, count * (part + 1) / parts};
}

// The hardware threads of this machine (at least 1).
size_t hardware_threads();

}  // namespace colony
