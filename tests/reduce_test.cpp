#define BOOST_TEST_MODULE reduce_test
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/hash.h"
#include "gpu/reduce.h"
#include "tests/random_grads.h"

using namespace colony;
using colony::testing::random_inputs;

namespace {

void sum(Reducer& r, const std::vector<const SparseGrads*>& inputs, size_t width,
         SparseGrads& out) {
  r.sum(std::span<const SparseGrads* const>(inputs.data(), inputs.size()), width, out);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  return a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(cpu_reducer_is_named_cpu) {
  BOOST_TEST(std::string(make_cpu_reducer()->name()) == "cpu");
}

BOOST_AUTO_TEST_CASE(sums_shared_keys_by_hand) {
  auto r = make_cpu_reducer();
  const SparseGrads a{{10, 20, 30}, {1, 2, 3, 4, 5, 6}};
  const SparseGrads b{{30, 40, 10}, {10, 20, 30, 40, 50, 60}};
  SparseGrads out{{99}, {7, 7}};  // cleared first
  sum(*r, {&a, &b}, 2, out);
  BOOST_TEST(out.keys == (std::vector<uint64_t>{10, 20, 30, 40}), boost::test_tools::per_element());
  BOOST_TEST(out.values == (std::vector<float>{51, 62, 3, 4, 15, 26, 30, 40}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(output_order_is_first_appearance_across_inputs) {
  auto r = make_cpu_reducer();
  const SparseGrads a{{5, 3, 9}, {1, 1, 1}};
  const SparseGrads b{{7, 9, 1, 3}, {1, 1, 1, 1}};
  const SparseGrads c{{2, 1, 5}, {1, 1, 1}};
  SparseGrads out;
  sum(*r, {&a, &b, &c}, 1, out);
  BOOST_TEST(out.keys == (std::vector<uint64_t>{5, 3, 9, 7, 1, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(out.values == (std::vector<float>{2, 2, 2, 1, 2, 1}),
             boost::test_tools::per_element());
  // Changing the order of the inputs changes the order of the output, as documented.
  sum(*r, {&c, &a, &b}, 1, out);
  BOOST_TEST(out.keys == (std::vector<uint64_t>{2, 1, 5, 3, 9, 7}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(sums_follow_input_order_bit_for_bit) {
  // (1e8 + -1e8) + 1 = 1 but 1e8 + (-1e8 + 1) = 0 in float: the input order decides.
  auto r = make_cpu_reducer();
  const SparseGrads a{{1}, {1e8f}};
  const SparseGrads b{{1}, {-1e8f}};
  const SparseGrads c{{1}, {1.0f}};
  SparseGrads out;
  sum(*r, {&a, &b, &c}, 1, out);
  BOOST_TEST(out.values[0] == 1.0f);
  sum(*r, {&c, &a, &b}, 1, out);
  BOOST_TEST(out.values[0] == 0.0f);
  // A lone contribution is copied, so even its sign of zero survives.
  const SparseGrads z{{4}, {-0.0f}};
  sum(*r, {&z}, 1, out);
  BOOST_TEST(std::signbit(out.values[0]));
}

BOOST_AUTO_TEST_CASE(matches_a_std_map_reference_on_random_inputs) {
  for (size_t width : {size_t{1}, size_t{9}, size_t{65}}) {
    auto r = make_cpu_reducer();  // reused across seeds: stale slots must not leak through
    SparseGrads out, again;
    for (uint64_t seed = 1; seed <= 30; ++seed) {
      const auto inputs = random_inputs(seed * 1000 + width, width);
      std::vector<const SparseGrads*> ptrs;
      for (const auto& in : inputs) ptrs.push_back(&in);
      sum(*r, ptrs, width, out);

      // Reference: ordered by first appearance, summed in input order starting from the
      // first contribution.
      std::map<uint64_t, size_t> first_seen;
      std::vector<uint64_t> ref_keys;
      std::vector<float> ref_values;
      for (const auto& in : inputs) {
        for (size_t j = 0; j < in.keys.size(); ++j) {
          const float* src = in.values.data() + j * width;
          auto [it, inserted] = first_seen.emplace(in.keys[j], ref_keys.size());
          if (inserted) {
            ref_keys.push_back(in.keys[j]);
            ref_values.insert(ref_values.end(), src, src + width);
          } else {
            for (size_t w = 0; w < width; ++w) ref_values[it->second * width + w] += src[w];
          }
        }
      }
      BOOST_REQUIRE_MESSAGE(out.keys == ref_keys, "width " << width << " seed " << seed);
      BOOST_REQUIRE_MESSAGE(same_bits(out.values, ref_values),
                            "width " << width << " seed " << seed);

      // A fresh reducer gives the same bits as a warmed-up one.
      make_cpu_reducer()->sum(std::span<const SparseGrads* const>(ptrs.data(), ptrs.size()), width,
                              again);
      BOOST_REQUIRE(again.keys == out.keys);
      BOOST_REQUIRE(same_bits(again.values, out.values));
    }
  }
}

BOOST_AUTO_TEST_CASE(empty_inputs_give_empty_output) {
  auto r = make_cpu_reducer();
  SparseGrads out{{1, 2}, {1, 2}};
  sum(*r, {}, 3, out);
  BOOST_TEST(out.keys.empty());
  BOOST_TEST(out.values.empty());
  const SparseGrads e1, e2;
  out = SparseGrads{{1}, {1, 2, 3}};
  sum(*r, {&e1, &e2}, 3, out);
  BOOST_TEST(out.keys.empty());
  BOOST_TEST(out.values.empty());
  // Empty inputs among others change nothing.
  const SparseGrads a{{8, 6}, {1, 2, 3, 4, 5, 6}};
  sum(*r, {&e1, &a, &e2}, 3, out);
  BOOST_TEST(out.keys == a.keys, boost::test_tools::per_element());
  BOOST_TEST(out.values == a.values, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(single_input_is_identity) {
  auto r = make_cpu_reducer();
  SparseGrads out;
  for (size_t width : {size_t{1}, size_t{9}, size_t{65}}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      const auto inputs = random_inputs(seed, width);
      for (const auto& in : inputs) {
        sum(*r, {&in}, width, out);
        BOOST_REQUIRE(out.keys == in.keys);
        BOOST_REQUIRE(same_bits(out.values, in.values));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(many_calls_reuse_the_index) {
  // Thousands of calls on one reducer: keys of earlier calls are never mistaken for keys of
  // this one, and a warm reducer writing into a warm output stays correct after growth.
  auto r = make_cpu_reducer();
  SparseGrads out;
  SplitMix64 rng(77);
  for (uint64_t call = 0; call < 3000; ++call) {
    const size_t n = call == 1500 ? 50'000 : 1 + rng.next() % 50;  // one call grows the index
    SparseGrads a, b;
    for (size_t j = 0; j < n; ++j) a.keys.push_back(j * 13 + call % 5);  // overlap across calls
    a.values.assign(n, 1.0f);
    b.keys = {a.keys[rng.next() % n], 1'000'000'000 + call};
    b.values = {2.0f, 3.0f};
    sum(*r, {&a, &b}, 1, out);
    BOOST_REQUIRE(out.keys.size() == n + 1);
    BOOST_REQUIRE(out.keys.back() == b.keys[1]);
    size_t twos = 0;
    for (size_t j = 0; j < n; ++j) {
      BOOST_REQUIRE(out.keys[j] == a.keys[j]);
      twos += out.values[j] == 3.0f;
      BOOST_REQUIRE((out.values[j] == 1.0f || (out.values[j] == 3.0f && out.keys[j] == b.keys[0])));
    }
    BOOST_REQUIRE(twos == 1u);
    BOOST_REQUIRE(out.values.back() == 3.0f);
  }
}

// The dense sum starts from the first input and adds the others in order: one input comes back
// exactly, and float addition's order is the documented one (1e8 + 1 - 1e8 is 0 in float; the
// other order gives 1).
BOOST_AUTO_TEST_CASE(dense_sum_adds_in_input_order) {
  auto r = make_cpu_reducer();
  const std::vector<float> a{1e8f, 0.5f, -0.0f}, b{1.0f, 0.25f, 0.0f}, c{-1e8f, 0.25f, 0.0f};
  std::vector<float> out(3);
  std::vector<std::span<const float>> one{a};
  r->sum_dense(one, out);
  BOOST_TEST(std::memcmp(out.data(), a.data(), sizeof(float) * 3) == 0);  // -0.0 kept
  std::vector<std::span<const float>> abc{a, b, c}, acb{a, c, b};
  r->sum_dense(abc, out);
  BOOST_TEST(out[0] == 0.0f);
  BOOST_TEST(out[1] == 1.0f);
  r->sum_dense(acb, out);
  BOOST_TEST(out[0] == 1.0f);
}

// The CUDA backend's Thrust code, built for the host: the CPU reducer's results bit for bit,
// keys in the same order, over random inputs whose sums depend on the order of addition.
BOOST_AUTO_TEST_CASE(thrust_device_code_matches_the_cpu_reducer_bit_for_bit) {
  auto cpu = make_cpu_reducer(), thrust = make_thrust_host_reducer();
  BOOST_TEST(std::string(thrust->name()) == "thrust-host");
  int checked = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const size_t width = 1 + seed % 9;
    const std::vector<SparseGrads> inputs = random_inputs(seed, width);
    std::vector<const SparseGrads*> ptrs;
    for (const auto& in : inputs) ptrs.push_back(&in);
    SparseGrads a, b;
    sum(*cpu, ptrs, width, a);
    sum(*thrust, ptrs, width, b);
    BOOST_TEST_CONTEXT("seed " << seed << ", width " << width) {
      BOOST_TEST((a.keys == b.keys));
      BOOST_TEST(same_bits(a.values, b.values));
    }
    checked += !a.keys.empty();
  }
  BOOST_TEST(checked > 40);
  // Dense: input order, one input copied exactly (-0.0 kept).
  const std::vector<float> x{1e8f, 0.5f, -0.0f}, y{1.0f, 0.25f, 0.0f}, z{-1e8f, 0.25f, 0.0f};
  std::vector<float> p(3), q(3);
  for (const auto& in :
       {std::vector<std::span<const float>>{x}, std::vector<std::span<const float>>{x, y, z},
        std::vector<std::span<const float>>{x, z, y}}) {
    cpu->sum_dense(in, p);
    thrust->sum_dense(in, q);
    BOOST_TEST(same_bits(p, q));
  }
}
