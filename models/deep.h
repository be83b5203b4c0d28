// Inside models/: the deep models' factory and the FM kernels DeepFM shares with FM.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "data/batch.h"
#include "gpu/deep_pass.h"
#include "models/model.h"

namespace colony {

// DeepFM, DLRM or DCN-v2 (spec.deep()); invalid_input for layer lists out of range. With
// spec.compute_threads above 1, that many copies of it sharing each batch (its part_threads()).
Expected<std::unique_ptr<Model>> make_deep_model(const ModelSpec& spec);

// Scratch for the FM kernels (rows with dense features are expanded into it).
struct FeatureWorkspace {
  std::vector<uint32_t> offsets, slots;
  std::vector<float> values;
};
// The FM part of a model with rows [w, v_1 .. v_dim] (bias in slot 0, dense rows in slots
// 1..dense_dim): each sample's logit into `logits` ...
void fm_logits(size_t dim, const Batch& batch, std::span<const uint32_t> slots,
               std::span<const float> rows, float* logits, FeatureWorkspace& ws);
// ... and, given dL/dlogit per sample in `dz`, the gradients of the rows added into `grads`.
void fm_backward(size_t dim, const Batch& batch, std::span<const uint32_t> slots,
                 std::span<const float> rows, const float* dz, float* grads, FeatureWorkspace& ws);
// The batch as the device's deep model pass takes it (gpu/deep_pass.h): its features as the
// model sees them (with `dense_rows`, DeepFM's: the FM part's view, as fm_logits sees it, in `ws`
// when the batch has dense features; else the batch's own), and each of those features' field
// (in `fields`; no_field for a dense feature's row). n_slots: the rows in the step's slots.
gpu::DeepBatch deep_device_batch(const Batch& batch, std::span<const uint32_t> slots,
                                 size_t n_slots, bool dense_rows, FeatureWorkspace& ws,
                                 std::vector<uint32_t>& fields);

}  // namespace colony
