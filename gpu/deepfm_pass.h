// DeepFM's forward and backward pass as device code (the CUDA compute backend's deep model),
// written once over Thrust algorithms, __host__ __device__ functors and one matrix product
// (gpu/deepfm_pass_impl.h). g++ builds it against Thrust's CPP system with OpenBLAS's sgemm in
// every build, so CI runs this very code; nvcc builds the same source for the GPU, with cuBLAS's
// products, when CUDA is found.
//
// What it computes is models/deep.cpp's DeepFM, z = FM(x) + MLP([e_1 .. e_F, dense]):
//   1. per sample: the FM logit (gpu/fm_functors.h, as the FM pass), and the MLP's input, each
//      field's embedding pooled from the rows of the sample's features of that field (the gather
//      is fused: rows are read through the slots), then the dense features;
//   2. the MLP: per layer, the bias, one product, and ReLU after every layer but the last;
//   3. per sample: the logit, its log loss and gradient; backward through the MLP (two products
//      and the bias's column sums a layer);
//   4. the sparse gradients: every (sample, slot) contribution of the FM part and of the pooled
//      embeddings, grouped by slot (deduplication) and summed per (slot, float) in sample order.
// In the host build the results equal the CPU model's bit for bit (the same operations in the
// same order, the same sgemm calls). On a GPU they differ by rounding (fused multiply-adds, the
// device's exp and log1p, cuBLAS's order of summation; with bf16 products, inputs rounded to 8
// bits of mantissa), which tests/cuda_test.cpp bounds.
//
// Plain C++17 (no std::span): nvcc compiles this header too.
// Thread-safety: a pass keeps device workspaces between calls; one thread uses it at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/fm_pass.h"

namespace colony::gpu {

// One fully connected layer of the MLP, y = x W + b, as models/layers.h's Linear: W (in x out,
// row-major) at params[w], b at params[b].
struct DeepFmLayer {
  size_t in = 0, out = 0, w = 0, b = 0;
};

struct DeepFmShape {
  size_t dim = 0;                   // embedding floats; rows are [w, v_1 .. v_dim]
  size_t fields = 0;                // pooled embeddings per sample
  size_t dense = 0;                 // dense features per sample
  std::vector<DeepFmLayer> layers;  // from fields * dim + dense inputs to 1 output
  size_t params = 0;                // dense parameters in all
};

// The field of a feature that has none: a dense feature's row in DeepFmBatch::fm.
inline constexpr uint32_t no_field = 0xFFFFFFFFu;

// A batch as DeepFM sees it: the FM part's view (each sample's dense features as rows of their
// own, then its features), and for each of that view's features its field, or no_field for a
// dense feature's row; the dense features (samples x dense).
struct DeepFmBatch {
  FmBatch fm;
  const uint32_t* fields = nullptr;  // fm.offsets[fm.samples]
  const float* dense = nullptr;      // fm.samples x dense
};

// How the device multiplies matrices (the host build always multiplies in fp32).
enum class DeviceProducts : uint8_t {
  fp32,  // cuBLAS in fp32
  bf16,  // cuBLAS with bf16 inputs on tensor cores, fp32 accumulation and results
};

class DeepFmPass {
 public:
  virtual ~DeepFmPass() = default;
  // Writes each sample's logit to `logits` when not null. When `grads` is not null (n_slots x
  // (1 + dim) floats) and `dense_grads` (shape.params floats), adds the batch's summed log-loss
  // gradients to them and returns the summed loss (0 otherwise). `params` holds the MLP's
  // shape.params parameters. Preconditions (the caller's): every slot < n_slots, every field
  // < shape.fields, labels in {0, 1}.
  //
  // A CUDA or cuBLAS error (no memory left on the device, a lost device) ends the process with
  // its message: a model's pass has no way to fail.
  virtual double run(const DeepFmBatch& batch, const float* rows, const float* params, float* grads,
                     float* dense_grads, float* logits) = 0;
};

// The host build (Thrust's CPP system, OpenBLAS).
std::unique_ptr<DeepFmPass> make_deepfm_pass_host(const DeepFmShape& shape);
// On CUDA device `device` (made current on every call, from whichever thread calls); nullptr in
// a build without CUDA. Precondition: check_device (gpu/device.h) accepted the device.
std::unique_ptr<DeepFmPass> make_deepfm_pass_cuda(const DeepFmShape& shape, int device,
                                                  DeviceProducts products);

}  // namespace colony::gpu
