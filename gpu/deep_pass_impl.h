// The body of gpu/deep_pass.h, included by one translation unit per Thrust system:
// deep_pass_host.cpp (g++, the CPP system) and deep_pass_cuda.cu (nvcc, CUDA). That file defines
// COLONY_DEEP_PASS as the class's name, COLONY_DEEP_PASS_ENTER() as what each call does first
// (selecting the device), and COLONY_DEEP_PRODUCTS as a class, made from (device,
// DeviceProducts), whose gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc) sets the
// row-major m x n matrix c to op(a) op(b) + beta c on that system's memory.
#include <thrust/copy.h>
#include <thrust/device_ptr.h>
#include <thrust/device_vector.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "gpu/deep_pass.h"
#include "gpu/fm_functors.h"

namespace colony::gpu {

namespace {

template <class F>
void each(size_t count, F f) {
  thrust::for_each(thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(count),
                   f);
}

// Sample i's pooled embeddings (models/deep.cpp's pool; DeepFM's concat_input too): at
// out + i * out_width + out_offset, each field's embedding, the sum of v x over the sample's
// features of that field in their order; then its n_dense dense features.
struct PoolSample {
  const uint32_t* offsets;
  const uint32_t* slots;
  const float* values;
  const uint32_t* fields;
  const float* rows;
  const float* dense;
  size_t dim, n_fields, n_dense, row_width, emb_offset, out_width, out_offset;
  float* out;
  __host__ __device__ void operator()(size_t i) const {
    float* x = out + i * out_width + out_offset;
    const size_t pooled = n_fields * dim;
    for (size_t j = 0; j < pooled; ++j) x[j] = 0.0f;
    for (uint32_t f = offsets[i]; f < offsets[i + 1]; ++f) {
      if (fields[f] == no_field) continue;  // a dense feature's row
      const float* v = rows + size_t{slots[f]} * row_width + emb_offset;
      const float xv = values[f];
      float* e = x + size_t{fields[f]} * dim;
      for (size_t j = 0; j < dim; ++j) e[j] += v[j] * xv;
    }
    for (size_t j = 0; j < n_dense; ++j) x[pooled + j] = dense[i * n_dense + j];
  }
};

// Element k of count columns a row: dst[i][dst_offset + j] = src[i][src_offset + j].
struct CopyColumns {
  const float* src;
  size_t src_width, src_offset;
  float* dst;
  size_t dst_width, dst_offset, count;
  __host__ __device__ void operator()(size_t k) const {
    const size_t i = k / count, j = k % count;
    dst[i * dst_width + dst_offset + j] = src[i * src_width + src_offset + j];
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

// ReLU's derivative taken from its output (models/layers.cpp's relu_mask), from g into masked.
struct ReluMask {
  const float* g;
  const float* a;
  float* masked;
  __host__ __device__ void operator()(size_t k) const { masked[k] = a[k] > 0.0f ? g[k] : 0.0f; }
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

// z[i] = first + h[i] (DeepFM: the FM logit first; DLRM: the bias, rows[0]).
struct AddLogit {
  float* z;
  const float* first;  // per sample, or one value when `one`
  bool one;
  const float* h;
  __host__ __device__ void operator()(size_t i) const { z[i] = (one ? first[0] : first[i]) + h[i]; }
};

// models/layers.cpp's dot(): eight lanes, then the lanes and the tail in sequence.
__host__ __device__ inline float dot_in_order(const float* a, const float* b, size_t d) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  size_t k = 0;
  for (; k + 8 <= d; k += 8) {
    for (size_t l = 0; l < 8; ++l) acc[l] += a[k + l] * b[k + l];
  }
  float sum = 0.0f;
  for (size_t l = 0; l < 8; ++l) sum += acc[l];
  for (; k < d; ++k) sum += a[k] * b[k];
  return sum;
}

// Sample s's dot products of every pair of its f vectors of d floats (models/layers.h's
// DotInteraction::forward), pairs (i, j), i < j, ordered by j then i.
struct DotForward {
  const float* x;
  size_t f, d;
  float* y;
  __host__ __device__ void operator()(size_t s) const {
    const float* v = x + s * f * d;
    float* o = y + s * (f * (f - 1) / 2);
    size_t p = 0;
    for (size_t j = 1; j < f; ++j) {
      for (size_t i = 0; i < j; ++i) o[p++] = dot_in_order(v + i * d, v + j * d, d);
    }
  }
};

// DotInteraction::backward for sample s: dx of its vectors from dy of its pairs.
struct DotBackward {
  const float* x;
  const float* dy;
  size_t f, d;
  float* dx;
  __host__ __device__ void operator()(size_t s) const {
    const float* v = x + s * f * d;
    float* dv = dx + s * f * d;
    const float* g = dy + s * (f * (f - 1) / 2);
    for (size_t k = 0; k < f * d; ++k) dv[k] = 0.0f;
    size_t p = 0;
    for (size_t j = 1; j < f; ++j) {
      for (size_t i = 0; i < j; ++i) {
        const float gp = g[p++];
        for (size_t k = 0; k < d; ++k) {
          dv[i * d + k] += gp * v[j * d + k];
          dv[j * d + k] += gp * v[i * d + k];
        }
      }
    }
  }
};

// dbot[i][j] = dtop[i][j] + dvecs[i][j] for j < d (DLRM's bottom output feeds both).
struct AddBottomGrads {
  const float* dtop;
  size_t top_width;
  const float* dvecs;
  size_t vecs_width, d;
  float* dbot;
  __host__ __device__ void operator()(size_t k) const {
    const size_t i = k / d, j = k % d;
    dbot[k] = dtop[i * top_width + j] + dvecs[i * vecs_width + j];
  }
};

// CrossNet's layer output, element k: x0 (x W + b) + x, u = x W + b given.
struct CrossStep {
  const float* x0;
  const float* u;
  const float* x;
  float* next;
  __host__ __device__ void operator()(size_t k) const { next[k] = x0[k] * u[k] + x[k]; }
};

// CrossNet::backward before a layer's product, element k: du = g x0, and dx0 += g u.
struct CrossBack {
  const float* g;
  const float* x0;
  const float* u;
  float* du;
  float* dx0;
  __host__ __device__ void operator()(size_t k) const {
    du[k] = g[k] * x0[k];
    dx0[k] += g[k] * u[k];
  }
};

// a[k] += b[k].
struct AddInPlace {
  float* a;
  const float* b;
  __host__ __device__ void operator()(size_t k) const { a[k] += b[k]; }
};

// DCN-v2's demb (models/deep.cpp's split_input_grad, once a branch): element k of the pooled
// part, (0 + the cross branch's dx0) + the tower's.
struct SplitInputGrads {
  const float* cross;
  const float* tower;  // null without a tower
  size_t input_width, pooled;
  float* demb;
  __host__ __device__ void operator()(size_t k) const {
    const size_t i = k / pooled, j = k % pooled;
    float v = 0.0f + cross[i * input_width + j];
    if (tower != nullptr) v += tower[i * input_width + j];
    demb[k] = v;
  }
};

// models/layers.cpp's Linear::forward on device memory: y (n x out) = x W + b, the bias first.
template <class Products>
void linear_forward(Products& products, const float* p, const DeepLayer& layer, const float* x,
                    size_t n, float* y) {
  each(n * layer.out, FillBias{p + layer.b, layer.out, y});
  products.gemm(false, false, n, layer.out, layer.in, x, layer.in, p + layer.w, layer.out, 1.0f, y,
                layer.out);
}

// Linear::backward: given x and g = dL/dy (n x out), adds x^T g and g's column sums to the
// layer's gradients in dp, and writes dx = g W^T (n x in) unless dx is null.
template <class Products>
void linear_backward(Products& products, const float* p, const DeepLayer& layer, const float* x,
                     const float* g, size_t n, float* dp, float* dx) {
  products.gemm(true, false, layer.in, layer.out, n, x, layer.in, g, layer.out, 1.0f, dp + layer.w,
                layer.out);
  each(layer.out, ColumnSum{g, n, layer.out, dp + layer.b});
  if (dx != nullptr)
    products.gemm(false, true, n, layer.in, layer.out, g, layer.out, p + layer.w, layer.out, 0.0f,
                  dx, layer.in);
}

// models/layers.h's Mlp on device memory: Linear layers with ReLU between them (and after the
// last unless last_linear), its activations kept for backward.
template <class Products>
class DeviceMlp {
 public:
  DeviceMlp(const std::vector<DeepLayer>& layers, bool last_linear)
      : layers_(layers), last_linear_(last_linear), acts_(layers.size()) {}

  // The output (n x out) of x (n x in), valid until the next forward.
  const float* forward(Products& products, const float* p, const float* x, size_t n) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      const DeepLayer& layer = layers_[l];
      thrust::device_vector<float>& y = acts_[l];
      y.resize(n * layer.out);
      linear_forward(products, p, layer, x, n, raw(y));
      if (relu_after(l)) each(n * layer.out, Relu{raw(y)});
      x = raw(y);
    }
    return x;
  }

