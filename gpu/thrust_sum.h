// The sparse and dense sums of gpu/reduce.h as device code, written once over Thrust algorithms
// and __host__ __device__ functors (gpu/thrust_sum_impl.h). g++ builds it against Thrust's CPP
// system in every build, so CI runs this very code; nvcc builds the same source for the GPU when
// CUDA is found (thrust_sum_cuda). Both follow Reducer::sum's contract, results bit for bit:
// keys in order of first appearance, a key's sum starting from its first contribution and adding
// the later ones in input order.
//
// Plain C++17 (no std::span): nvcc compiles this header too.
// Thread-safety: the functions keep no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace colony::gpu {

// One contribution: `count` unique keys and count x width floats.
struct SumInput {
  const uint64_t* keys = nullptr;
  const float* values = nullptr;
  size_t count = 0;
};

// Sums the inputs over identical keys into out_keys / out_values (replaced). Preconditions as
// Reducer::sum's (the caller checks them).
void thrust_sum_host(const SumInput* inputs, size_t n_inputs, size_t width,
                     std::vector<uint64_t>& out_keys, std::vector<float>& out_values);
// out = inputs[0] + inputs[1] + ... elementwise, in input order; every input has `n` floats.
void thrust_sum_dense_host(const float* const* inputs, size_t n_inputs, size_t n, float* out);

#ifdef COLONY_HAVE_CUDA
// The same on the current CUDA device (inputs and outputs in host memory, copied over).
void thrust_sum_cuda(const SumInput* inputs, size_t n_inputs, size_t width,
                     std::vector<uint64_t>& out_keys, std::vector<float>& out_values);
void thrust_sum_dense_cuda(const float* const* inputs, size_t n_inputs, size_t n, float* out);
#endif

}  // namespace colony::gpu
