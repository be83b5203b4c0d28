// How often a repeated event is logged: every one of the first 10, then the one that makes the
// count reach each power of 10 (100, 1000, ...), so that a thousand-fold repeat costs a handful
// of lines and the first ones are all there.
#pragma once

#include <cstdint>

namespace colony {

// Whether a count that went from `before` to `now` (> before) is to be logged.
inline bool log_this_count(uint64_t before, uint64_t now) {
  if (before < 10) return true;
  for (uint64_t p = 100; p != 0 && p <= now; p *= 10)
    if (before < p) return true;
  return false;
}

}  // namespace colony
