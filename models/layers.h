// Dense layers of deep CTR models (DeepFM, DLRM, DCN-v2): forward and backward passes over a
// batch held as row-major fp32 matrices, one row per sample (n rows).
//
// Parameters: all dense parameters of a model live in ONE flat float vector, so that a whole
// model's dense part is initialised, all-reduced, updated and checkpointed as one buffer.
// Gradients live in a parallel vector of the same size. A layer holds only offsets into it,
// handed out by a ParamLayout when the model is built; the same offsets index both vectors.
//
// Contracts shared by every layer here:
// - Pointers are not owned and must stay valid for the call only. Shapes are not checked
//   against buffer sizes (raw pointers carry none): `params` and `grads` must cover the
//   layout the layer was made from, and each matrix argument must hold the floats its
//   comment says. Output buffers must not overlap inputs.
// - backward() ADDS parameter gradients to `grads` (so a batch split into pieces, or a
//   layer used twice, sums its gradients) and OVERWRITES input gradients (dx, dx0).
// - Everything is deterministic: the same inputs give bit-identical outputs. Matrix
//   products go through cblas_sgemm, which is deterministic for a fixed BLAS library, CPU
//   and BLAS thread count, but not across thread counts: OpenBLAS 0.3.21 gives different
//   last bits at 1 and 2 threads, even for a 5-row batch. Its thread count defaults to the
//   number of cores (OPENBLAS_NUM_THREADS overrides it), so runs that must match bit for bit
//   on different machines need the same setting. Nothing here starts threads of its own
//   (a deep model split among threads does: models/model.h, ModelSpec::compute_threads).
// - Nothing allocates per sample. Layers with workspaces (Mlp, CrossNet) grow them to the
//   largest batch seen and reuse them; such a layer is therefore not thread-safe (one
//   instance per thread), while a Linear or DotInteraction is immutable and may be shared.
// - Failures: there are no operating errors here. A broken precondition that can be seen
//   (a zero or over-large dimension, a backward() whose batch size is not that of the last
//   forward(), a short parameter span in init()) is a COLONY_ASSERT failure, which aborts
//   with the values involved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace colony::nn {

// The largest matrix dimension (batch rows, layer widths) a layer accepts: cblas_sgemm takes
// its sizes and leading dimensions as int.
inline constexpr size_t dim_max = static_cast<size_t>(std::numeric_limits<int>::max());

// Makes the process's BLAS compute each matrix product on the thread that asks for it (for
// callers that split the work among threads themselves: ModelSpec::compute_threads). Changes
// the last bits of products that ran on several BLAS threads before (see above).
void single_threaded_blas();

// Hands out consecutive ranges of the flat parameter vector, in the order layers are made.
class ParamLayout {
 public:
  // Reserves `count` floats (count >= 1) and returns the offset of the first.
  size_t add(size_t count);
  // Floats reserved so far: the size the parameter and gradient vectors must have.
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

// A fully connected layer: y = x W + b. x: n x in, W: in x out (row-major), b: out,
// y: n x out. W is stored at params[w], b at params[b] (W first, then b, contiguous).
struct Linear {
  size_t in = 0, out = 0, w = 0, b = 0;  // w, b: offsets into params

  // Reserves in * out + out floats. Precondition: 1 <= in, out <= dim_max.
  static Linear make(ParamLayout& layout, size_t in, size_t out);
  size_t param_count() const { return in * out + out; }
  // Writes W ~ uniform(-sqrt(6 / (in + out)), +sqrt(6 / (in + out))) (Glorot) and b = 0, a
  // pure function of `seed` and the offset w, so the layers of one layout all initialised
  // with one seed still differ. Precondition: params.size() >= b + out.
  void init(std::span<float> params, uint64_t seed) const;
  // y = x W + b (n x out). n == 0 does nothing. Precondition: n <= dim_max.
  void forward(const float* params, const float* x, size_t n, float* y) const;
  // Given x (n x in) of the forward pass and dy = dL/dy (n x out): adds dL/dW = x^T dy and
  // dL/db = column sums of dy to grads[w..], grads[b..]; writes dL/dx = dy W^T (n x in) to
  // dx unless dx is nullptr.
  void backward(const float* params, const float* x, const float* dy, size_t n, float* grads,
                float* dx) const;
  // Multiply-adds times two of one sample's forward pass (the backward pass costs twice it).
  size_t flops_per_sample() const { return 2 * in * out; }
};

// A multilayer perceptron: Linear layers with ReLU between them. The last layer is followed
// by no activation when `last_linear` (a logit head), else by ReLU too (DLRM's bottom MLP and
// towers that feed another layer). It keeps the activations of its last forward pass in a
// workspace it owns, so backward needs no recomputation. A default-constructed Mlp is a
// placeholder to assign a make() result to; calling it is a bug (asserted).
class Mlp {
 public:
  // sizes = {in, h1, ..., out}: at least two entries, each in [1, dim_max]. Reserves the
  // layers' parameters in order.
  static Mlp make(ParamLayout& layout, std::vector<size_t> sizes, bool last_linear);
  // Initialises every layer with Linear::init(params, seed).
  void init(std::span<float> params, uint64_t seed) const;
  // Runs the batch x (n x in()) and returns its output (n x out()), which lives in this Mlp
  // and stays valid until the next forward(). n == 0 returns nullptr.
  const float* forward(const float* params, const float* x, size_t n);
  // Backward pass of the LAST forward(), which must have had the same params, x and n (the
  // latter asserted): adds the parameter gradients of L to grads, given dy = dL/dy
  // (n x out()), and writes dL/dx (n x in()) to dx unless dx is nullptr.
  void backward(const float* params, const float* x, const float* dy, size_t n, float* grads,
                float* dx);
  size_t in() const { return layers_.front().in; }
  size_t out() const { return layers_.back().out; }
  bool last_linear() const { return last_linear_; }
  const std::vector<Linear>& layers() const { return layers_; }
  // Flops (multiply-adds times two) of one sample's forward pass; a training step (forward
  // and both backward products) costs three times as much.
  size_t flops_per_sample() const;

