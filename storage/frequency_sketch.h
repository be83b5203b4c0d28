// How often each key was used lately, approximately, in a few bytes per cached row: a count-min
// sketch with conservative updates and periodic halving, the frequency histogram of TinyLFU
// (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", 2017).
//
// A cache that counts uses only while a row is cached forgets a hot row's count when it evicts
// it, and the row starts again from nothing when it returns. The sketch counts every key used,
// cached or not, so a returning row comes back with its history and a row used once does not
// outrank it (the tiered store's `lfu` eviction, storage/rocksdb_store.h).
//
// 8-bit counters, 4 x `width` of them (`width` a power of two) in blocks of one cache line; a key's
// count is the least of its four counters, one in each quarter of its block, so that a use costs
// one cache miss (the layout of Caffeine's sketch). add() raises only the counters at that least
// value (conservative update, which overestimates less). Once `window` adds have been made since
// the last halving, every counter is halved, so that old popularity fades; add() says when. For a
// cache of n rows the defaults keep 4 x bit_ceil(n) bytes (4 to 8 per row, 4 KiB at least) and
// halve every 16 n adds: in `colony bench store` a sketch 2 or 4 times wider and windows of 8 n or
// 32 n moved the hit rate within about a point (docs/benchmarks.md, "Admission by frequency").
//
// Thread-safety: none.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/hash.h"

namespace colony {

class FrequencySketch {
 public:
  // For a cache of `capacity` rows: counters for `width_per_row` x capacity keys (rounded up to
  // a power of two, at least 1024), halved every `window_per_row` x capacity adds.
  explicit FrequencySketch(size_t capacity, size_t width_per_row = 1, size_t window_per_row = 16)
      : width_(std::bit_ceil(std::max<size_t>(1024, capacity * width_per_row))),
        window_(std::max<uint64_t>(64, uint64_t(capacity) * window_per_row)),
        blocks_(width_ / 16) {}

  struct Added {
    uint32_t count;  // the key's count after this use
    bool halved;     // every count was halved by this add (counts kept elsewhere should be too)
  };
  // Counts one use of `key`.
  Added add(uint64_t key) {
    const Place at = place(key);
    uint8_t* b = blocks_[at.block].counters;
    uint8_t least = UINT8_MAX;
    for (uint8_t i : at.offsets) least = std::min(least, b[i]);
    if (least < UINT8_MAX)
      for (uint8_t i : at.offsets)
        if (b[i] == least) ++b[i];
    uint32_t count = least < UINT8_MAX ? least + 1u : least;
    if (++adds_ < window_) return {count, false};
    adds_ = 0;
    for (Block& b : blocks_)
      for (uint8_t& c : b.counters) c >>= 1;
    return {count >> 1, true};
  }
  // `key`'s count: at least its uses since they were last halved, usually exactly that.
  uint32_t estimate(uint64_t key) const {
    const Place at = place(key);
    const uint8_t* b = blocks_[at.block].counters;
    uint8_t least = UINT8_MAX;
    for (uint8_t i : at.offsets) least = std::min(least, b[i]);
    return least;
  }
  // A hint that `key` will be added or estimated soon: its block is fetched toward the cache.
  void prefetch(uint64_t key) const { __builtin_prefetch(&blocks_[place(key).block]); }
  size_t memory_bytes() const { return blocks_.size() * sizeof(Block); }

 private:
  // A key's four counters share one cache line, one in each quarter of it: one miss per use.
  struct alignas(64) Block {
    uint8_t counters[64] = {};
  };
  struct Place {
    size_t block;
    uint8_t offsets[4];
  };
  Place place(uint64_t key) const {
    const uint64_t h = mix64(key ^ 0x9e3779b97f4a7c15ULL);
    Place p{size_t(h) & (blocks_.size() - 1), {}};
    for (int i = 0; i < 4; ++i) p.offsets[i] = uint8_t(i * 16 + ((h >> (40 + 4 * i)) & 15));
    return p;
  }

  size_t width_;
  uint64_t window_;
  uint64_t adds_ = 0;
  std::vector<Block> blocks_;
};

}  // namespace colony
