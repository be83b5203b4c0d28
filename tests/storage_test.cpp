#define BOOST_TEST_MODULE storage_test
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/hash.h"
#include "storage/row_table.h"

using namespace colony;

BOOST_AUTO_TEST_CASE(find_on_empty_table_returns_null) {
  RowTable t(4);
  BOOST_TEST(t.size() == 0u);
  BOOST_TEST(t.row_floats() == 4u);
  BOOST_TEST(t.find(0) == nullptr);
  BOOST_TEST(t.find(1) == nullptr);
  BOOST_TEST(t.find(UINT64_MAX) == nullptr);
}

BOOST_AUTO_TEST_CASE(find_or_insert_inserts_zero_filled_row_once) {
  RowTable t(5);
  auto [row, inserted] = t.find_or_insert(42);
  BOOST_REQUIRE(row != nullptr);
  BOOST_TEST(inserted);
  for (size_t i = 0; i < 5; ++i) BOOST_TEST(row[i] == 0.0f);
  for (size_t i = 0; i < 5; ++i) row[i] = static_cast<float>(i) + 0.5f;
  auto [again, inserted_again] = t.find_or_insert(42);
  BOOST_TEST(!inserted_again);
  BOOST_TEST(again == row);
  BOOST_TEST(t.find(42) == row);
  const RowTable& ct = t;
  BOOST_TEST(ct.find(42) == row);
  BOOST_TEST(t.size() == 1u);
  BOOST_TEST(t.find(43) == nullptr);
}

BOOST_AUTO_TEST_CASE(inserted_rows_are_zero_filled_even_after_many_writes) {
  // Rows come from an arena: a later row must not inherit anything.
  RowTable t(3);
  for (uint64_t k = 1; k <= 50000; ++k) {
    auto [row, inserted] = t.find_or_insert(k);
    BOOST_REQUIRE(inserted);
    if (row[0] != 0.0f || row[1] != 0.0f || row[2] != 0.0f)
      BOOST_FAIL("row of key " << k << " not zero");
    row[0] = row[1] = row[2] = -1.0f;
  }
}

BOOST_AUTO_TEST_CASE(keys_zero_and_max_work) {
  RowTable t(2);
  BOOST_TEST(t.find(0) == nullptr);
  auto [z, zi] = t.find_or_insert(0);
  BOOST_TEST(zi);
  z[0] = 1.0f;
  auto [m, mi] = t.find_or_insert(UINT64_MAX);
  BOOST_TEST(mi);
  m[0] = 2.0f;
  BOOST_TEST(z != m);
  BOOST_TEST(t.find(0) == z);
  BOOST_TEST(t.find(UINT64_MAX) == m);
  BOOST_TEST(t.find(0)[0] == 1.0f);
  BOOST_TEST(t.find(UINT64_MAX)[0] == 2.0f);
  BOOST_TEST(!t.find_or_insert(0).second);
  BOOST_TEST(t.size() == 2u);
  // Still there after growth.
  for (uint64_t k = 1; k < 5000; ++k) (void)t.find_or_insert(k);
  BOOST_TEST(t.find(0) == z);
  BOOST_TEST(t.find(UINT64_MAX) == m);
  BOOST_TEST(z[0] == 1.0f);
  BOOST_TEST(m[0] == 2.0f);
}

BOOST_AUTO_TEST_CASE(row_pointers_stay_valid_across_growth) {
  const size_t width = 7;
  RowTable t(width);
  std::vector<std::pair<uint64_t, float*>> early;
  SplitMix64 rng(3);
  for (int i = 0; i < 100; ++i) {
    const uint64_t k = rng.next();
    auto [row, inserted] = t.find_or_insert(k);
    BOOST_REQUIRE(inserted);
    for (size_t j = 0; j < width; ++j) row[j] = static_cast<float>(i * 100 + j);
    early.emplace_back(k, row);
  }
  for (uint64_t k = 0; k < 100000; ++k) {
    auto [row, inserted] = t.find_or_insert(mix64(k) ^ 0x5555);
    if (inserted) row[0] = static_cast<float>(k);
  }
  BOOST_TEST(t.size() >= 100000u);
  for (size_t i = 0; i < early.size(); ++i) {
    const auto& [k, ptr] = early[i];
    BOOST_TEST(t.find(k) == ptr);
    for (size_t j = 0; j < width; ++j) {
      if (ptr[j] != static_cast<float>(i * 100 + j))
        BOOST_FAIL("early row " << i << " entry " << j << " changed to " << ptr[j]);
    }
  }
  BOOST_TEST(t.memory_bytes() >= t.size() * width * sizeof(float));
}

