// How a row's values are encoded: in float32, bfloat16 (common/bf16.h: half the bytes, float32's
// range), fp16 (common/fp16.h: half the bytes, 8 times bf16's precision, saturating at +-65504)
// or int8 with a float32 scale a row (common/int8.h: one byte a value). The wire (a job's
// --wire-format, ps/protocol.h) and the compact row store (a job's --row-format and
// --state-format, storage/compact_store.h) use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace colony {

enum class ValueFormat : uint8_t { fp32 = 0, bf16 = 1, int8 = 2, fp16 = 3 };
inline constexpr uint8_t value_format_max = 3;

// "fp32", "bf16", "fp16" or "int8"; fails with invalid_input naming `what` (as "wire format") and
// the choices.
Expected<ValueFormat> parse_value_format(const std::string& text, const char* what = "wire format");
std::string to_string(ValueFormat f);

// Bytes a row of `width` values takes in format `f` (int8: with its scale).
inline size_t row_bytes(ValueFormat f, size_t width) {
  switch (f) {
    case ValueFormat::bf16:
    case ValueFormat::fp16:
      return 2 * width;
    case ValueFormat::int8:
      return width + sizeof(float);
    case ValueFormat::fp32:
      break;
  }
  return 4 * width;
}

}  // namespace colony
