// The grouping step the device code's sums share (gpu/thrust_sum_impl.h, gpu/fm_pass_impl.h):
// contributions tagged by key, grouped by key with each key's contributions kept in the order
// they were made. Included by the *_impl.h files, once per Thrust system; plain C++17.
#pragma once

#include <thrust/device_vector.h>
#include <thrust/iterator/constant_iterator.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <cstddef>
#include <cstdint>

namespace colony::gpu {

// `keys` holds contribution p's key at p (it is sorted in place). Afterwards: positions[j] is a
// contribution, grouped by key in increasing key order, each key's contributions in increasing
// p (a stable sort); distinct[0..m), counts[0..m) and starts[0..m) are each key, its number of
// contributions and where they start in positions. Returns m. The vectors are resized.
template <class Key>
size_t group_by_key(thrust::device_vector<Key>& keys, thrust::device_vector<uint32_t>& positions,
                    thrust::device_vector<Key>& distinct, thrust::device_vector<uint32_t>& counts,
                    thrust::device_vector<uint32_t>& starts) {
  const size_t n = keys.size();
  positions.resize(n);
  thrust::sequence(positions.begin(), positions.end());
  thrust::stable_sort_by_key(keys.begin(), keys.end(), positions.begin());
  distinct.resize(n);
  counts.resize(n);
  const auto ends =
      thrust::reduce_by_key(keys.begin(), keys.end(), thrust::constant_iterator<uint32_t>(1),
                            distinct.begin(), counts.begin());
  const size_t m = size_t(ends.first - distinct.begin());
  starts.resize(m);
  thrust::exclusive_scan(counts.begin(), counts.begin() + m, starts.begin());
  return m;
}

}  // namespace colony::gpu
