// A ps's durable store as the simulator models it (RocksDB with its write-ahead log, or the
// tiered store with its push log): what a commit wrote survives a crash of the process, the
// senders' clocks staged with it included (RowStore::stage_clock); rows handed out since the
// last commit are lost with it. A commit that stages a sender's clock the store already holds
// applies that push a second time: DurableRows counts it (take_applied_twice) for the checker. The
// rows live in DurableRows, which the simulated host keeps over crashes; each process opens a store
// over them (open_sim_store), and the shard core of a restarted process finds what the last one
// committed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
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
  // Another store holding these rows and clocks, as if it had committed them in one batch.
  std::shared_ptr<DurableRows> copy() const {
    auto c = std::make_shared<DurableRows>(row_floats_);
    c->rows_ = rows_;
    c->clocks_ = clocks_;
    c->commits_ = 1;
    return c;
  }
  // Batches committed so far (never decreases but by lose_tail).
  uint64_t commits() const { return commits_; }
  // Undoes the last `n` commits, as a store would that acknowledged writes before they were
  // durable (the lose_log_tail fault site); at most the last undo_max are remembered. Returns
  // how many were undone.
  uint64_t lose_tail(uint64_t n);
  // Each sender's clock of its last push (or clock advance) the committed rows hold.
  const std::map<uint64_t, uint32_t>& clocks() const { return clocks_; }
  // (sender, clock) of every commit since the last call that staged a clock this store already
  // held: a push applied twice.
  std::vector<std::pair<uint64_t, uint32_t>> take_applied_twice() {
    return std::exchange(applied_twice_, {});
  }
  // The committed rows, and one of them (null when not held).
  const std::unordered_map<uint64_t, std::vector<float>>& rows() const { return rows_; }
  const std::vector<float>* row(uint64_t key) const {
    auto it = rows_.find(key);
    return it == rows_.end() ? nullptr : &it->second;
  }

 private:
  friend class SimRowStore;
  static constexpr size_t undo_max = 8;
  struct Undo {
    std::vector<std::pair<uint64_t, std::optional<std::vector<float>>>> rows;
    std::vector<std::pair<uint64_t, std::optional<uint32_t>>> clocks;
  };
  void write(std::unordered_map<uint64_t, std::vector<float>>& batch,
             const std::vector<std::pair<uint64_t, uint32_t>>& clocks);
  void erase(uint64_t key, Undo& undo);
  void remember(Undo undo);

  size_t row_floats_;
  std::unordered_map<uint64_t, std::vector<float>> rows_;
  std::map<uint64_t, uint32_t> clocks_;
  uint64_t commits_ = 0;
  std::deque<Undo> undo_;  // the last commits, newest last: each key's value before it
  std::vector<std::pair<uint64_t, uint32_t>> applied_twice_;
};

// A store over `rows` for one process (the batch protocol of storage/row_store.h: rows handed
// out by find_or_insert are kept only by commit()). `forget_clocks` (the forget_clocks fault
// site): committed_clocks() gives nothing, as a store that does not commit clocks, so the pushes
// a crash left unacknowledged are applied again when they are re-sent.
std::unique_ptr<RowStore> open_sim_store(std::shared_ptr<DurableRows> rows,
                                         bool forget_clocks = false);

}  // namespace colony::sim
