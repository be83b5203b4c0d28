// An in-memory table of fixed-width float rows keyed by uint64: the memory row store.
//
// A KeyIndex (storage/key_index.h: open addressing) of key -> row id; rows live in an arena of
// fixed-size chunks, so a row pointer stays valid until the table is destroyed, however many
// rows are added after it. No per-row allocation.
//
// Thread-safety: none. One thread (one shard core, one trainer) owns a table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "storage/key_index.h"

namespace colony {

class RowTable {
 public:
  // Rows hold `row_floats` floats (> 0).
  explicit RowTable(size_t row_floats);

  // The row stored under `key`, or nullptr when there is none.
  float* find(uint64_t key) {
    const uint64_t id = index_.get(key);
    return id == KeyIndex::missing ? nullptr : row(id);
  }
  const float* find(uint64_t key) const { return const_cast<RowTable*>(this)->find(key); }

  // The row stored under `key`, inserting a zero-filled one when there is none; `.second`
  // says whether it was inserted (the caller then initialises it). The pointer stays valid
  // for the table's lifetime.
  std::pair<float*, bool> find_or_insert(uint64_t key) {
    auto [id, inserted] = index_.find_or_insert(key, [this] { return new_row(); });
    return {row(id), inserted};
  }

  // Removes `key`'s row; false when there is none. Its row's memory is reused by a later
  // insert, so a pointer to it must not be used after this.
  bool erase(uint64_t key);

  // Removes every row; pointers handed out before must not be used after. Keeps the arena's
  // memory for the rows inserted next, and an index for about as many rows as were removed.
  void clear();

  // Hints that `key` will be looked up soon: starts loading its index slot into cache.
  void prefetch(uint64_t key) const { index_.prefetch(key); }

  size_t size() const { return index_.size(); }
  size_t row_floats() const { return row_floats_; }
  // Bytes held by the index and the arena.
  size_t memory_bytes() const;

  // Calls f(key, const float* row) for every row, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    index_.for_each([&](uint64_t key, uint64_t id) { f(key, static_cast<const float*>(row(id))); });
  }

 private:
  static constexpr size_t chunk_rows_log2 = 14;
  static constexpr size_t chunk_rows = size_t{1} << chunk_rows_log2;

  float* row(uint64_t id) const {
    return chunks_[id >> chunk_rows_log2].get() + (id & (chunk_rows - 1)) * row_floats_;
  }
  // A zero-filled arena row for a new key.
  uint64_t new_row();

  size_t row_floats_;
  uint64_t next_row_ = 0;            // arena rows handed out so far
  std::vector<uint64_t> free_rows_;  // arena rows of erased keys, reused first
  KeyIndex index_;                   // key -> arena row
  std::vector<std::unique_ptr<float[]>> chunks_;
};

}  // namespace colony