  bool empty() const { return layers_.empty(); }
  size_t out() const { return layers_.back().out; }

  // Mlp::backward of the last forward (x and n as there): adds dW += x^T g and the bias's column
  // sums to dp, layer by layer; writes dx = g W^T of the first layer (n x in) into *dx unless
  // dx is null.
  void backward(Products& products, const float* p, const float* x, const float* dy, size_t n,
                float* dp, thrust::device_vector<float>* dx) {
    const size_t last = layers_.size() - 1;
    const float* g = dy;
    if (relu_after(last)) {
      grad_a_.resize(n * layers_[last].out);
      each(grad_a_.size(), ReluMask{dy, raw(acts_[last]), raw(grad_a_)});
      g = raw(grad_a_);
    }
    for (size_t l = last + 1; l-- > 0;) {
      const DeepLayer& layer = layers_[l];
      const float* in = l == 0 ? x : raw(acts_[l - 1]);
      thrust::device_vector<float>* next = l == 0 ? dx : (g == raw(grad_a_) ? &grad_b_ : &grad_a_);
      if (next != nullptr) next->resize(n * layer.in);
      linear_backward(products, p, layer, in, g, n, dp, next ? raw(*next) : nullptr);
      if (next == nullptr) break;
      if (l > 0) each(n * layer.in, ReluMask{raw(*next), raw(acts_[l - 1]), raw(*next)});
      g = raw(*next);
    }
  }

