// Hot keys: the keys a shard serves most often, estimated in bounded memory while it serves.
// A count-min sketch counts the keys pulled; the keys whose estimate reached the smallest of
// the current top ones are kept as candidates. Estimates of what was counted only err upward,
// by at most 2/width of all the keys counted, with probability 1 - (1/2)^depth (count-min's
// bound). To keep its cost off the shard's path, one call of `sample_every` is counted, each of
// its keys `sample_every` times: an unbiased estimate of the whole stream.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace colony::monitor {

class HotKeys {
 public:
  // Keeps the `k` most-pulled keys (k >= 1), counting one add() in `sample_every` (>= 1).
  explicit HotKeys(size_t k = 10, uint32_t sample_every = 1);

  // Counts one pull of each key (the first call of every `sample_every`, each key that many
  // times). Thread-safe (a scrape may read while a shard adds).
  void add(std::span<const uint64_t> keys);

  // The top keys and their estimated counts, most first (at most k; fewer before k distinct
  // keys were seen).
  std::vector<std::pair<uint64_t, uint64_t>> top() const;

  // Keys counted in all (sampled ones, each `sample_every` times).
  uint64_t total() const;

 private:
  static constexpr size_t depth = 4, width = size_t{1} << 14;
  uint64_t estimate_and_count(uint64_t key);
  const size_t k_;
  const uint32_t sample_every_;
  uint64_t calls_ = 0;
  mutable std::mutex mutex_;
  std::vector<uint32_t> counts_;                    // depth x width, saturating
  std::vector<std::pair<uint64_t, uint64_t>> top_;  // (key, estimate), unordered, at most k
  uint64_t top_min_ = 0;                            // the smallest estimate in top_ once it is full
  uint64_t total_ = 0;
};

}  // namespace colony::monitor
