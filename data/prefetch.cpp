#include "data/prefetch.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"

namespace colony {
namespace {

class PrefetchReader final : public BatchReader {
 public:
  PrefetchReader(std::unique_ptr<BatchReader> inner, size_t depth)
      : inner_(std::move(inner)), slots_(depth), ready_(depth) {
    COLONY_ASSERT(depth > 0);
    stats_ = inner_->stats();
    free_.reserve(depth);
    for (size_t i = 0; i < depth; ++i) free_.push_back(i);
    thread_ = std::thread([this] { produce(); });
  }

  ~PrefetchReader() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    free_cv_.notify_all();
    thread_.join();
  }

  Expected<bool> next(Batch& out) override {
    if (finished_) {
      out.clear();
      if (!final_error_.ok()) return final_error_;
      return false;
    }
    size_t s;
    {
      std::unique_lock lock(mutex_);
      ready_cv_.wait(lock, [&] { return ready_count_ > 0; });
      s = ready_[ready_head_];
      ready_head_ = (ready_head_ + 1) % ready_.size();
      --ready_count_;
    }
    Slot& slot = slots_[s];
    std::swap(out, slot.batch);  // the slot takes out's buffers back to the producer
    bool more = slot.more;
    if (!more) {
      finished_ = true;
      final_error_ = slot.error;
      out.clear();
    }
    {
      std::lock_guard lock(mutex_);
      stats_ = slot.stats;
      free_.push_back(s);
    }
    free_cv_.notify_one();
    if (!final_error_.ok()) return final_error_;
    return more;
  }

  ReaderStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  struct Slot {
    Batch batch;
    bool more = false;  // false: the end, or `error`
    Status error;
    ReaderStats stats;  // the inner reader's stats after this batch
  };

  void produce() {
    for (;;) {
      size_t s;
      {
        std::unique_lock lock(mutex_);
        free_cv_.wait(lock, [&] { return stop_ || !free_.empty(); });
        if (stop_) return;
        s = free_.back();
        free_.pop_back();
      }
      // Only this thread touches a slot between taking it from free_ and putting it in ready_.
      Slot& slot = slots_[s];
      Expected<bool> r = inner_->next(slot.batch);
      slot.more = r.ok() && r.value();
      slot.error = r.ok() ? Status() : r.status();
      slot.stats = inner_->stats();
      bool last = !slot.more;
      {
        std::lock_guard lock(mutex_);
        ready_[(ready_head_ + ready_count_) % ready_.size()] = s;
        ++ready_count_;
      }
      ready_cv_.notify_one();
      if (last) return;  // (the slot belongs to the consumer now: do not look at it)
    }
  }

  std::unique_ptr<BatchReader> inner_;  // used by the producer thread only
  std::vector<Slot> slots_;

  mutable std::mutex mutex_;  // guards the fields below
  std::condition_variable free_cv_;
  std::condition_variable ready_cv_;
  std::vector<size_t> free_;   // slots the producer may fill
  std::vector<size_t> ready_;  // ring of filled slots, oldest at ready_head_
  size_t ready_head_ = 0;
  size_t ready_count_ = 0;
  bool stop_ = false;
  ReaderStats stats_;

  // Consumer thread only.
  bool finished_ = false;
  Status final_error_;

  std::thread thread_;  // last: started once everything above exists
};

}  // namespace

std::unique_ptr<BatchReader> make_prefetch_reader(std::unique_ptr<BatchReader> inner,
                                                  size_t queue_batches) {
  return std::make_unique<PrefetchReader>(std::move(inner), queue_batches);
}

}  // namespace colony
