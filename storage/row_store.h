// Where a PS shard keeps its rows: the interface the shard core talks to, so that the core
// never does I/O itself. A row is a fixed number of floats (parameters and optimizer state
// together, so they are always stored, moved and checkpointed as one).
//
// The memory store is here; the RocksDB and tiered stores (storage issue) implement the same
// interface.
//
// Thread-safety: none; one shard owns a store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "storage/row_table.h"

namespace colony {

class RowStore {
 public:
  virtual ~RowStore() = default;
  // The row stored under `key`, or nullptr.
  virtual float* find(uint64_t key) = 0;
  // The row under `key`, inserting a zero-filled one when there is none; `.second` says
  // whether it was inserted (the caller initialises it).
  virtual std::pair<float*, bool> find_or_insert(uint64_t key) = 0;
  // A hint that `key` will be looked up soon.
  virtual void prefetch(uint64_t key) const = 0;
  // True when a row pointer stays valid until the store is destroyed (the memory store).
  // Otherwise a pointer is valid only until the next call on the store.
  virtual bool stable_rows() const = 0;
  virtual size_t size() const = 0;
  virtual size_t row_floats() const = 0;
  virtual size_t memory_bytes() const = 0;
  // Calls f(key, row) for every row, in no particular order.
  virtual void for_each(const std::function<void(uint64_t, const float*)>& f) const = 0;
};

// Rows in memory: a RowTable (open addressing, rows in a chunked arena, stable pointers).
class MemoryRowStore final : public RowStore {
 public:
  explicit MemoryRowStore(size_t row_floats) : table_(row_floats) {}
  float* find(uint64_t key) override { return table_.find(key); }
  std::pair<float*, bool> find_or_insert(uint64_t key) override { return table_.find_or_insert(key); }
  void prefetch(uint64_t key) const override { table_.prefetch(key); }
  bool stable_rows() const override { return true; }
  size_t size() const override { return table_.size(); }
  size_t row_floats() const override { return table_.row_floats(); }
  size_t memory_bytes() const override { return table_.memory_bytes(); }
  void for_each(const std::function<void(uint64_t, const float*)>& f) const override { table_.for_each(f); }

 private:
  RowTable table_;
};

}  // namespace colony
