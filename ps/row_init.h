// Lazy, deterministic initialisation of model rows from (key, seed).
//
// A row is initialised the first time its key is touched, wherever that happens (a PS
// shard, the single-process trainer, an evaluator reading an unseen key): the result depends
// only on the key, the seed and the layout, so every place computes the same row.
#pragma once

#include <cstdint>
#include <span>

namespace colony {

struct RowInit {
  uint64_t seed = 0;
  // Entries [0, linear) start at zero (linear weights, biases); entries [linear, width) are
  // drawn uniformly with standard deviation `factor_std` (factorization-machine factors).
  size_t linear = 1;
  float factor_std = 0.01f;
};

// Fills `value` (the row's parameters) for `key`. The bias row (bias_key) is all zero.
void init_row(uint64_t key, const RowInit& init, std::span<float> value);

}  // namespace colony