 private:
  bool relu_after(size_t layer) const { return !last_linear_ || layer + 1 < layers_.size(); }
  std::vector<Linear> layers_;
  bool last_linear_ = true;
  size_t width_max_ = 0;  // the widest layer input or output
  // Workspaces, grown to the largest batch seen: acts_[i] is the output of layer i (after
  // its activation) of the last forward; grad_a_, grad_b_ carry dL/d(activation) backwards.
  std::vector<std::vector<float>> acts_;
  std::vector<float> grad_a_, grad_b_;
  size_t last_n_ = 0;
};

// The DCN-v2 cross network (Wang et al. 2021, full-rank W): x_{l+1} = x_0 ⊙ (x_l W_l + b_l)
// + x_l for l = 0 .. layers - 1, each W_l d x d and b_l of size d; the output is x_layers.
// A default-constructed CrossNet is a placeholder, like Mlp's.
class CrossNet {
 public:
  // Precondition: 1 <= d <= dim_max, layers >= 1. Reserves layers * (d * d + d) floats.
  static CrossNet make(ParamLayout& layout, size_t d, size_t layers);
  // Initialises every W_l, b_l with Linear::init(params, seed).
  void init(std::span<float> params, uint64_t seed) const;
  // Runs the batch x0 (n x d) and returns x_layers (n x d), which lives in this CrossNet and
  // stays valid until the next forward(). n == 0 returns nullptr.
  const float* forward(const float* params, const float* x0, size_t n);
  // Backward pass of the LAST forward(), which must have had the same params, x0 and n (the
  // latter asserted): adds the parameter gradients to grads given dy = dL/dx_layers (n x d),
  // and writes dL/dx0 (n x d) to dx0 unless dx0 is nullptr.
  void backward(const float* params, const float* x0, const float* dy, size_t n, float* grads,
                float* dx0);
  size_t dim() const { return d_; }
  const std::vector<Linear>& layers() const { return layers_; }
  size_t flops_per_sample() const;

 private:
  size_t d_ = 0;
  std::vector<Linear> layers_;
  // Workspaces, grown to the largest batch seen: xs_[l] = x_{l+1} and us_[l] = x_l W_l + b_l
  // of the last forward; g_, du_, tmp_ for backward.
  std::vector<std::vector<float>> xs_, us_;
  std::vector<float> g_, du_, tmp_;
  size_t last_n_ = 0;
};

// DLRM's dot interaction: input n x f x d (f vectors of d floats per sample: the bottom MLP's
// output and the field embeddings), output n x out(), the dot products of the pairs of
// distinct vectors. Pair order is DLRM's (the strict lower triangle of the Gram matrix, row by
// row): (0,1), (0,2), (1,2), (0,3), (1,3), (2,3), ..., i.e. for j = 1 .. f-1, for i < j.
struct DotInteraction {
  size_t f = 0, d = 0;  // precondition for every call: f >= 2, d >= 1
  size_t out() const { return f * (f - 1) / 2; }
  // Writes y (n x out()) for the batch x (n x f x d).
  void forward(const float* x, size_t n, float* y) const;
  // Writes dx = dL/dx (n x f x d) given x and dy = dL/dy (n x out()).
  void backward(const float* x, const float* dy, size_t n, float* dx) const;
  size_t flops_per_sample() const { return 2 * out() * d; }
};

}  // namespace colony::nn
