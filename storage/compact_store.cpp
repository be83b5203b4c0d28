#include "storage/compact_store.h"

#include "common/hash.h"

namespace colony {

Expected<std::unique_ptr<CompactRowStore>> CompactRowStore::make(std::vector<RowPart> parts) {
  if (parts.empty()) return Status::invalid_input("a compact row store needs a row part");
  for (const RowPart& p : parts)
    if (p.floats == 0) return Status::invalid_input("a compact row store's part has no floats");
  auto codec = RowCodec::make(std::move(parts));
  if (!codec) return codec.status();
  return std::unique_ptr<CompactRowStore>(new CompactRowStore(std::move(codec.value())));
}

CompactRowStore::CompactRowStore(RowCodec codec)
    : codec_(std::move(codec)),
      row_floats_(codec_.row_floats()),
      encoded_((codec_.encoded_bytes() + sizeof(float) - 1) / sizeof(float)),
      batch_(row_floats_ + 1) {}

float* CompactRowStore::batch_row(uint64_t key, bool dirty) {
  float* row = batch_.find(key);
  if (!row) {
    const float* encoded = encoded_.find(key);
    if (!encoded) return nullptr;
    row = batch_.find_or_insert(key).first;
    codec_.decode(reinterpret_cast<const unsigned char*>(encoded), row);
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
    codec_.encode(hash_combine(key, writes_++), row, reinterpret_cast<unsigned char*>(encoded));
  }
  dirty_.clear();
  batch_.clear();
  return {};
}

Status CompactRowStore::for_each(const std::function<void(uint64_t, const float*)>& f) const {
  std::vector<float> row(row_floats_);
  encoded_.for_each([&](uint64_t key, const float* encoded) {
    codec_.decode(reinterpret_cast<const unsigned char*>(encoded), row.data());
    f(key, row.data());
  });
  return {};
}

Status CompactRowStore::erase(std::span<const uint64_t> keys) {
  for (uint64_t k : keys) encoded_.erase(k);
  return {};
}

}  // namespace colony
