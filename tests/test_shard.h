// The small shard the store, recovery and core tests share: one shard of a one-shard map,
// rows of width 3 under Adagrad (3 more floats of state), one sender (node 7).
#pragma once

#include "ps/optimizer.h"
#include "ps/shard_core.h"

namespace colony::testing {

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
