// A hash map from uint64 keys to uint64 values, for the stores' row indexes (the memory table's
// key -> arena row, the tiered cache's key -> slot).
//
// Open addressing with linear probing over one flat array of {key, value} at a load factor of at
// most 1/2, and backward-shift deletion (no tombstones): a lookup touches one or two cache lines
// and allocates nothing, where std::unordered_map chases a pointer per lookup. Any key is
// allowed; values must be below UINT64_MAX.
//
// Thread-safety: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"

namespace colony {

class KeyIndex {
 public:
  KeyIndex() { slots_.resize(min_slots); }

  static constexpr uint64_t missing = UINT64_MAX;
  // The value stored under `key`, or `missing`.
  uint64_t get(uint64_t key) const {
    for (size_t pos = home(key);; pos = (pos + 1) & mask()) {
      const Slot& s = slots_[pos];
      if (s.value_plus_one == 0) return missing;
      if (s.key == key) return s.value_plus_one - 1;
    }
  }
  bool contains(uint64_t key) const { return get(key) != missing; }

  // The value under `key` and false; or, when there is none, stores `make_value()` (called only
  // then; below UINT64_MAX) under it and returns that and true.
  template <class F>
  std::pair<uint64_t, bool> find_or_insert(uint64_t key, F&& make_value) {
    size_t pos = home(key);
    for (;; pos = (pos + 1) & mask()) {
      const Slot& s = slots_[pos];
      if (s.value_plus_one == 0) break;
      if (s.key == key) return {s.value_plus_one - 1, false};
    }
    if ((size_ + 1) * 2 > slots_.size()) {
      grow();
      for (pos = home(key); slots_[pos].value_plus_one != 0;) pos = (pos + 1) & mask();
    }
    const uint64_t value = make_value();
    COLONY_ASSERT(value != missing);
    slots_[pos] = Slot{key, value + 1};
    ++size_;
    return {value, true};
  }
  // Stores `value` (below UINT64_MAX) under `key`, which must not be in the index.
  void insert(uint64_t key, uint64_t value) {
    const bool inserted = find_or_insert(key, [value] { return value; }).second;
    COLONY_ASSERT(inserted, "key {:#x} is in the index already", key);
  }

  // Removes `key` and returns its value, or `missing` when it is not in the index.
  uint64_t erase(uint64_t key) {
    size_t pos = home(key);
    for (;; pos = (pos + 1) & mask()) {
      if (slots_[pos].value_plus_one == 0) return missing;
      if (slots_[pos].key == key) break;
    }
    const uint64_t value = slots_[pos].value_plus_one - 1;
    // Backward shift: move later entries of the probe run into the hole when their home allows,
    // so that a lookup never stops early at it.
    size_t hole = pos;
    for (size_t next = (pos + 1) & mask(); slots_[next].value_plus_one != 0;
         next = (next + 1) & mask()) {
      const size_t h = home(slots_[next].key);
      if (((next - h) & mask()) >= ((next - hole) & mask())) {
        slots_[hole] = slots_[next];
        hole = next;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    return value;
  }

  // Removes every key. Keeps an array for about as many keys as were removed, so that one large
  // batch does not make every later clear() sweep a large array.
  void clear() {
    size_t n = min_slots;
    while (n < 4 * size_) n *= 2;
    if (n < slots_.size())
      slots_.assign(n, Slot{});
    else
      std::fill(slots_.begin(), slots_.end(), Slot{});
    size_ = 0;
  }
  // Makes room for `keys` keys without growing.
  void reserve(size_t keys) {
    while (slots_.size() < 2 * keys) grow();
  }

  // Starts loading `key`'s home slot into the CPU cache.
  void prefetch(uint64_t key) const { __builtin_prefetch(&slots_[home(key)]); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t memory_bytes() const { return slots_.size() * sizeof(Slot); }

  // Calls f(key, value) for every key, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.value_plus_one != 0) f(s.key, s.value_plus_one - 1);
  }

 private:
  struct Slot {
    uint64_t key = 0;
    uint64_t value_plus_one = 0;  // 0 marks an empty slot
  };
  static constexpr size_t min_slots = 1024;

  size_t mask() const { return slots_.size() - 1; }
  size_t home(uint64_t key) const {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return key & mask();
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old) {
      if (s.value_plus_one == 0) continue;
      size_t pos = home(s.key);
      while (slots_[pos].value_plus_one != 0) pos = (pos + 1) & mask();
      slots_[pos] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace colony
