// A batch of sparse samples in compressed-row form: what readers produce and models consume.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace colony {

// Row i has label labels[i] (0 or 1) and features keys/values[offsets[i] .. offsets[i+1]).
// Keys are feature ids as made by make_key() in common/hash.h. A row may repeat a key; models
// treat repeats as separate features. Clearing keeps the capacity, so a reused Batch does not
// allocate once it has grown to its working size.
struct Batch {
  std::vector<float> labels;
  std::vector<uint32_t> offsets{0};
  std::vector<uint64_t> keys;
  std::vector<float> values;

  size_t rows() const { return labels.size(); }
  size_t features() const { return keys.size(); }
  bool empty() const { return labels.empty(); }
  void clear() {
    labels.clear();
    offsets.assign(1, 0);
    keys.clear();
    values.clear();
  }
  void add_feature(uint64_t key, float value) {
    keys.push_back(key);
    values.push_back(value);
  }
  // Ends the current row (the features added since the last call) with its label.
  void finish_row(float label) {
    labels.push_back(label);
    offsets.push_back(static_cast<uint32_t>(keys.size()));
  }
  // Drops the features added since the last finish_row (a line that turned out malformed).
  void abandon_row() {
    keys.resize(offsets.back());
    values.resize(offsets.back());
  }
  std::span<const uint64_t> row_keys(size_t i) const {
    return {keys.data() + offsets[i], keys.data() + offsets[i + 1]};
  }
  std::span<const float> row_values(size_t i) const {
    return {values.data() + offsets[i], values.data() + offsets[i + 1]};
  }
};

}  // namespace colony
