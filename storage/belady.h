// Belady's MIN, the offline optimum of a row cache: on a miss with the cache full, evict the row
// whose next access is furthest in the future (or never comes). No eviction policy hits more
// often on the same accesses, so it is the bound the tiered store's hit rate is measured
// against (`colony bench store`, docs/storage.md). Like the tiered store, the cache takes every
// row it misses (a batch's rows must be in memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace colony {

struct CacheCounts {
  uint64_t hits = 0;
  uint64_t misses = 0;
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
};

// Replays `trace` (row keys in access order) through an empty cache of `capacity` rows under
// Belady's MIN, and counts the hits and misses of the accesses at index count_from and later
// (a measurement that starts once the cache is warm). With count_from 0 no policy hits more
// often; with a later one, a policy could trade hits before count_from for hits after it, so
// the figure is MIN's over that window, not a bound on it. Capacity 0: every access misses.
// O(n log n) time and O(n) memory in the trace's length.
CacheCounts belady_min(std::span<const uint64_t> trace, size_t capacity, size_t count_from = 0);

}  // namespace colony
