#include "storage/belady.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace colony {

namespace {

// next[i]: the index of the next access of trace[i]'s key, trace.size() if none.
std::vector<size_t> next_accesses(std::span<const uint64_t> trace) {
  const size_t n = trace.size();
  std::vector<size_t> next(n);
  std::unordered_map<uint64_t, size_t> seen;
  for (size_t i = n; i-- > 0;) {
    const auto [it, added] = seen.try_emplace(trace[i], n);
    next[i] = it->second;
    it->second = i;
  }
  return next;
}

}  // namespace

CacheCounts lookahead_min(std::span<const uint64_t> trace, size_t capacity, size_t lookahead,
                          Fallback fallback, size_t count_from) {
  const size_t n = trace.size();
  CacheCounts counts;
  if (capacity == 0) {
    counts.misses = count_from < n ? n - count_from : 0;
    return counts;
  }
  lookahead = std::min(lookahead, n);  // a longer window sees no more (and i + lookahead fits)
  const std::vector<size_t> next = next_accesses(trace);
  // A cached row is either accessed within the window (in_window, by that access) or not
  // (beyond, by its uses under LFU and then its last access).
  struct Row {
    size_t last = 0, next = 0;
    uint64_t uses = 0;  // since it was cached
    bool seen = false;  // its next access is within the window
  };
  std::unordered_map<uint64_t, Row> cached;
  cached.reserve(capacity + 1);
  std::set<std::pair<size_t, uint64_t>> in_window;
  std::set<std::tuple<uint64_t, size_t, uint64_t>> beyond;
  auto beyond_entry = [&](uint64_t key, const Row& r) {
    return std::tuple{fallback == Fallback::lfu ? r.uses : 0, r.last, key};
  };
  for (size_t i = 0; i < n; ++i) {
    // The window now reaches access i + lookahead: the row it names, if cached and not accessed
    // before then, moves into the window.
    if (const size_t p = i + lookahead; lookahead > 0 && p < n) {
      auto r = cached.find(trace[p]);
      if (r != cached.end() && !r->second.seen && r->second.next == p) {
        beyond.erase(beyond_entry(trace[p], r->second));
        in_window.emplace(p, trace[p]);
        r->second.seen = true;
      }
    }
    const uint64_t key = trace[i];
    auto it = cached.find(key);
    const bool hit = it != cached.end();
    if (i >= count_from) ++(hit ? counts.hits : counts.misses);
    if (hit) {
      if (it->second.seen)
        in_window.erase({it->second.next, key});
      else
        beyond.erase(beyond_entry(key, it->second));
    } else {
      if (cached.size() == capacity) {
        // The fallback's choice of the rows not seen in the window; else the one seen last in it.
        if (!beyond.empty()) {
          cached.erase(std::get<2>(*beyond.begin()));
          beyond.erase(beyond.begin());
        } else {
          cached.erase(std::prev(in_window.end())->second);
          in_window.erase(std::prev(in_window.end()));
        }
      }
      it = cached.emplace(key, Row{}).first;
    }
    Row& row = it->second;
    ++row.uses;
    row.last = i;
    row.next = next[i];
    row.seen = next[i] < n && next[i] <= i + lookahead;
    if (row.seen)
      in_window.emplace(row.next, key);
    else
      beyond.insert(beyond_entry(key, row));
  }
  return counts;
}

CacheCounts most_probable_first(std::span<const uint64_t> trace, size_t capacity,
                                const std::function<uint64_t(uint64_t)>& rank, size_t count_from) {
  const size_t n = trace.size();
  CacheCounts counts;
  if (capacity == 0) {
    counts.misses = count_from < n ? n - count_from : 0;
    return counts;
  }
  std::unordered_set<uint64_t> cached;
  cached.reserve(capacity + 1);
  std::set<std::pair<uint64_t, uint64_t>> by_rank;  // (rank, key) of the cached rows
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = trace[i];
    const bool hit = cached.count(key) > 0;
    if (i >= count_from) ++(hit ? counts.hits : counts.misses);
    if (hit) continue;
    if (cached.size() == capacity) {
      // The least probable: the highest rank, the smallest key among equal ranks.
      auto least = std::prev(by_rank.end());
      const uint64_t r = least->first;
      least = by_rank.lower_bound({r, 0});
      cached.erase(least->second);
      by_rank.erase(least);
    }
    cached.insert(key);
    by_rank.emplace(rank(key), key);
  }
  return counts;
}

CacheCounts belady_min(std::span<const uint64_t> trace, size_t capacity, size_t count_from) {
  // With a window over the whole trace, every cached row is in it but those never accessed again,
  // which go first, and then the row accessed furthest ahead: MIN's choices.
  return lookahead_min(trace, capacity, trace.size(), Fallback::lru, count_from);
}

}  // namespace colony
