// A ps's durable store as the simulator models it (RocksDB with its write-ahead log): what a
// commit wrote survives a crash of the process; rows handed out since the last commit are lost
// with it. The rows live in DurableRows, which the simulated host keeps over crashes; each
// process opens a store over them (open_sim_store), and the shard core of a restarted process
// finds what the last one committed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "storage/row_store.h"

namespace colony::sim {

class DurableRows {
 public:
  explicit DurableRows(size_t row_floats) : row_floats_(row_floats) {}
  size_t row_floats() const { return row_floats_; }
  size_t size() const { return rows_.size(); }
  // Batches committed so far (never decreases but by lose_tail).
  uint64_t commits() const { return commits_; }
  // Undoes the last `n` commits, as a store would that acknowledged writes before they were
  // durable (the lose_log_tail fault site); at most the last undo_max are remembered. Returns
  // how many were undone.
  uint64_t lose_tail(uint64_t n);

 private:
  friend class SimRowStore;
  static constexpr size_t undo_max = 8;
  using Undo = std::vector<std::pair<uint64_t, std::optional<std::vector<float>>>>;
  void write(std::unordered_map<uint64_t, std::vector<float>>& batch);
  void erase(uint64_t key, Undo& undo);

  size_t row_floats_;
  std::unordered_map<uint64_t, std::vector<float>> rows_;
  uint64_t commits_ = 0;
  std::deque<Undo> undo_;  // the last commits, newest last: each key's value before it
};

// A store over `rows` for one process (the batch protocol of storage/row_store.h: rows handed
// out by find_or_insert are kept only by commit()).
std::unique_ptr<RowStore> open_sim_store(std::shared_ptr<DurableRows> rows);

}  // namespace colony::sim
