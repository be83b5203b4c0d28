#define BOOST_TEST_MODULE shard_map_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "common/hash.h"
#include "data/zipf.h"
#include "ps/shard_map.h"

using namespace colony;

namespace {

ShardMap make_map(uint32_t shards, uint64_t seed = 0,
                  uint32_t vnodes = ShardMapSpec{}.vnodes_per_shard) {
  ShardMapSpec spec;
  spec.shards = shards;
  spec.seed = seed;
  spec.vnodes_per_shard = vnodes;
  auto m = ShardMap::make(spec);
  if (!m.ok()) BOOST_FAIL(m.status().message());
  return std::move(m).value();
}

std::vector<uint64_t> random_keys(size_t n, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = make_key(static_cast<uint32_t>(rng.next() % 40), rng.next());
  return keys;
}

// Inverse of mix64, to build keys that land exactly on a ring point.
uint64_t unxorshift(uint64_t y, int s) {
  uint64_t x = y;
  for (int i = s; i < 64; i += s) x ^= y >> i;
  return x;
}
uint64_t mul_inverse(uint64_t c) {
  uint64_t inv = c;  // Newton's iteration doubles the correct low bits each step
  for (int i = 0; i < 6; ++i) inv *= 2 - c * inv;
  return inv;
}
uint64_t unmix64(uint64_t x) {
  x = unxorshift(x, 31);
  x *= mul_inverse(0x94d049bb133111ebULL);
  x = unxorshift(x, 27);
  x *= mul_inverse(0xbf58476d1ce4e5b9ULL);
  x = unxorshift(x, 30);
  return x - 0x9e3779b97f4a7c15ULL;
}

// The placement exactly as the header documents it, by binary search: the check on the
// bucket table, and a pin on the wire contract.
struct ReferenceRing {
  explicit ReferenceRing(const ShardMapSpec& spec) {
    for (uint32_t s = 0; s < spec.shards; ++s)
      for (uint32_t v = 0; v < spec.vnodes_per_shard; ++v)
        points.emplace_back(hash_combine(hash_combine(spec.seed, s), v), s);
    std::sort(points.begin(), points.end());
  }
  uint32_t shard_of(uint64_t key) const {
    const uint64_t h = mix64(key);
    auto it = std::lower_bound(points.begin(), points.end(), std::pair<uint64_t, uint32_t>{h, 0});
    return it == points.end() ? points.front().second : it->second;
  }
  std::vector<std::pair<uint64_t, uint32_t>> points;
};

}  // namespace

BOOST_AUTO_TEST_CASE(unmix64_inverts_mix64) {
  for (uint64_t x : random_keys(1000, 99)) BOOST_TEST(unmix64(mix64(x)) == x);
}

