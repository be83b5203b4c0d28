// One node of the dense all-reduce tree (ps/protocol.h DenseReduce), as a pure state machine:
// what a node aggregator does with a deep model's dense gradients.
//
// A tree node has ordered children (a node aggregator's worker replicas; at the root, also the
// other aggregators, after its own replicas) and, unless it is the root, a parent (the root
// aggregator). Each child sends DenseReduce for the steps it contributes to, in increasing
// order, then DenseReduce{clock_done} when it has finished. The lowest pending step is ready
// once every child has sent it or finished; the node then sums the contributions in child order
// (Reducer::sum_dense, in memory) and sends the sum up, or, at the root, broadcasts it to the
// children that contributed. A broadcast from the parent goes down to the children that
// contributed to that step. When every child has finished, the node sums the children's final
// contributions (the parameters under parameter averaging; nothing when the job all-reduces
// gradients) and ends the same way.
//
// Errors: a message that breaks the protocol (from a node that is not a child or the parent, a
// step out of order or after finishing, values of the wrong size, a broadcast nobody waits for)
// is reported with a Status naming it and changes nothing; the owner stops on it. These messages
// are checked for sender and shape by the drivers before they get here, so an error is a bug or
// a lie from a listed key, not noise.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "gpu/reduce.h"
#include "ps/protocol.h"

namespace colony {

struct DenseTreeConfig {
  NodeId id = 0;
  size_t params = 0;             // floats in a contribution (the model's dense_params())
  std::vector<NodeId> children;  // in summation order; at least one, no repeats
  std::optional<NodeId> parent;  // none at the root
};

class DenseTree {
 public:
  // Fails with invalid_input for no children, a repeated child, or params == 0. `reducer` sums
  // the contributions and must outlive the tree.
  static Expected<DenseTree> make(const DenseTreeConfig& config, Reducer& reducer);

  // A DenseReduce from a child (`map_version` is stamped on what this node sends).
  Status on_reduce(const DenseReduce& m, uint64_t map_version, Outbox& out);
  // A DenseBroadcast from the parent.
  Status on_broadcast(const DenseBroadcast& m, uint64_t map_version, Outbox& out);

  // Every child has finished, the final contributions went up (or out, at the root) and no
  // broadcast is still due from the parent.
  bool done() const { return final_sent_ && waiting_.empty(); }
  uint64_t steps_reduced() const { return steps_reduced_; }

 private:
  struct Contribution {
    uint64_t samples = 0;
    std::vector<float> values;
  };
  DenseTree(const DenseTreeConfig& config, Reducer& reducer);
  void flush(uint64_t map_version, Outbox& out);
  // Sums the contributions present (child order) and sends the result up or broadcasts it.
  void reduce(uint32_t step, std::vector<std::optional<Contribution>>& slots, uint64_t map_version,
              Outbox& out);

  DenseTreeConfig config_;
  Reducer* reducer_;
  std::unordered_map<NodeId, size_t> child_index_;
  std::vector<int64_t> child_last_;  // last step each child sent (-1: none)
  std::vector<bool> child_done_;
  std::map<uint32_t, std::vector<std::optional<Contribution>>> pending_;  // step -> by child
  std::vector<std::optional<Contribution>> final_;                        // clock_done's
  std::map<uint32_t, std::vector<size_t>> waiting_;  // step -> contributors, until broadcast
  bool final_sent_ = false;
  uint64_t next_request_ = 1;
  uint64_t steps_reduced_ = 0;
  std::vector<float> sum_;
};

}  // namespace colony
