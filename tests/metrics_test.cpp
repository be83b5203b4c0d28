#define BOOST_TEST_MODULE metrics_test
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/hash.h"
#include "common/metrics.h"

using namespace colony;
namespace tt = boost::test_tools;

namespace {

double auc_of(const std::vector<float>& s, const std::vector<float>& y) {
  return auc(s, y);
}
double logloss_of(const std::vector<float>& p, const std::vector<float>& y) {
  return logloss(p, y);
}

// The definition: P(score of a random positive > score of a random negative), ties 1/2.
double pairwise_auc(const std::vector<float>& s, const std::vector<float>& y) {
  double credit = 0.0, pairs = 0.0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (y[i] < 0.5f) continue;
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[j] > 0.5f) continue;
      pairs += 1.0;
      credit += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
    }
  }
  return credit / pairs;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// AUC

BOOST_AUTO_TEST_CASE(auc_hand_computed_case) {
  BOOST_TEST(auc_of({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}) == 0.75, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(auc_ties_between_classes_count_half) {
  BOOST_TEST(auc_of({0.5f, 0.5f, 0.5f, 0.5f}, {0, 1, 0, 1}) == 0.5, tt::tolerance(1e-12));
  BOOST_TEST(auc_of({0.3f, 0.3f}, {1, 0}) == 0.5, tt::tolerance(1e-12));
  // positives {0.5, 0.9}, negatives {0.5, 0.1}: pairs 0.5/0.5 tie, 0.5>0.1, 0.9>both -> 3.5/4
  BOOST_TEST(auc_of({0.5f, 0.9f, 0.5f, 0.1f}, {1, 1, 0, 0}) == 0.875, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(auc_perfect_is_one_and_reversed_is_zero) {
  BOOST_TEST(auc_of({0.1f, 0.2f, 0.8f, 0.9f}, {0, 0, 1, 1}) == 1.0, tt::tolerance(1e-12));
  BOOST_TEST(auc_of({0.9f, 0.8f, 0.2f, 0.1f}, {0, 0, 1, 1}) == 0.0, tt::tolerance(1e-12));
  BOOST_TEST(auc_of({-3.0f, 7.0f}, {0, 1}) == 1.0, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(auc_is_nan_when_a_class_is_absent) {
  BOOST_TEST(std::isnan(auc_of({0.1f, 0.5f, 0.9f}, {1, 1, 1})));
  BOOST_TEST(std::isnan(auc_of({0.1f, 0.5f, 0.9f}, {0, 0, 0})));
  BOOST_TEST(std::isnan(auc_of({}, {})));
}

BOOST_AUTO_TEST_CASE(auc_depends_only_on_order_of_scores) {
  const std::vector<float> y{0, 1, 1, 0, 1, 0};
  const std::vector<float> s{0.2f, 0.6f, 0.4f, 0.5f, 0.9f, 0.1f};
  std::vector<float> transformed;
  for (float x : s) transformed.push_back(10.0f * x - 3.0f);  // strictly increasing map
  BOOST_TEST(auc_of(s, y) == auc_of(transformed, y), tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(auc_equals_pairwise_definition_on_random_inputs_with_ties) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SplitMix64 rng(seed);
    const size_t n = 2 + rng.next() % 200;
    // Few distinct score levels for some seeds so ties are frequent; many for others.
    const uint64_t levels = seed % 3 == 0 ? 1000000 : 1 + rng.next() % 10;
    const double p_pos = 0.05 + 0.9 * rng.uniform();
    std::vector<float> s(n), y(n);
    for (size_t i = 0; i < n; ++i) {
      s[i] = static_cast<float>(rng.next() % levels) / 7.0f - 3.0f;
      y[i] = rng.uniform() < p_pos ? 1.0f : 0.0f;
    }
    size_t positives = 0;
    for (float v : y) positives += v > 0.5f;
    BOOST_TEST_CONTEXT("seed " << seed << " n " << n) {
      if (positives == 0 || positives == n) {
        BOOST_TEST(std::isnan(auc(s, y)));
      } else {
        BOOST_TEST(auc(s, y) == pairwise_auc(s, y), tt::tolerance(1e-9));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Log loss

BOOST_AUTO_TEST_CASE(logloss_hand_computed_mean) {
  const std::vector<float> p{0.5f, 0.9f, 0.2f, 0.7f};
  const std::vector<float> y{1, 1, 0, 0};
  const double want = (-std::log(0.5) - std::log(double{0.9f}) - std::log(1.0 - double{0.2f}) -
                       std::log(1.0 - double{0.7f})) /
                      4.0;
  BOOST_TEST(logloss_of(p, y) == want, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(logloss_clips_confident_mistakes_to_finite) {
  const double worst = -std::log(1e-15);  // about 34.54
  const double a = logloss_of({0.0f}, {1.0f});
  BOOST_TEST(std::isfinite(a));
  BOOST_TEST(a == worst, tt::tolerance(1e-9));
  const double b = logloss_of({1.0f}, {0.0f});
  BOOST_TEST(std::isfinite(b));
  BOOST_TEST(b == worst, tt::tolerance(1e-2));  // 1 - 1e-15 rounds in double
  // Confident and right costs about nothing.
  BOOST_TEST(logloss_of({1.0f}, {1.0f}) < 1e-14);
  BOOST_TEST(logloss_of({0.0f}, {0.0f}) < 1e-14);
}

BOOST_AUTO_TEST_CASE(logloss_of_empty_input_is_nan) {
  BOOST_TEST(std::isnan(logloss_of({}, {})));
}

BOOST_AUTO_TEST_CASE(logloss_from_logit_matches_direct_formula_for_moderate_logits) {
  for (double z : {-20.0, -5.0, -1.0, -0.1, 0.0, 0.3, 2.0, 8.0, 20.0}) {
    const double p = 1.0 / (1.0 + std::exp(-z));
    BOOST_TEST_CONTEXT("z " << z) {
      // -log(sigmoid(z)) = log(1 + e^-z); -log(1 - sigmoid(z)) = log(1 + e^z).
      // Accurate to a few ulps of |z| (the max(z, 0) - y z terms cancel in absolute terms).
      const double abs_tol = 1e-14 * (1.0 + std::fabs(z));
      BOOST_TEST(std::fabs(logloss_from_logit(z, 1.0) - std::log1p(std::exp(-z))) <= abs_tol);
      BOOST_TEST(std::fabs(logloss_from_logit(z, 0.0) - std::log1p(std::exp(z))) <= abs_tol);
      // The naive form through p agrees where it is not itself losing precision.
      if (std::fabs(z) <= 8.0) {
        BOOST_TEST(logloss_from_logit(z, 1.0) == -std::log(p), tt::tolerance(1e-6));
        BOOST_TEST(logloss_from_logit(z, 0.0) == -std::log1p(-p), tt::tolerance(1e-6));
      }
      BOOST_TEST(sigmoid(z) == p, tt::tolerance(1e-12));
    }
  }
  BOOST_TEST(logloss_from_logit(0.0, 1.0) == std::log(2.0), tt::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(logloss_from_logit_does_not_overflow_for_large_logits) {
  // -log(sigmoid(z)) = log(1 + e^-z): about 0 for z = 800 and about 800 for z = -800.
  BOOST_TEST(logloss_from_logit(800.0, 1.0) == 0.0, tt::tolerance(1e-12));
  BOOST_TEST(logloss_from_logit(800.0, 0.0) == 800.0, tt::tolerance(1e-12));
  BOOST_TEST(logloss_from_logit(-800.0, 1.0) == 800.0, tt::tolerance(1e-12));
  BOOST_TEST(logloss_from_logit(-800.0, 0.0) == 0.0, tt::tolerance(1e-12));
  for (double z : {-1e6, -800.0, -710.0, 710.0, 800.0, 1e6}) {
    BOOST_TEST(std::isfinite(logloss_from_logit(z, 0.0)));
    BOOST_TEST(std::isfinite(logloss_from_logit(z, 1.0)));
    BOOST_TEST(std::isfinite(sigmoid(z)));
  }
  BOOST_TEST(sigmoid(800.0) == 1.0);
  BOOST_TEST(sigmoid(-800.0) == 0.0);
}

BOOST_AUTO_TEST_CASE(logloss_from_logit_agrees_with_logloss_of_sigmoid) {
  SplitMix64 rng(5);
  std::vector<float> p, y;
  double sum = 0.0;
  for (int i = 0; i < 1000; ++i) {
    const double z = rng.uniform() * 10.0 - 5.0;
    const float label = rng.uniform() < 0.4 ? 1.0f : 0.0f;
    p.push_back(static_cast<float>(sigmoid(z)));
    y.push_back(label);
    sum += logloss_from_logit(z, label);
  }
  BOOST_TEST(logloss(p, y) == sum / 1000.0, tt::tolerance(1e-5));
}
