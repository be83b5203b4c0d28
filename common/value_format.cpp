#include "common/value_format.h"

#include <fmt/format.h>

namespace colony {

Expected<ValueFormat> parse_value_format(const std::string& text, const char* what) {
  if (text == "fp32") return ValueFormat::fp32;
  if (text == "bf16") return ValueFormat::bf16;
  if (text == "fp16") return ValueFormat::fp16;
  if (text == "int8") return ValueFormat::int8;
  return Status::invalid_input(
      fmt::format("{} '{}': expected fp32, bf16, fp16 or int8", what, text));
}

std::string to_string(ValueFormat f) {
  switch (f) {
    case ValueFormat::bf16:
      return "bf16";
    case ValueFormat::int8:
      return "int8";
    case ValueFormat::fp16:
      return "fp16";
    case ValueFormat::fp32:
      break;
  }
  return "fp32";
}

}  // namespace colony
