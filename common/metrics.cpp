#include "common/metrics.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "common/status.h"

namespace colony {

double logloss(std::span<const float> p, std::span<const float> y) {
  COLONY_ASSERT(p.size() == y.size(), "p={} y={}", p.size(), y.size());
  if (p.empty()) return std::numeric_limits<double>::quiet_NaN();
  constexpr double eps = 1e-15;
  double sum = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = std::clamp(static_cast<double>(p[i]), eps, 1.0 - eps);
    sum -= y[i] > 0.5f ? std::log(q) : std::log1p(-q);
  }
  return sum / static_cast<double>(p.size());
}

double auc(std::span<const float> score, std::span<const float> y) {
  COLONY_ASSERT(score.size() == y.size(), "score={} y={}", score.size(), y.size());
  const size_t n = score.size();
  for (float s : score)
    if (std::isnan(s)) return std::numeric_limits<double>::quiet_NaN();  // no order to sort by
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return score[a] < score[b]; });
  // Sum of the (average) ranks of the positives.
  double rank_sum = 0.0;
  double positives = 0.0;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j + 1 < n && score[order[j + 1]] == score[order[i]]) ++j;
    const double avg_rank = 0.5 * static_cast<double>(i + j) + 1.0;  // ranks are 1-based
    for (size_t k = i; k <= j; ++k) {
      if (y[order[k]] > 0.5f) {
        rank_sum += avg_rank;
        positives += 1.0;
      }
    }
    i = j + 1;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0.0 || negatives == 0.0) return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum - positives * (positives + 1.0) / 2.0) / (positives * negatives);
}

}  // namespace colony
