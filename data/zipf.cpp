#include "data/zipf.h"

#include <cmath>

#include "common/status.h"

namespace colony {

namespace {
// log(1 + x) / x, accurate near 0.
double helper1(double x) {
  return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x / 3.0);
}
// (exp(x) - 1) / x, accurate near 0.
double helper2(double x) {
  return std::fabs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0);
}
}  // namespace

ZipfSampler::ZipfSampler(uint64_t n, double exponent) : n_(n), s_(exponent) {
  COLONY_ASSERT(n >= 1 && exponent > 0.0, "n={} exponent={}", n, exponent);
  h_integral_x1_ = h_integral(1.5) - 1.0;
  h_integral_n_ = h_integral(static_cast<double>(n) + 0.5);
  threshold_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const {
  return std::exp(-s_ * std::log(x));
}

double ZipfSampler::h_integral(double x) const {
  const double lx = std::log(x);
  return helper2((1.0 - s_) * lx) * lx;
}

double ZipfSampler::h_integral_inverse(double x) const {
  double t = x * (1.0 - s_);
  if (t < -1.0) t = -1.0;  // guards rounding at the boundary
  return std::exp(helper1(t) * x);
}

uint64_t ZipfSampler::operator()(SplitMix64& rng) const {
  while (true) {
    const double u = h_integral_n_ + rng.uniform() * (h_integral_x1_ - h_integral_n_);
    const double x = h_integral_inverse(u);
    double kd = std::floor(x + 0.5);
    if (kd < 1.0) kd = 1.0;
    if (kd > static_cast<double>(n_)) kd = static_cast<double>(n_);
    if (kd - x <= threshold_ || u >= h_integral(kd + 0.5) - h(kd)) return static_cast<uint64_t>(kd);
  }
}

}  // namespace colony
