// DeepFM, DLRM and DCN-v2 over field embeddings pooled from parameter-server rows.
#include "models/deep.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/hash.h"
#include "common/metrics.h"
#include "common/parallel.h"
#include "models/layers.h"

namespace colony {
namespace {

using nn::CrossNet;
using nn::DotInteraction;
using nn::Linear;
using nn::Mlp;
using nn::ParamLayout;

// What every deep model shares: pooling rows into field embeddings and scattering their
// gradients back, the input [embeddings, dense] and the loss.
class DeepModel : public Model {
 public:
  explicit DeepModel(const ModelSpec& spec)
      : Model(spec), offset_(spec.kind == ModelKind::deepfm ? 1 : 0) {}

  size_t dense_params() const override { return layout_.size(); }

  double forward_backward(const Batch& batch, std::span<const uint32_t> slots,
                          std::span<const float> rows, std::span<const float> dense,
                          std::span<float> grads, std::span<float> dense_grads,
                          std::span<float> logits) override {
    COLONY_ASSERT(grads.size() == rows.size(), "grads={} rows={}", grads.size(), rows.size());
    COLONY_ASSERT(dense.size() == dense_params(), "dense={} params={}", dense.size(),
                  dense_params());
    COLONY_ASSERT(dense_grads.size() == dense_params(), "dense_grads={} params={}",
                  dense_grads.size(), dense_params());
    COLONY_ASSERT(logits.empty() || logits.size() == batch.rows());
    if (pass_)
      return pass_->run(device_batch(batch, slots, rows), rows.data(), dense.data(), grads.data(),
                        dense_grads.data(), logits.empty() ? nullptr : logits.data());
    const size_t n = batch.rows();
    z_.resize(n);
    run_forward(batch, slots, rows, dense.data(), z_.data());
    double loss = 0.0;
    dz_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      loss += logloss_from_logit(z_[i], batch.labels[i]);
      dz_[i] = static_cast<float>(sigmoid(z_[i])) - batch.labels[i];
    }
    if (!logits.empty()) std::copy(z_.begin(), z_.end(), logits.begin());
    demb_.assign(n * spec_.fields * spec_.dim, 0.0f);
    run_backward(batch, slots, rows, dense.data(), dz_.data(), grads.data(), dense_grads.data());
    scatter(batch, slots, grads.data());
    return loss;
  }

  void forward(const Batch& batch, std::span<const uint32_t> slots, std::span<const float> rows,
               std::span<const float> dense, std::span<float> logits) override {
    COLONY_ASSERT(logits.size() == batch.rows());
    COLONY_ASSERT(dense.size() == dense_params(), "dense={} params={}", dense.size(),
                  dense_params());
    if (pass_) {
      pass_->run(device_batch(batch, slots, rows), rows.data(), dense.data(), nullptr, nullptr,
                 logits.data());
      return;
    }
    run_forward(batch, slots, rows, dense.data(), logits.data());
  }

 protected:
  // Off the CPU, the device code of gpu/deep_pass.h runs forward_backward and forward instead of
  // run_forward and run_backward (with bf16 products on a GPU). `shape` gives the kind and the
  // layers; the rest comes from the spec.
  void use_device(gpu::DeepShape shape) {
    if (spec_.device.backend == Backend::cpu) return;
    shape.dim = spec_.dim;
    shape.fields = spec_.fields;
    shape.dense = spec_.dense;
    shape.params = layout_.size();
    pass_ = spec_.device.backend == Backend::device_host
                ? gpu::make_deep_pass_host(shape)
                : gpu::make_deep_pass_cuda(shape, spec_.device.index, gpu::DeviceProducts::bf16);
    COLONY_ASSERT(pass_ != nullptr, "device {}", device_text(spec_.device));
  }
  static gpu::DeepLayer device_layer(const Linear& l) { return {l.in, l.out, l.w, l.b}; }
  static std::vector<gpu::DeepLayer> device_layers(const Mlp& mlp) {
    std::vector<gpu::DeepLayer> layers;
    for (const Linear& l : mlp.layers()) layers.push_back(device_layer(l));
    return layers;
  }