BOOST_AUTO_TEST_CASE(same_spec_gives_same_map) {
  const ShardMap a = make_map(37, 5);
  const ShardMap b = make_map(37, 5);
  BOOST_TEST((a.spec() == b.spec()));
  for (uint64_t k : random_keys(100'000, 1)) BOOST_REQUIRE(a.shard_of(k) == b.shard_of(k));
}

BOOST_AUTO_TEST_CASE(version_does_not_move_keys_and_seed_does) {
  ShardMapSpec spec;
  spec.shards = 16;
  spec.seed = 3;
  const ShardMap a = ShardMap::make(spec).value();
  spec.version = 9;
  const ShardMap b = ShardMap::make(spec).value();
  BOOST_TEST(b.version() == 9u);
  spec.seed = 4;
  const ShardMap c = ShardMap::make(spec).value();
  size_t same_seed_differs = 0, other_seed_differs = 0;
  for (uint64_t k : random_keys(10'000, 2)) {
    same_seed_differs += a.shard_of(k) != b.shard_of(k);
    other_seed_differs += a.shard_of(k) != c.shard_of(k);
  }
  BOOST_TEST(same_seed_differs == 0u);
  BOOST_TEST(other_seed_differs > 8'000u);  // ~15/16 of keys
}

BOOST_AUTO_TEST_CASE(lookup_matches_documented_placement) {
  // Small rings wrap often and leave buckets empty or crowded; large ones use the table.
  const std::vector<std::pair<uint32_t, uint32_t>> shapes = {
      {1, 1}, {2, 1}, {3, 2}, {5, 7}, {64, 4096}};
  for (auto [shards, vnodes] : shapes) {
    const ShardMap m = make_map(shards, 11, vnodes);
    const ReferenceRing ref(m.spec());
    for (uint64_t k : random_keys(50'000, shards)) BOOST_REQUIRE(m.shard_of(k) == ref.shard_of(k));
    // Keys exactly on, just before and just after every point (sampled for the big ring),
    // and at both ends of the hash space.
    const size_t step = std::max<size_t>(1, ref.points.size() / 5000);
    for (size_t i = 0; i < ref.points.size(); i += step) {
      for (uint64_t delta : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
        const uint64_t key = unmix64(ref.points[i].first + delta);
        BOOST_REQUIRE(m.shard_of(key) == ref.shard_of(key));
      }
      BOOST_REQUIRE(m.shard_of(unmix64(ref.points[i].first)) == ref.points[i].second);
    }
    for (uint64_t h : {uint64_t{0}, uint64_t{1}, std::numeric_limits<uint64_t>::max()})
      BOOST_REQUIRE(m.shard_of(unmix64(h)) == ref.shard_of(unmix64(h)));
  }
}

BOOST_AUTO_TEST_CASE(every_shard_gets_keys) {
  for (uint32_t shards : {1u, 2u, 64u, 1000u}) {
    const ShardMap m = make_map(shards, 1);
    std::vector<size_t> count(shards);
    for (uint64_t k : random_keys(200'000, 3)) {
      const uint32_t s = m.shard_of(k);
      BOOST_REQUIRE(s < shards);
      ++count[s];
    }
    BOOST_TEST(*std::min_element(count.begin(), count.end()) > 0u, shards << " shards");
  }
}

BOOST_AUTO_TEST_CASE(bad_specs_are_rejected) {
  auto rejected = [](uint32_t shards, uint32_t vnodes) {
    ShardMapSpec spec;
    spec.shards = shards;
    spec.vnodes_per_shard = vnodes;
    auto m = ShardMap::make(spec);
    if (m.ok()) return false;
    BOOST_TEST((m.status().code() == Status::Code::invalid_input));
    BOOST_TEST_MESSAGE(m.status().message());
    return true;
  };
  BOOST_TEST(rejected(0, 16));
  BOOST_TEST(rejected(shard_map_shards_max + 1, 1));
  BOOST_TEST(rejected(4, 0));
  BOOST_TEST(rejected(1, shard_map_vnodes_max + 1));
  BOOST_TEST(rejected(1025, ShardMapSpec{}.vnodes_per_shard));  // too many points
  // The largest maps the bounds allow are built.
  BOOST_TEST(!rejected(shard_map_shards_max, shard_map_points_max / shard_map_shards_max));
  BOOST_TEST(!rejected(shard_map_points_max / shard_map_vnodes_max, shard_map_vnodes_max));
  BOOST_TEST(!rejected(1024, ShardMapSpec{}.vnodes_per_shard));
}

BOOST_AUTO_TEST_CASE(adding_a_shard_moves_only_keys_to_the_new_shard) {
  const auto keys = random_keys(400'000, 4);
  for (uint32_t shards : {1u, 7u, 63u}) {
    const ShardMap before = make_map(shards, 21);
    const ShardMap after = make_map(shards + 1, 21);
    size_t moved = 0;
    for (uint64_t k : keys) {
      const uint32_t from = before.shard_of(k), to = after.shard_of(k);
      if (from == to) continue;
      ++moved;
      BOOST_REQUIRE_MESSAGE(to == shards, "key " << k << " moved from " << from << " to " << to);
    }
    const double fraction = static_cast<double>(moved) / static_cast<double>(keys.size());
    const double expected = 1.0 / (shards + 1);
    BOOST_TEST_MESSAGE(shards << " -> " << shards + 1 << " shards: moved " << fraction
                              << ", 1/(S+1) = " << expected);
    BOOST_TEST(fraction > expected * 0.85);
    BOOST_TEST(fraction < expected * 1.15);
  }
}

BOOST_AUTO_TEST_CASE(zipf_keys_spread_evenly_over_64_shards) {
  // Distinct keys per shard (the rows a shard stores) for a Criteo-like draw: a few fields,
  // Zipf ids, keys built as the readers build them. The bound is on the busiest shard.
  constexpr uint32_t shards = 64;
  constexpr uint64_t vocab = 10'000'000;
  constexpr int draws = 2'000'000;
  constexpr uint32_t fields = 4;
  double worst = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const ZipfSampler zipf(vocab, 1.1);
    SplitMix64 rng(seed);
    std::vector<uint64_t> keys(draws);
    for (int t = 0; t < draws; ++t) keys[t] = make_key(1 + t % fields, mix64(zipf(rng)));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());

    const ShardMap m = make_map(shards, seed);
    std::vector<size_t> count(shards);
    for (uint64_t k : keys) ++count[m.shard_of(k)];
    const double mean = static_cast<double>(keys.size()) / shards;
    const double max_ratio = *std::max_element(count.begin(), count.end()) / mean;
    const double min_ratio = *std::min_element(count.begin(), count.end()) / mean;
    BOOST_TEST_MESSAGE("seed " << seed << ": " << keys.size() << " distinct keys, max/mean "
                               << max_ratio << ", min/mean " << min_ratio << " (vnodes "
                               << m.spec().vnodes_per_shard << ")");
    BOOST_TEST(max_ratio < 1.10, "seed " << seed);
    BOOST_TEST(min_ratio > 0.90, "seed " << seed);
    worst = std::max(worst, max_ratio);
  }
  BOOST_TEST_MESSAGE("worst max/mean over 5 seeds: " << worst);
}
