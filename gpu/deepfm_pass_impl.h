// The body of gpu/deepfm_pass.h, included by one translation unit per Thrust system:
// deepfm_pass_host.cpp (g++, the CPP system) and deepfm_pass_cuda.cu (nvcc, CUDA). That file
// defines COLONY_DEEPFM_PASS as the class's name, COLONY_DEEPFM_PASS_ENTER() as what each call
// does first (selecting the device), and COLONY_DEEPFM_PRODUCTS as a class, made from (device,
// DeviceProducts), whose gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc) sets the
// row-major m x n matrix c to op(a) op(b) + beta c on that system's memory.
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "gpu/deepfm_pass.h"
#include "gpu/fm_functors.h"

namespace colony::gpu {

namespace {

// Sample i's MLP input (models/deep.cpp's pool and concat_input): each field's embedding, the
// sum of v x over the sample's features of that field in their order, then the dense features.
struct PoolSample {
  const uint32_t* offsets;
  const uint32_t* slots;
  const float* values;
  const uint32_t* fields;
  const float* rows;
  const float* dense;
  size_t dim, n_fields, n_dense, input_width;
  float* x0;  // samples x input_width
  __host__ __device__ void operator()(size_t i) const {
    float* x = x0 + i * input_width;
    const size_t pooled = n_fields * dim;
    for (size_t j = 0; j < pooled; ++j) x[j] = 0.0f;
    for (uint32_t f = offsets[i]; f < offsets[i + 1]; ++f) {
      if (fields[f] == no_field) continue;  // a dense feature's row
      const float* v = rows + size_t{slots[f]} * (1 + dim) + 1;
      const float xv = values[f];
      float* e = x + size_t{fields[f]} * dim;
      for (size_t j = 0; j < dim; ++j) e[j] += v[j] * xv;
    }
    for (size_t j = 0; j < n_dense; ++j) x[pooled + j] = dense[i * n_dense + j];
  }
};

// Element k of an n x out layer output: the bias (the product adds to it).
struct FillBias {
  const float* bias;
  size_t out;
  float* y;
  __host__ __device__ void operator()(size_t k) const { y[k] = bias[k % out]; }
};

struct Relu {
  float* a;
  __host__ __device__ void operator()(size_t k) const { a[k] = a[k] > 0.0f ? a[k] : 0.0f; }
};

// ReLU's derivative taken from its output (models/layers.cpp's relu_mask).
struct ReluMask {
  float* g;
  const float* a;
  __host__ __device__ void operator()(size_t k) const { g[k] = a[k] > 0.0f ? g[k] : 0.0f; }
};

// Column j of an n x out gradient added to the bias's gradient, in row order.
struct ColumnSum {
  const float* g;
  size_t n, out;
  float* db;
  __host__ __device__ void operator()(size_t j) const {
    float acc = db[j];
    for (size_t r = 0; r < n; ++r) acc += g[r * out + j];
    db[j] = acc;
  }
};

struct AddTo {
  float* z;
  const float* h;
  __host__ __device__ void operator()(size_t i) const { z[i] += h[i]; }
};

class COLONY_DEEPFM_PASS final : public DeepFmPass {
 public:
  COLONY_DEEPFM_PASS(const DeepFmShape& shape, int device, DeviceProducts products)
      : shape_(shape), device_(device), products_(device, products) {
    acts_.resize(shape_.layers.size());
  }

  double run(const DeepFmBatch& batch, const float* rows, const float* params, float* grads,
             float* dense_grads, float* logits) override {
    try {
      COLONY_DEEPFM_PASS_ENTER();
      return pass(batch, rows, params, grads, dense_grads, logits);
    } catch (const std::exception& e) {
      // thrust::system_error (CUDA), a cuBLAS error or std::bad_alloc: the pass cannot report
      // them (deepfm_pass.h).
      std::fprintf(stderr, "colony: the device's DeepFM pass failed: %s\n", e.what());
      std::abort();
    }
  }

 private:
  template <class F>
  static void each(size_t count, F f) {
    thrust::for_each(thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(count),
                     f);
  }

