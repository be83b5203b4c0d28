#include "worker/model.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "common/hash.h"
#include "common/metrics.h"

namespace colony {

Expected<ModelKind> parse_model(const std::string& name) {
  if (name == "lr") return ModelKind::lr;
  if (name == "fm") return ModelKind::fm;
  if (name == "deepfm")
    return Status::invalid_input(
        "--model deepfm is not available yet in this version; use lr or fm");
  return Status::invalid_input("unknown model \"" + name + "\", expected lr or fm");
}

const char* to_string(ModelKind kind) {
  return kind == ModelKind::lr ? "lr" : "fm";
}

void BatchIndex::build(const Batch& batch) {
  const size_t want = std::max<size_t>(1024, 2 * (batch.features() + 1));
  if (table_.size() < want) {
    size_t cap = 1024;
    while (cap < want) cap *= 2;
    table_.assign(cap, Entry{0, 0, 0});
    stamp_ = 0;
  }
  if (++stamp_ == 0) {  // wrapped: stamps of old entries could collide with new ones
    std::fill(table_.begin(), table_.end(), Entry{0, 0, 0});
    stamp_ = 1;
  }
  const size_t mask = table_.size() - 1;
  unique_.clear();
  slots_.resize(batch.features());
  auto slot_of = [&](uint64_t key) -> uint32_t {
    size_t pos = mix64(key) & mask;
    while (true) {
      Entry& e = table_[pos];
      if (e.stamp != stamp_) {
        e = Entry{key, static_cast<uint32_t>(unique_.size()), stamp_};
        unique_.push_back(key);
        return e.slot;
      }
      if (e.key == key) return e.slot;
      pos = (pos + 1) & mask;
    }
  };
  slot_of(bias_key);
  const uint64_t* keys = batch.keys.data();
  for (size_t i = 0; i < batch.features(); ++i) slots_[i] = slot_of(keys[i]);
}

namespace {

// One kernel for both passes; `Backward` selects whether gradients are accumulated.
template <bool Backward>
double lr_pass(const Batch& b, const uint32_t* slots, const float* rows, float* grads,
               float* logits) {
  double loss = 0.0;
  const float bias = rows[0];
  for (size_t i = 0; i < b.rows(); ++i) {
    const uint32_t begin = b.offsets[i], end = b.offsets[i + 1];
    float z = bias;
    for (uint32_t f = begin; f < end; ++f) z += rows[slots[f]] * b.values[f];
    if (logits) logits[i] = z;
    if constexpr (Backward) {
      loss += logloss_from_logit(z, b.labels[i]);
      const float g = static_cast<float>(sigmoid(z)) - b.labels[i];
      grads[0] += g;
      for (uint32_t f = begin; f < end; ++f) grads[slots[f]] += g * b.values[f];
    }
  }
  return loss;
}

// D > 0: the factor dimension is a compile-time constant (the common sizes); D == 0: `dim`.
template <bool Backward, size_t D>
double fm_pass(const Batch& b, const uint32_t* slots, const float* rows, size_t dim, float* grads,
               float* logits, float* scratch) {
  const size_t d_n = D > 0 ? D : dim;
  const size_t width = 1 + d_n;
  double loss = 0.0;
  const float bias = rows[0];
  float* sum = scratch;  // per dimension: sum_k v_kd x_k
  for (size_t i = 0; i < b.rows(); ++i) {
    const uint32_t begin = b.offsets[i], end = b.offsets[i + 1];
    float linear = bias;
    float sq_total = 0.0f;
    for (size_t d = 0; d < d_n; ++d) sum[d] = 0.0f;
    for (uint32_t f = begin; f < end; ++f) {
      const float* r = rows + size_t{slots[f]} * width;
      const float x = b.values[f];
      linear += r[0] * x;
      for (size_t d = 0; d < d_n; ++d) {
        const float vx = r[1 + d] * x;
        sum[d] += vx;
        sq_total += vx * vx;
      }
    }
    float pair = 0.0f;
    for (size_t d = 0; d < d_n; ++d) pair += sum[d] * sum[d];
    const float z = linear + 0.5f * (pair - sq_total);
    if (logits) logits[i] = z;
    if constexpr (Backward) {
      loss += logloss_from_logit(z, b.labels[i]);
      const float g = static_cast<float>(sigmoid(z)) - b.labels[i];
      grads[0] += g;
      for (uint32_t f = begin; f < end; ++f) {
        const float* r = rows + size_t{slots[f]} * width;
        float* gr = grads + size_t{slots[f]} * width;
        const float x = b.values[f];
        const float gx = g * x;
        gr[0] += gx;
        for (size_t d = 0; d < d_n; ++d) gr[1 + d] += gx * (sum[d] - r[1 + d] * x);
      }
    }
  }
  return loss;
}

template <bool Backward>
double run(const ModelSpec& spec, const Batch& b, std::span<const uint32_t> slots,
           std::span<const float> rows, float* grads, float* logits) {
  COLONY_ASSERT(slots.size() == b.features(), "slots={} features={}", slots.size(), b.features());
  if (spec.kind == ModelKind::lr)
    return lr_pass<Backward>(b, slots.data(), rows.data(), grads, logits);
  COLONY_ASSERT(spec.dim >= 1 && spec.dim <= max_fm_dim, "dim={}", spec.dim);
  std::array<float, max_fm_dim> scratch;
  switch (spec.dim) {
    case 4:
      return fm_pass<Backward, 4>(b, slots.data(), rows.data(), 4, grads, logits, scratch.data());
    case 8:
      return fm_pass<Backward, 8>(b, slots.data(), rows.data(), 8, grads, logits, scratch.data());
    case 16:
      return fm_pass<Backward, 16>(b, slots.data(), rows.data(), 16, grads, logits, scratch.data());
    case 32:
      return fm_pass<Backward, 32>(b, slots.data(), rows.data(), 32, grads, logits, scratch.data());
    default:
      return fm_pass<Backward, 0>(b, slots.data(), rows.data(), spec.dim, grads, logits,
                                  scratch.data());
  }
}

}  // namespace

double forward_backward(const ModelSpec& spec, const Batch& batch, std::span<const uint32_t> slots,
                        std::span<const float> rows, std::span<float> grads,
                        std::span<float> logits) {
  COLONY_ASSERT(grads.size() == rows.size(), "grads={} rows={}", grads.size(), rows.size());
  COLONY_ASSERT(logits.empty() || logits.size() == batch.rows());
  return run<true>(spec, batch, slots, rows, grads.data(),
                   logits.empty() ? nullptr : logits.data());
}

void forward(const ModelSpec& spec, const Batch& batch, std::span<const uint32_t> slots,
             std::span<const float> rows, std::span<float> logits) {
  COLONY_ASSERT(logits.size() == batch.rows());
  run<false>(spec, batch, slots, rows, nullptr, logits.data());
}

}  // namespace colony
