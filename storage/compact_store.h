// Rows in memory in fewer bytes: each row is kept encoded, part by part (its values in one
// format, its optimizer state in another: storage/row_codec.h), and decoded while a batch uses it
// (the batch protocol of storage/row_store.h). A job's --row-format and --state-format choose the
// parts' formats.
//
// Writing a row back rounds each value stochastically (RowCodec::encode); the randomness is a hash
// of the key and a count of the store's writes, so a run is reproducible. A part in fp32 is kept
// bit for bit: a store of fp32 parts only gives what MemoryRowStore gives.
//
// Memory: the encoded rows (each padded to whole floats) in a RowTable, plus the decoded rows
// of the current batch, dropped at commit().
//
// Thread-safety: none; one shard owns a store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/value_format.h"
#include "storage/row_codec.h"
#include "storage/row_store.h"
#include "storage/row_table.h"

namespace colony {

class CompactRowStore final : public RowStore {
 public:
  // A store of rows made of `parts`, in order. Fails with invalid_input when there is no part
  // or a part has no floats.
  static Expected<std::unique_ptr<CompactRowStore>> make(std::vector<RowPart> parts);

  float* find(uint64_t key) override;
  std::pair<float*, bool> find_or_insert(uint64_t key) override;
  void prefetch(uint64_t key) const override { encoded_.prefetch(key); }
  bool stable_rows() const override { return false; }
  size_t size() const override { return encoded_.size(); }
  size_t row_floats() const override { return row_floats_; }
  size_t row_bytes() const override { return encoded_.row_floats() * sizeof(float); }
  size_t memory_bytes() const override { return encoded_.memory_bytes(); }
  // Decodes each row in turn (rows of the current batch as the store holds them, not as
  // changed since).
  Status for_each(const std::function<void(uint64_t, const float*)>& f) const override;
  Status erase(std::span<const uint64_t> keys) override;
  // Encodes the rows handed out by find_or_insert since the last commit; never fails.
  Status commit() override;

 private:
  explicit CompactRowStore(RowCodec codec);
  // The decoded row of `key` in this batch (decoding it on first use), or nullptr when the
  // store has no row; `dirty` marks it for write-back.
  float* batch_row(uint64_t key, bool dirty);

  RowCodec codec_;
  size_t row_floats_;
  RowTable encoded_;  // each row's encoded bytes, padded to whole floats
  // The batch's decoded rows: row_floats_ values, then 1 when handed out for writing.
  RowTable batch_;
  std::vector<std::pair<uint64_t, float*>> dirty_;
  uint64_t writes_ = 0;  // rows encoded so far: with the key, the rounding's randomness
};

}  // namespace colony
