// IEEE half precision (binary16): 1 sign, 5 exponent and 10 mantissa bits, about 3 significant
// decimal digits (8 times bf16's precision) over +-65504 (normal down to 6.1e-5, subnormal down
// to 6e-8). Rows and gradients sent or kept in it take half the bytes (a job's --wire-format,
// --row-format and --state-format fp16, common/value_format.h). GCC's _Float16 does the
// conversions, rounding to the nearest, ties to even.
//
// fp16's range is narrow, so the roundings below saturate: a finite value past +-65504 becomes
// +-65504, not infinity (a large row or gradient stays finite). NaN stays NaN and the
// infinities stay infinite. They return float32 values that fp16 represents exactly; to_fp16
// then keeps them whole and from_fp16 gives them back bit for bit.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace colony {

inline constexpr float fp16_max = 65504.0f;

// Whether fp16 holds `v` exactly (NaN and the infinities included).
inline bool is_fp16(float v) {
  return std::isnan(v) || float(static_cast<_Float16>(v)) == v;
}

// The nearest fp16 value, ties to even, saturating at +-65504.
inline float round_fp16(float v) {
  if (std::isfinite(v)) v = std::clamp(v, -fp16_max, fp16_max);
  return float(static_cast<_Float16>(v));
}

// Stochastic rounding: one of the two fp16 values around `v` (saturated first), the farther one
// with the probability of its share of the gap, given `random` uniform 32 bits. Unbiased within
// +-65504 (up to the float32 arithmetic of the share).
inline float round_fp16_stochastic(float v, uint32_t random) {
  if (!std::isfinite(v)) return v;
  v = std::clamp(v, -fp16_max, fp16_max);
  const _Float16 nearest = static_cast<_Float16>(v);
  const float n = float(nearest);
  if (n == v) return n;
  // The other neighbour: one step of the magnitude away from `nearest`, towards v (the sign bit
  // is apart from the magnitude's, and |n| < |v| <= 65504 leaves room for a step up).
  float other;
  if (n == 0.0f) {
    other = std::copysign(0x1p-24f, v);  // the smallest subnormal
  } else {
    const uint16_t b = std::bit_cast<uint16_t>(nearest);
    const uint16_t step = std::fabs(n) < std::fabs(v) ? uint16_t(b + 1) : uint16_t(b - 1);
    other = float(std::bit_cast<_Float16>(step));
  }
  const float share = (v - n) / (other - n);      // in (0, 1/2]
  const float u = float(random >> 8) * 0x1p-24f;  // uniform in [0, 1)
  return u < share ? other : n;
}

// The fp16 bits of `v` (exact when is_fp16(v)).
inline uint16_t to_fp16(float v) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(v));
}

inline float from_fp16(uint16_t bits) {
  return float(std::bit_cast<_Float16>(bits));
}

}  // namespace colony
