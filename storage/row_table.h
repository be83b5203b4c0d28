// An in-memory table of fixed-width float rows keyed by uint64: the memory row store.
//
// Open addressing (linear probing) over a compact index of {key, row id}; rows live in an
// arena of fixed-size chunks, so a row pointer stays valid until the table is destroyed,
// however many rows are added after it. No per-row allocation.
//
// Thread-safety: none. One thread (one shard core, one trainer) owns a table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"

namespace colony {

class RowTable {
 public:
  // Rows hold `row_floats` floats (> 0).
  explicit RowTable(size_t row_floats);

  // The row stored under `key`, or nullptr when there is none.
  float* find(uint64_t key) {
    size_t pos = home(key);
    while (true) {
      const Slot& s = index_[pos];
      if (s.row_plus_one == 0) return nullptr;
      if (s.key == key) return row(s.row_plus_one - 1);
      pos = (pos + 1) & mask_;
    }
  }
  const float* find(uint64_t key) const { return const_cast<RowTable*>(this)->find(key); }

  // The row stored under `key`, inserting a zero-filled one when there is none; `.second`
  // says whether it was inserted (the caller then initialises it). The pointer stays valid
  // for the table's lifetime.
  std::pair<float*, bool> find_or_insert(uint64_t key) {
    size_t pos = home(key);
    while (true) {
      Slot& s = index_[pos];
      if (s.row_plus_one == 0) break;
      if (s.key == key) return {row(s.row_plus_one - 1), false};
      pos = (pos + 1) & mask_;
    }
    return {insert_at(pos, key), true};
  }

  // Removes `key`'s row; false when there is none. Its row's memory is reused by a later
  // insert, so a pointer to it must not be used after this.
  bool erase(uint64_t key);

  // Removes every row; pointers handed out before must not be used after. Keeps the arena's
  // memory for the rows inserted next, and an index for about as many rows as were removed.
  void clear();

  // Hints that `key` will be looked up soon: starts loading its index slot into cache.
  void prefetch(uint64_t key) const { __builtin_prefetch(&index_[home(key)]); }

  size_t size() const { return rows_; }
  size_t row_floats() const { return row_floats_; }
  // Bytes held by the index and the arena.
  size_t memory_bytes() const;

  // Calls f(key, const float* row) for every row, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : index_)
      if (s.row_plus_one != 0) f(s.key, row(s.row_plus_one - 1));
  }

 private:
  struct Slot {
    uint64_t key = 0;
    uint64_t row_plus_one = 0;  // 0 marks an empty slot
  };
  static constexpr size_t chunk_rows_log2 = 14;
  static constexpr size_t chunk_rows = size_t{1} << chunk_rows_log2;

  size_t home(uint64_t key) const { return mix(key) & mask_; }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  float* row(uint64_t id) const {
    return chunks_[id >> chunk_rows_log2].get() + (id & (chunk_rows - 1)) * row_floats_;
  }
  float* insert_at(size_t pos, uint64_t key);
  void grow();

  size_t row_floats_;
  size_t rows_ = 0;
  uint64_t next_row_ = 0;            // arena rows handed out so far
  std::vector<uint64_t> free_rows_;  // arena rows of erased keys, reused first
  size_t mask_ = 0;
  std::vector<Slot> index_;
  std::vector<std::unique_ptr<float[]>> chunks_;
};

}  // namespace colony