BOOST_AUTO_TEST_CASE(for_each_visits_every_row_exactly_once) {
  RowTable t(2);
  std::unordered_set<uint64_t> want;
  SplitMix64 rng(11);
  for (int i = 0; i < 30000; ++i) {
    const uint64_t k = i % 3 == 0 ? rng.next() % 1000 : rng.next();  // some repeats
    auto [row, inserted] = t.find_or_insert(k);
    if (inserted) {
      row[0] = static_cast<float>(k % 1000);
      row[1] = 1.0f;
    }
    want.insert(k);
  }
  want.insert(0);
  (void)t.find_or_insert(0);
  std::unordered_map<uint64_t, int> seen;
  size_t visits = 0;
  t.for_each([&](uint64_t key, const float* row) {
    ++visits;
    ++seen[key];
    BOOST_CHECK(row == t.find(key));
  });
  BOOST_TEST(visits == t.size());
  BOOST_TEST(seen.size() == want.size());
  for (const auto& [k, count] : seen) {
    if (count != 1) BOOST_FAIL("key " << k << " visited " << count << " times");
    if (!want.count(k)) BOOST_FAIL("unexpected key " << k);
  }
}

BOOST_AUTO_TEST_CASE(matches_unordered_map_over_random_operations) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SplitMix64 rng(seed);
    const size_t width = 1 + seed % 4;
    RowTable t(width);
    std::unordered_map<uint64_t, std::vector<float>> ref;
    // Small key spaces give many hits; the last seeds use full 64-bit keys plus edge keys.
    const uint64_t space = seed <= 3 ? 500 * seed : 0;
    auto draw_key = [&]() -> uint64_t {
      const uint64_t r = rng.next();
      if (r % 50 == 0) return r % 100 == 0 ? 0 : UINT64_MAX;
      return space ? rng.next() % space : rng.next();
    };
    size_t mismatches = 0;
    for (int op = 0; op < 40000; ++op) {
      const uint64_t k = draw_key();
      switch (rng.next() % 4) {
        case 0: {  // find
          float* row = t.find(k);
          auto it = ref.find(k);
          if ((row == nullptr) != (it == ref.end())) {
            ++mismatches;
          } else if (row && std::memcmp(row, it->second.data(), width * sizeof(float)) != 0) {
            ++mismatches;
          }
          break;
        }
        case 1: {  // find_or_insert
          auto [row, inserted] = t.find_or_insert(k);
          auto [it, ref_inserted] = ref.try_emplace(k, std::vector<float>(width, 0.0f));
          if (inserted != ref_inserted) ++mismatches;
          if (std::memcmp(row, it->second.data(), width * sizeof(float)) != 0) ++mismatches;
          break;
        }
        case 2: {  // write through find_or_insert
          auto [row, inserted] = t.find_or_insert(k);
          auto [it, ref_inserted] = ref.try_emplace(k, std::vector<float>(width, 0.0f));
          if (inserted != ref_inserted) ++mismatches;
          const float v = static_cast<float>(op);
          row[op % width] = v;
          it->second[op % width] = v;
          break;
        }
        case 3: {  // erase (backward-shift deletion; the arena row is reused)
          if (t.erase(k) != (ref.erase(k) == 1)) ++mismatches;
          break;
        }
      }
      if (t.size() != ref.size()) ++mismatches;
    }
    BOOST_TEST(mismatches == 0u, "seed " << seed);
    size_t visited = 0;
    t.for_each([&](uint64_t key, const float* row) {
      ++visited;
      auto it = ref.find(key);
      if (it == ref.end() || std::memcmp(row, it->second.data(), width * sizeof(float)) != 0)
        ++mismatches;
    });
    BOOST_TEST(visited == ref.size());
    BOOST_TEST(mismatches == 0u, "seed " << seed << " after for_each");
  }
}
