#include "models/layers.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "common/hash.h"
#include "common/status.h"

namespace colony::nn {

namespace {

void check_batch(size_t n) {
  COLONY_ASSERT(n <= dim_max, "n={} dim_max={}", n, dim_max);
}

// Grows `v` to at least `count` floats; never shrinks, so a workspace is allocated only when
// a batch is larger than every batch before it.
void grow(std::vector<float>& v, size_t count) {
  if (v.size() < count) v.resize(count);
}

// ReLU's derivative taken from its output: a > 0 exactly where the input was > 0.
void relu_mask(float* g, const float* a, size_t count) {
  for (size_t k = 0; k < count; ++k) g[k] = a[k] > 0.0f ? g[k] : 0.0f;
}

void relu(float* a, size_t count) {
  for (size_t k = 0; k < count; ++k) a[k] = a[k] > 0.0f ? a[k] : 0.0f;
}

// A dot product in a fixed order: eight lanes (which GCC vectorises without -ffast-math,
// since the order is spelled out), then the lanes and the tail in sequence.
float dot(const float* a, const float* b, size_t d) {
  constexpr size_t lanes = 8;
  float acc[lanes] = {};
  size_t k = 0;
  for (; k + lanes <= d; k += lanes) {
    for (size_t l = 0; l < lanes; ++l) acc[l] += a[k + l] * b[k + l];
  }
  float sum = 0.0f;
  for (size_t l = 0; l < lanes; ++l) sum += acc[l];
  for (; k < d; ++k) sum += a[k] * b[k];
  return sum;
}

int blas_int(size_t v) {
  return static_cast<int>(v);  // every dimension was checked against dim_max
}

}  // namespace

void single_threaded_blas() {
  openblas_set_num_threads(1);
}

size_t ParamLayout::add(size_t count) {
  COLONY_ASSERT(count >= 1 && size_ + count > size_, "count={} size={}", count, size_);
  const size_t offset = size_;
  size_ += count;
  return offset;
}

Linear Linear::make(ParamLayout& layout, size_t in, size_t out) {
  COLONY_ASSERT(in >= 1 && out >= 1 && in <= dim_max && out <= dim_max, "in={} out={}", in, out);
  Linear l;
  l.in = in;
  l.out = out;
  l.w = layout.add(in * out + out);
  l.b = l.w + in * out;
  return l;
}

void Linear::init(std::span<float> params, uint64_t seed) const {
  COLONY_ASSERT(params.size() >= b + out, "params={} b={} out={}", params.size(), b, out);
  // Seeded by the offset too, so layers of one layout initialised with one seed differ.
  SplitMix64 rng(hash_combine(seed, w));
  const double limit = std::sqrt(6.0 / static_cast<double>(in + out));
  for (size_t i = 0; i < in * out; ++i) {
    params[w + i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * limit);
  }
  std::fill_n(params.begin() + static_cast<std::ptrdiff_t>(b), out, 0.0f);
}

void Linear::forward(const float* params, const float* x, size_t n, float* y) const {
  check_batch(n);
  if (n == 0) return;
  for (size_t r = 0; r < n; ++r) std::memcpy(y + r * out, params + b, out * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(n), blas_int(out), blas_int(in),
              1.0f, x, blas_int(in), params + w, blas_int(out), 1.0f, y, blas_int(out));
}

void Linear::backward(const float* params, const float* x, const float* dy, size_t n, float* grads,
                      float* dx) const {
  check_batch(n);
  if (n == 0) return;
  // dW += x^T dy (in x out).
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(in), blas_int(out), blas_int(n),
              1.0f, x, blas_int(in), dy, blas_int(out), 1.0f, grads + w, blas_int(out));
  float* db = grads + b;
  for (size_t r = 0; r < n; ++r) {
    const float* dy_r = dy + r * out;
    for (size_t j = 0; j < out; ++j) db[j] += dy_r[j];
  }
  // dx = dy W^T (n x in).
  if (dx != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(n), blas_int(in), blas_int(out),
                1.0f, dy, blas_int(out), params + w, blas_int(out), 0.0f, dx, blas_int(in));
  }
}

Mlp Mlp::make(ParamLayout& layout, std::vector<size_t> sizes, bool last_linear) {
  COLONY_ASSERT(sizes.size() >= 2, "sizes={}", sizes.size());
  Mlp m;
  m.last_linear_ = last_linear;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    m.layers_.push_back(Linear::make(layout, sizes[i], sizes[i + 1]));
  }
  m.width_max_ = *std::max_element(sizes.begin(), sizes.end());
  m.acts_.resize(m.layers_.size());
  return m;
}

void Mlp::init(std::span<float> params, uint64_t seed) const {
  for (const Linear& l : layers_) l.init(params, seed);
}

const float* Mlp::forward(const float* params, const float* x, size_t n) {
  COLONY_ASSERT(!layers_.empty(), "forward() of an Mlp not built by make()");
  check_batch(n);
  last_n_ = n;
  if (n == 0) return nullptr;
  const float* input = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Linear& l = layers_[i];
    grow(acts_[i], n * l.out);
    float* y = acts_[i].data();
    l.forward(params, input, n, y);
    if (relu_after(i)) relu(y, n * l.out);
    input = y;
  }
  return input;
}

