// Evaluation metrics for binary CTR prediction.
#pragma once

#include <cmath>
#include <span>

namespace colony {

// Log loss of one prediction given as a logit: -[y log p + (1-y) log(1-p)], p = sigmoid(logit),
// computed without overflow for any finite logit. y in {0, 1}.
inline double logloss_from_logit(double logit, double y) {
  // log(1 + exp(-|z|)) + max(z, 0) - y z  ==  -[y log p + (1-y) log(1-p)]
  return std::log1p(std::exp(-std::fabs(logit))) + (logit > 0 ? logit : 0.0) - y * logit;
}

inline double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Mean log loss of probabilities `p` against labels `y` (same size, y in {0, 1}). Each p is
// clipped to [1e-15, 1 - 1e-15] so a confident mistake costs a large but finite amount.
// Returns NaN for empty input.
double logloss(std::span<const float> p, std::span<const float> y);

// Exact area under the ROC curve: the probability that a random positive scores above a
// random negative, ties counting one half (Mann-Whitney U with average ranks), by sorting in
// O(n log n). Returns NaN when either class is absent.
double auc(std::span<const float> score, std::span<const float> y);

}  // namespace colony
