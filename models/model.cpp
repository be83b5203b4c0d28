#include "models/model.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "common/hash.h"
#include "common/metrics.h"
#include "gpu/fm_pass.h"
#include "models/deep.h"

namespace colony {

size_t ModelSpec::width() const {
  switch (kind) {
    case ModelKind::lr:
      return 1;
    case ModelKind::fm:
    case ModelKind::deepfm:
      return 1 + dim;
    case ModelKind::dlrm:
    case ModelKind::dcn:
      return dim;
  }
  return 1 + dim;
}

Expected<ModelKind> parse_model(const std::string& name) {
  if (name == "lr") return ModelKind::lr;
  if (name == "fm") return ModelKind::fm;
  if (name == "deepfm") return ModelKind::deepfm;
  if (name == "dlrm") return ModelKind::dlrm;
  if (name == "dcn") return ModelKind::dcn;
  return Status::invalid_input("unknown model \"" + name +
                               "\", expected lr, fm, deepfm, dlrm or dcn");
}

const char* to_string(ModelKind kind) {
  switch (kind) {
    case ModelKind::lr:
      return "lr";
    case ModelKind::fm:
      return "fm";
    case ModelKind::deepfm:
      return "deepfm";
    case ModelKind::dlrm:
      return "dlrm";
    case ModelKind::dcn:
      return "dcn";
  }
  return "?";
}

Expected<std::vector<size_t>> parse_layer_sizes(const std::string& text) {
  std::vector<size_t> sizes;
  if (text.empty() || text == "none") return sizes;
  size_t pos = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    size_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 1 ||
        v > max_layer_units)
      return Status::invalid_input(
          fmt::format("\"{}\": layer {} is \"{}\", expected a size 1..{} (a list such as 256,128)",
                      text, sizes.size() + 1, item, max_layer_units));
    sizes.push_back(v);
    if (sizes.size() > max_layers)
      return Status::invalid_input(fmt::format("\"{}\": more than {} layers", text, max_layers));
    if (comma == text.size()) return sizes;
    pos = comma + 1;
  }
}

