// A count-min sketch with conservative update (Estan & Varghese): approximate counts of how
// often each key was seen, in a fixed amount of memory, never below the true count. Used by
// the shard's feature admission (ShardConfig::admit_after) to count keys that have no row yet.
//
// Counters are bytes that saturate at 255: admission only needs to count up to a small N.
// Conservative update (raise only the counters at the current minimum) keeps the
// overestimate of rare keys small when many keys share counters.
//
// Thread-safety: none. Pure: no clock, no randomness beyond the seed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/hash.h"
#include "common/status.h"

namespace colony {

class CountMinSketch {
 public:
  // `depth` rows of `width` counters (width a power of two, both > 0).
  CountMinSketch(size_t depth, size_t width, uint64_t seed)
      : depth_(depth), mask_(width - 1), seed_(seed) {
    COLONY_ASSERT(depth > 0 && width > 0 && (width & (width - 1)) == 0, "depth={} width={}", depth,
                  width);
    counters_.assign(depth * width, 0);
  }
  // Counts one more sighting of `key`; returns the new estimate (at least the true count,
  // saturating at 255).
  uint32_t add(uint64_t key) {
    uint32_t least = 255;
    for (size_t d = 0; d < depth_; ++d) least = std::min<uint32_t>(least, counters_[slot(key, d)]);
    if (least == 255) return least;
    for (size_t d = 0; d < depth_; ++d) {
      uint8_t& c = counters_[slot(key, d)];
      if (c == least) ++c;
    }
    return least + 1;
  }
  uint32_t estimate(uint64_t key) const {
    uint32_t least = 255;
    for (size_t d = 0; d < depth_; ++d) least = std::min<uint32_t>(least, counters_[slot(key, d)]);
    return least;
  }
  size_t bytes() const { return counters_.size(); }

 private:
  size_t slot(uint64_t key, size_t d) const {
    return d * (mask_ + 1) + (hash_combine(key, seed_ + d) & mask_);
  }
  size_t depth_;
  size_t mask_;
  uint64_t seed_;
  std::vector<uint8_t> counters_;
};

}  // namespace colony
