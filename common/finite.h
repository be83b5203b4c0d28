// Finding values that are not finite (NaN or infinite) in float arrays: a NaN gradient applied
// to a row makes that row NaN for good, so pushes are checked before anything is applied.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>

namespace colony {

// The index of the first value that is NaN or infinite, or values.size() when every value is
// finite. Tests the exponent bits a block at a time (a loop the compiler vectorizes), and only a
// block that holds such a value one by one.
inline size_t first_not_finite(std::span<const float> values) {
  constexpr size_t block = 256;
  const size_t n = values.size();
  for (size_t b = 0; b < n; b += block) {
    const size_t e = std::min(n, b + block);
    uint32_t any = 0;
    for (size_t i = b; i < e; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      any |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (any)
      for (size_t i = b; i < e; ++i)
        if (!std::isfinite(values[i])) return i;
  }
  return n;
}

}  // namespace colony
