// Feature admission and row eviction in the shard core.
#define BOOST_TEST_MODULE admission_test
#include <boost/test/unit_test.hpp>

#include <vector>

#include "common/hash.h"
#include "ps/count_min.h"
#include "ps/shard_core.h"

using namespace colony;

BOOST_AUTO_TEST_CASE(count_min_never_underestimates_and_rarely_overestimates_rare_keys) {
  CountMinSketch cms(4, 1 << 16, 7);
  SplitMix64 rng(3);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 20000; ++i) keys.push_back(rng.next());
  for (uint64_t k : keys) cms.add(k);
  for (int i = 0; i < 100; ++i) cms.add(keys[0]);
  BOOST_TEST(cms.estimate(keys[0]) >= 101u);
  size_t over = 0;
  for (size_t i = 1; i < keys.size(); ++i) {
    BOOST_REQUIRE(cms.estimate(keys[i]) >= 1u);
    over += cms.estimate(keys[i]) > 1;
  }
  BOOST_TEST(over < keys.size() / 100, over);  // 20k keys in 64k counters a row
  for (int i = 0; i < 300; ++i) cms.add(keys[1]);
  BOOST_TEST(cms.estimate(keys[1]) == 255u);  // saturates
}

namespace {
ShardConfig config(uint32_t admit_after) {
  ShardConfig sc{0,
                 0,
                 2,
                 default_optimizer_config(OptimizerKind::sgd),
                 RowInit{1, 1, 0.1f},
                 Consistency{},
                 {7},
                 ShardMapSpec{1, 1, 16, 0}};
  sc.admit_after = admit_after;
  sc.admit_sketch_width = 1 << 12;
  return sc;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_key_gets_a_row_only_after_it_was_pulled_admit_after_times) {
  auto shard = std::move(ShardCore::make(config(3)).value());
  auto plain = std::move(ShardCore::make(config(0)).value());
  const uint64_t k = make_key(1, 42);
  const std::vector<uint64_t> keys{k};
  std::vector<float> init(2);
  init_row(k, RowInit{1, 1, 0.1f}, init);
  for (uint32_t step = 0; step < 4; ++step) {
    Outbox out;
    shard->on_message(PullRequest{{7, 2 * step + 1, 1}, step, 7, keys}, out);
    shard->on_message(PushRequest{{7, 2 * step + 2, 1}, step + 1, keys, {1.0f, 1.0f}}, out);
    plain->on_message(PullRequest{{7, 2 * step + 1, 1}, step, 7, keys}, out);
    plain->on_message(PushRequest{{7, 2 * step + 2, 1}, step + 1, keys, {1.0f, 1.0f}}, out);
    const auto& reply = std::get<PullReply>(out[0].message).values;
    if (step < 2) {
      // Not admitted: the initial value, no row, the push dropped.
      BOOST_TEST(reply == init);
      BOOST_TEST(shard->rows() == 0u);
      BOOST_TEST(shard->stats().updates_dropped == step + 1);
    } else {
      BOOST_TEST(shard->rows() == 1u);
      BOOST_TEST(shard->stats().updates_dropped == 2u);  // from the third pull on it has a row
    }
  }
  // Admitted at the third pull, so it has seen two updates (steps 2 and 3), the plain shard four.
  std::vector<float> a(2), b(2);
  shard->row_value(k, a);
  plain->row_value(k, b);
  BOOST_TEST(a != b);
  BOOST_TEST(shard->stats().rows_not_admitted == 2u);
}

BOOST_AUTO_TEST_CASE(admission_settings_out_of_range_are_refused) {
  ShardConfig sc = config(300);
  BOOST_TEST(!ShardCore::make(sc).ok());
  sc = config(2);
  sc.admit_sketch_width = 1000;
  BOOST_TEST(!ShardCore::make(sc).ok());
}

BOOST_AUTO_TEST_CASE(rows_not_updated_for_evict_after_steps_are_removed) {
  ShardConfig sc = config(0);
  sc.evict_after = 4;
  auto shard = std::move(ShardCore::make(sc).value());
  BOOST_TEST(ShardCore::row_floats(sc).value() == 2u + 1u);  // SGD has no state; the clock stamp
  const uint64_t hot = make_key(1, 1), cold = make_key(1, 2);
  for (uint32_t step = 0; step < 12; ++step) {
    // `cold` is pulled and pushed at step 0 only; `hot` at every step.
    std::vector<uint64_t> keys{hot};
    if (step == 0) keys.push_back(cold);
    Outbox out;
    shard->on_message(PullRequest{{7, 2 * step + 1, 1}, step, 7, keys}, out);
    shard->on_message(
        PushRequest{
            {7, 2 * step + 2, 1}, step + 1, keys, std::vector<float>(keys.size() * 2, 1.0f)},
        out);
    BOOST_REQUIRE_EQUAL(out.size(), 2u);
    // Last updated by the push of clock 1: gone once the clock is past 1 + 4 (scans every 2).
    if (step + 1 <= 5) BOOST_TEST(shard->rows() == 2u, "step " << step);
    if (step + 1 >= 8) BOOST_TEST(shard->rows() == 1u, "step " << step);
  }
  BOOST_TEST(shard->stats().rows_evicted == 1u);
  // An evicted key pulled again starts from its initial row.
  std::vector<float> v(2), init(2);
  shard->row_value(cold, v);
  init_row(cold, RowInit{1, 1, 0.1f}, init);
  BOOST_TEST(v == init);
}