  // Logits of the batch into z (pooling first); keeps what run_backward needs.
  virtual void run_forward(const Batch& batch, std::span<const uint32_t> slots,
                           std::span<const float> rows, const float* params, float* z) = 0;
  // Given dz, adds dense gradients and the bias's, and adds dL/d(embedding) into demb_
  // (n x fields x dim, zeroed by the caller); may add to the row gradients directly (DeepFM's
  // FM part).
  virtual void run_backward(const Batch& batch, std::span<const uint32_t> slots,
                            std::span<const float> rows, const float* params, const float* dz,
                            float* grads, float* dense_grads) = 0;

  // emb_ (n x fields x dim): per sample and field, the sum of v_k x_k over its features.
  void pool(const Batch& b, std::span<const uint32_t> slots, std::span<const float> rows) {
    const size_t d = spec_.dim, w = spec_.width(), fd = spec_.fields * d;
    emb_.assign(b.rows() * fd, 0.0f);
    for (size_t i = 0; i < b.rows(); ++i) {
      float* e = &emb_[i * fd];
      for (uint32_t k = b.offsets[i]; k < b.offsets[i + 1]; ++k) {
        const uint32_t field = key_field(b.keys[k]);
        COLONY_ASSERT(field < spec_.fields, "field {} of {} (Model::check not called)", field,
                      spec_.fields);
        const float* v = &rows[size_t{slots[k]} * w + offset_];
        const float x = b.values[k];
        float* ef = e + size_t{field} * d;
        for (size_t j = 0; j < d; ++j) ef[j] += v[j] * x;
      }
    }
  }
  // Adds demb_ back into the rows' gradients.
  void scatter(const Batch& b, std::span<const uint32_t> slots, float* grads) const {
    const size_t d = spec_.dim, w = spec_.width(), fd = spec_.fields * d;
    for (size_t i = 0; i < b.rows(); ++i) {
      const float* de = &demb_[i * fd];
      for (uint32_t k = b.offsets[i]; k < b.offsets[i + 1]; ++k) {
        const float* def = de + size_t{key_field(b.keys[k])} * d;
        float* g = grads + size_t{slots[k]} * w + offset_;
        const float x = b.values[k];
        for (size_t j = 0; j < d; ++j) g[j] += def[j] * x;
      }
    }
  }
  // x0_ (n x (fields*dim + dense)): the embeddings, then the dense features.
  void concat_input(const Batch& b) {
    const size_t fd = spec_.fields * spec_.dim, in = fd + spec_.dense;
    x0_.resize(b.rows() * in);
    for (size_t i = 0; i < b.rows(); ++i) {
      std::copy_n(&emb_[i * fd], fd, &x0_[i * in]);
      std::copy_n(b.dense.data() + i * spec_.dense, spec_.dense, &x0_[i * in + fd]);
    }
  }
  // Splits dx0 (n x (fields*dim + dense)) into demb_ (added).
  void split_input_grad(size_t n, const float* dx0) {
    const size_t fd = spec_.fields * spec_.dim, in = fd + spec_.dense;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < fd; ++j) demb_[i * fd + j] += dx0[i * in + j];
  }
  size_t input_width() const { return spec_.fields * spec_.dim + spec_.dense; }

  ParamLayout layout_;
  const size_t offset_;  // where the embedding starts in a row (after DeepFM's w)
  std::vector<float> z_, dz_, emb_, demb_, x0_, dx0_;

 private:
  gpu::DeepBatch device_batch(const Batch& b, std::span<const uint32_t> slots,
                              std::span<const float> rows) {
    COLONY_ASSERT(slots.size() == b.features(), "slots={} features={}", slots.size(), b.features());
    const gpu::DeepBatch batch = deep_device_batch(b, slots, rows.size() / width(),
                                                   spec_.dense_rows(), device_ws_, device_fields_);
    // What pool() asserts on the CPU: the device code would index outside the sample's input.
    for (uint32_t field : device_fields_)
      COLONY_ASSERT(field == gpu::no_field || field < spec_.fields,
                    "field {} of {} (Model::check not called)", field, spec_.fields);
    return batch;
  }
  std::unique_ptr<gpu::DeepPass> pass_;
  FeatureWorkspace device_ws_;
  std::vector<uint32_t> device_fields_;
};

