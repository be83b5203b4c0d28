// Random sparse gradients for the reducer tests (tests/reduce_test.cpp, tests/cuda_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "common/hash.h"
#include "gpu/reduce.h"

namespace colony::testing {

// Random contributions over a small key space, so that keys overlap across inputs; some
// inputs are empty. Values are spread over magnitudes so that summation order shows.
inline std::vector<SparseGrads> random_inputs(uint64_t seed, size_t width) {
  SplitMix64 rng(seed);
  const size_t n_inputs = 1 + rng.next() % 8;
  const uint64_t key_space = 1 + rng.next() % 3000;
  std::vector<SparseGrads> inputs(n_inputs);
  for (auto& in : inputs) {
    const size_t n = rng.next() % 4 == 0 ? 0 : rng.next() % 2000;
    std::vector<bool> taken(key_space);
    for (size_t j = 0; j < n; ++j) {
      const uint64_t id = rng.next() % key_space;
      if (taken[id]) continue;
      taken[id] = true;
      in.keys.push_back(make_key(static_cast<uint32_t>(id % 7), mix64(id)));
      for (size_t w = 0; w < width; ++w) {
        const double mag = (rng.uniform() - 0.5) * (rng.next() % 2 ? 1e6 : 1e-3);
        in.values.push_back(static_cast<float>(mag));
      }
    }
  }
  return inputs;
}

}  // namespace colony::testing
