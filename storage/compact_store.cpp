#include "storage/compact_store.h"

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

Expected<std::unique_ptr<CompactRowStore>> CompactRowStore::make(std::vector<RowPart> parts) {
  if (parts.empty()) return Status::invalid_input("a compact row store needs a row part");
  size_t row_floats = 0;
  for (const RowPart& p : parts) {
    if (p.floats == 0) return Status::invalid_input("a compact row store's part has no floats");
    row_floats += p.floats;
  }
  const size_t encoded_floats = (encoded_row_bytes(parts) + sizeof(float) - 1) / sizeof(float);
  return std::unique_ptr<CompactRowStore>(
      new CompactRowStore(std::move(parts), row_floats, encoded_floats));
}

CompactRowStore::CompactRowStore(std::vector<RowPart> parts, size_t row_floats,
                                 size_t encoded_floats)
    : parts_(std::move(parts)),
      row_floats_(row_floats),
      encoded_(encoded_floats),
      batch_(row_floats + 1) {}

void CompactRowStore::decode(const float* encoded, float* row) const {
  const auto* in = reinterpret_cast<const unsigned char*>(encoded);
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

void CompactRowStore::encode(uint64_t key, float* row, float* encoded) {
  const uint64_t seed = hash_combine(key, writes_++);
  auto* out = reinterpret_cast<unsigned char*>(encoded);
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

float* CompactRowStore::batch_row(uint64_t key, bool dirty) {
  float* row = batch_.find(key);
  if (!row) {
    const float* encoded = encoded_.find(key);
    if (!encoded) return nullptr;
    row = batch_.find_or_insert(key).first;
    decode(encoded, row);
  }
  if (dirty && row[row_floats_] == 0.0f) {
    row[row_floats_] = 1.0f;
    dirty_.emplace_back(key, row);
  }
  return row;
}

float* CompactRowStore::find(uint64_t key) {
  return batch_row(key, false);
}

std::pair<float*, bool> CompactRowStore::find_or_insert(uint64_t key) {
  if (float* row = batch_row(key, true)) return {row, false};
  encoded_.find_or_insert(key);  // zero bytes: a row of zeros in every format
  float* row = batch_.find_or_insert(key).first;
  row[row_floats_] = 1.0f;
  dirty_.emplace_back(key, row);
  return {row, true};
}

Status CompactRowStore::commit() {
  for (const auto& [key, row] : dirty_) {
    float* encoded = encoded_.find(key);
    COLONY_ASSERT(encoded);  // inserted by find_or_insert, and erase() is outside batches
    encode(key, row, encoded);
  }
  dirty_.clear();
  batch_.clear();
  return {};
}

Status CompactRowStore::for_each(const std::function<void(uint64_t, const float*)>& f) const {
  std::vector<float> row(row_floats_);
  encoded_.for_each([&](uint64_t key, const float* encoded) {
    decode(encoded, row.data());
    f(key, row.data());
  });
  return {};
}

Status CompactRowStore::erase(std::span<const uint64_t> keys) {
  for (uint64_t k : keys) encoded_.erase(k);
  return {};
}

}  // namespace colony
