// The node aggregator of hierarchical push, as a pure state machine.
//
// The worker replicas of one node send it their step's summed sparse gradients (a
// PushRequest each, acknowledged at once). When every replica still training has sent step t,
// the aggregator sums the contributions over identical keys (through a gpu/ Reducer: CPU now,
// NCCL later) and sends one push per shard for the whole group, with clock t + 1 under its own
// node id: the shards count the group as one sender. When every replica has finished, the
// aggregator tells every shard it is done.
//
// Pulls go the same way: each replica sends its step's keys (a PullRequest), and when every
// replica still training has asked for step t the aggregator pulls the union of their keys,
// each key once, with one pull per shard (writer: itself, so the shards' consistency gate
// holds for the whole node), and answers each replica with its own rows in its own key order.
//
// With a deep model the aggregator is also a node of the dense all-reduce tree (DenseTree): its
// replicas' DenseReduce messages go up through it and the root's DenseBroadcast comes down.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "gpu/reduce.h"
#include "ps/protocol.h"
#include "storage/key_index.h"
#include "worker/dense_tree.h"
#include "worker/kv_client.h"

namespace colony {

struct AggregatorConfig {
  NodeId id = 0;
  size_t width = 1;
  ShardMapSpec map;
  std::vector<NodeId> shard_nodes;              // node id of shard i of the map
  std::vector<NodeId> replicas;                 // the workers whose gradients this node sums
  bool durable_shards = false;                  // as WorkerConfig::durable_shards
  ValueFormat push_format = ValueFormat::fp32;  // of its pushes (KvClient::Options)
  size_t part_bytes = part_bytes_default;       // its messages' largest part (KvClient::Options)
  ValueFormat pull_format = ValueFormat::fp32;  // of the replies to its pulls (KvClient::Options)
  uint64_t error_feedback_rows = 0;             // of its pushes (KvClient::Options)
  // A deep model's dense all-reduce (worker/dense_tree.h), when dense_params > 0: this node
  // sums its replicas' dense gradients and sends them to `dense_root`, or, being the root (no
  // dense_root), also sums those of the other aggregators, `dense_peers`, and broadcasts.
  size_t dense_params = 0;
  std::optional<NodeId> dense_root{};
  std::vector<NodeId> dense_peers{};
};

struct AggregatorStats {
  uint64_t steps_pushed = 0;
  uint64_t contributions = 0;
  uint64_t push_messages = 0;  // pushes and clock advances sent to shards
  uint64_t push_bytes = 0;
  uint64_t replies_dropped = 0;  // shard replies that answered no open request (KvClient)
  uint64_t dense_steps = 0;      // dense all-reduce rounds this node summed
  uint64_t pull_messages = 0;    // pulls sent to shards (re-sends under a new map included)
  uint64_t keys_requested = 0;   // keys the replicas asked for, summed over replicas
  uint64_t keys_pulled = 0;      // of those, the distinct keys per step the shards were asked
  // Dense all-reduce messages from other aggregators that broke the protocol (a step out of
  // order, a wrong size, a broadcast not waited for, any for a model without dense layers):
  // dropped, changing nothing.
  uint64_t dense_refused = 0;
};

class AggregatorCore {
 public:
  // Fails with invalid_input for no replicas, a bad map or shard list, or a bad dense tree.
  static Expected<std::unique_ptr<AggregatorCore>> make(const AggregatorConfig& config,
                                                        std::unique_ptr<Reducer> reducer);
  void on_message(const PsMessage& message, Outbox& out);
  // As WorkerCore::on_shards_restarted.
  void on_shards_restarted(const std::vector<NodeId>& nodes, Outbox& out);
  // Every replica finished, every step pushed and acknowledged, every pull answered.
  bool done() const {
    return done_sent_ && (!dense_ || dense_->done()) && pulls_.empty() &&
           std::all_of(push_tickets_.begin(), push_tickets_.end(),
                       [&](auto t) { return kv_->done(t); });
  }
  const Status& error() const { return error_; }
  const AggregatorStats& stats() const { return stats_; }
  // Why the last dense message counted in stats().dense_refused was refused (ok if none was).
  const Status& last_refusal() const { return last_refusal_; }
  uint64_t pushes_resent() const { return kv_->pushes_resent(); }
  uint64_t pull_bytes() const { return kv_->pull_bytes(); }  // KvClient::pull_bytes

 private:
  AggregatorCore(const AggregatorConfig& config, std::unique_ptr<KvClient> kv,
                 std::unique_ptr<Reducer> reducer);
  Status make_dense_tree();
  void flush(Outbox& out);
  // A replica's pull: kept until every replica still training has asked for its step.
  void on_pull(const PullRequest& m, Outbox& out);
  // Pulls the steps every replica still training has asked for; answers the pulls done.
  void serve_pulls(Outbox& out);
  // A DenseReduce or DenseBroadcast: to the dense tree, or refused.
  void on_dense(const PsMessage& message, Outbox& out);
  void refuse_dense(NodeId sender, Status s);
  void fail(Status s) {
    if (error_.ok()) error_ = std::move(s);
  }

  AggregatorConfig config_;
  std::unique_ptr<KvClient> kv_;  // pushes to the shards
  std::unique_ptr<Reducer> reducer_;
  std::optional<DenseTree> dense_;
  std::unordered_map<NodeId, size_t> replica_index_;
  std::vector<uint32_t> replica_clock_;  // steps received from each replica
  std::vector<bool> replica_done_;
  std::map<uint32_t, std::vector<std::optional<SparseGrads>>> pending_;  // step -> per replica
  // One step's pull for the node. Its keys and values stay put while the pull is out.
  struct NodePull {
    std::vector<std::optional<PullRequest>> asked;  // per replica
    bool sent = false;
    KvClient::Ticket ticket = 0;
    std::vector<uint64_t> keys;                 // distinct keys of the step
    std::vector<float> values;                  // keys.size() x width
    uint32_t min_clock = clock_done;            // the stalest shard's, as its replies arrive
    std::vector<std::vector<uint32_t>> places;  // per replica: its keys' indices in `keys`
    bool whole = false;  // one replica asked: `keys` are its keys, `values` its rows
  };
  std::map<uint32_t, NodePull> pulls_;  // step -> the node's pull
  KeyIndex index_;  // key -> its place in a NodePull's keys (no allocation a key)
  uint32_t next_step_ = 0;
  std::vector<KvClient::Ticket> push_tickets_;  // not yet acknowledged by every shard
  bool done_sent_ = false;
  SparseGrads sum_;
  Status error_;
  Status last_refusal_;
  AggregatorStats stats_;
};

}  // namespace colony
