// The CUDA backend on a device: its results against the host build of the same Thrust code
// (gpu/thrust_sum.h), bit for bit. Built only with CUDA. Where no device is present the cases are
// skipped, not passed silently: Boost reports them as skipped, and scripts/gpu-check.sh, which
// runs on a machine with a GPU, fails when any was.
#define BOOST_TEST_MODULE cuda_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/hash.h"
#include "data/batch.h"
#include "gpu/cublas_lib.h"
#include "gpu/deep_pass.h"
#include "gpu/device.h"
#include "gpu/thrust_sum.h"
#include "models/deep.h"
#include "models/model.h"
#include "tests/random_batch.h"
#include "tests/random_grads.h"

using namespace colony;

namespace {

struct HasDevice {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    std::string why;
    const bool any = !cuda_devices(&why).empty();
    boost::test_tools::assertion_result r(any);
    if (!any) r.message() << "no CUDA device: " << why;
    return r;
  }
};

std::vector<gpu::SumInput> views(const std::vector<SparseGrads>& inputs) {
  std::vector<gpu::SumInput> out;
  for (const auto& in : inputs) out.push_back({in.keys.data(), in.values.data(), in.keys.size()});
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Whether a library whose file name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

}  // namespace

// cuBLAS is opened at its first use, not at the start (gpu/cublas_lib.h): linked, its
// initialisers cost every colony process a third of a second. Runs first, on any machine (the
// library opens without a GPU): before, no cuBLAS is mapped; after, it is, with every function.
BOOST_AUTO_TEST_CASE(cublas_is_opened_at_its_first_use_not_when_the_process_starts) {
  BOOST_TEST(!mapped("libcublas"));
  std::string error;
  const gpu::CublasLib* lib = gpu::cublas_lib(&error);
  BOOST_TEST_REQUIRE(lib != nullptr, error);
  BOOST_TEST(lib->create != nullptr);
  BOOST_TEST(lib->gemm_ex != nullptr);
  BOOST_TEST(std::string(lib->status_string(CUBLAS_STATUS_SUCCESS)).size() > 0u);
  BOOST_TEST(mapped("libcublas.so"));
  BOOST_TEST(gpu::cublas_lib() == lib);
}

BOOST_AUTO_TEST_CASE(sparse_sums_on_the_device_equal_the_host_build_bit_for_bit,
                     *boost::unit_test::precondition(HasDevice())) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const size_t width = 1 + seed % 9;
    const auto inputs = testing::random_inputs(seed, width);
    const auto in = views(inputs);
    std::vector<uint64_t> hk, dk;
    std::vector<float> hv, dv;
    gpu::thrust_sum_host(in.data(), in.size(), width, hk, hv);
    gpu::thrust_sum_cuda(in.data(), in.size(), width, dk, dv);
    BOOST_TEST_CONTEXT("seed " << seed << ", width " << width) {
      BOOST_TEST((hk == dk));
      BOOST_TEST(same_bits(hv, dv));
    }
  }
}

BOOST_AUTO_TEST_CASE(dense_sums_on_the_device_equal_the_host_build_bit_for_bit,
                     *boost::unit_test::precondition(HasDevice())) {
  SplitMix64 rng(5);
  std::vector<std::vector<float>> inputs(5, std::vector<float>(100003));
  for (auto& v : inputs)
    for (float& x : v) x = float((rng.uniform() - 0.5) * (rng.next() % 2 ? 1e6 : 1e-3));
  std::vector<const float*> ptrs;
  for (const auto& v : inputs) ptrs.push_back(v.data());
  std::vector<float> h(100003), d(100003);
  gpu::thrust_sum_dense_host(ptrs.data(), ptrs.size(), h.size(), h.data());
  gpu::thrust_sum_dense_cuda(ptrs.data(), ptrs.size(), d.size(), d.data());
  BOOST_TEST(same_bits(h, d));
}

namespace {

// fp32 on the device against the host build: the device fuses multiply-adds and rounds exp and
// log1p its own way, so each float may differ by a few units in the last place of the largest
// term it sums; 1e-4 absolute plus 1e-4 relative bounds that for these magnitudes (rows within
// 0.5, at most 7 features a sample, 512 samples a batch).
bool close(float device, float host) {
  return std::fabs(device - host) <= 1e-4f + 1e-4f * std::fabs(host);
}

}  // namespace

// The CUDA backend's LR and FM pass (gpu/fm_pass.h) on the device against the same code's host
// build, which equals the CPU model bit for bit (model_test): logits, gradients, loss.
BOOST_AUTO_TEST_CASE(fm_pass_on_the_device_matches_the_host_build_within_fp32_bounds,
                     *boost::unit_test::precondition(HasDevice())) {
  for (size_t dim : {size_t{0}, size_t{1}, size_t{8}, size_t{16}, size_t{64}}) {
    ModelSpec spec;
    spec.kind = dim == 0 ? ModelKind::lr : ModelKind::fm;
    spec.dim = dim == 0 ? 8 : dim;
    ModelSpec host = spec, device = spec;
    host.device.backend = Backend::device_host;
    device.device = DeviceChoice{Backend::cuda, 0};
    auto h = std::move(Model::make(host).value());
    auto d = std::move(Model::make(device).value());
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      const Batch b = testing::random_batch(seed, 512, 300, seed % 2 ? 0 : 4);
      BatchIndex index;
      index.build(b, spec.dense_rows());
      const size_t n = index.unique_keys().size() * spec.width();
      std::vector<float> rows(n), gh(n, 0.0f), gd(n, 0.0f), zh(b.rows()), zd(b.rows());
      SplitMix64 rng(seed + 100);
      for (float& r : rows) r = static_cast<float>(rng.uniform() - 0.5);
      const double lh = h->forward_backward(b, index.slots(), rows, {}, gh, {}, zh);
      const double ld = d->forward_backward(b, index.slots(), rows, {}, gd, {}, zd);
      size_t logits_off = 0, grads_off = 0;
      for (size_t i = 0; i < zh.size(); ++i) logits_off += !close(zd[i], zh[i]);
      for (size_t j = 0; j < gh.size(); ++j) grads_off += !close(gd[j], gh[j]);
      BOOST_TEST_CONTEXT(to_string(spec.kind) << " dim " << dim << " seed " << seed) {
        BOOST_TEST(std::fabs(ld - lh) <= 1e-5 * std::fabs(lh));
        BOOST_TEST(logits_off == 0u);
        BOOST_TEST(grads_off == 0u);
      }
    }
  }
}

