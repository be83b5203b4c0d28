// The forward and backward pass of LR and FM as device code (the CUDA compute backend's sparse
// models), written once over Thrust algorithms and __host__ __device__ functors
// (gpu/fm_pass_impl.h). g++ builds it against Thrust's CPP system in every build, so CI runs this
// very code; nvcc builds the same source for the GPU when CUDA is found.
//
// What it computes is models/model.h's Model::forward_backward for LR and FM, over the batch as
// those models see it (dense features first, then sparse ones, each a slot and a value):
//   1. per sample (one functor call each): the logit from the gathered rows of its slots (the
//      gather is fused into the pass: rows are read through the slots), the per-dimension sums
//      the FM gradient needs, the log loss and the logit's gradient;
//   2. the sparse gradients: every (sample, slot) contribution, and one bias contribution per
//      sample for slot 0, stably sorted by slot (deduplication), then a segmented reduction per
//      (slot, float): each slot's gradient adds its contributions in sample order to what the
//      gradient held.
// In the host build the results equal the CPU model's bit for bit (the same operations in the
// same order); on a GPU they differ by rounding only (nvcc fuses multiply-adds, and the device's
// exp and log1p round differently), which tests/cuda_test.cpp bounds.
//
// Plain C++17 (no std::span): nvcc compiles this header too.
// Thread-safety: an FmPass keeps device workspaces between calls; one thread uses it at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace colony::gpu {

// A batch in host memory, in CSR form: sample i's features are [offsets[i], offsets[i + 1]),
// each a slot (a row of `rows`) and a value.
struct FmBatch {
  size_t samples = 0;
  const float* labels = nullptr;      // samples
  const uint32_t* offsets = nullptr;  // samples + 1, offsets[0] = 0
  const uint32_t* slots = nullptr;    // offsets[samples]
  const float* values = nullptr;      // offsets[samples]
  size_t n_slots = 0;                 // rows: n_slots x (1 + dim)
};

class FmPass {
 public:
  virtual ~FmPass() = default;
  // dim == 0: LR (rows of one float); dim >= 1: FM (rows [w, v_1 .. v_dim]). Slot 0's first
  // float is the bias. Writes each sample's logit to `logits` when not null; when `grads` is not
  // null (n_slots x (1 + dim) floats), adds the summed gradient of the batch's log loss to it and
  // returns the summed log loss (0 otherwise). Preconditions (the caller's, asserted where
  // cheap): every slot < n_slots, labels in {0, 1}.
  //
  // A CUDA error (no memory left on the device, a lost device) ends the process with CUDA's
  // message: a model's pass has no way to fail.
  virtual double run(const FmBatch& batch, size_t dim, const float* rows, float* grads,
                     float* logits) = 0;
};

// The host build (Thrust's CPP system).
std::unique_ptr<FmPass> make_fm_pass_host();
// On CUDA device `device` (made current on every call, from whichever thread calls); nullptr in
// a build without CUDA. Precondition: check_device (gpu/device.h) accepted the device.
std::unique_ptr<FmPass> make_fm_pass_cuda(int device);

}  // namespace colony::gpu