 private:
  bool relu_after(size_t l) const { return !last_linear_ || l + 1 < layers_.size(); }
  std::vector<DeepLayer> layers_;
  bool last_linear_;
  std::vector<thrust::device_vector<float>> acts_;  // each layer's output, after its ReLU
  thrust::device_vector<float> grad_a_, grad_b_;
};

// models/layers.h's CrossNet on device memory: x_{l+1} = x0 (x_l W_l + b_l) + x_l.
template <class Products>
class DeviceCross {
 public:
  explicit DeviceCross(const std::vector<DeepLayer>& layers)
      : layers_(layers), xs_(layers.size()), us_(layers.size()) {}

  // x_layers (n x d) of x0 (n x d), valid until the next forward.
  const float* forward(Products& products, const float* p, const float* x0, size_t n) {
    const float* x = x0;
    for (size_t l = 0; l < layers_.size(); ++l) {
      const DeepLayer& layer = layers_[l];
      const size_t count = n * layer.out;
      us_[l].resize(count);
      xs_[l].resize(count);
      linear_forward(products, p, layer, x, n, raw(us_[l]));
      each(count, CrossStep{x0, raw(us_[l]), x, raw(xs_[l])});
      x = raw(xs_[l]);
    }
    return x;
  }

  // CrossNet::backward of the last forward: adds the layers' gradients to dp and writes
  // dL/dx0 (n x d) into dx0, given dy = dL/dx_layers.
  void backward(Products& products, const float* p, const float* x0, const float* dy, size_t n,
                float* dp, thrust::device_vector<float>& dx0) {
    const size_t d = layers_.front().in, count = n * d;
    const thrust::device_ptr<const float> from = thrust::device_pointer_cast(dy);
    g_.assign(from, from + count);
    du_.resize(count);
    tmp_.resize(count);
    dx0.assign(count, 0.0f);
    for (size_t l = layers_.size(); l-- > 0;) {
      const DeepLayer& layer = layers_[l];
      const float* x = l == 0 ? x0 : raw(xs_[l - 1]);
      each(count, CrossBack{raw(g_), x0, raw(us_[l]), raw(du_), raw(dx0)});
      // Through x_l W_l + b_l, plus the residual: dL/dx_l = du W_l^T + dL/dx_{l+1}.
      linear_backward(products, p, layer, x, raw(du_), n, dp, raw(tmp_));
      each(count, AddInPlace{raw(g_), raw(tmp_)});
    }
    each(count, AddInPlace{raw(dx0), raw(g_)});
  }

