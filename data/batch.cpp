#include "data/batch.h"

#include "common/status.h"

namespace colony {

void Batch::add_dense(const float* x, uint32_t count) {
  if (labels.empty() && dense.empty()) dense_dim = count;
  COLONY_ASSERT(count == dense_dim, "a row with {} dense features in a batch of {}", count,
                dense_dim);
  dense.insert(dense.end(), x, x + count);
}

void Batch::append_rows(const Batch& from, size_t first, size_t n) {
  COLONY_ASSERT(first + n <= from.rows(), "rows {}..{} of a batch of {}", first, first + n,
                from.rows());
  if (empty()) dense_dim = from.dense_dim;
  COLONY_ASSERT(dense_dim == from.dense_dim, "dense_dim {} != {}", dense_dim, from.dense_dim);
  const uint32_t begin = from.offsets[first], end = from.offsets[first + n];
  const uint32_t base = offsets.back();
  labels.insert(labels.end(), from.labels.begin() + static_cast<ptrdiff_t>(first),
                from.labels.begin() + static_cast<ptrdiff_t>(first + n));
  for (size_t i = 1; i <= n; ++i) offsets.push_back(base + from.offsets[first + i] - begin);
  keys.insert(keys.end(), from.keys.begin() + begin, from.keys.begin() + end);
  values.insert(values.end(), from.values.begin() + begin, from.values.begin() + end);
  dense.insert(dense.end(), from.dense.begin() + static_cast<ptrdiff_t>(first * dense_dim),
               from.dense.begin() + static_cast<ptrdiff_t>((first + n) * dense_dim));
}

}  // namespace colony
