// Random batches for the model tests (tests/model_test.cpp, tests/cuda_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "common/hash.h"
#include "data/batch.h"

namespace colony::testing {

// Random rows from a small key pool so keys repeat within and across rows: 1..7 features a row
// with values in [-0.5, 1.5), keys of fields 0..3, `dense` dense features in [0, 2) a row, both
// labels.
inline Batch random_batch(uint64_t seed, size_t rows, size_t pool, uint32_t dense = 0) {
  SplitMix64 rng(seed);
  Batch b;
  std::vector<float> x(dense);
  for (size_t i = 0; i < rows; ++i) {
    for (float& v : x) v = static_cast<float>(rng.uniform() * 2.0);
    b.add_dense(x.data(), dense);
    const size_t n = 1 + rng.next() % 7;
    for (size_t f = 0; f < n; ++f) {
      const uint64_t key = make_key(static_cast<uint32_t>(rng.next() % 4), rng.next() % pool);
      const float value = static_cast<float>(rng.uniform() * 2.0 - 0.5);
      b.add_feature(key, value);
    }
    b.finish_row(rng.uniform() < 0.5 ? 1.0f : 0.0f);
  }
  return b;
}

}  // namespace colony::testing
