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

namespace {

// How long a thread waits for the other side by spinning before it blocks: about 50 us. The
// gaps between the runs of one training step are shorter, and a futex wake-up costs several
// microseconds (more in a virtual machine); a thread that finds nothing then sleeps as before.
constexpr int spin_rounds = 4096;

inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void PartThreads::run(const std::function<void(size_t part)>& f) {
  if (threads_.empty()) {
    f(0);
    return;
  }
  {
    std::lock_guard lock(mu_);
    COLONY_ASSERT(pending_.load() == 0, "PartThreads::run is not reentrant");
    work_ = &f;
    pending_.store(threads_.size(), std::memory_order_relaxed);
    generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  start_.notify_all();
  f(0);
  for (int i = 0; i < spin_rounds && pending_.load(std::memory_order_acquire) != 0; ++i)
    spin_pause();
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock lock(mu_);
    done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }
  work_ = nullptr;
}

void PartThreads::loop(size_t part) {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < spin_rounds && generation_.load(std::memory_order_acquire) == seen; ++i)
      spin_pause();
    const std::function<void(size_t)>* work = nullptr;
    {
      std::unique_lock lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
      work = work_;
    }
    (*work)(part);
    // The last part to finish wakes run() if it sleeps: under the lock, so that run() is either
    // before its check (and sees 0) or waiting.
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);
      done_.notify_one();
    }
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