 private:
  std::vector<DeepLayer> layers_;
  std::vector<thrust::device_vector<float>> xs_, us_;
  thrust::device_vector<float> g_, du_, tmp_;
};

class COLONY_DEEP_PASS final : public DeepPass {
 public:
  COLONY_DEEP_PASS(const DeepShape& shape, int device, DeviceProducts products)
      : shape_(shape),
        device_(device),
        products_(device, products),
        mlp_(shape.mlp, shape.kind != DeepKind::dcn),
        bottom_(shape.bottom, false),
        cross_(shape.cross),
        head_(shape.kind == DeepKind::dcn ? std::vector<DeepLayer>{shape.head}
                                          : std::vector<DeepLayer>{},
              true) {}

  double run(const DeepBatch& batch, const float* rows, const float* params, float* grads,
             float* dense_grads, float* logits) override {
    try {
      COLONY_DEEP_PASS_ENTER();
      return pass(batch, rows, params, grads, dense_grads, logits);
    } catch (const std::exception& e) {
      // thrust::system_error (CUDA), a cuBLAS error or std::bad_alloc: the pass cannot report
      // them (deep_pass.h).
      std::fprintf(stderr, "colony: the device's deep model pass failed: %s\n", e.what());
      std::abort();
    }
  }

 private:
  bool deepfm() const { return shape_.kind == DeepKind::deepfm; }
  size_t width() const { return deepfm() ? 1 + shape_.dim : shape_.dim; }

  double pass(const DeepBatch& batch, const float* rows, const float* params, float* grads,
              float* dense_grads, float* logits) {
    const FmBatch& b = batch.features;
    const size_t n = b.samples;
    if (n == 0) return 0.0;
    const size_t features = b.offsets[n];
    labels_.assign(b.labels, b.labels + n);
    offsets_.assign(b.offsets, b.offsets + n + 1);
    slots_.assign(b.slots, b.slots + features);
    values_.assign(b.values, b.values + features);
    fields_.assign(batch.fields, batch.fields + features);
    dense_.assign(batch.dense, batch.dense + n * shape_.dense);
    rows_.assign(rows, rows + b.n_slots * width());
    params_.assign(params, params + shape_.params);
    logits_.resize(n);
    switch (shape_.kind) {
      case DeepKind::deepfm:
        forward_deepfm(n);
        break;
      case DeepKind::dlrm:
        forward_dlrm(n);
        break;
      case DeepKind::dcn:
        forward_dcn(n);
        break;
    }
    if (logits) thrust::copy(logits_.begin(), logits_.end(), logits);
    if (grads == nullptr) return 0.0;

    dz_.resize(n);
    loss_.resize(n);
    each(n, LossAndGradient{raw(labels_), raw(logits_), raw(dz_), raw(loss_)});
    dparams_.assign(dense_grads, dense_grads + shape_.params);
    // Where the pooled embeddings' gradients are: dL/d(the layer input they were part of).
    const Input input = shape_.kind == DeepKind::deepfm ? backward_deepfm(n)
                        : shape_.kind == DeepKind::dlrm ? backward_dlrm(n)
                                                        : backward_dcn(n);

    Contributions& c = contributions_;
    const size_t k = c.build(b);
    grads_.assign(grads, grads + b.n_slots * width());
    AddContributions add = c.functor(raw(values_), raw(dz_), width(), raw(grads_));
    if (deepfm()) {
      add.fm = true;
      add.dim = shape_.dim;
      add.rows = raw(rows_);
      add.sums = raw(sums_);
    }
    add.fields = raw(fields_);
    add.dinput = input.grads;
    add.input_width = input.width;
    add.input_offset = input.offset;
    add.emb_offset = deepfm() ? 1 : 0;
    add.emb_dim = shape_.dim;
    each(k * width(), add);
    thrust::copy(grads_.begin(), grads_.end(), grads);
    thrust::copy(dparams_.begin(), dparams_.end(), dense_grads);
    return summed_loss(loss_, host_loss_);
  }

