// The device code that the FM pass (gpu/fm_pass.h) and the deep models' pass (gpu/deep_pass.h)
// share: the per-sample FM forward, the per-(slot, float) gradient sum, and the grouping of a
// batch's gradient contributions by slot. Included by the *_impl.h files, once per Thrust system
// (each translation unit builds one system); plain C++17, so nvcc compiles it too.
#pragma once

#include <thrust/copy.h>
#include <thrust/device_vector.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/deep_pass.h"
#include "gpu/fm_pass.h"
#include "gpu/thrust_group.h"

namespace colony::gpu {

namespace {

constexpr uint32_t bias_feature = 0xFFFFFFFFu;  // a contribution of the sample's bias

// common/metrics.h's logloss_from_logit and sigmoid, as device code (the same operations).
__host__ __device__ inline double logloss_of(double logit, double y) {
  const double common = log1p(exp(-fabs(logit)));
  const double loss_if_positive = common + (logit < 0 ? -logit : 0.0);
  const double loss_if_negative = common + (logit > 0 ? logit : 0.0);
  return y * loss_if_positive + (1.0 - y) * loss_if_negative;
}
__host__ __device__ inline double sigmoid_of(double z) {
  return 1.0 / (1.0 + exp(-z));
}

// Sample i's log loss and its logit's gradient (the CPU models' operations).
struct LossAndGradient {
  const float* labels;
  const float* logits;
  float* dz;
  double* loss;
  __host__ __device__ void operator()(size_t i) const {
    loss[i] = logloss_of(logits[i], labels[i]);
    dz[i] = static_cast<float>(sigmoid_of(logits[i])) - labels[i];
  }
};

// Step 1, sample i: models/model.cpp's lr_pass (dim == 0) and fm_pass, term for term. With
// `backward`, also the sample's loss and logit gradient (LossAndGradient).
struct ForwardSample {
  const float* labels;
  const uint32_t* offsets;
  const uint32_t* slots;
  const float* values;
  const float* rows;
  size_t dim;
  float* sums;    // samples x dim: sum_k v_kd x_k
  float* logits;  // samples
  float* dz;      // samples: the logit's gradient (backward only)
  double* loss;   // samples (backward only)
  bool backward;
  __host__ __device__ void operator()(size_t i) const {
    const size_t width = 1 + dim;
    const uint32_t begin = offsets[i], end = offsets[i + 1];
    float* sum = sums + i * dim;
    float linear = rows[0];
    float sq_total = 0.0f;
    for (size_t d = 0; d < dim; ++d) sum[d] = 0.0f;
    for (uint32_t f = begin; f < end; ++f) {
      const float* r = rows + size_t{slots[f]} * width;
      const float x = values[f];
      linear += r[0] * x;
      for (size_t d = 0; d < dim; ++d) {
        const float vx = r[1 + d] * x;
        sum[d] += vx;
        sq_total += vx * vx;
      }
    }
    float z = linear;
    if (dim > 0) {
      float pair = 0.0f;
      for (size_t d = 0; d < dim; ++d) pair += sum[d] * sum[d];
      z = linear + 0.5f * (pair - sq_total);
    }
    logits[i] = z;
    if (backward) LossAndGradient{labels, logits, dz, loss}(i);
  }
};

// Step 2, float o of the batch's distinct slots (slot distinct[o / width], float o % width): what
// the gradient held plus that slot's contributions, in the order they were made: each sample's
// bias (to float 0), with `fm` the FM (or LR) part's terms of each feature; then, with `fields`,
// the pooled embeddings' gradients, in the same order (as models/deep.cpp adds them after the
// rest). Members are set by name (Contributions::functor), not by position.
struct AddContributions {
  const uint32_t* distinct = nullptr;  // slots, sorted
  const uint32_t* starts = nullptr;    // per distinct slot: where its contributions start in order
  const uint32_t* counts = nullptr;    // per distinct slot: how many
  const uint32_t* order = nullptr;     // contributions by slot, each slot's in the order made
  const uint32_t* feature = nullptr;   // per contribution: the feature, or bias_feature
  const uint32_t* sample = nullptr;    // per contribution
  const float* values = nullptr;       // per feature
  const float* dz = nullptr;           // per sample: the logit's gradient
  size_t width = 0;                    // floats a row
  float* grads = nullptr;              // rows' gradients (width floats a slot)
  // The FM part: rows [w, v_1 .. v_dim] (width = 1 + dim), sums as ForwardSample's.
  bool fm = false;
  size_t dim = 0;
  const float* rows = nullptr;
  const float* sums = nullptr;
  // The pooled embeddings (nullptr fields: none): per feature its field, or no_field; dinput
  // holds dL/d(embedding) of field f of sample i at i * input_width + input_offset + f * emb_dim;
  // a row's embedding starts at its float emb_offset.
  const uint32_t* fields = nullptr;
  const float* dinput = nullptr;
  size_t input_width = 0, input_offset = 0, emb_offset = 0, emb_dim = 0;
  __host__ __device__ void operator()(size_t o) const {
    const size_t s = o / width, c = o % width;
    const size_t at = size_t{distinct[s]} * width + c;
    float acc = grads[at];
    const uint32_t first = starts[s], end = starts[s] + counts[s];
    for (uint32_t j = first; j < end; ++j) {
      const uint32_t p = order[j], f = feature[p], i = sample[p];
      if (f == bias_feature) {
        if (c == 0) acc += dz[i];
        continue;
      }
      if (!fm) continue;
      const float x = values[f];
      const float gx = dz[i] * x;
      if (c == 0) {
        acc += gx;
      } else {
        acc += gx * (sums[size_t{i} * dim + (c - 1)] - rows[at] * x);
      }
    }
    if (fields != nullptr && c >= emb_offset) {
      for (uint32_t j = first; j < end; ++j) {
        const uint32_t p = order[j], f = feature[p], i = sample[p];
        if (f == bias_feature || fields[f] == no_field) continue;
        // models/deep.cpp's demb: zeroed, then the input's gradient added.
        const float demb = 0.0f + dinput[size_t{i} * input_width + input_offset +
                                         size_t{fields[f]} * emb_dim + (c - emb_offset)];
        acc += demb * values[f];
      }
    }
    grads[at] = acc;
  }
};

template <class T>
T* raw(thrust::device_vector<T>& v) {
  return thrust::raw_pointer_cast(v.data());
}

// The per-sample losses summed in sample order, in double, as the CPU models do (`host` is
// scratch).
inline double summed_loss(thrust::device_vector<double>& loss, std::vector<double>& host) {
  host.resize(loss.size());
  thrust::copy(loss.begin(), loss.end(), host.begin());
  double sum = 0.0;
  for (double l : host) sum += l;
  return sum;
}

// A batch's gradient contributions grouped by slot: per sample its bias (slot 0), then its
// features, in the order the CPU models make them; grouped with each slot's kept in that order.
struct Contributions {
  thrust::device_vector<uint32_t> keys, feature, sample, order, distinct, counts, starts;
  std::vector<uint32_t> host_slot, host_feature, host_sample;
  // Returns the number of distinct slots.
  size_t build(const FmBatch& b) {
    const size_t n = b.samples, m = b.offsets[n] + n;
    host_slot.resize(m);
    host_feature.resize(m);
    host_sample.resize(m);
    for (size_t i = 0, p = 0; i < n; ++i) {
      host_slot[p] = 0;
      host_feature[p] = bias_feature;
      host_sample[p++] = static_cast<uint32_t>(i);
      for (uint32_t f = b.offsets[i]; f < b.offsets[i + 1]; ++f, ++p) {
        host_slot[p] = b.slots[f];
        host_feature[p] = f;
        host_sample[p] = static_cast<uint32_t>(i);
      }
    }
    keys.assign(host_slot.begin(), host_slot.end());
    feature.assign(host_feature.begin(), host_feature.end());
    sample.assign(host_sample.begin(), host_sample.end());
    return group_by_key(keys, order, distinct, counts, starts);
  }
  // The sum over the groups of the last build, its slots' contributions added to `grads`; the
  // caller sets the rest (AddContributions).
  AddContributions functor(const float* values, const float* dz, size_t width, float* grads) {
    AddContributions a;
    a.distinct = raw(distinct);
    a.starts = raw(starts);
    a.counts = raw(counts);
    a.order = raw(order);
    a.feature = raw(feature);
    a.sample = raw(sample);
    a.values = values;
    a.dz = dz;
    a.width = width;
    a.grads = grads;
    return a;
  }
};

}  // namespace

}  // namespace colony::gpu
