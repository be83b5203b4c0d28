#include "storage/row_codec.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "common/bf16.h"
#include "common/fp16.h"
#include "common/hash.h"
#include "common/int8.h"

namespace colony {

size_t encoded_row_bytes(std::span<const RowPart> parts) {
  size_t bytes = 0;
  for (const RowPart& p : parts) bytes += colony::row_bytes(p.format, p.floats);
  return bytes;
}

std::string to_string(std::span<const RowPart> parts) {
  std::string s;
  for (const RowPart& p : parts) {
    if (!s.empty()) s += ',';
    s += fmt::format("{}{}:{}", to_string(p.format), p.root ? "r" : "", p.floats);
  }
  return s;
}

Expected<std::vector<RowPart>> parse_row_parts(const std::string& text) {
  std::vector<RowPart> parts;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string part = text.substr(at, end - at);
    const size_t colon = part.find(':');
    auto bad = [&](const std::string& why) {
      return Status::invalid_input(
          fmt::format("row parts \"{}\": part \"{}\" {}", text, part, why));
    };
    if (colon == std::string::npos) return bad("is not FORMAT:FLOATS");
    std::string format = part.substr(0, colon);
    RowPart p;
    if (format.size() > 1 && format.back() == 'r') {
      p.root = true;
      format.pop_back();
    }
    auto f = parse_value_format(format, "row part format");
    if (!f) return bad(f.status().message());
    p.format = *f;
    const char* first = part.data() + colon + 1;
    const char* last = part.data() + part.size();
    auto [ptr, ec] = std::from_chars(first, last, p.floats);
    if (ec != std::errc() || ptr != last || p.floats == 0 || p.floats > (size_t{1} << 24))
      return bad("does not hold 1 to 2^24 floats");
    parts.push_back(p);
    at = end + 1;
  }
  return parts;
}

Expected<RowCodec> RowCodec::make(std::vector<RowPart> parts) {
  if (parts.empty()) return Status::invalid_input("a row codec needs a row part");
  size_t row_floats = 0;
  for (const RowPart& p : parts) {
    if (p.floats == 0) return Status::invalid_input("a row codec's part has no floats");
    row_floats += p.floats;
  }
  const size_t bytes = encoded_row_bytes(parts);
  return RowCodec(std::move(parts), row_floats, bytes);
}

void RowCodec::decode(const unsigned char* in, float* row) const {
  for (const RowPart& p : parts_) {
    auto each16 = [&](float (*from)(uint16_t)) {
      for (size_t j = 0; j < p.floats; ++j) {
        uint16_t b;
        std::memcpy(&b, in + 2 * j, sizeof b);
        row[j] = from(b);
      }
    };
    switch (p.format) {
      case ValueFormat::fp32:
        std::memcpy(row, in, p.floats * sizeof(float));
        break;
      case ValueFormat::bf16:
        each16(from_bf16);
        break;
      case ValueFormat::fp16:
        each16(from_fp16);
        break;
      case ValueFormat::int8: {
        float s;
        std::memcpy(&s, in, sizeof s);
        const auto* q = reinterpret_cast<const int8_t*>(in + sizeof s);
        for (size_t j = 0; j < p.floats; ++j) row[j] = int8_value(s, q[j]);
        break;
      }
    }
    if (p.root && p.format != ValueFormat::fp32)
      for (size_t j = 0; j < p.floats; ++j) row[j] *= std::fabs(row[j]);
    in += colony::row_bytes(p.format, p.floats);
    row += p.floats;
  }
}

void RowCodec::encode(uint64_t seed, float* row, unsigned char* out) const {
  size_t first = 0;  // the part's first float in the row: with seed, its values' randomness
  for (const RowPart& p : parts_) {
    auto random = [&](size_t j) { return uint32_t(mix64(seed + first + j) >> 32); };
    auto each16 = [&](float (*round)(float, uint32_t), uint16_t (*to)(float)) {
      for (size_t j = 0; j < p.floats; ++j) {
        const uint16_t b = to(round(row[j], random(j)));
        std::memcpy(out + 2 * j, &b, sizeof b);
      }
    };
    if (p.root && p.format != ValueFormat::fp32)
      for (size_t j = 0; j < p.floats; ++j)
        row[j] = std::copysign(std::sqrt(std::fabs(row[j])), row[j]);
    switch (p.format) {
      case ValueFormat::fp32:
        std::memcpy(out, row, p.floats * sizeof(float));
        break;
      case ValueFormat::bf16:
        each16(round_bf16_stochastic, to_bf16);
        break;
      case ValueFormat::fp16:
        each16(round_fp16_stochastic, to_fp16);
        break;
      case ValueFormat::int8: {
        // Straight to the codes (round_int8_row_stochastic's, without making the values and
        // coding them again).
        const float s = int8_codes_stochastic({row, p.floats}, random,
                                              reinterpret_cast<int8_t*>(out + sizeof(float)));
        std::memcpy(out, &s, sizeof s);
        break;
      }
    }
    out += colony::row_bytes(p.format, p.floats);
    row += p.floats;
    first += p.floats;
  }
}

}  // namespace colony
