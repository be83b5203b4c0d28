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

#include "gpu/fm_functors.h"
#include "gpu/fm_pass.h"

namespace colony::gpu {

namespace {

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

    Contributions& c = contributions_;
    const size_t k = c.build(b);
    grads_.assign(grads, grads + b.n_slots * width);
    AddContributions add = c.functor(raw(values_), raw(dz_), width, raw(grads_));
    add.fm = true;
    add.dim = dim;
    add.rows = raw(rows_);
    add.sums = raw(sums_);
    thrust::for_each(thrust::counting_iterator<size_t>(0),
                     thrust::counting_iterator<size_t>(k * width), add);
    thrust::copy(grads_.begin(), grads_.end(), grads);
    return summed_loss(loss_, host_loss_);
  }

  int device_;
  thrust::device_vector<float> labels_, values_, rows_, sums_, logits_, dz_, grads_;
  thrust::device_vector<uint32_t> offsets_, slots_;
  thrust::device_vector<double> loss_;
  Contributions contributions_;
  std::vector<double> host_loss_;
};

}  // namespace

}  // namespace colony::gpu
