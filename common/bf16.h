// bfloat16: the upper 16 bits of an IEEE float32 (sign, 8 exponent bits, 7 mantissa bits). It
// keeps float32's range and about 2-3 significant decimal digits, so rows and gradients sent
// in it take half the bytes (the wire's --wire-format bf16, ps/protocol.h ValueFormat).
//
// The roundings below return float32 values that bf16 represents exactly; to_bf16 then keeps
// them whole and from_bf16 gives them back bit for bit. NaN stays NaN (quiet) and the
// infinities stay infinite; a finite value past bf16's largest (about 3.39e38) rounds to
// infinity as float32 rounding would.
#pragma once

#include <bit>
#include <cstdint>

namespace colony {

// Whether bf16 holds `v` exactly (its low 16 bits are zero).
inline bool is_bf16(float v) {
  return (std::bit_cast<uint32_t>(v) & 0xFFFFu) == 0;
}

// The nearest bf16 value, ties to even. Branch-free, so that loops over arrays vectorise.
inline float round_bf16(float v) {
  const uint32_t b = std::bit_cast<uint32_t>(v);
  const bool nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
  const uint32_t rounded = b + 0x7FFFu + ((b >> 16) & 1u);
  return std::bit_cast<float>((nan ? b | 0x00400000u : rounded) & 0xFFFF0000u);  // NaN: quiet
}

// Stochastic rounding: one of the two bf16 values around `v`, the farther one with the
// probability of its share of the gap, given `random` uniform in [0, 2^16). Unbiased: the mean
// over `random` is `v` exactly (for finite v below bf16's largest), which keeps many small
// gradients summed on a shard from being rounded away.
inline float round_bf16_stochastic(float v, uint32_t random) {
  uint32_t b = std::bit_cast<uint32_t>(v);
  if ((b & 0x7F800000u) == 0x7F800000u) return round_bf16(v);  // NaN and infinities
  b += random & 0xFFFFu;
  return std::bit_cast<float>(b & 0xFFFF0000u);
}

// The bf16 bits of `v` (its upper 16; exact when is_bf16(v)).
inline uint16_t to_bf16(float v) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
}

inline float from_bf16(uint16_t bits) {
  return std::bit_cast<float>(uint32_t{bits} << 16);
}

}  // namespace colony
