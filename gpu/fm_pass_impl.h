// The body of gpu/fm_pass.h, included by one translation unit per Thrust system: fm_pass_host.cpp
// (g++, the CPP system) and fm_pass_cuda.cu (nvcc, CUDA). That file defines COLONY_FM_PASS as the
// class's name and COLONY_FM_PASS_ENTER() as what each call does first (selecting the device).
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

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

// Step 1, sample i: models/model.cpp's lr_pass (dim == 0) and fm_pass, term for term.
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
    if (backward) {
      loss[i] = logloss_of(z, labels[i]);
      dz[i] = static_cast<float>(sigmoid_of(z)) - labels[i];
    }
  }
};

// Step 2, float o of the batch's distinct slots (slot distinct[o / width], float o % width): what
// the gradient held plus that slot's contributions, in the order they were made.
struct AddContributions {
  const uint32_t* distinct;  // slots, sorted
  const uint32_t* starts;    // per distinct slot: where its contributions start in `order`
  const uint32_t* counts;    // per distinct slot: how many
  const uint32_t* order;     // contributions by slot, each slot's in the order they were made
  const uint32_t* feature;   // per contribution: the feature, or bias_feature
  const uint32_t* sample;    // per contribution
  const float* values;
  const float* rows;
  const float* sums;
  const float* dz;
  size_t dim;
  float* grads;
  __host__ __device__ void operator()(size_t o) const {
    const size_t width = 1 + dim;
    const size_t s = o / width, c = o % width;
    const size_t at = size_t{distinct[s]} * width + c;
    float acc = grads[at];
    for (uint32_t j = starts[s], end = starts[s] + counts[s]; j < end; ++j) {
      const uint32_t p = order[j], f = feature[p], i = sample[p];
      if (f == bias_feature) {
        if (c == 0) acc += dz[i];
        continue;
      }
      const float x = values[f];
      const float gx = dz[i] * x;
      if (c == 0) {
        acc += gx;
      } else {
        acc += gx * (sums[size_t{i} * dim + (c - 1)] - rows[at] * x);
      }
    }
    grads[at] = acc;
  }
};

template <class T>
T* raw(thrust::device_vector<T>& v) {
  return thrust::raw_pointer_cast(v.data());
}

class COLONY_FM_PASS final : public FmPass {
 public:
  explicit COLONY_FM_PASS(int device) : device_(device) {}

  double run(const FmBatch& b, size_t dim, const float* rows, float* grads,
             float* logits) override {
    try {
      COLONY_FM_PASS_ENTER();
      return pass(b, dim, rows, grads, logits);
    } catch (const std::exception& e) {
      // thrust::system_error (CUDA) or std::bad_alloc: the pass cannot report them (fm_pass.h).
      std::fprintf(stderr, "colony: the device's FM pass failed: %s\n", e.what());
      std::abort();
    }
  }

 private:
  double pass(const FmBatch& b, size_t dim, const float* rows, float* grads, float* logits) {
    const size_t n = b.samples, features = n == 0 ? 0 : b.offsets[n], width = 1 + dim;
    const bool backward = grads != nullptr;
    if (n == 0) return 0.0;
    labels_.assign(b.labels, b.labels + n);
    offsets_.assign(b.offsets, b.offsets + n + 1);
    slots_.assign(b.slots, b.slots + features);
    values_.assign(b.values, b.values + features);
    rows_.assign(rows, rows + b.n_slots * width);
    sums_.resize(n * dim);
    logits_.resize(n);
    dz_.resize(backward ? n : 0);
    loss_.resize(backward ? n : 0);
    thrust::for_each(
        thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(n),
        ForwardSample{raw(labels_), raw(offsets_), raw(slots_), raw(values_), raw(rows_), dim,
                      raw(sums_), raw(logits_), raw(dz_), raw(loss_), backward});
    if (logits) thrust::copy(logits_.begin(), logits_.end(), logits);
    if (!backward) return 0.0;

    // The contributions in the order the CPU model makes them: per sample, its bias, then its
    // features.
    const size_t m = features + n;
    host_slot_.resize(m);
    host_feature_.resize(m);
    host_sample_.resize(m);
    for (size_t i = 0, p = 0; i < n; ++i) {
      host_slot_[p] = 0;
      host_feature_[p] = bias_feature;
      host_sample_[p++] = static_cast<uint32_t>(i);
      for (uint32_t f = b.offsets[i]; f < b.offsets[i + 1]; ++f, ++p) {
        host_slot_[p] = b.slots[f];
        host_feature_[p] = f;
        host_sample_[p] = static_cast<uint32_t>(i);
      }
    }
    keys_.assign(host_slot_.begin(), host_slot_.end());
    feature_.assign(host_feature_.begin(), host_feature_.end());
    sample_.assign(host_sample_.begin(), host_sample_.end());
    // Deduplication: by slot, each slot's contributions kept in order.
    const size_t k = group_by_key(keys_, order_, distinct_, counts_, starts_);
    grads_.assign(grads, grads + b.n_slots * width);
    thrust::for_each(thrust::counting_iterator<size_t>(0),
                     thrust::counting_iterator<size_t>(k * width),
                     AddContributions{raw(distinct_), raw(starts_), raw(counts_), raw(order_),
                                      raw(feature_), raw(sample_), raw(values_), raw(rows_),
                                      raw(sums_), raw(dz_), dim, raw(grads_)});
    thrust::copy(grads_.begin(), grads_.end(), grads);
    // The loss summed in sample order, in double, as the CPU model does.
    host_loss_.resize(n);
    thrust::copy(loss_.begin(), loss_.end(), host_loss_.begin());
    double loss = 0.0;
    for (double l : host_loss_) loss += l;
    return loss;
  }

  int device_;
  thrust::device_vector<float> labels_, values_, rows_, sums_, logits_, dz_, grads_;
  thrust::device_vector<uint32_t> offsets_, slots_, keys_, feature_, sample_, order_, distinct_,
      counts_, starts_;
  thrust::device_vector<double> loss_;
  std::vector<uint32_t> host_slot_, host_feature_, host_sample_;
  std::vector<double> host_loss_;
};

}  // namespace

}  // namespace colony::gpu
