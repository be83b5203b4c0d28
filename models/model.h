// Sparse CTR models: logistic regression and factorization machines.
//
// Models are pure math over a batch whose features have been mapped to row slots (see
// BatchIndex): they read the gathered rows of the batch's unique keys and accumulate
// gradients for those same slots. They never touch a table, so the single-process trainer,
// a PS worker and tests run the same code. Per-sample work touches only that sample's rows;
// nothing allocates per sample.
//
// Row layout (width floats): LR [w]; FM [w, v_1 .. v_dim]. Slot 0 is always the global bias
// row (bias_key), whose first float is the bias.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/batch.h"

namespace colony {

enum class ModelKind { lr, fm };

struct ModelSpec {
  ModelKind kind = ModelKind::fm;
  size_t dim = 8;  // FM factor dimension (LR ignores it)
  size_t width() const { return kind == ModelKind::lr ? 1 : 1 + dim; }
};

// Parses "lr" or "fm". "deepfm" is named by the CLI contract but not built yet: it is
// rejected with a message saying so.
Expected<ModelKind> parse_model(const std::string& name);
const char* to_string(ModelKind kind);
inline constexpr size_t max_fm_dim = 1024;

// Maps each feature of a batch to a slot in the batch's list of unique keys.
// Slot 0 is bias_key; other keys get slots in order of first appearance.
class BatchIndex {
 public:
  void build(const Batch& batch);
  std::span<const uint64_t> unique_keys() const { return unique_; }
  std::span<const uint32_t> slots() const { return slots_; }  // one per feature of the batch

 private:
  struct Entry {
    uint64_t key;
    uint32_t slot;
    uint32_t stamp;  // entries from older batches are stale: no clearing between batches
  };
  std::vector<Entry> table_;
  std::vector<uint64_t> unique_;
  std::vector<uint32_t> slots_;
  uint32_t stamp_ = 0;
};

// Forward and backward pass over `batch`: `rows` holds the parameters of each slot
// (unique_keys().size() x width), `grads` (same shape) receives the summed gradient of the
// batch's log loss (added to what is there). Writes each sample's logit to `logits` when it is
// not empty (size batch.rows()). Returns the summed log loss.
double forward_backward(const ModelSpec& spec, const Batch& batch, std::span<const uint32_t> slots,
                        std::span<const float> rows, std::span<float> grads,
                        std::span<float> logits);

// Forward pass only: each sample's logit into `logits` (size batch.rows()).
void forward(const ModelSpec& spec, const Batch& batch, std::span<const uint32_t> slots,
             std::span<const float> rows, std::span<float> logits);

}  // namespace colony
