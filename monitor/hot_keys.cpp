#include "monitor/hot_keys.h"

#include <algorithm>
#include <limits>

#include "common/hash.h"

namespace colony::monitor {

HotKeys::HotKeys(size_t k, uint32_t sample_every)
    : k_(std::max<size_t>(k, 1)),
      sample_every_(std::max<uint32_t>(sample_every, 1)),
      counts_(depth * width, 0) {}

uint64_t HotKeys::estimate_and_count(uint64_t key) {
  uint64_t h = mix64(key);
  uint32_t estimate = std::numeric_limits<uint32_t>::max();
  for (size_t d = 0; d < depth; ++d) {
    // 16 bits of the hash per row (width is 2^14): four rows from one 64-bit hash.
    uint32_t& c = counts_[d * width + (h & (width - 1))];
    h >>= 16;
    c = uint32_t(
        std::min<uint64_t>(uint64_t(c) + sample_every_, std::numeric_limits<uint32_t>::max()));
    estimate = std::min(estimate, c);
  }
  return estimate;
}

void HotKeys::add(std::span<const uint64_t> keys) {
  std::lock_guard lock(mutex_);
  if (calls_++ % sample_every_ != 0) return;
  total_ += keys.size() * sample_every_;
  for (uint64_t key : keys) {
    const uint64_t estimate = estimate_and_count(key);
    if (top_.size() == k_ && estimate < top_min_) continue;  // the common case: not hot
    auto it = std::find_if(top_.begin(), top_.end(), [&](const auto& t) { return t.first == key; });
    if (it != top_.end()) {
      it->second = estimate;
    } else if (top_.size() < k_) {
      top_.push_back({key, estimate});
    } else {
      auto smallest = std::min_element(top_.begin(), top_.end(), [](const auto& a, const auto& b) {
        return a.second < b.second;
      });
      *smallest = {key, estimate};
    }
    if (top_.size() == k_)
      top_min_ = std::min_element(top_.begin(), top_.end(), [](const auto& a, const auto& b) {
                   return a.second < b.second;
                 })->second;
  }
}

std::vector<std::pair<uint64_t, uint64_t>> HotKeys::top() const {
  std::lock_guard lock(mutex_);
  auto out = top_;
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  return out;
}

uint64_t HotKeys::total() const {
  std::lock_guard lock(mutex_);
  return total_;
}

}  // namespace colony::monitor
