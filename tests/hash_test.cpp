#define BOOST_TEST_MODULE hash_test
#include <boost/test/unit_test.hpp>
#include <unordered_set>

#include "common/hash.h"

using namespace colony;

BOOST_AUTO_TEST_CASE(keys_carry_their_field_and_never_collide_across_fields) {
  std::unordered_set<uint64_t> seen;
  for (uint32_t field = 0; field < 40; ++field) {
    for (uint64_t v = 0; v < 2000; ++v) {
      const uint64_t key = make_key(field, mix64(v));
      BOOST_REQUIRE_EQUAL(key_field(key), field);
      BOOST_REQUIRE(seen.insert(key).second);
    }
  }
  BOOST_TEST(key_field(bias_key) == 255u);
  BOOST_TEST(seen.count(bias_key) == 0u);
}

BOOST_AUTO_TEST_CASE(mix64_is_deterministic_and_spreads_neighbouring_inputs) {
  BOOST_TEST(mix64(12345) == mix64(12345));
  // Neighbouring inputs differ in about half their output bits.
  int total = 0;
  for (uint64_t i = 0; i < 1000; ++i) total += __builtin_popcountll(mix64(i) ^ mix64(i + 1));
  BOOST_TEST(total / 1000.0 > 28.0);
  BOOST_TEST(total / 1000.0 < 36.0);
  // Bijective on a sample: no collisions among a million consecutive inputs.
  std::unordered_set<uint64_t> out;
  for (uint64_t i = 0; i < 1000000; ++i) out.insert(mix64(i));
  BOOST_TEST(out.size() == 1000000u);
}

BOOST_AUTO_TEST_CASE(hash_bytes_depends_on_every_byte) {
  BOOST_TEST(hash_bytes("68fd1e64") != hash_bytes("68fd1e65"));
  BOOST_TEST(hash_bytes("") != hash_bytes("0"));
  BOOST_TEST(hash_combine(1, 2) != hash_combine(2, 1));
}

BOOST_AUTO_TEST_CASE(splitmix_is_seeded_and_uniform) {
  SplitMix64 a(9), b(9), c(10);
  double sum = 0.0;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t x = a.next();
    BOOST_REQUIRE_EQUAL(x, b.next());
    sum += unit_double(x);
  }
  BOOST_TEST(a.next() != c.next());
  BOOST_TEST(sum / 100000 == 0.5, boost::test_tools::tolerance(0.01));
}
