// IEEE half precision (binary16): 1 sign, 5 exponent and 10 mantissa bits, about 3 significant
// decimal digits (8 times bf16's precision) over +-65504 (normal down to 6.1e-5, subnormal down
// to 6e-8). Rows and gradients sent or kept in it take half the bytes (a job's --wire-format,
// --row-format and --state-format fp16, common/value_format.h). The conversions are done on the
// bits (no compiler half type: not every compiler this builds with has one on x86), rounding to
// the nearest, ties to even, as IEEE conversion does.
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

// The fp16 bits of `v`, rounded to the nearest, ties to even (past 65504 by half a step or
// more: infinity; NaN: a quiet NaN).
inline uint16_t to_fp16(float v) {
  const uint32_t b = std::bit_cast<uint32_t>(v);
  const auto sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t abs = b & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u | ((abs >> 13) & 0x3FFu);  // NaN, quiet
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // 65520 and up (and infinity): infinity
  if (abs < 0x38800000u) {
    // Below 2^-14, fp16's smallest normal: a subnormal, in steps of 2^-24. The scaling is exact,
    // and the rounding (as common/int8.h's round_small: adding and taking away 1.5 x 2^23)
    // rounds to the nearest, ties to even; 1024 steps are the smallest normal's bits.
    constexpr float magic = 12582912.0f;
    const float steps = (std::bit_cast<float>(abs) * 0x1p24f + magic) - magic;
    return sign | static_cast<uint16_t>(steps);
  }
  // A normal: the exponent rebiased (127 - 15 = 112), the mantissa rounded at bit 13 (a carry
  // moves into the exponent, as it should).
  uint32_t bits = abs - (112u << 23);
  bits += 0xFFFu + ((bits >> 13) & 1u);
  return sign | static_cast<uint16_t>(bits >> 13);
}

inline float from_fp16(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0) {  // zero or a subnormal: mantissa x 2^-24, exact in float32
    const float v = float(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Whether fp16 holds `v` exactly (NaN and the infinities included).
inline bool is_fp16(float v) {
  return std::isnan(v) || from_fp16(to_fp16(v)) == v;
}

// The nearest fp16 value, ties to even, saturating at +-65504.
inline float round_fp16(float v) {
  if (std::isfinite(v)) v = std::clamp(v, -fp16_max, fp16_max);
  return from_fp16(to_fp16(v));
}

// Stochastic rounding: one of the two fp16 values around `v` (saturated first), the farther one
// with the probability of its share of the gap, given `random` uniform 32 bits. Unbiased within
// +-65504 (up to the float32 arithmetic of the share).
inline float round_fp16_stochastic(float v, uint32_t random) {
  if (!std::isfinite(v)) return v;
  v = std::clamp(v, -fp16_max, fp16_max);
  const uint16_t nearest = to_fp16(v);
  const float n = from_fp16(nearest);
  if (n == v) return n;
  // The other neighbour: one step of the magnitude away from `nearest`, towards v (the sign bit
  // is apart from the magnitude's, and |n| < |v| <= 65504 leaves room for a step up).
  float other;
  if (n == 0.0f) {
    other = std::copysign(0x1p-24f, v);  // the smallest subnormal
  } else {
    const uint16_t step =
        std::fabs(n) < std::fabs(v) ? uint16_t(nearest + 1) : uint16_t(nearest - 1);
    other = from_fp16(step);
  }
  const float share = (v - n) / (other - n);      // in (0, 1/2]
  const float u = float(random >> 8) * 0x1p-24f;  // uniform in [0, 1)
  return u < share ? other : n;
}

}  // namespace colony
