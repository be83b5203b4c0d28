// Gradient reduction: summing several workers' (or several micro-batches') sparse gradients
// over the keys they share, and dense vectors elementwise, behind a device interface. The CPU
// backend is here, and the Thrust code of the CUDA backend built for the host; NCCL will
// implement the same contract, results included bit for bit.
//
// Thread-safety: a Reducer keeps scratch state between calls; one thread uses it at a time.
// Different Reducers are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace colony {

// One contribution: keys (unique within the contribution, any order) and their gradients,
// `width` floats per key, row-major: the gradient of keys[i] is values[i*width, (i+1)*width).
struct SparseGrads {
  std::vector<uint64_t> keys;
  std::vector<float> values;
};

class Reducer {
 public:
  virtual ~Reducer() = default;
  // The backend, for logs: "cpu".
  virtual const char* name() const = 0;

  // Sums the contributions over identical keys into `out`, which is cleared first (its
  // capacity is kept, so a reused `out` stops allocating once it is large enough).
  //
  // Output order is deterministic: keys in order of first appearance scanning the inputs in
  // order (inputs[0]'s keys first, in their order, then the keys of inputs[1] not seen yet,
  // ...). A key's sum starts from its first contribution's values and adds the later ones in
  // input order, so results are bit for bit the same on every run and every backend.
  //
  // Preconditions (asserted, they are bugs in the caller): width >= 1; every input non-null,
  // not `out` itself, with values.size() == keys.size() * width and no key twice; fewer than
  // 2^32 keys in all.
  virtual void sum(std::span<const SparseGrads* const> inputs, size_t width, SparseGrads& out) = 0;

  // Dense reduction, the in-memory step of the dense all-reduce (ps/protocol.h DenseReduce):
  // out = inputs[0] + inputs[1] + ... elementwise, starting from inputs[0]'s values and adding
  // the later ones in input order, so results are bit for bit the same on every run and every
  // backend (one input is copied exactly).
  // Preconditions (asserted): at least one input; every input has out.size() floats and does not
  // overlap `out`.
  virtual void sum_dense(std::span<const std::span<const float>> inputs, std::span<float> out) = 0;
};

// The CPU backend. Its key index is an open-addressing table kept across calls and grown to
// twice the largest total key count seen, so a warmed-up reducer allocates nothing.
std::unique_ptr<Reducer> make_cpu_reducer();

// The CUDA backend's sums (gpu/thrust_sum.h, Thrust algorithms) built for the host: the same
// results as make_cpu_reducer()'s, bit for bit; slower on a CPU (it sorts instead of hashing),
// it is here so that CI runs and tests the device code. A key twice within one input is not
// caught (it is summed).
std::unique_ptr<Reducer> make_thrust_host_reducer();

}  // namespace colony
