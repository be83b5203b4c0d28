// A row's floats in fewer bytes: the row is cut into parts (its values in one format, its
// optimizer state in another), each kept in a ValueFormat (common/value_format.h): fp32, bf16 or
// fp16 (2 bytes a value), or int8 (1 byte a value and a float32 scale a part). The compact memory
// store (storage/compact_store.h) and the RocksDB table (storage/rocks_table.h, rows on disk)
// keep rows so.
//
// Encoding rounds each value stochastically, to one of its two neighbours in the format with the
// probability that makes the mean the value itself (common/bf16.h, common/fp16.h, common/int8.h):
// small updates to a row are kept in expectation instead of being rounded away. The randomness is
// a seed the caller gives (a hash of the key and a count of writes), so a run is reproducible. A
// part in fp32 is kept bit for bit.
//
// Thread-safety: a codec is immutable; encode and decode may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/value_format.h"

namespace colony {

// A run of a row's floats kept in one format, with a scale of its own when int8.
struct RowPart {
  size_t floats = 0;
  ValueFormat format = ValueFormat::fp32;
  // Keep sign(v) sqrt(|v|) in the format (and square it back; ignored in fp32). For optimizer
  // state, whose sums of squared gradients span orders of magnitude within a row: int8's 127
  // even steps then cover a range 127^2 wide instead of rounding the small sums to 0, and
  // fp16's largest value, 65504, stands for 4.3e9.
  bool root = false;

  bool operator==(const RowPart&) const = default;
};

// Bytes a row of `parts` takes encoded.
size_t encoded_row_bytes(std::span<const RowPart> parts);

// The parts as text, part by part: "int8:8,fp16r:9" (format, `r` when root, floats).
std::string to_string(std::span<const RowPart> parts);
// The parts of to_string's text. Fails with invalid_input naming the text and the part that
// is not one (an unknown format, no floats, no part at all).
Expected<std::vector<RowPart>> parse_row_parts(const std::string& text);

class RowCodec {
 public:
  // A codec for rows made of `parts`, in order. Fails with invalid_input when there is no part
  // or a part has no floats.
  static Expected<RowCodec> make(std::vector<RowPart> parts);

  const std::vector<RowPart>& parts() const { return parts_; }
  size_t row_floats() const { return row_floats_; }
  size_t encoded_bytes() const { return encoded_bytes_; }

  // Reads encoded_bytes() from `in` into row[0 .. row_floats()).
  void decode(const unsigned char* in, float* row) const;
  // Writes `row` in encoded_bytes() to `out`, rounding with the randomness of `seed`. Changes the
  // values of the root parts of `row` (to their square roots) on the way.
  void encode(uint64_t seed, float* row, unsigned char* out) const;

 private:
  RowCodec(std::vector<RowPart> parts, size_t row_floats, size_t encoded_bytes)
      : parts_(std::move(parts)), row_floats_(row_floats), encoded_bytes_(encoded_bytes) {}

  std::vector<RowPart> parts_;
  size_t row_floats_;
  size_t encoded_bytes_;
};

}  // namespace colony