// DeepFM: z = FM(x) + MLP([e_1 .. e_F, dense]), the FM part over the same rows (w and v).
class DeepFm final : public DeepModel {
 public:
  explicit DeepFm(const ModelSpec& spec) : DeepModel(spec) {
    std::vector<size_t> sizes{input_width()};
    sizes.insert(sizes.end(), spec.mlp.begin(), spec.mlp.end());
    sizes.push_back(1);
    mlp_ = Mlp::make(layout_, sizes, true);
    gpu::DeepShape shape;
    shape.kind = gpu::DeepKind::deepfm;
    shape.mlp = device_layers(mlp_);
    use_device(shape);
  }
  void init_dense(std::span<float> params, uint64_t seed) const override {
    Model::init_dense(params, seed);
    mlp_.init(params, seed);
  }
  size_t dense_flops_per_sample() const override { return mlp_.flops_per_sample(); }

 private:
  void run_forward(const Batch& b, std::span<const uint32_t> slots, std::span<const float> rows,
                   const float* params, float* z) override {
    fm_logits(spec_.dim, b, slots, rows, z, ws_);
    pool(b, slots, rows);
    concat_input(b);
    const float* h = mlp_.forward(params, x0_.data(), b.rows());
    for (size_t i = 0; i < b.rows(); ++i) z[i] += h[i];
  }
  void run_backward(const Batch& b, std::span<const uint32_t> slots, std::span<const float> rows,
                    const float* params, const float* dz, float* grads,
                    float* dense_grads) override {
    fm_backward(spec_.dim, b, slots, rows, dz, grads, ws_);
    dx0_.resize(b.rows() * input_width());
    mlp_.backward(params, x0_.data(), dz, b.rows(), dense_grads, dx0_.data());
    split_input_grad(b.rows(), dx0_.data());
  }
  Mlp mlp_;
  FeatureWorkspace ws_;
};

// DLRM: bottom MLP on the dense features (to dim floats, ReLU), dot products of every pair of
// [bottom, e_1 .. e_F], top MLP on [bottom, dots] to the logit.
class Dlrm final : public DeepModel {
 public:
  explicit Dlrm(const ModelSpec& spec) : DeepModel(spec) {
    if (spec.dense > 0) {
      std::vector<size_t> sizes{spec.dense};
      sizes.insert(sizes.end(), spec.bottom.begin(), spec.bottom.end());
      sizes.push_back(spec.dim);
      bottom_ = Mlp::make(layout_, sizes, false);
    }
    vectors_ = spec.fields + (spec.dense > 0 ? 1 : 0);
    dot_ = DotInteraction{std::max<size_t>(vectors_, 2), spec.dim};
    top_in_ = (spec.dense > 0 ? spec.dim : 0) + (vectors_ >= 2 ? dot_.out() : 0);
    if (vectors_ < 2) top_in_ = spec.dim;  // one field, no dense: the embedding itself
    std::vector<size_t> sizes{top_in_};
    sizes.insert(sizes.end(), spec.mlp.begin(), spec.mlp.end());
    sizes.push_back(1);
    top_ = Mlp::make(layout_, sizes, true);
    gpu::DeepShape shape;
    shape.kind = gpu::DeepKind::dlrm;
    shape.mlp = device_layers(top_);
    if (bottom_) shape.bottom = device_layers(*bottom_);
    use_device(shape);
  }
  void init_dense(std::span<float> params, uint64_t seed) const override {
    Model::init_dense(params, seed);
    if (bottom_) bottom_->init(params, seed);
    top_.init(params, hash_combine(seed, 1));
  }
  size_t dense_flops_per_sample() const override {
    return (bottom_ ? bottom_->flops_per_sample() : 0) + top_.flops_per_sample() +
           (vectors_ >= 2 ? dot_.flops_per_sample() : 0);
  }

