// Rows in 8 bits with a scale of their own (FBGEMM's row-wise quantization): a row of floats
// travels as one float32 scale s and one int8 q per value, standing for s * q, with
// s = max |v| / 127 over the row, so q lies in -127..127. A row of d values takes d + 4 bytes
// instead of 4d (the wire's --wire-format int8, ps/protocol.h ValueFormat).
//
// The roundings below replace a row's values, in place, by s * q (computed in float32) and
// return s. The wire codec then sends s and q = nearest(v / s), which gives q back exactly
// (v / s is within a few ulps of an integer of at most 127), and the receiver computes s * q
// again: the same floats, bit for bit, so an embedded cluster computes what daemons do.
//
// A row holding a NaN or an infinity gets the scale NaN and every value NaN (a shard refuses a
// push holding one, naming the key); an all-zero row gets the scale 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

namespace colony {

inline constexpr float int8_levels = 127.0f;

// The scale of `row`: max |v| / 127 (NaN when a value is not finite).
inline float int8_scale(std::span<const float> row) {
  float m = 0.0f;
  for (float v : row) {
    if (!std::isfinite(v)) return NAN;
    m = std::max(m, std::fabs(v));
  }
  return m / int8_levels;
}

// x rounded to the nearest integer, ties to even, for |x| < 2^22 (the codes' range, and more):
// adding and taking away 1.5 x 2^23 leaves no fraction bits (std::nearbyint, without its call).
inline float round_small(float x) {
  constexpr float magic = 12582912.0f;  // IEEE arithmetic: (x + magic) - magic is not folded
  return (x + magic) - magic;
}

// What int8_code multiplies by: 1 / s, or 0 for a scale that is 0 or not finite.
inline float int8_inverse(float s) {
  return s > 0.0f && std::isfinite(s) ? 1.0f / s : 0.0f;
}

// q for `v` under a scale whose int8_inverse is `inverse`, clamped to -127..127. For v = s * q
// (as the roundings below make them), v * (1 / s) is within a few ulps of q: q comes back.
inline int8_t int8_code_by(float v, float inverse) {
  const float x = v * inverse;
  if (std::isnan(x)) return 0;
  return static_cast<int8_t>(round_small(std::clamp(x, -int8_levels, int8_levels)));
}

// q for `v` under scale `s` (0 for a scale that is 0 or not finite).
inline int8_t int8_code(float v, float s) {
  return int8_code_by(v, int8_inverse(s));
}

// The value that scale `s` and code `q` stand for.
inline float int8_value(float s, int8_t q) {
  return std::isfinite(s) ? s * float(q) : NAN;
}

// Rounds each value of `row` to the nearest s * q; returns s.
inline float round_int8_row(std::span<float> row) {
  const float s = int8_scale(row), inverse = int8_inverse(s);
  for (float& v : row) v = int8_value(s, int8_code_by(v, inverse));
  return s;
}

// The code of x = v / s (finite) rounded to one of its two neighbours q, q + 1, the upper with
// probability x - q, from 32 random `bits`; clamped to -127..127. Without branches: which way a
// value rounds is a coin flip that a branch would mispredict half the time.
inline int8_t int8_code_stochastic(float x, uint32_t bits) {
  const float u = float(bits >> 8) * 0x1p-24f;  // uniform in [0, 1)
  const float y = std::min(std::max(x + u, -int8_levels), int8_levels), r = round_small(y);
  return static_cast<int8_t>(static_cast<int>(r) - (r > y));  // floor(y): a compare, no branch
}

// The codes of `row`, each rounded to one of its two neighbours as int8_code_stochastic does
// (`random(j)` gives 32 random bits for value j), into `codes` (row.size() of them). Returns s.
template <class Random>
float int8_codes_stochastic(std::span<const float> row, Random random, int8_t* codes) {
  const float s = int8_scale(row), inverse = int8_inverse(s);
  for (size_t j = 0; j < row.size(); ++j)
    codes[j] = inverse == 0.0f ? int8_t{0} : int8_code_stochastic(row[j] * inverse, random(j));
  return s;
}

// Rounds each value of `row` to one of its two neighbours s * q, s * (q + 1), the upper with
// probability (v / s - q): unbiased. `random(j)` gives 32 random bits for value j. Returns s.
// Its codes are int8_codes_stochastic's with the same random bits.
template <class Random>
float round_int8_row_stochastic(std::span<float> row, Random random) {
  const float s = int8_scale(row), inverse = int8_inverse(s);
  for (size_t j = 0; j < row.size(); ++j)
    row[j] = int8_value(
        s, inverse == 0.0f ? int8_t{0} : int8_code_stochastic(row[j] * inverse, random(j)));
  return s;
}

}  // namespace colony
