#include "storage/belady.h"

#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

namespace colony {

CacheCounts belady_min(std::span<const uint64_t> trace, size_t capacity, size_t count_from) {
  const size_t n = trace.size();
  CacheCounts counts;
  if (capacity == 0) {
    counts.misses = count_from < n ? n - count_from : 0;
    return counts;
  }
  // next[i]: the index of the next access of trace[i]'s key, n if none.
  std::vector<size_t> next(n);
  {
    std::unordered_map<uint64_t, size_t> seen;
    for (size_t i = n; i-- > 0;) {
      const auto [it, added] = seen.try_emplace(trace[i], n);
      next[i] = it->second;
      it->second = i;
    }
  }
  // The cached keys with their next access; the heap holds (next access, key) for each, and
  // stale pairs (a key accessed again since, or evicted) are skipped when they surface.
  std::unordered_map<uint64_t, size_t> cached;
  cached.reserve(capacity + 1);
  std::priority_queue<std::pair<size_t, uint64_t>> furthest;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = trace[i];
    auto it = cached.find(key);
    const bool hit = it != cached.end();
    if (i >= count_from) ++(hit ? counts.hits : counts.misses);
    if (!hit) {
      if (cached.size() == capacity) {
        for (;;) {
          const auto [when, victim] = furthest.top();
          furthest.pop();
          auto v = cached.find(victim);
          if (v != cached.end() && v->second == when) {
            cached.erase(v);
            break;
          }
        }
      }
      it = cached.emplace(key, 0).first;
    }
    it->second = next[i];
    furthest.emplace(next[i], key);
  }
  return counts;
}

}  // namespace colony