std::string layer_sizes_text(const std::vector<size_t>& sizes) {
  if (sizes.empty()) return "none";
  std::string out;
  for (size_t s : sizes) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

ModelSpec with_model_defaults(ModelSpec spec) {
  spec.mlp.clear();
  spec.bottom.clear();
  spec.cross_layers = 3;
  if (spec.deep()) spec.mlp = {256, 128};
  if (spec.kind == ModelKind::dlrm) spec.bottom = {64};
  return spec;
}

void BatchIndex::build(const Batch& batch, bool dense_rows) {
  const size_t dense = dense_rows ? batch.dense_dim : 0;
  const size_t want = std::max<size_t>(1024, 2 * (batch.features() + dense + 1));
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
  for (size_t j = 0; j < dense; ++j) slot_of(dense_key(static_cast<uint32_t>(j)));
  // A large batch's table is far bigger than the CPU's first caches and each key lands anywhere
  // in it: the slot of a key a few ahead is fetched while this one is placed.
  constexpr size_t ahead = 16;
  const uint64_t* keys = batch.keys.data();
  const size_t n = batch.features();
  for (size_t i = 0; i < n; ++i) {
    if (i + ahead < n) __builtin_prefetch(&table_[mix64(keys[i + ahead]) & mask]);
    slots_[i] = slot_of(keys[i]);
  }
}

void Model::init_dense(std::span<float> params, uint64_t) const {
  COLONY_ASSERT(params.size() == dense_params(), "params={} dense_params={}", params.size(),
                dense_params());
}

Status Model::check(const Batch& batch) const {
  if (!spec_.deep()) return Status();  // any dense features become rows of their own
  for (uint64_t key : batch.keys) {
    const uint32_t f = key_field(key);
    if (f >= spec_.fields)
      return Status::invalid_input(
          fmt::format("a feature of field {} in a model of fields 0..{} (set --fields {} or more)",
                      f, spec_.fields - 1, f + 1));
  }
  if (batch.dense_dim != spec_.dense)
    return Status::invalid_input(
        fmt::format("the data has {} dense features per sample, the model was built for {}",
                    batch.dense_dim, spec_.dense));
  return Status();
}

namespace {

// A batch's features as LR and FM see them: per row, its dense features (slots 1..dense_dim,
// when the batch has any) then its sparse ones. Without dense features it points into the
// batch and `slots`; with them it is built in `ws`.
struct FeatureView {
  size_t rows = 0;
  const float* labels = nullptr;
  const uint32_t* offsets = nullptr;
  const uint32_t* slots = nullptr;
  const float* values = nullptr;
};

FeatureView feature_view(const Batch& b, std::span<const uint32_t> slots, FeatureWorkspace& ws) {
  FeatureView v{b.rows(), b.labels.data(), b.offsets.data(), slots.data(), b.values.data()};
  const size_t d = b.dense_dim;
  if (d == 0) return v;
  ws.offsets.resize(b.rows() + 1);
  ws.slots.resize(b.features() + b.rows() * d);
  ws.values.resize(ws.slots.size());
  size_t at = 0;
  ws.offsets[0] = 0;
  for (size_t i = 0; i < b.rows(); ++i) {
    for (size_t j = 0; j < d; ++j, ++at) {
      ws.slots[at] = static_cast<uint32_t>(1 + j);
      ws.values[at] = b.dense[i * d + j];
    }
    for (uint32_t f = b.offsets[i]; f < b.offsets[i + 1]; ++f, ++at) {
      ws.slots[at] = slots[f];
      ws.values[at] = b.values[f];
    }
    ws.offsets[i + 1] = static_cast<uint32_t>(at);
  }
  v.offsets = ws.offsets.data();
  v.slots = ws.slots.data();
  v.values = ws.values.data();
  return v;
}

// One kernel for both passes; `Backward` selects whether gradients are accumulated.
template <bool Backward>
double lr_pass(const FeatureView& b, const float* rows, float* grads, float* logits) {
  double loss = 0.0;
  const float bias = rows[0];
  const uint32_t* slots = b.slots;
  for (size_t i = 0; i < b.rows; ++i) {
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
// With `given_g` (Backward only), the gradient of each sample's logit is given (the FM part of
// a larger model) and no loss is computed; `logits` then receives nothing.
template <bool Backward, size_t D>
double fm_pass(const FeatureView& b, const float* rows, size_t dim, float* grads, float* logits,
               float* scratch, const float* given_g) {
  const uint32_t* slots = b.slots;
  const size_t d_n = D > 0 ? D : dim;
  const size_t width = 1 + d_n;
  double loss = 0.0;
  const float bias = rows[0];
  float* sum = scratch;  // per dimension: sum_k v_kd x_k
  for (size_t i = 0; i < b.rows; ++i) {
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
      float g;
      if (given_g) {
        g = given_g[i];
      } else {
        loss += logloss_from_logit(z, b.labels[i]);
        g = static_cast<float>(sigmoid(z)) - b.labels[i];
      }
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
double fm_run(size_t dim, const FeatureView& b, const float* rows, float* grads, float* logits,
              const float* given_g = nullptr) {
  COLONY_ASSERT(dim >= 1 && dim <= max_fm_dim, "dim={}", dim);
  std::array<float, max_fm_dim> scratch;
  switch (dim) {
    case 4:
      return fm_pass<Backward, 4>(b, rows, 4, grads, logits, scratch.data(), given_g);
    case 8:
      return fm_pass<Backward, 8>(b, rows, 8, grads, logits, scratch.data(), given_g);
    case 16:
      return fm_pass<Backward, 16>(b, rows, 16, grads, logits, scratch.data(), given_g);
    case 32:
      return fm_pass<Backward, 32>(b, rows, 32, grads, logits, scratch.data(), given_g);
    default:
      return fm_pass<Backward, 0>(b, rows, dim, grads, logits, scratch.data(), given_g);
  }
}

// LR and FM: sparse parameters only. Off the CPU, the device code of gpu/fm_pass.h does the math.
class SparseModel final : public Model {
 public:
  explicit SparseModel(const ModelSpec& spec) : Model(spec) {
    if (spec.device.backend == Backend::device_host) pass_ = gpu::make_fm_pass_host();
    if (spec.device.backend == Backend::cuda) pass_ = gpu::make_fm_pass_cuda(spec.device.index);
    COLONY_ASSERT((spec.device.backend == Backend::cpu) == !pass_, "device {}",
                  device_text(spec.device));
  }

  double forward_backward(const Batch& batch, std::span<const uint32_t> slots,
                          std::span<const float> rows, std::span<const float>,
                          std::span<float> grads, std::span<float>,
                          std::span<float> logits) override {
    COLONY_ASSERT(grads.size() == rows.size(), "grads={} rows={}", grads.size(), rows.size());
    COLONY_ASSERT(logits.empty() || logits.size() == batch.rows());
    return run<true>(batch, slots, rows, grads.data(), logits.empty() ? nullptr : logits.data());
  }
  void forward(const Batch& batch, std::span<const uint32_t> slots, std::span<const float> rows,
               std::span<const float>, std::span<float> logits) override {
    COLONY_ASSERT(logits.size() == batch.rows());
    run<false>(batch, slots, rows, nullptr, logits.data());
  }

 private:
  template <bool Backward>
  double run(const Batch& b, std::span<const uint32_t> slots, std::span<const float> rows,
             float* grads, float* logits) {
    COLONY_ASSERT(slots.size() == b.features(), "slots={} features={}", slots.size(), b.features());
    const FeatureView view = feature_view(b, slots, ws_);
    if (pass_) {
      const gpu::FmBatch batch{view.rows,  view.labels, view.offsets,
                               view.slots, view.values, rows.size() / width()};
      return pass_->run(batch, spec_.kind == ModelKind::lr ? 0 : spec_.dim, rows.data(), grads,
                        logits);
    }
    if (spec_.kind == ModelKind::lr) return lr_pass<Backward>(view, rows.data(), grads, logits);
    return fm_run<Backward>(spec_.dim, view, rows.data(), grads, logits);
  }
  FeatureWorkspace ws_;
  std::unique_ptr<gpu::FmPass> pass_;
};

}  // namespace

void fm_logits(size_t dim, const Batch& batch, std::span<const uint32_t> slots,
               std::span<const float> rows, float* logits, FeatureWorkspace& ws) {
  fm_run<false>(dim, feature_view(batch, slots, ws), rows.data(), nullptr, logits);
}

void fm_backward(size_t dim, const Batch& batch, std::span<const uint32_t> slots,
                 std::span<const float> rows, const float* dz, float* grads, FeatureWorkspace& ws) {
  fm_run<true>(dim, feature_view(batch, slots, ws), rows.data(), grads, nullptr, dz);
}

gpu::DeepBatch deep_device_batch(const Batch& batch, std::span<const uint32_t> slots,
                                 size_t n_slots, bool dense_rows, FeatureWorkspace& ws,
                                 std::vector<uint32_t>& fields) {
  FeatureView v{batch.rows(), batch.labels.data(), batch.offsets.data(), slots.data(),
                batch.values.data()};
  if (dense_rows) v = feature_view(batch, slots, ws);
  const size_t dense_features = dense_rows ? batch.dense_dim : 0;
  fields.clear();
  for (size_t i = 0; i < batch.rows(); ++i) {
    fields.insert(fields.end(), dense_features, gpu::no_field);
    for (uint32_t k = batch.offsets[i]; k < batch.offsets[i + 1]; ++k)
      fields.push_back(key_field(batch.keys[k]));
  }
  return {
      {v.rows, v.labels, v.offsets, v.slots, v.values, n_slots}, fields.data(), batch.dense.data()};
}

Expected<std::unique_ptr<Model>> Model::make(const ModelSpec& spec) {
  if (spec.kind != ModelKind::lr && (spec.dim < 1 || spec.dim > max_fm_dim))
    return Status::invalid_input(
        fmt::format("--dim {} is out of range, expected 1..{}", spec.dim, max_fm_dim));
  if (spec.dense > max_dense)
    return Status::invalid_input(
        fmt::format("{} dense features per sample, at most {}", spec.dense, max_dense));
  if (Status s = check_device(spec.device); !s.ok()) return s;
  if (spec.compute_threads < 1 || spec.compute_threads > max_compute_threads)
    return Status::invalid_input(fmt::format("--compute-threads {} is out of range, expected 1..{}",
                                             spec.compute_threads, max_compute_threads));
  if (!spec.deep()) return std::unique_ptr<Model>(new SparseModel(spec));
  if (spec.fields < 1 || spec.fields > max_fields)
    return Status::invalid_input(
        fmt::format("--fields {} is out of range, expected 1..{}", spec.fields, max_fields));
  for (const auto& [flag, sizes] : {std::pair{"--mlp", &spec.mlp}, {"--bottom", &spec.bottom}}) {
    // The same rule as parse_layer_sizes, for specs that did not come from a flag.
    const bool bad_size = std::any_of(sizes->begin(), sizes->end(),
                                      [](size_t u) { return u < 1 || u > max_layer_units; });
    if (sizes->size() > max_layers || bad_size)
      return Status::invalid_input(fmt::format("{} {}: expected at most {} layers of 1..{} units",
                                               flag, layer_sizes_text(*sizes), max_layers,
                                               max_layer_units));
  }
  auto model = make_deep_model(spec);
  if (model && (*model)->dense_params() > max_dense_params)
    return Status::invalid_input(fmt::format(
        "--model {} with {} fields, dim {} and {} dense features has {} dense parameters, more "
        "than {}: use a smaller --dim, --mlp{}",
        to_string(spec.kind), spec.fields, spec.dim, spec.dense, (*model)->dense_params(),
        max_dense_params, spec.kind == ModelKind::dcn ? " or --cross-layers" : " or --bottom"));
  return model;
}

}  // namespace colony
