// The parameter-server shard as a pure state machine.
//
// A shard holds the rows (parameters plus optimizer state, created lazily from (key, seed))
// of the keys the shard map gives it, applies pushes with its optimizer, answers pulls, and
// gates pulls by the consistency model: a pull for step t is answered only when the slowest
// sender's clock is at least t - k (BSP: k = 0; ASP: not bounded), and in every model once
// the puller's own writes of step t - 1 have arrived (read-my-writes; see PullRequest::writer). Pulls that
// must wait are queued and answered, in arrival order, as soon as clocks allow.
//
// It takes messages and returns messages (into an Outbox): no threads, clocks, sockets or
// storage calls of its own. The driver (an actor, the simulator, a test) delivers messages
// and carries the outbox out.
//
// Pushes are idempotent: a push or clock advance whose clock is not above the sender's
// current clock is acknowledged without being applied (a retry), and one that skips a step is
// refused with PsError{out_of_order}. So no push is applied twice, and a lost one is noticed.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "ps/optimizer.h"
#include "ps/protocol.h"
#include "ps/row_init.h"
#include "ps/shard_map.h"
#include "storage/row_store.h"

namespace colony {

struct ShardConfig {
  NodeId id = 0;
  uint32_t shard_index = 0;  // this shard's number in the shard map
  size_t width = 1;          // parameters per row
  OptimizerConfig optimizer;
  RowInit init;
  Consistency consistency;
  std::vector<NodeId> senders;  // the cores whose pushes and clocks this shard waits for
  ShardMapSpec map;
  // A seeded fault site (FoundationDB's BUGGIFY) that only the simulator switches on: pulls
  // skip the consistency bound (read-my-writes still holds). Off everywhere else.
  bool fault_skip_consistency_gate = false;
};

struct ShardStats {
  uint64_t pulls_answered = 0;
  uint64_t pulls_deferred = 0;  // answered later than they arrived, because of the gate
  uint64_t pushes_applied = 0;
  uint64_t pushes_duplicate = 0;
  uint64_t pushes_reusing_pull_rows = 0;  // applied without looking the rows up again
  uint64_t rows_pulled = 0;
  uint64_t rows_pushed = 0;
  uint64_t stale_map_replies = 0;
};

class ShardCore {
 public:
  // Fails with invalid_input for a bad optimizer setting, an empty sender list, a shard
  // index outside the map, or a store whose rows are not width + optimizer state floats.
  // Without a store, rows are kept in memory (MemoryRowStore).
  static Expected<std::unique_ptr<ShardCore>> make(const ShardConfig& config,
                                                   std::unique_ptr<RowStore> store = nullptr);

  // Handles one message addressed to this shard; replies go to `out`.
  void on_message(const PsMessage& message, Outbox& out);

  // The slowest sender's clock (clock_done when all have finished).
  uint32_t min_clock() const { return min_clock_; }
  const ShardStats& stats() const { return stats_; }
  size_t rows() const { return store_->size(); }
  // The parameters of `key` (its initial row when never touched); size width.
  void row_value(uint64_t key, std::span<float> out) const;
  // Calls f(key, parameters) for every row held.
  template <class F>
  void for_each_row(F&& f) const {
    store_->for_each([&](uint64_t key, const float* row) { f(key, std::span<const float>(row, width_)); });
  }
  const ShardConfig& config() const { return config_; }

 private:
  ShardCore(const ShardConfig& config, std::unique_ptr<Optimizer> optimizer, ShardMap map,
            std::unique_ptr<RowStore> store);
  void on_pull(const PullRequest& r, Outbox& out);
  void on_push(const PushRequest& r, Outbox& out);
  void on_clock(const ClockAdvance& r, Outbox& out);
  // Accepts a new clock from a sender: false (with a PsError queued) if it is out of order or
  // from an unknown sender, and sets `duplicate` when it is a retry.
  bool advance(const MessageHeader& h, uint32_t clock, bool& duplicate, Outbox& out);
  bool stale(const MessageHeader& h, Outbox& out);
  // False (with a PsError queued) when a key does not belong to this shard under its map.
  bool owns_all(const MessageHeader& h, const std::vector<uint64_t>& keys, Outbox& out);
  bool may_answer(const PullRequest& r) const;
  void answer(const PullRequest& r, Outbox& out);
  void release_waiting(Outbox& out);
  float* row(uint64_t key);

  ShardConfig config_;
  std::unique_ptr<Optimizer> optimizer_;
  ShardMap map_;
  size_t width_;
  size_t state_;
  std::unique_ptr<RowStore> store_;
  std::unordered_map<NodeId, uint32_t> clocks_;
  uint32_t min_clock_ = 0;
  std::deque<PullRequest> waiting_;
  // The rows of recent pulls, by writer and step: a worker pushes exactly the keys it pulled,
  // in the same order, so the push can update those rows without looking them up again. A
  // push whose keys do not match (hash of the key sequence) is looked up key by key.
  struct AnsweredPull {
    uint32_t clock;
    uint64_t keys_hash;
    std::vector<float*> rows;
  };
  std::unordered_map<NodeId, std::deque<AnsweredPull>> answered_;
  static constexpr size_t answered_pulls_max = 8;  // per writer
  ShardStats stats_;
};

}  // namespace colony