  double pass(const DeepFmBatch& batch, const float* rows, const float* params, float* grads,
              float* dense_grads, float* logits) {
    const FmBatch& b = batch.fm;
    const size_t n = b.samples, dim = shape_.dim, width = 1 + dim;
    if (n == 0) return 0.0;
    const size_t features = b.offsets[n];
    const size_t in0 = shape_.fields * dim + shape_.dense;
    const bool backward = grads != nullptr;
    labels_.assign(b.labels, b.labels + n);
    offsets_.assign(b.offsets, b.offsets + n + 1);
    slots_.assign(b.slots, b.slots + features);
    values_.assign(b.values, b.values + features);
    fields_.assign(batch.fields, batch.fields + features);
    dense_.assign(batch.dense, batch.dense + n * shape_.dense);
    rows_.assign(rows, rows + b.n_slots * width);
    params_.assign(params, params + shape_.params);

    // The FM part's logits, then the MLP's input.
    sums_.resize(n * dim);
    logits_.resize(n);
    each(n, ForwardSample{raw(labels_), raw(offsets_), raw(slots_), raw(values_), raw(rows_), dim,
                          raw(sums_), raw(logits_), nullptr, nullptr, false});
    x0_.resize(n * in0);
    each(n, PoolSample{raw(offsets_), raw(slots_), raw(values_), raw(fields_), raw(rows_),
                       raw(dense_), dim, shape_.fields, shape_.dense, in0, raw(x0_)});

    // The MLP (models/layers.cpp's Mlp::forward: the bias, then x W added to it).
    const float* p = raw(params_);
    const float* x = raw(x0_);
    for (size_t l = 0; l < shape_.layers.size(); ++l) {
      const DeepFmLayer& layer = shape_.layers[l];
      thrust::device_vector<float>& y = acts_[l];
      y.resize(n * layer.out);
      each(n * layer.out, FillBias{p + layer.b, layer.out, raw(y)});
      products_.gemm(false, false, n, layer.out, layer.in, x, layer.in, p + layer.w, layer.out,
                     1.0f, raw(y), layer.out);
      if (l + 1 < shape_.layers.size()) each(n * layer.out, Relu{raw(y)});
      x = raw(y);
    }
    each(n, AddTo{raw(logits_), x});
    if (logits) thrust::copy(logits_.begin(), logits_.end(), logits);
    if (!backward) return 0.0;

    dz_.resize(n);
    loss_.resize(n);
    each(n, LossAndGradient{raw(labels_), raw(logits_), raw(dz_), raw(loss_)});

    // Backward through the MLP (Mlp::backward; the last layer is linear): per layer dW += x^T g,
    // the bias's column sums, dx = g W^T, and ReLU's mask below the first layer.
    dparams_.assign(dense_grads, dense_grads + shape_.params);
    float* dp = raw(dparams_);
    const float* g = raw(dz_);
    for (size_t l = shape_.layers.size(); l-- > 0;) {
      const DeepFmLayer& layer = shape_.layers[l];
      const float* in = l == 0 ? raw(x0_) : raw(acts_[l - 1]);
      products_.gemm(true, false, layer.in, layer.out, n, in, layer.in, g, layer.out, 1.0f,
                     dp + layer.w, layer.out);
      each(layer.out, ColumnSum{g, n, layer.out, dp + layer.b});
      thrust::device_vector<float>& dx = l == 0 ? dx0_ : (g == raw(grad_a_) ? grad_b_ : grad_a_);
      dx.resize(n * layer.in);
      products_.gemm(false, true, n, layer.in, layer.out, g, layer.out, p + layer.w, layer.out,
                     0.0f, raw(dx), layer.in);
      if (l > 0) each(n * layer.in, ReluMask{raw(dx), raw(acts_[l - 1])});
      g = raw(dx);
    }

    // The sparse gradients: the FM part's contributions, then the pooled embeddings'.
    Contributions& c = contributions_;
    const size_t k = c.build(b);
    grads_.assign(grads, grads + b.n_slots * width);
    each(k * width,
         AddContributions{raw(c.distinct), raw(c.starts), raw(c.counts), raw(c.order),
                          raw(c.feature), raw(c.sample), raw(values_), raw(rows_), raw(sums_),
                          raw(dz_), dim, raw(grads_), raw(fields_), raw(dx0_), in0});
    thrust::copy(grads_.begin(), grads_.end(), grads);
    thrust::copy(dparams_.begin(), dparams_.end(), dense_grads);
    return summed_loss(loss_, host_loss_);
  }

  DeepFmShape shape_;
  int device_;
  COLONY_DEEPFM_PRODUCTS products_;
  thrust::device_vector<float> labels_, values_, dense_, rows_, params_, sums_, logits_, x0_, dz_,
      dparams_, dx0_, grad_a_, grad_b_, grads_;
  std::vector<thrust::device_vector<float>> acts_;  // each layer's output, after its ReLU
  thrust::device_vector<uint32_t> offsets_, slots_, fields_;
  thrust::device_vector<double> loss_;
  Contributions contributions_;
  std::vector<double> host_loss_;
};

}  // namespace

}  // namespace colony::gpu