namespace {

// The floats of `device` that differ from `host` by more than tol times the largest |host|.
size_t off_scale(const std::vector<float>& device, const std::vector<float>& host, float tol) {
  float scale = 0.0f;
  for (float h : host) scale = std::max(scale, std::fabs(h));
  size_t off = 0;
  for (size_t i = 0; i < host.size(); ++i) off += !(std::fabs(device[i] - host[i]) <= tol * scale);
  return off;
}

}  // namespace

// The CUDA backend's deep model pass (gpu/deep_pass.h) on the device against the same code's host
// build, which equals the CPU model bit for bit (model_test): logits, sparse and dense gradients,
// loss. With bf16 products (the deep models on --device cuda) inputs of each product keep 8 bits
// of mantissa, about 0.4% each: each float within 3e-2 of the largest of its kind. With fp32
// products (DeepFM's pass made directly) within 1e-4: cuBLAS sums in its own order, the device
// fuses multiply-adds.
BOOST_AUTO_TEST_CASE(deep_pass_on_the_device_matches_the_host_build_within_bounds,
                     *boost::unit_test::precondition(HasDevice())) {
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn}) {
    for (size_t dim : {size_t{8}, size_t{16}}) {
      for (uint32_t dense : {0u, 4u}) {
        ModelSpec spec;
        spec.kind = kind;
        spec.dim = dim;
        spec.fields = 4;  // random_batch's
        spec.dense = dense;
        spec.mlp = {64, 32};
        spec.bottom = {16};
        ModelSpec host = spec, device = spec;
        host.device.backend = Backend::device_host;
        device.device = DeviceChoice{Backend::cuda, 0};
        auto h = std::move(Model::make(host).value());
        auto d = std::move(Model::make(device).value());
        std::vector<float> params(h->dense_params());
        h->init_dense(params, 3);
        // DeepFM's pass with fp32 products, its layers laid out as the model lays them out.
        std::unique_ptr<gpu::DeepPass> fp32;
        if (kind == ModelKind::deepfm) {
          gpu::DeepShape shape;
          shape.dim = dim;
          shape.fields = spec.fields;
          shape.dense = dense;
          shape.params = params.size();
          const std::vector<size_t> sizes{spec.fields * dim + dense, 64, 32, 1};
          for (size_t l = 0, at = 0; l + 1 < sizes.size(); ++l) {
            shape.mlp.push_back({sizes[l], sizes[l + 1], at, at + sizes[l] * sizes[l + 1]});
            at += sizes[l] * sizes[l + 1] + sizes[l + 1];
          }
          BOOST_REQUIRE(shape.mlp.back().b + 1 == params.size());
          fp32 = gpu::make_deep_pass_cuda(shape, 0, gpu::DeviceProducts::fp32);
        }
        for (uint64_t seed = 1; seed <= 4; ++seed) {
          const Batch b = testing::random_batch(seed, 512, 300, dense);
          BatchIndex index;
          index.build(b, spec.dense_rows());
          const size_t n = index.unique_keys().size() * spec.width();
          std::vector<float> rows(n);
          SplitMix64 rng(seed + 100);
          for (float& r : rows) r = static_cast<float>(rng.uniform() - 0.5);
          struct Out {
            std::vector<float> grads, dense_grads, logits;
            double loss = 0.0;
          };
          const auto fresh = [&] {
            return Out{std::vector<float>(n, 0.0f), std::vector<float>(params.size(), 0.0f),
                       std::vector<float>(b.rows()), 0.0};
          };
          Out oh = fresh(), ob = fresh(), of = fresh();
          oh.loss = h->forward_backward(b, index.slots(), rows, params, oh.grads, oh.dense_grads,
                                        oh.logits);
          ob.loss = d->forward_backward(b, index.slots(), rows, params, ob.grads, ob.dense_grads,
                                        ob.logits);
          std::vector<std::tuple<const char*, const Out*, float>> checks{{"bf16", &ob, 3e-2f}};
          if (fp32) {
            FeatureWorkspace ws;
            std::vector<uint32_t> fields;
            of.loss =
                fp32->run(deep_device_batch(b, index.slots(), n / spec.width(), true, ws, fields),
                          rows.data(), params.data(), of.grads.data(), of.dense_grads.data(),
                          of.logits.data());
            checks.emplace_back("fp32", &of, 1e-4f);
          }
          for (const auto& [name, o, tol] : checks) {
            BOOST_TEST_CONTEXT(to_string(kind) << ", " << name << " products, dim " << dim
                                               << ", dense " << dense << ", seed " << seed) {
              BOOST_TEST(std::fabs(o->loss - oh.loss) <= tol * std::fabs(oh.loss));
              BOOST_TEST(off_scale(o->logits, oh.logits, tol) == 0u);
              BOOST_TEST(off_scale(o->grads, oh.grads, tol) == 0u);
              BOOST_TEST(off_scale(o->dense_grads, oh.dense_grads, tol) == 0u);
            }
          }
        }
      }
    }
  }
}
