// CTR models behind one interface: logistic regression, factorization machines, DeepFM, DLRM
// and DCN-v2.
//
// A model is math over a batch whose features have been mapped to row slots (BatchIndex): it
// reads the gathered rows of the batch's unique keys ("sparse" parameters, which live on the
// parameter server) and, for the deep models, a flat vector of dense parameters (the MLPs and
// cross layers, replicated in every worker). It accumulates gradients for both and never
// touches a table, so the single-process trainer, a PS worker and tests run the same code.
//
// Row layout (width() floats per key): LR [w]; FM and DeepFM [w, v_1 .. v_dim]; DLRM and
// DCN-v2 [v_1 .. v_dim]. Slot 0 is always the global bias row (bias_key), whose first float is
// the bias. Models whose dense_rows() is true (LR, FM, DeepFM) also give each dense feature j
// a row, dense_key(j), in slot 1 + j, and treat it as a feature of value x_j.
//
// Fields: the deep models pool each sample's features field by field (sum of v_k x_k over the
// features whose key_field is f) into `fields` embeddings of `dim` floats. A key of field
// >= fields is an error that check() reports.
//
// Equations, defaults and measured results: docs/models.md.
//
// Thread-safety: a Model keeps workspaces between calls; one thread uses it at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "data/batch.h"
#include "gpu/device.h"

namespace colony {

enum class ModelKind { lr, fm, deepfm, dlrm, dcn };

struct ModelSpec {
  ModelKind kind = ModelKind::fm;
  size_t dim = 8;                // FM factor and embedding dimension (LR ignores it)
  size_t fields = 1;             // field slots of the deep models (keys of fields 0..fields-1)
  size_t dense = 0;              // dense features per sample (Batch::dense_dim)
  std::vector<size_t> mlp{};     // hidden sizes: DeepFM's and DCN-v2's deep tower, DLRM's top MLP
  std::vector<size_t> bottom{};  // DLRM's bottom MLP hidden sizes (its output has `dim` floats)
  size_t cross_layers = 3;       // DCN-v2's cross layers
  // Where the math runs (--device): LR and FM on any backend (gpu/fm_pass.h off the CPU), the
  // deep models on the CPU in this version. A worker's own choice, not part of the job.
  DeviceChoice device{};
  // Threads that share each batch of a deep model (--compute-threads): its samples split into
  // this many contiguous shares, each through a copy of the model on a thread of its own, the
  // gradients added in share order. Results depend on the count, never on timing; 1 runs on the
  // caller's thread. Above 1 the process's OpenBLAS runs each product on its caller's thread.
  // A worker's own choice, not part of the job; LR and FM ignore it.
  size_t compute_threads = 1;

  bool deep() const { return kind != ModelKind::lr && kind != ModelKind::fm; }
  // Floats per parameter-server row.
  size_t width() const;
  // Leading floats of a row that start at zero (linear weights); the rest are embeddings.
  size_t linear() const { return width() - (kind == ModelKind::lr ? 0 : dim); }
  // Dense features have rows of their own (LR, FM, DeepFM).
  bool dense_rows() const {
    return kind == ModelKind::lr || kind == ModelKind::fm || kind == ModelKind::deepfm;
  }
};

// "lr", "fm", "deepfm", "dlrm" or "dcn"; invalid_input naming the accepted values otherwise.
Expected<ModelKind> parse_model(const std::string& name);
const char* to_string(ModelKind kind);
// A layer list such as "256,128": positive sizes, at most max_layers layers of at most
// max_layer_units units; "none" or "" is no hidden layer. invalid_input naming the bad element
// otherwise.
Expected<std::vector<size_t>> parse_layer_sizes(const std::string& text);
inline constexpr size_t max_layers = 16;
inline constexpr size_t max_layer_units = 65536;
// Dense parameters a model may have (1 GiB of fp32; training holds about four times that with
// gradients and Adam's moments).
inline constexpr size_t max_dense_params = size_t{1} << 28;
std::string layer_sizes_text(const std::vector<size_t>& sizes);
// The defaults of `kind`'s flags: DeepFM --mlp 256,128; DLRM --bottom 64 --mlp 256,128;
// DCN-v2 --mlp 256,128 with 3 cross layers. `spec` keeps its dim, fields and dense.
ModelSpec with_model_defaults(ModelSpec spec);
inline constexpr size_t max_fm_dim = 1024;
inline constexpr size_t max_fields = 255;
inline constexpr size_t max_dense = 1024;
inline constexpr size_t max_compute_threads = 64;

// Maps each feature of a batch to a slot in the batch's list of unique keys.
// Slot 0 is bias_key; with dense rows, slots 1..dense_dim are dense_key(0..dense_dim-1); other
// keys get slots in order of first appearance.
class BatchIndex {
 public:
  void build(const Batch& batch, bool dense_rows = false);
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

class Model {
 public:
  // Fails with invalid_input for a dimension, field count, dense count, compute thread count or
  // layer list out of range (naming the flag), dense layers of more than max_dense_params
  // parameters, or a device that check_device refuses.
  static Expected<std::unique_ptr<Model>> make(const ModelSpec& spec);
  virtual ~Model() = default;

  const ModelSpec& spec() const { return spec_; }
  size_t width() const { return spec_.width(); }
  // Number of dense (replicated) parameters; 0 for LR and FM.
  virtual size_t dense_params() const { return 0; }
  // Deterministic initial dense parameters from `seed` (size dense_params()).
  virtual void init_dense(std::span<float> params, uint64_t seed) const;
  // Floating-point operations per sample in the dense layers' forward pass (two per
  // multiply-add), for throughput reports.
  virtual size_t dense_flops_per_sample() const { return 0; }
  // The threads this model shares its batches among (ModelSpec::compute_threads above 1), which
  // a caller may use for its own per-step work between calls (the dense optimizer's update);
  // nullptr when the model runs on the caller's thread.
  virtual PartThreads* part_threads() { return nullptr; }

  // invalid_input when `batch` does not fit a deep model: dense features other than
  // spec().dense, or a key whose field is spec().fields or more. LR and FM take any batch.
  Status check(const Batch& batch) const;

  // Forward and backward pass: `rows` holds the parameters of each slot (slots x width()),
  // `grads` (same shape) and `dense_grads` (dense_params()) receive the summed gradient of the
  // batch's log loss (added to what is there). Writes each sample's logit to `logits` when it is
  // not empty (size batch.rows()). Returns the summed log loss. Precondition: check(batch) is ok,
  // `slots` comes from BatchIndex::build(batch, spec().dense_rows()), and `dense` and
  // `dense_grads` have dense_params() floats.
  virtual double forward_backward(const Batch& batch, std::span<const uint32_t> slots,
                                  std::span<const float> rows, std::span<const float> dense,
                                  std::span<float> grads, std::span<float> dense_grads,
                                  std::span<float> logits) = 0;
  // Forward pass only: each sample's logit into `logits` (size batch.rows()). Preconditions as
  // for forward_backward; `dense` has dense_params() floats.
  virtual void forward(const Batch& batch, std::span<const uint32_t> slots,
                       std::span<const float> rows, std::span<const float> dense,
                       std::span<float> logits) = 0;

 protected:
  explicit Model(const ModelSpec& spec) : spec_(spec) {}
  ModelSpec spec_;
};

}  // namespace colony