 private:
  void run_forward(const Batch& b, std::span<const uint32_t> slots, std::span<const float> rows,
                   const float* params, float* z) override {
    const size_t n = b.rows(), d = spec_.dim, fd = spec_.fields * d;
    pool(b, slots, rows);
    const float* bot = bottom_ ? bottom_->forward(params, b.dense.data(), n) : nullptr;
    top_x_.resize(n * top_in_);
    if (vectors_ < 2) {
      std::copy_n(emb_.data(), n * d, top_x_.data());
    } else {
      const size_t vd = vectors_ * d, lead = bot ? d : 0;
      vecs_.resize(n * vd);
      for (size_t i = 0; i < n; ++i) {
        if (bot) std::copy_n(bot + i * d, d, &vecs_[i * vd]);
        std::copy_n(&emb_[i * fd], fd, &vecs_[i * vd + lead]);
      }
      dots_.resize(n * dot_.out());
      dot_.forward(vecs_.data(), n, dots_.data());
      for (size_t i = 0; i < n; ++i) {
        if (bot) std::copy_n(bot + i * d, d, &top_x_[i * top_in_]);
        std::copy_n(&dots_[i * dot_.out()], dot_.out(), &top_x_[i * top_in_ + lead]);
      }
    }
    const float* y = top_.forward(params, top_x_.data(), n);
    const float bias = rows[0];
    for (size_t i = 0; i < n; ++i) z[i] = bias + y[i];
  }
  void run_backward(const Batch& b, std::span<const uint32_t>, std::span<const float>,
                    const float* params, const float* dz, float* grads,
                    float* dense_grads) override {
    const size_t n = b.rows(), d = spec_.dim, fd = spec_.fields * d;
    for (size_t i = 0; i < n; ++i) grads[0] += dz[i];
    dtop_.resize(n * top_in_);
    top_.backward(params, top_x_.data(), dz, n, dense_grads, dtop_.data());
    if (vectors_ < 2) {
      for (size_t j = 0; j < n * d; ++j) demb_[j] += dtop_[j];
      return;
    }
    const size_t vd = vectors_ * d, lead = bottom_ ? d : 0;
    ddots_.resize(n * dot_.out());
    for (size_t i = 0; i < n; ++i)
      std::copy_n(&dtop_[i * top_in_ + lead], dot_.out(), &ddots_[i * dot_.out()]);
    dvecs_.resize(n * vd);
    dot_.backward(vecs_.data(), ddots_.data(), n, dvecs_.data());
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < fd; ++j) demb_[i * fd + j] += dvecs_[i * vd + lead + j];
    if (!bottom_) return;
    dbot_.resize(n * d);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < d; ++j) dbot_[i * d + j] = dtop_[i * top_in_ + j] + dvecs_[i * vd + j];
    bottom_->backward(params, b.dense.data(), dbot_.data(), n, dense_grads, nullptr);
  }
  std::optional<Mlp> bottom_;
  Mlp top_;
  DotInteraction dot_;
  size_t vectors_ = 0, top_in_ = 0;
  std::vector<float> vecs_, dots_, top_x_, dtop_, ddots_, dvecs_, dbot_;
};

// DCN-v2 (parallel): a cross network and a deep tower over x0 = [e_1 .. e_F, dense], a linear
// head over [cross output, tower output].
class Dcn final : public DeepModel {
 public:
  explicit Dcn(const ModelSpec& spec) : DeepModel(spec) {
    cross_ = CrossNet::make(layout_, input_width(), spec.cross_layers);
    if (!spec.mlp.empty()) {
      std::vector<size_t> sizes{input_width()};
      sizes.insert(sizes.end(), spec.mlp.begin(), spec.mlp.end());
      tower_ = Mlp::make(layout_, sizes, false);
    }
    head_in_ = input_width() + (tower_ ? tower_->out() : 0);
    head_ = Linear::make(layout_, head_in_, 1);
    gpu::DeepShape shape;
    shape.kind = gpu::DeepKind::dcn;
    if (tower_) shape.mlp = device_layers(*tower_);
    for (const Linear& l : cross_.layers()) shape.cross.push_back(device_layer(l));
    shape.head = device_layer(head_);
    use_device(shape);
  }
  void init_dense(std::span<float> params, uint64_t seed) const override {
    Model::init_dense(params, seed);
    cross_.init(params, seed);
    if (tower_) tower_->init(params, hash_combine(seed, 1));
    head_.init(params, hash_combine(seed, 2));
  }
  size_t dense_flops_per_sample() const override {
    return cross_.flops_per_sample() + (tower_ ? tower_->flops_per_sample() : 0) +
           head_.flops_per_sample();
  }

