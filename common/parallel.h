// Threads kept for splitting one computation into parts: a deep model's batch into shares of
// its samples (models/model.h, ModelSpec::compute_threads), its optimizer's parameters into
// ranges.
//
// PartThreads(n) starts n - 1 threads once; run(f) calls f(0) on the caller's thread and
// f(1) .. f(n - 1) on those threads, and returns when every call has returned. What a part
// computes must depend on its index only, never on which thread or when, so that a result is
// the same in every run (callers combine the parts in index order).
//
// Errors: none; f must not throw (this codebase reports errors as values). Creating the threads
// is the only thing that can fail (std::system_error, as std::thread does).
// Thread-safety: one caller at a time; run() is not reentrant.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
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
  uint64_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
};

// The hardware threads of this machine (at least 1).
size_t hardware_threads();

}  // namespace colony
