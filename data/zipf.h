// Zipf-distributed ranks in O(1) per draw, without tables: rejection-inversion sampling
// (Hörmann & Derflinger, "Rejection-inversion to generate variates from monotone discrete
// distributions", 1996), as in Apache Commons' RejectionInversionZipfSampler.
#pragma once

#include <cstdint>

#include "common/hash.h"

namespace colony {

class ZipfSampler {
 public:
  // Ranks 1..n with P(k) proportional to k^-exponent; n >= 1, exponent > 0.
  ZipfSampler(uint64_t n, double exponent);
  // Draws a rank in [1, n] from the generator.
  uint64_t operator()(SplitMix64& rng) const;
  uint64_t n() const { return n_; }
  double exponent() const { return s_; }

 private:
  double h(double x) const;
  double h_integral(double x) const;
  double h_integral_inverse(double x) const;

  uint64_t n_;
  double s_;
  double h_integral_x1_;
  double h_integral_n_;
  double threshold_;
};

}  // namespace colony