  struct Input {
    const float* grads;
    size_t width, offset;
  };
  size_t pooled() const { return shape_.fields * shape_.dim; }
  PoolSample pool_into(float* out, size_t out_width, size_t out_offset, size_t n_dense) {
    return PoolSample{raw(offsets_),
                      raw(slots_),
                      raw(values_),
                      raw(fields_),
                      raw(rows_),
                      raw(dense_),
                      shape_.dim,
                      shape_.fields,
                      n_dense,
                      width(),
                      deepfm() ? size_t{1} : size_t{0},
                      out_width,
                      out_offset,
                      out};
  }

  // DeepFM: the FM part's logits, the MLP over [embeddings, dense] added.
  void forward_deepfm(size_t n) {
    const size_t in0 = pooled() + shape_.dense;
    sums_.resize(n * shape_.dim);
    each(n, ForwardSample{raw(labels_), raw(offsets_), raw(slots_), raw(values_), raw(rows_),
                          shape_.dim, raw(sums_), raw(logits_), nullptr, nullptr, false});
    x0_.resize(n * in0);
    each(n, pool_into(raw(x0_), in0, 0, shape_.dense));
    const float* h = mlp_.forward(products_, raw(params_), raw(x0_), n);
    each(n, AddLogit{raw(logits_), raw(logits_), false, h});
  }
  Input backward_deepfm(size_t n) {
    mlp_.backward(products_, raw(params_), raw(x0_), raw(dz_), n, raw(dparams_), &dx0_);
    return {raw(dx0_), pooled() + shape_.dense, 0};
  }

  // DLRM: vectors [bottom(dense), e_1 .. e_F]; the top MLP over [bottom, their pairs' dots]
  // (over e_1 alone for one field and no dense features).
  size_t vectors() const { return shape_.fields + (shape_.dense > 0 ? 1 : 0); }
  size_t lead() const { return shape_.dense > 0 ? shape_.dim : 0; }
  size_t pairs() const { return vectors() * (vectors() - 1) / 2; }
  size_t top_in() const { return vectors() < 2 ? shape_.dim : lead() + pairs(); }
  void forward_dlrm(size_t n) {
    const size_t d = shape_.dim, vd = vectors() * d;
    top_x_.resize(n * top_in());
    if (vectors() < 2) {
      each(n, pool_into(raw(top_x_), d, 0, 0));
    } else {
      vecs_.resize(n * vd);
      each(n, pool_into(raw(vecs_), vd, lead(), 0));
      const float* bot = nullptr;
      if (shape_.dense > 0) {
        bot = bottom_.forward(products_, raw(params_), raw(dense_), n);
        each(n * d, CopyColumns{bot, d, 0, raw(vecs_), vd, 0, d});
        each(n * d, CopyColumns{bot, d, 0, raw(top_x_), top_in(), 0, d});
      }
      dots_.resize(n * pairs());
      each(n, DotForward{raw(vecs_), vectors(), d, raw(dots_)});
      each(n * pairs(),
           CopyColumns{raw(dots_), pairs(), 0, raw(top_x_), top_in(), lead(), pairs()});
    }
    const float* y = mlp_.forward(products_, raw(params_), raw(top_x_), n);
    each(n, AddLogit{raw(logits_), raw(rows_), true, y});
  }
  Input backward_dlrm(size_t n) {
    const size_t d = shape_.dim, vd = vectors() * d;
    mlp_.backward(products_, raw(params_), raw(top_x_), raw(dz_), n, raw(dparams_), &dtop_);
    if (vectors() < 2) return {raw(dtop_), d, 0};
    ddots_.resize(n * pairs());
    each(n * pairs(), CopyColumns{raw(dtop_), top_in(), lead(), raw(ddots_), pairs(), 0, pairs()});
    dvecs_.resize(n * vd);
    each(n, DotBackward{raw(vecs_), raw(ddots_), vectors(), d, raw(dvecs_)});
    if (shape_.dense > 0) {
      dbot_.resize(n * d);
      each(n * d, AddBottomGrads{raw(dtop_), top_in(), raw(dvecs_), vd, d, raw(dbot_)});
      bottom_.backward(products_, raw(params_), raw(dense_), raw(dbot_), n, raw(dparams_), nullptr);
    }
    return {raw(dvecs_), vd, lead()};
  }

