#include "common/parallel.h"

#include "common/status.h"

namespace colony {

PartThreads::PartThreads(size_t parts) {
  COLONY_ASSERT(parts >= 1, "parts={}", parts);
  threads_.reserve(parts - 1);
  for (size_t p = 1; p < parts; ++p) threads_.emplace_back([this, p] { loop(p); });
}

PartThreads::~PartThreads() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void PartThreads::run(const std::function<void(size_t part)>& f) {
  if (threads_.empty()) {
    f(0);
    return;
  }
  {
    std::lock_guard lock(mu_);
    COLONY_ASSERT(pending_ == 0, "PartThreads::run is not reentrant");
    work_ = &f;
    pending_ = threads_.size();
    ++generation_;
  }
  start_.notify_all();
  f(0);
  std::unique_lock lock(mu_);
  done_.wait(lock, [this] { return pending_ == 0; });
  work_ = nullptr;
}

void PartThreads::loop(size_t part) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t)>* work = nullptr;
    {
      std::unique_lock lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      work = work_;
    }
    (*work)(part);
    bool last = false;
    {
      std::lock_guard lock(mu_);
      last = --pending_ == 0;
    }
    if (last) done_.notify_one();
  }
}

void run_parts(PartThreads* threads, const std::function<void(size_t part)>& f) {
  if (threads != nullptr)
    threads->run(f);
  else
    f(0);
}

size_t hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

}  // namespace colony
