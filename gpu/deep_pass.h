// The deep models' forward and backward pass as device code (the CUDA compute backend's DeepFM,
// DLRM and DCN-v2), written once over Thrust algorithms, __host__ __device__ functors and one
// matrix product (gpu/deep_pass_impl.h). g++ builds it against Thrust's CPP system with OpenBLAS's
// sgemm in every build, so CI runs this very code; nvcc builds the same source for the GPU, with
// cuBLAS's products, when CUDA is found.
//
// What it computes is models/deep.cpp's models:
//   - DeepFM, z = FM(x) + MLP([e_1 .. e_F, dense]): per sample the FM logit (gpu/fm_functors.h,
//     as the FM pass) and the MLP's input, each field's embedding pooled from the rows of the
//     sample's features of that field (the gather is fused: rows are read through the slots),
//     then the dense features;
//   - DLRM, z = bias + top([bottom(dense), dots]): the bottom MLP over the dense features, the
//     pooled embeddings beside its output, the dot product of every pair of those vectors (one
//     functor call a sample), the top MLP over the bottom's output and the dots;
//   - DCN-v2, z = bias + head([cross(x0), tower(x0)]) over x0 = [e_1 .. e_F, dense]: the cross
//     layers x_{l+1} = x0 (x_l W_l + b_l) + x_l (a product and an elementwise functor each),
//     the deep tower beside them, a linear head;
// then per sample the log loss and the logit's gradient, backward through the layers (per layer
// two products and the bias's column sums), and the sparse gradients: every (sample, slot)
// contribution (DeepFM's FM part, the pooled embeddings', the bias's) grouped by slot
// (deduplication) and summed per (slot, float) in sample order.
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

// One fully connected layer, y = x W + b, as models/layers.h's Linear: W (in x out, row-major)
// at params[w], b at params[b].
struct DeepLayer {
  size_t in = 0, out = 0, w = 0, b = 0;
};

enum class DeepKind : uint8_t { deepfm, dlrm, dcn };

struct DeepShape {
  DeepKind kind = DeepKind::deepfm;
  size_t dim = 0;  // embedding floats (DeepFM's rows are [w, v_1 .. v_dim], the others' [v_1 ..])
  size_t fields = 0;  // pooled embeddings per sample
  size_t dense = 0;   // dense features per sample
  // DeepFM: the MLP from fields * dim + dense inputs to the logit. DLRM: the top MLP to the
  // logit. Both with ReLU after every layer but the last. DCN-v2: the deep tower from
  // fields * dim + dense inputs, ReLU after every layer; may be empty.
  std::vector<DeepLayer> mlp;
  // DLRM: the bottom MLP from the dense features to dim floats, ReLU after every layer; empty
  // without dense features.
  std::vector<DeepLayer> bottom;
  // DCN-v2: the cross layers (fields * dim + dense square), and the linear head from the cross
  // output and the tower's to the logit.
  std::vector<DeepLayer> cross;
  DeepLayer head;
  size_t params = 0;  // dense parameters in all
};

// The field of a feature that has none: a dense feature's row in DeepFM's view.
inline constexpr uint32_t no_field = 0xFFFFFFFFu;

// A batch as the model sees it: its features (DeepFM: the FM part's view, each sample's dense
// features as rows of their own first; DLRM and DCN-v2: the batch's own), each feature's field
// (no_field for a dense feature's row), and the dense features (samples x dense).
struct DeepBatch {
  FmBatch features;
  const uint32_t* fields = nullptr;  // features.offsets[features.samples]
  const float* dense = nullptr;      // features.samples x dense
};

// How the device multiplies matrices (the host build always multiplies in fp32).
enum class DeviceProducts : uint8_t {
  fp32,  // cuBLAS in fp32
  bf16,  // cuBLAS with bf16 inputs on tensor cores, fp32 accumulation and results
};

class DeepPass {
 public:
  virtual ~DeepPass() = default;
  // Writes each sample's logit to `logits` when not null. When `grads` is not null (n_slots
  // rows of the model's width) and `dense_grads` (shape.params floats), adds the batch's summed
  // log-loss gradients to them and returns the summed loss (0 otherwise). `params` holds the
  // shape.params dense parameters. Preconditions (the caller's): every slot < n_slots, every
  // field < shape.fields or no_field, labels in {0, 1}.
  //
  // A CUDA or cuBLAS error (no memory left on the device, a lost device) ends the process with
  // its message: a model's pass has no way to fail.
  virtual double run(const DeepBatch& batch, const float* rows, const float* params, float* grads,
                     float* dense_grads, float* logits) = 0;
};

// The host build (Thrust's CPP system, OpenBLAS).
std::unique_ptr<DeepPass> make_deep_pass_host(const DeepShape& shape);
// On CUDA device `device` (made current on every call, from whichever thread calls); nullptr in
// a build without CUDA. Precondition: check_device (gpu/device.h) accepted the device.
std::unique_ptr<DeepPass> make_deep_pass_cuda(const DeepShape& shape, int device,
                                              DeviceProducts products);

}  // namespace colony::gpu
