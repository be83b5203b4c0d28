// The body of gpu/thrust_sum.h's functions, included by one translation unit per Thrust
// system: thrust_sum_host.cpp (g++, the CPP system) and thrust_sum_cuda.cu (nvcc, CUDA). That
// file defines COLONY_THRUST_SUM and COLONY_THRUST_SUM_DENSE as the functions' names.
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/gather.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include "gpu/thrust_group.h"
#include "gpu/thrust_sum.h"

namespace colony::gpu {

namespace {

// Output float o (row o / width, column o % width) of the sum: the rows of that key's
// contributions at positions[offset .. offset + count), added in that order.
struct SumRows {
  const float* values;
  const uint32_t* positions;  // the contributions' places in the inputs, by key, in input order
  const uint32_t* offsets;    // per distinct key (sorted), where its contributions start
  const uint32_t* counts;
  const uint32_t* order;  // output row -> distinct key (sorted index), first appearance first
  size_t width;
  __host__ __device__ float operator()(size_t o) const {
    const uint32_t s = order[o / width];
    const size_t c = o % width;
    const uint32_t begin = offsets[s], end = begin + counts[s];
    float sum = values[size_t{positions[begin]} * width + c];
    for (uint32_t j = begin + 1; j < end; ++j) sum += values[size_t{positions[j]} * width + c];
    return sum;
  }
};

}  // namespace

void COLONY_THRUST_SUM(const SumInput* inputs, size_t n_inputs, size_t width,
                       std::vector<uint64_t>& out_keys, std::vector<float>& out_values) {
  size_t total = 0;
  for (size_t i = 0; i < n_inputs; ++i) total += inputs[i].count;
  out_keys.clear();
  out_values.clear();
  if (total == 0) return;
  // Every contribution, in input order: its key and its place.
  thrust::device_vector<uint64_t> keys(total);
  thrust::device_vector<float> values(total * width);
  for (size_t i = 0, at = 0; i < n_inputs; at += inputs[i].count, ++i) {
    thrust::copy(inputs[i].keys, inputs[i].keys + inputs[i].count, keys.begin() + at);
    thrust::copy(inputs[i].values, inputs[i].values + inputs[i].count * width,
                 values.begin() + at * width);
  }
  // By key, each key's contributions in input order.
  thrust::device_vector<uint32_t> positions, counts, offsets;
  thrust::device_vector<uint64_t> distinct;
  const size_t m = group_by_key(keys, positions, distinct, counts, offsets);
  // Output order: by each key's first contribution.
  thrust::device_vector<uint32_t> first(m), order(m);
  thrust::gather(offsets.begin(), offsets.end(), positions.begin(), first.begin());
  thrust::sequence(order.begin(), order.end());
  thrust::sort_by_key(first.begin(), first.end(), order.begin());
  thrust::device_vector<uint64_t> sum_keys(m);
  thrust::gather(order.begin(), order.end(), distinct.begin(), sum_keys.begin());
  thrust::device_vector<float> sums(m * width);
  thrust::transform(
      thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(m * width),
      sums.begin(),
      SumRows{thrust::raw_pointer_cast(values.data()), thrust::raw_pointer_cast(positions.data()),
              thrust::raw_pointer_cast(offsets.data()), thrust::raw_pointer_cast(counts.data()),
              thrust::raw_pointer_cast(order.data()), width});
  out_keys.resize(m);
  out_values.resize(m * width);
  thrust::copy(sum_keys.begin(), sum_keys.end(), out_keys.begin());
  thrust::copy(sums.begin(), sums.end(), out_values.begin());
}

void COLONY_THRUST_SUM_DENSE(const float* const* inputs, size_t n_inputs, size_t n, float* out) {
  if (n_inputs == 0 || n == 0) return;
  thrust::device_vector<float> sum(inputs[0], inputs[0] + n), next(n);
  for (size_t i = 1; i < n_inputs; ++i) {
    thrust::copy(inputs[i], inputs[i] + n, next.begin());
    thrust::transform(sum.begin(), sum.end(), next.begin(), sum.begin(), thrust::plus<float>());
  }
  thrust::copy(sum.begin(), sum.end(), out);
}

}  // namespace colony::gpu
