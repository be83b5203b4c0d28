// The CUDA backend on a device: its results against the host build of the same Thrust code
// (gpu/thrust_sum.h), bit for bit. Built only with CUDA. Where no device is present the cases are
// skipped, not passed silently: Boost reports them as skipped, and scripts/gpu-check.sh, which
// runs on a machine with a GPU, fails when any was.
#define BOOST_TEST_MODULE cuda_test
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <vector>

#include "gpu/device.h"
#include "gpu/thrust_sum.h"
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

}  // namespace

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