 private:
  void run_forward(const Batch& b, std::span<const uint32_t> slots, std::span<const float> rows,
                   const float* params, float* z) override {
    const size_t n = b.rows(), in = input_width();
    pool(b, slots, rows);
    concat_input(b);
    const float* xc = cross_.forward(params, x0_.data(), n);
    const float* h = tower_ ? tower_->forward(params, x0_.data(), n) : nullptr;
    const size_t ho = tower_ ? tower_->out() : 0;
    head_x_.resize(n * head_in_);
    for (size_t i = 0; i < n; ++i) {
      std::copy_n(xc + i * in, in, &head_x_[i * head_in_]);
      if (h) std::copy_n(h + i * ho, ho, &head_x_[i * head_in_ + in]);
    }
    head_.forward(params, head_x_.data(), n, z);
    const float bias = rows[0];
    for (size_t i = 0; i < n; ++i) z[i] += bias;
  }
  void run_backward(const Batch& b, std::span<const uint32_t>, std::span<const float>,
                    const float* params, const float* dz, float* grads,
                    float* dense_grads) override {
    const size_t n = b.rows(), in = input_width(), ho = tower_ ? tower_->out() : 0;
    for (size_t i = 0; i < n; ++i) grads[0] += dz[i];
    dhead_.resize(n * head_in_);
    head_.backward(params, head_x_.data(), dz, n, dense_grads, dhead_.data());
    dpart_.resize(n * in);
    for (size_t i = 0; i < n; ++i) std::copy_n(&dhead_[i * head_in_], in, &dpart_[i * in]);
    dx0_.resize(n * in);
    cross_.backward(params, x0_.data(), dpart_.data(), n, dense_grads, dx0_.data());
    split_input_grad(n, dx0_.data());
    if (!tower_) return;
    dpart_.resize(n * ho);
    for (size_t i = 0; i < n; ++i) std::copy_n(&dhead_[i * head_in_ + in], ho, &dpart_[i * ho]);
    tower_->backward(params, x0_.data(), dpart_.data(), n, dense_grads, dx0_.data());
    split_input_grad(n, dx0_.data());
  }
  CrossNet cross_;
  std::optional<Mlp> tower_;
  Linear head_;
  size_t head_in_ = 0;
  std::vector<float> head_x_, dhead_, dpart_;
};

// A deep model whose batches are shared among threads (ModelSpec::compute_threads): the
// samples in contiguous shares, share i through copy i of the model on thread i. Share 0 adds
// its gradients where the caller asked; the others into buffers of their own, added after it in
// share order, so the result depends on the number of shares (min(threads, samples)) only.
class SplitModel final : public Model {
 public:
  SplitModel(const ModelSpec& spec, std::vector<std::unique_ptr<Model>> copies)
      : Model(spec), copies_(std::move(copies)), threads_(copies_.size()) {
    COLONY_ASSERT(copies_.size() >= 2, "copies={}", copies_.size());
    parts_.resize(copies_.size());
    nn::single_threaded_blas();
  }

  size_t dense_params() const override { return copies_[0]->dense_params(); }
  void init_dense(std::span<float> params, uint64_t seed) const override {
    copies_[0]->init_dense(params, seed);
  }
  size_t dense_flops_per_sample() const override { return copies_[0]->dense_flops_per_sample(); }
  PartThreads* part_threads() override { return &threads_; }

