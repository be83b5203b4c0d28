// The small shard the store, recovery and core tests share: one shard of a one-shard map,
// rows of width 3 under Adagrad (3 more floats of state), one sender (node 7).
#pragma once

#include <memory>

#include "ps/optimizer.h"
#include "ps/shard_core.h"
#include "storage/row_store.h"

namespace colony::testing {

// A memory store that does not promise stable row pointers (as a tiered store cannot), so the
// shard goes through load and commit for every batch; its commit fails once `*full` is set (a
// disk that filled up).
struct UnstableStore final : RowStore {
  explicit UnstableStore(size_t n) : inner(n) {}
  float* find(uint64_t k) override { return inner.find(k); }
  std::pair<float*, bool> find_or_insert(uint64_t k) override { return inner.find_or_insert(k); }
  void prefetch(uint64_t k) const override { inner.prefetch(k); }
  bool stable_rows() const override { return false; }
  size_t size() const override { return inner.size(); }
  size_t row_floats() const override { return inner.row_floats(); }
  size_t memory_bytes() const override { return inner.memory_bytes(); }
  Status for_each(const std::function<void(uint64_t, const float*)>& f) const override {
    return inner.for_each(f);
  }
  Status erase(std::span<const uint64_t> keys) override { return inner.erase(keys); }
  Status commit() override { return *full ? Status::io_error("no space left") : Status(); }
  MemoryRowStore inner;
  std::shared_ptr<bool> full = std::make_shared<bool>(false);
};

inline ShardConfig small_adagrad_shard() {
  return ShardConfig{0,
                     0,
                     3,
                     default_optimizer_config(OptimizerKind::adagrad),
                     RowInit{1, 1, 0.1f},
                     Consistency{},
                     {7},
                     ShardMapSpec{1, 1, 16, 0}};
}

}  // namespace colony::testing