  // DCN-v2: a linear head over [cross(x0), tower(x0)], the bias added.
  void forward_dcn(size_t n) {
    const size_t in = pooled() + shape_.dense, ho = mlp_.empty() ? 0 : mlp_.out();
    const size_t head_in = in + ho;
    x0_.resize(n * in);
    each(n, pool_into(raw(x0_), in, 0, shape_.dense));
    const float* xc = cross_.forward(products_, raw(params_), raw(x0_), n);
    head_x_.resize(n * head_in);
    each(n * in, CopyColumns{xc, in, 0, raw(head_x_), head_in, 0, in});
    if (ho > 0) {
      const float* h = mlp_.forward(products_, raw(params_), raw(x0_), n);
      each(n * ho, CopyColumns{h, ho, 0, raw(head_x_), head_in, in, ho});
    }
    const float* y = head_.forward(products_, raw(params_), raw(head_x_), n);
    each(n, AddLogit{raw(logits_), raw(rows_), true, y});
  }
  Input backward_dcn(size_t n) {
    const size_t in = pooled() + shape_.dense, ho = mlp_.empty() ? 0 : mlp_.out();
    const size_t head_in = in + ho;
    head_.backward(products_, raw(params_), raw(head_x_), raw(dz_), n, raw(dparams_), &dhead_);
    dpart_.resize(n * in);
    each(n * in, CopyColumns{raw(dhead_), head_in, 0, raw(dpart_), in, 0, in});
    cross_.backward(products_, raw(params_), raw(x0_), raw(dpart_), n, raw(dparams_), dx0_);
    if (ho > 0) {
      dtower_.resize(n * ho);
      each(n * ho, CopyColumns{raw(dhead_), head_in, in, raw(dtower_), ho, 0, ho});
      mlp_.backward(products_, raw(params_), raw(x0_), raw(dtower_), n, raw(dparams_), &dx0_tower_);
    }
    demb_.resize(n * pooled());
    each(n * pooled(),
         SplitInputGrads{raw(dx0_), ho > 0 ? raw(dx0_tower_) : nullptr, in, pooled(), raw(demb_)});
    return {raw(demb_), pooled(), 0};
  }

  DeepShape shape_;
  int device_;
  COLONY_DEEP_PRODUCTS products_;
  DeviceMlp<COLONY_DEEP_PRODUCTS> mlp_, bottom_;
  DeviceCross<COLONY_DEEP_PRODUCTS> cross_;
  DeviceMlp<COLONY_DEEP_PRODUCTS> head_;
  thrust::device_vector<float> labels_, values_, dense_, rows_, params_, sums_, logits_, x0_, dz_,
      dparams_, dx0_, grads_, vecs_, dots_, top_x_, dtop_, ddots_, dvecs_, dbot_, head_x_, dhead_,
      dpart_, dtower_, dx0_tower_, demb_;
  thrust::device_vector<uint32_t> offsets_, slots_, fields_;
  thrust::device_vector<double> loss_;
  Contributions contributions_;
  std::vector<double> host_loss_;
};

}  // namespace

}  // namespace colony::gpu
