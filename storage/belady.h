// Belady's MIN, the offline optimum of a row cache: on a miss with the cache full, evict the row
// whose next access is furthest in the future (or never comes). No eviction policy hits more
// often on the same accesses, so it is the bound the tiered store's hit rate is measured
// against (`colony bench store`, docs/storage.md). Like the tiered store, the cache takes every
// row it misses (a batch's rows must be in memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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

// How lookahead_min chooses among the rows its window does not see: the least recently used, or
// the least frequently used while cached (ties: the least recently used).
enum class Fallback { lru, lfu };

// The same replay by a cache that sees only the next `lookahead` accesses (a store that the
// reader tells the keys of the next few batches): on a miss with the cache full it evicts, of the
// rows not accessed within the window, the one `fallback` picks, or, when every cached row is,
// the one whose access in it comes last. Lookahead 0 is plain LRU or LFU; a lookahead as long as
// the trace (or longer) hits as often as MIN. O(n log n).
CacheCounts lookahead_min(std::span<const uint64_t> trace, size_t capacity, size_t lookahead,
                          Fallback fallback, size_t count_from = 0);

// The same replay by a cache that knows each row's probability of being accessed: on a miss with
// the cache full it evicts the least probable cached row, the one of the highest `rank` (0: the
// most probable; ties: the smallest key). Under the independent reference model (each access an
// independent draw from a fixed distribution, as this project's Zipf keys are) that is the best any
// policy that does not know the coming accesses can do in expectation (Aho, Denning and Ullman's
// A0), so it bounds what LRU, LFU or any policy learning the frequencies can reach on such
// accesses. It never hits more often than MIN. Capacity 0: every access misses. O(n log n).
CacheCounts most_probable_first(std::span<const uint64_t> trace, size_t capacity,
                                const std::function<uint64_t(uint64_t)>& rank,
                                size_t count_from = 0);

}  // namespace colony
