// Evaluation metrics for binary CTR prediction.
#pragma once

#include <cmath>
#include <span>

namespace colony {

// Log loss of one prediction given as a logit: -[y log p + (1-y) log(1-p)], p = sigmoid(logit),
// computed without overflow for any finite logit. y in {0, 1}.
inline double logloss_from_logit(double logit, double y) {
  // softplus(t) = log(1 + exp(t)), computed as log1p(exp(-|t|)) + max(t, 0) without overflow.
  // -log p = softplus(-z) and -log(1 - p) = softplus(z); each term is accurate relative to
  // its own size, even when it is tiny (a confident, correct prediction).
  const double common = std::log1p(std::exp(-std::fabs(logit)));
  const double loss_if_positive = common + (logit < 0 ? -logit : 0.0);
  const double loss_if_negative = common + (logit > 0 ? logit : 0.0);
  return y * loss_if_positive + (1.0 - y) * loss_if_negative;
}

inline double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

// Mean log loss of probabilities `p` against labels `y` (same size, y in {0, 1}). Each p is
// clipped to [1e-15, 1 - 1e-15] so a confident mistake costs a large but finite amount.
// Returns NaN for empty input.
double logloss(std::span<const float> p, std::span<const float> y);

// Exact area under the ROC curve: the probability that a random positive scores above a
// random negative, ties counting one half (Mann-Whitney U with average ranks), by sorting in
// O(n log n). Returns NaN when either class is absent or any score is NaN.
double auc(std::span<const float> score, std::span<const float> y);

}  // namespace colony