void Mlp::backward(const float* params, const float* x, const float* dy, size_t n, float* grads,
                   float* dx) {
  COLONY_ASSERT(n == last_n_, "n={} last forward n={}", n, last_n_);
  if (n == 0) return;
  grow(grad_a_, n * width_max_);
  grow(grad_b_, n * width_max_);
  const size_t last = layers_.size() - 1;
  // g: dL/d(output of layer i before its activation), read by layer i's backward.
  const float* g = dy;
  if (relu_after(last)) {
    const size_t count = n * layers_[last].out;
    std::memcpy(grad_a_.data(), dy, count * sizeof(float));
    relu_mask(grad_a_.data(), acts_[last].data(), count);
    g = grad_a_.data();
  }
  for (size_t i = last + 1; i-- > 0;) {
    if (i == 0) {
      layers_[0].backward(params, x, g, n, grads, dx);
      break;
    }
    float* next = g == grad_a_.data() ? grad_b_.data() : grad_a_.data();
    layers_[i].backward(params, acts_[i - 1].data(), g, n, grads, next);
    relu_mask(next, acts_[i - 1].data(), n * layers_[i].in);  // every hidden layer has ReLU
    g = next;
  }
}

size_t Mlp::flops_per_sample() const {
  size_t flops = 0;
  for (const Linear& l : layers_) flops += l.flops_per_sample();
  return flops;
}

CrossNet CrossNet::make(ParamLayout& layout, size_t d, size_t layers) {
  COLONY_ASSERT(d >= 1 && d <= dim_max && layers >= 1, "d={} layers={}", d, layers);
  CrossNet c;
  c.d_ = d;
  for (size_t l = 0; l < layers; ++l) c.layers_.push_back(Linear::make(layout, d, d));
  c.xs_.resize(layers);
  c.us_.resize(layers);
  return c;
}

void CrossNet::init(std::span<float> params, uint64_t seed) const {
  for (const Linear& l : layers_) l.init(params, seed);
}

const float* CrossNet::forward(const float* params, const float* x0, size_t n) {
  COLONY_ASSERT(!layers_.empty(), "forward() of a CrossNet not built by make()");
  check_batch(n);
  last_n_ = n;
  if (n == 0) return nullptr;
  const size_t count = n * d_;
  const float* x = x0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    grow(us_[l], count);
    grow(xs_[l], count);
    float* u = us_[l].data();
    float* next = xs_[l].data();
    layers_[l].forward(params, x, n, u);
    for (size_t k = 0; k < count; ++k) next[k] = x0[k] * u[k] + x[k];
    x = next;
  }
  return x;
}

void CrossNet::backward(const float* params, const float* x0, const float* dy, size_t n,
                        float* grads, float* dx0) {
  COLONY_ASSERT(n == last_n_, "n={} last forward n={}", n, last_n_);
  if (n == 0) return;
  const size_t count = n * d_;
  grow(g_, count);
  grow(du_, count);
  grow(tmp_, count);
  float* g = g_.data();  // dL/dx_{l+1}, then dL/dx_l
  float* du = du_.data();
  float* tmp = tmp_.data();
  std::memcpy(g, dy, count * sizeof(float));
  if (dx0 != nullptr) std::fill_n(dx0, count, 0.0f);
  for (size_t l = layers_.size(); l-- > 0;) {
    const float* u = us_[l].data();
    const float* x = l == 0 ? x0 : xs_[l - 1].data();
    for (size_t k = 0; k < count; ++k) du[k] = g[k] * x0[k];
    if (dx0 != nullptr) {
      for (size_t k = 0; k < count; ++k) dx0[k] += g[k] * u[k];
    }
    // Through x_l W_l + b_l, plus the residual: dL/dx_l = du W_l^T + dL/dx_{l+1}. The first
    // layer's dL/dx_l is only needed for dx0.
    const bool need_dx = l > 0 || dx0 != nullptr;
    layers_[l].backward(params, x, du, n, grads, need_dx ? tmp : nullptr);
    if (need_dx) {
      for (size_t k = 0; k < count; ++k) g[k] += tmp[k];
    }
  }
  if (dx0 != nullptr) {
    for (size_t k = 0; k < count; ++k) dx0[k] += g[k];
  }
}

size_t CrossNet::flops_per_sample() const {
  size_t flops = 0;
  for (const Linear& l : layers_) flops += l.flops_per_sample() + 2 * d_;
  return flops;
}

void DotInteraction::forward(const float* x, size_t n, float* y) const {
  COLONY_ASSERT(f >= 2 && d >= 1, "f={} d={}", f, d);
  const size_t pairs = out();
  for (size_t s = 0; s < n; ++s) {
    const float* v = x + s * f * d;
    float* o = y + s * pairs;
    size_t p = 0;
    for (size_t j = 1; j < f; ++j) {
      for (size_t i = 0; i < j; ++i) o[p++] = dot(v + i * d, v + j * d, d);
    }
  }
}

void DotInteraction::backward(const float* x, const float* dy, size_t n, float* dx) const {
  COLONY_ASSERT(f >= 2 && d >= 1, "f={} d={}", f, d);
  const size_t pairs = out();
  std::fill_n(dx, n * f * d, 0.0f);
  for (size_t s = 0; s < n; ++s) {
    const float* v = x + s * f * d;
    float* dv = dx + s * f * d;
    const float* g = dy + s * pairs;
    size_t p = 0;
    for (size_t j = 1; j < f; ++j) {
      for (size_t i = 0; i < j; ++i) {
        const float gp = g[p++];
        const float* vi = v + i * d;
        const float* vj = v + j * d;
        float* dvi = dv + i * d;
        float* dvj = dv + j * d;
        for (size_t k = 0; k < d; ++k) {
          dvi[k] += gp * vj[k];
          dvj[k] += gp * vi[k];
        }
      }
    }
  }
}

}  // namespace colony::nn