  double forward_backward(const Batch& batch, std::span<const uint32_t> slots,
                          std::span<const float> rows, std::span<const float> dense,
                          std::span<float> grads, std::span<float> dense_grads,
                          std::span<float> logits) override {
    const size_t k = split(batch);
    if (k == 1)
      return copies_[0]->forward_backward(batch, slots, rows, dense, grads, dense_grads, logits);
    threads_.run([&](size_t i) {
      if (i >= k) return;
      Part& p = parts_[i];
      std::span<float> g = grads, dg = dense_grads;
      if (i > 0) {
        p.grads.assign(rows.size(), 0.0f);
        p.dense_grads.assign(dense_grads.size(), 0.0f);
        g = p.grads;
        dg = p.dense_grads;
      }
      p.loss = copies_[i]->forward_backward(share(batch, i), share_slots(slots, i), rows, dense, g,
                                            dg, logits.empty() ? logits : share_of(logits, i));
    });
    double loss = parts_[0].loss;
    for (size_t i = 1; i < k; ++i) {
      const Part& p = parts_[i];
      loss += p.loss;
      for (size_t j = 0; j < grads.size(); ++j) grads[j] += p.grads[j];
      for (size_t j = 0; j < dense_grads.size(); ++j) dense_grads[j] += p.dense_grads[j];
    }
    return loss;
  }

  void forward(const Batch& batch, std::span<const uint32_t> slots, std::span<const float> rows,
               std::span<const float> dense, std::span<float> logits) override {
    const size_t k = split(batch);
    if (k == 1) return copies_[0]->forward(batch, slots, rows, dense, logits);
    threads_.run([&](size_t i) {
      if (i < k)
        copies_[i]->forward(share(batch, i), share_slots(slots, i), rows, dense,
                            share_of(logits, i));
    });
  }

 private:
  struct Part {
    size_t first = 0, rows = 0;              // the share's samples in the whole batch
    size_t feature_first = 0, features = 0;  // and its features
    Batch batch;                             // a copy of them
    std::vector<float> grads, dense_grads;
    double loss = 0.0;
  };
  // Sets the bounds of k = min(threads, samples) shares of `batch`; returns k.
  size_t split(const Batch& batch) {
    const size_t n = batch.rows(), k = std::max<size_t>(1, std::min(copies_.size(), n));
    for (size_t i = 0; k > 1 && i < k; ++i) {
      Part& p = parts_[i];
      const auto [first, end] = part_range(n, i, k);
      p.first = first;
      p.rows = end - first;
      p.feature_first = batch.offsets[first];
      p.features = batch.offsets[end] - p.feature_first;
    }
    return k;
  }
  // Share i's samples, copied by the thread that computes them.
  const Batch& share(const Batch& batch, size_t i) {
    Part& p = parts_[i];
    p.batch.clear();
    p.batch.append_rows(batch, p.first, p.rows);
    return p.batch;
  }
  std::span<const uint32_t> share_slots(std::span<const uint32_t> slots, size_t i) const {
    return slots.subspan(parts_[i].feature_first, parts_[i].features);
  }
  std::span<float> share_of(std::span<float> per_sample, size_t i) const {
    return per_sample.subspan(parts_[i].first, parts_[i].rows);
  }

  std::vector<std::unique_ptr<Model>> copies_;
  std::vector<Part> parts_;
  PartThreads threads_;
};

}  // namespace

Expected<std::unique_ptr<Model>> make_deep_model(const ModelSpec& spec) {
  COLONY_ASSERT(spec.deep());
  if (spec.kind == ModelKind::dcn && (spec.cross_layers < 1 || spec.cross_layers > 16))
    return Status::invalid_input(
        fmt::format("--cross-layers {} is out of range, expected 1..16", spec.cross_layers));
  if (spec.compute_threads > 1) {
    ModelSpec one = spec;
    one.compute_threads = 1;
    std::vector<std::unique_ptr<Model>> copies;
    for (size_t i = 0; i < spec.compute_threads; ++i) {
      auto copy = make_deep_model(one);
      if (!copy) return copy.status();
      copies.push_back(std::move(copy.value()));
    }
    return std::unique_ptr<Model>(new SplitModel(spec, std::move(copies)));
  }
  switch (spec.kind) {
    case ModelKind::deepfm:
      return std::unique_ptr<Model>(new DeepFm(spec));
    case ModelKind::dlrm:
      return std::unique_ptr<Model>(new Dlrm(spec));
    case ModelKind::dcn:
      return std::unique_ptr<Model>(new Dcn(spec));
    default:
      break;
  }
  COLONY_ASSERT(false, "not a deep model: {}", to_string(spec.kind));
  return Status::internal("not a deep model");
}

}  // namespace colony
