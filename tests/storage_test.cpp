#define BOOST_TEST_MODULE storage_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <list>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/bf16.h"
#include "common/fp16.h"
#include "common/hash.h"
#include "storage/belady.h"
#include "storage/compact_store.h"
#include "storage/dense_file.h"
#include "storage/key_index.h"
#include "storage/row_table.h"
#include "storage/store_spec.h"
#include "tests/temp_dir.h"

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

// KeyIndex, which RowTable and the tiered store's cache index stand on: its values, erasures
// (backward shift, also of probe runs that wrap around the array's end), growth and clear(),
// against std::unordered_map over random operations.
BOOST_AUTO_TEST_CASE(a_key_index_matches_unordered_map_over_random_operations) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    SplitMix64 rng(seed);
    KeyIndex index;
    std::unordered_map<uint64_t, uint64_t> ref;
    // Small key spaces collide and erase often; the last seeds use full 64-bit keys.
    const uint64_t space = seed <= 4 ? 300 * seed : 0;
    size_t mismatches = 0;
    for (int op = 0; op < 60000; ++op) {
      uint64_t k = space ? rng.next() % space : rng.next();
      if (op % 97 == 0) k = op % 2 ? 0 : UINT64_MAX;
      const uint64_t v = rng.next() % (uint64_t{1} << 40);
      switch (rng.next() % 8) {
        case 0:
        case 1:
        case 2: {
          auto it = ref.find(k);
          if (index.get(k) != (it == ref.end() ? KeyIndex::missing : it->second)) ++mismatches;
          if (index.contains(k) != (it != ref.end())) ++mismatches;
          break;
        }
        case 3:
        case 4: {
          bool called = false;
          auto [got, inserted] = index.find_or_insert(k, [&] {
            called = true;
            return v;
          });
          auto [it, ref_inserted] = ref.try_emplace(k, v);
          if (inserted != ref_inserted || called != inserted || got != it->second) ++mismatches;
          break;
        }
        case 5:
        case 6: {
          auto it = ref.find(k);
          const uint64_t want = it == ref.end() ? KeyIndex::missing : it->second;
          if (it != ref.end()) ref.erase(it);
          if (index.erase(k) != want) ++mismatches;
          break;
        }
        case 7:
          if (op % 5000 == 7) {  // now and then, start again
            index.clear();
            ref.clear();
          }
          break;
      }
      if (index.size() != ref.size() || index.empty() != ref.empty()) ++mismatches;
    }
    BOOST_TEST(mismatches == 0u, "seed " << seed);
    size_t visited = 0;
    index.for_each([&](uint64_t key, uint64_t value) {
      ++visited;
      auto it = ref.find(key);
      if (it == ref.end() || it->second != value) ++mismatches;
    });
    BOOST_TEST(visited == ref.size());
    BOOST_TEST(mismatches == 0u, "seed " << seed << " after for_each");
  }
}

namespace {
DenseState some_dense_state() {
  DenseState s;
  s.shape = "deepfm dim=8 fields=26 dense=13 mlp=256,128 optimizer=adam";
  s.step = 40;
  SplitMix64 rng(7);
  for (int i = 0; i < 1000; ++i) s.params.push_back(float(unit_double(rng.next())) - 0.5f);
  for (int i = 0; i < 2000; ++i) s.optimizer_state.push_back(float(unit_double(rng.next())));
  s.optimizer_steps = 40;
  return s;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void put_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
}  // namespace

// clear() empties the table and keeps working at any size: after a large table, a small one,
// and again a large one.
BOOST_AUTO_TEST_CASE(a_cleared_table_is_empty_and_fills_again) {
  RowTable t(3);
  for (uint64_t round = 0; round < 3; ++round) {
    const uint64_t n = round == 1 ? 10 : 50000;
    for (uint64_t k = 0; k < n; ++k) t.find_or_insert(mix64(k + round)).first[1] = float(k);
    BOOST_TEST(t.size() == n);
    for (uint64_t k = 0; k < n; k += 97) BOOST_TEST(t.find(mix64(k + round))[1] == float(k));
    t.clear();
    BOOST_TEST(t.size() == 0u);
    for (uint64_t k = 0; k < n; k += 97) BOOST_TEST(t.find(mix64(k + round)) == nullptr);
    auto [row, inserted] = t.find_or_insert(7);
    BOOST_TEST(inserted);
    BOOST_TEST((row[0] == 0.0f && row[1] == 0.0f && row[2] == 0.0f));
    t.clear();
  }
}

// A memory store's compact parts must add up to the rows' floats.
BOOST_AUTO_TEST_CASE(a_memory_stores_compact_parts_hold_the_rows_floats) {
  StoreSpec memory = parse_store_spec("memory", 0).value();
  memory.compact_parts = {{9, ValueFormat::int8}, {9, ValueFormat::bf16}};
  BOOST_TEST(to_string(memory) == "memory (32 bytes a row)");
  BOOST_TEST(open_shard_store(memory, StoreIdentity{"c", 0, 1, 18}).value()->row_bytes() == 32u);
  BOOST_TEST(!open_shard_store(memory, StoreIdentity{"c", 0, 1, 19}).ok());
}

// Row parts as text, and back; text that is not parts is refused, naming it.
BOOST_AUTO_TEST_CASE(row_parts_read_back_from_their_text) {
  const std::vector<RowPart> parts{{8, ValueFormat::int8},
                                   {9, ValueFormat::fp16, true},
                                   {1, ValueFormat::fp32},
                                   {3, ValueFormat::bf16}};
  BOOST_TEST(to_string(parts) == "int8:8,fp16r:9,fp32:1,bf16:3");
  BOOST_TEST((parse_row_parts(to_string(parts)).value() == parts));
  for (const char* bad : {"", "int8:8,", "int8", "int4:8", "int8:0", "int8:8x", "int8:-1", "r:3",
                          "fp16rr:2", "int8:99999999999"}) {
    auto p = parse_row_parts(bad);
    BOOST_TEST(!p.ok(), bad);
    if (!p.ok()) BOOST_TEST(p.status().message().find("row parts") != std::string::npos);
  }
}

// Rows on disk in compact parts (--row-format, --state-format with --store rocksdb:DIR, with or
// without --cache-bytes): the table keeps each row in the parts' bytes and decodes it within the
// format's step, through the RocksDB store, the tiered store (rows evicted to disk and read
// back) and a read-only open; a store created in other parts, or a checkpoint of them, is
// refused by name and left as it was.
BOOST_AUTO_TEST_CASE(stores_on_disk_keep_rows_in_their_compact_parts) {
  testing::TempDir dir("compact-disk");
  const std::vector<RowPart> parts{{8, ValueFormat::int8}, {8, ValueFormat::bf16, true}};
  const StoreIdentity id{"c", 0, 1, 16};
  auto value = [](uint64_t k, size_t j) {
    return j < 8 ? float(int64_t(mix64(k * 16 + j) % 20001) - 10000) / 997
                 : float(mix64(k * 16 + j) % 10000) / 97;  // optimizer state: not negative
  };
  auto close_enough = [&](uint64_t k, const float* row) {
    float max = 0;
    for (size_t j = 0; j < 8; ++j) max = std::max(max, std::fabs(value(k, j)));
    for (size_t j = 0; j < 16; ++j) {
      const float w = value(k, j);
      // int8: within one step of the part's scale; bf16 of the root, squared: 2^-7 relative.
      const float tolerance = j < 8 ? max / 127 * 1.0001f : std::fabs(w) * 0.02f + 1e-6f;
      if (std::fabs(row[j] - w) > tolerance) return false;
    }
    return true;
  };
  for (const std::string kind : {"rocksdb", "tiered"}) {
    BOOST_TEST_CONTEXT(kind) {
      StoreSpec spec =
          parse_store_spec("rocksdb:" + dir.sub(kind), kind == "tiered" ? 2000 : 0).value();
      spec.compact_parts = parts;
      BOOST_TEST(to_string(spec).find("(28 bytes a row") != std::string::npos, to_string(spec));
      {
        auto store = open_shard_store(spec, id).value();
        BOOST_TEST(store->row_bytes() == 28u);  // 8 + 4, 16
        for (uint64_t batch = 0; batch < 10; ++batch) {
          std::vector<uint64_t> keys;
          for (uint64_t k = batch * 50; k < batch * 50 + 50; ++k) keys.push_back(k);
          BOOST_REQUIRE(store->load(keys).ok());
          for (uint64_t k : keys) {
            float* row = store->find_or_insert(k).first;
            for (size_t j = 0; j < 16; ++j) row[j] = value(k, j);
          }
          BOOST_REQUIRE(store->commit().ok());
        }
        BOOST_REQUIRE(store->flush().ok());
        // Every row read back, from the cache or from disk, is within its format's step.
        std::vector<uint64_t> all;
        for (uint64_t k = 0; k < 500; ++k) all.push_back(k);
        BOOST_REQUIRE(store->load(all).ok());
        size_t good = 0;
        for (uint64_t k : all) good += close_enough(k, store->find(k));
        BOOST_TEST(good == 500u);
        BOOST_REQUIRE(store->commit().ok());
      }
      auto table = RocksTable::open_read_only(shard_store_path(spec.dir, 0));
      BOOST_REQUIRE(table.ok());
      BOOST_TEST(((*table)->row_parts() == parts));
      BOOST_TEST((*table)->row_bytes() == 28u);
      size_t good = 0, seen = 0;
      BOOST_TEST((*table)
                     ->for_each_in_range(0, UINT64_MAX,
                                         [&](uint64_t k, const float* row) {
                                           ++seen;
                                           good += close_enough(k, row);
                                         })
                     .ok());
      BOOST_TEST(seen == 500u);
      BOOST_TEST(good == 500u);
      BOOST_REQUIRE((*table)->checkpoint(dir.sub(kind + "-checkpoint")).ok());
      table.value().reset();
      // Opened in other parts, or in fp32: refused, naming both.
      StoreSpec other = spec;
      other.compact_parts = {{8, ValueFormat::fp16}, {8, ValueFormat::bf16, true}};
      auto refused = open_shard_store(other, id);
      BOOST_REQUIRE(!refused.ok());
      BOOST_TEST(refused.status().message().find("keeps its rows in int8:8,bf16r:8; this job keeps "
                                                 "them in fp16:8,bf16r:8") != std::string::npos,
                 refused.status().message());
      other.compact_parts.clear();
      other.resume = true;
      refused = open_shard_store(other, id);
      BOOST_REQUIRE(!refused.ok());
      BOOST_TEST(
          refused.status().message().find("this job keeps them in fp32") != std::string::npos,
          refused.status().message());
      // A checkpoint of other parts is refused before the store is touched.
      auto restored = restore_shard_store(other, id, dir.sub(kind + "-checkpoint"));
      BOOST_REQUIRE(!restored.ok());
      BOOST_TEST(restored.status().message().find("a checkpoint of rows in int8:8,bf16r:8") !=
                     std::string::npos,
                 restored.status().message());
      // In its own parts the store opens again, rows as they were; so does its checkpoint.
      restored = restore_shard_store(spec, id, dir.sub(kind + "-checkpoint"));
      BOOST_REQUIRE(restored.ok());
      BOOST_TEST((*restored)->size() == 500u);
      // A memory store restores the checkpoint's rows in its own parts (here fp32).
      StoreSpec memory = parse_store_spec("memory", 0).value();
      auto loaded = restore_shard_store(memory, id, dir.sub(kind + "-checkpoint"));
      BOOST_REQUIRE(loaded.ok());
      good = 0;
      BOOST_TEST((*loaded)
                     ->for_each([&](uint64_t k, const float* row) { good += close_enough(k, row); })
                     .ok());
      BOOST_TEST(good == 500u);
    }
  }
}

// The parts of a table must hold its rows' floats: refused before anything is created.
BOOST_AUTO_TEST_CASE(a_table_refuses_parts_that_do_not_hold_its_rows) {
  testing::TempDir dir("compact-parts");
  RocksTableOptions o;
  o.path = dir.sub("t");
  o.parts = {{8, ValueFormat::int8}};
  auto t = RocksTable::open(o, StoreIdentity{"c", 0, 1, 9});
  BOOST_REQUIRE(!t.ok());
  BOOST_TEST(
      t.status().message().find("row parts int8:8 hold 8 floats; rows have 9") != std::string::npos,
      t.status().message());
  BOOST_TEST(!std::filesystem::exists(o.path));
}

BOOST_AUTO_TEST_CASE(a_compact_store_refuses_rows_without_floats) {
  BOOST_TEST(!CompactRowStore::make({}).ok());
  BOOST_TEST(!CompactRowStore::make({{4, ValueFormat::int8}, {0, ValueFormat::fp32}}).ok());
}

// With fp32 parts only, a compact store keeps rows bit for bit, through the batch protocol: rows
// handed out by find_or_insert are written back at commit(), writes through find() are not.
BOOST_AUTO_TEST_CASE(a_compact_store_of_fp32_parts_keeps_rows_exactly) {
  auto store =
      std::move(CompactRowStore::make({{3, ValueFormat::fp32}, {2, ValueFormat::fp32}}).value());
  BOOST_TEST(store->row_floats() == 5u);
  BOOST_TEST(store->row_bytes() == 20u);
  BOOST_TEST(!store->stable_rows());
  for (uint64_t k = 0; k < 100; ++k) {
    auto [row, inserted] = store->find_or_insert(k);
    BOOST_TEST(inserted);
    for (size_t j = 0; j < 5; ++j) {
      BOOST_TEST(row[j] == 0.0f);
      row[j] = std::bit_cast<float>(uint32_t(mix64(k * 5 + j)) & 0x7F7FFFFFu);
    }
  }
  BOOST_TEST(store->commit().ok());
  BOOST_TEST(store->size() == 100u);
  store->find(3)[0] = 1.0f;  // read only: not kept
  BOOST_TEST(store->commit().ok());
  size_t seen = 0;
  BOOST_TEST(store
                 ->for_each([&](uint64_t k, const float* row) {
                   ++seen;
                   for (size_t j = 0; j < 5; ++j)
                     BOOST_TEST(std::bit_cast<uint32_t>(row[j]) ==
                                (uint32_t(mix64(k * 5 + j)) & 0x7F7FFFFFu));
                 })
                 .ok());
  BOOST_TEST(seen == 100u);
  const uint64_t gone[] = {3, 4, 1000};
  BOOST_TEST(store->erase(gone).ok());
  BOOST_TEST(store->size() == 98u);
  BOOST_TEST(store->find(3) == nullptr);
  BOOST_TEST(store->find(5) != nullptr);
}

// bf16 and int8 parts take 2 and 1 bytes a value (and a scale a part), and keep each value
// within the format's step.
BOOST_AUTO_TEST_CASE(a_compact_store_keeps_values_within_their_formats_step) {
  auto store = std::move(CompactRowStore::make({{8, ValueFormat::int8},
                                                {8, ValueFormat::bf16},
                                                {1, ValueFormat::fp32},
                                                {4, ValueFormat::fp16}})
                             .value());
  BOOST_TEST(store->row_bytes() == 40u);  // 8 + 4, 16, 4, 8
  std::vector<std::vector<float>> written;
  for (uint64_t k = 0; k < 200; ++k) {
    float* row = store->find_or_insert(k).first;
    written.emplace_back();
    for (size_t j = 0; j < 21; ++j)
      written.back().push_back(row[j] = float(int64_t(mix64(k * 21 + j) % 20001) - 10000) / 997);
  }
  BOOST_TEST(store->commit().ok());
  for (uint64_t k = 0; k < 200; ++k) {
    const float* row = store->find(k);
    const std::vector<float>& w = written[k];
    float max = 0;
    for (size_t j = 0; j < 8; ++j) max = std::max(max, std::fabs(w[j]));
    for (size_t j = 0; j < 8; ++j) BOOST_TEST(std::fabs(row[j] - w[j]) <= max / 127);
    for (size_t j = 8; j < 16; ++j) {
      BOOST_TEST(is_bf16(row[j]));
      BOOST_TEST(std::fabs(row[j] - w[j]) <= std::fabs(w[j]) / 128);
    }
    BOOST_TEST(row[16] == w[16]);
    for (size_t j = 17; j < 21; ++j) {
      BOOST_TEST(is_fp16(row[j]));
      BOOST_TEST(std::fabs(row[j] - w[j]) <= std::fabs(w[j]) / 1024 + 1e-7f);
    }
  }
  BOOST_TEST(store->commit().ok());
}

// Rounding is stochastic and unbiased: a value between two int8 steps, written under many keys,
// comes back as the value on average (rounding to the nearest would always give the step
// above). Small updates to a row are not rounded away.
BOOST_AUTO_TEST_CASE(a_compact_stores_rounding_is_unbiased) {
  auto store = std::move(CompactRowStore::make({{2, ValueFormat::int8}}).value());
  constexpr uint64_t n = 20000;
  const float v = 38.57f / 127;  // between the steps 38 and 39 of a row whose largest is 1
  for (uint64_t k = 0; k < n; ++k) {
    float* row = store->find_or_insert(k).first;
    row[0] = 1.0f;
    row[1] = v;
  }
  BOOST_TEST(store->commit().ok());
  double sum = 0;
  BOOST_TEST(store->for_each([&](uint64_t, const float* row) { sum += row[1]; }).ok());
  // The mean's standard deviation is below (1/127) * 0.5 / sqrt(n) = 2.8e-5.
  BOOST_TEST(std::fabs(sum / n - v) < 2e-4);
}

BOOST_AUTO_TEST_CASE(dense_state_round_trips_bit_for_bit) {
  testing::TempDir dir("dense-file");
  const std::string path = dir.sub("dense.bin");
  const DenseState s = some_dense_state();
  BOOST_REQUIRE(write_dense_state(path, s).ok());
  auto back = read_dense_state(path);
  BOOST_REQUIRE(back.ok());
  BOOST_TEST((*back == s));
  // Nothing but the file itself is left in the folder (the temporary was renamed).
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path)) ++entries;
  BOOST_TEST(entries == 1u);
  DenseState empty;
  empty.shape = "dcn";
  BOOST_REQUIRE(write_dense_state(path, empty).ok());
  BOOST_TEST((read_dense_state(path).value() == empty));
}

BOOST_AUTO_TEST_CASE(dense_state_refuses_damaged_files_naming_them) {
  testing::TempDir dir("dense-file");
  const std::string path = dir.sub("dense.bin");
  BOOST_CHECK(read_dense_state(path).status().code() == Status::Code::not_found);
  BOOST_REQUIRE(write_dense_state(path, some_dense_state()).ok());
  const std::string good = file_bytes(path);
  auto refused = [&](const std::string& bytes, const std::string& why) {
    put_bytes(path, bytes);
    auto r = read_dense_state(path);
    BOOST_TEST_CONTEXT(why) {
      BOOST_CHECK(r.status().code() == Status::Code::invalid_input);
      BOOST_TEST(r.status().message().find(path) != std::string::npos, r.status().message());
    }
  };
  refused("", "empty");
  refused("COLONYX1" + good.substr(8), "another magic");
  // Every shorter prefix, and one byte more.
  for (size_t n = 0; n < good.size(); n += 97)
    refused(good.substr(0, n), "cut at " + std::to_string(n));
  refused(good.substr(0, good.size() - 1), "last byte missing");
  refused(good + "x", "a byte after its end");
  // One flipped bit anywhere: the checksum (or the header's sizes) catch it.
  SplitMix64 rng(3);
  for (int i = 0; i < 64; ++i) {
    std::string bad = good;
    const size_t at = rng.next() % bad.size();
    bad[at] = char(bad[at] ^ (1 << (rng.next() % 8)));
    refused(bad, "bit flipped at byte " + std::to_string(at));
  }
  // Sizes that promise more than the file holds allocate nothing: a header claiming 2^60 floats.
  std::string huge = good;
  const size_t params_at = 8 + 4 + some_dense_state().shape.size() + 4;
  const uint64_t lie = uint64_t{1} << 60;
  std::memcpy(huge.data() + params_at, &lie, sizeof lie);
  refused(huge, "2^60 parameters");
  const std::string too_long(dense_shape_max + 1, 'x');
  DenseState s;
  s.shape = too_long;
  BOOST_CHECK(write_dense_state(dir.sub("other.bin"), s).code() == Status::Code::invalid_input);
  BOOST_TEST(!std::filesystem::exists(dir.sub("other.bin")));
}

namespace {

// The most hits any eviction choice gets on trace[i..] from `cache` (a cache of `capacity` rows
// that takes every row it misses), counting accesses at count_from and later: every choice tried.
uint64_t best_hits(const std::vector<uint64_t>& trace, size_t i, std::set<uint64_t> cache,
                   size_t capacity, size_t count_from) {
  if (i == trace.size()) return 0;
  const uint64_t key = trace[i];
  const uint64_t counted = i >= count_from ? 1 : 0;
  if (cache.contains(key)) return counted + best_hits(trace, i + 1, cache, capacity, count_from);
  if (cache.size() < capacity) {
    cache.insert(key);
    return best_hits(trace, i + 1, cache, capacity, count_from);
  }
  uint64_t best = 0;
  for (uint64_t victim : cache) {
    std::set<uint64_t> next = cache;
    next.erase(victim);
    next.insert(key);
    best = std::max(best, best_hits(trace, i + 1, next, capacity, count_from));
  }
  return best;
}

// LRU on the same terms, for comparison.
CacheCounts lru(const std::vector<uint64_t>& trace, size_t capacity) {
  CacheCounts c;
  std::list<uint64_t> order;  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  for (uint64_t key : trace) {
    if (auto it = where.find(key); it != where.end()) {
      ++c.hits;
      order.erase(it->second);
    } else {
      ++c.misses;
      if (where.size() == capacity) {
        where.erase(order.back());
        order.pop_back();
      }
    }
    order.push_front(key);
    where[key] = order.begin();
  }
  return c;
}

// LFU (uses counted while cached; ties: the least recently used) on the same terms, for
// capacities of at least 1.
CacheCounts lfu(const std::vector<uint64_t>& trace, size_t capacity) {
  CacheCounts c;
  std::unordered_map<uint64_t, std::pair<uint64_t, size_t>> cached;  // uses, last access
  for (size_t i = 0; i < trace.size(); ++i) {
    auto it = cached.find(trace[i]);
    if (it != cached.end()) {
      ++c.hits;
    } else {
      ++c.misses;
      if (cached.size() == capacity)
        cached.erase(std::min_element(cached.begin(), cached.end(),
                                      [](auto& a, auto& b) { return a.second < b.second; }));
      it = cached.emplace(trace[i], std::pair<uint64_t, size_t>{0, 0}).first;
    }
    ++it->second.first;
    it->second.second = i;
  }
  return c;
}

// A random short trace over a few keys, a capacity of 0-3 rows and an access to count from.
struct ShortTrace {
  std::vector<uint64_t> trace;
  size_t capacity;
  size_t count_from;
};
ShortTrace short_trace(SplitMix64& rng) {
  std::vector<uint64_t> trace(1 + rng.next() % 11);
  const uint64_t keys = 1 + rng.next() % 5;
  for (uint64_t& k : trace) k = rng.next() % keys;
  const size_t capacity = rng.next() % 4;
  const size_t count_from = rng.next() % (trace.size() + 1);
  return {std::move(trace), capacity, count_from};
}

}  // namespace

// Belady's MIN (storage/belady.h) gets as many hits as the best of every eviction choice, on
// random short traces; counted from a later access, the same replay's hits there, at most the
// best there.
BOOST_AUTO_TEST_CASE(belady_min_hits_as_often_as_the_best_eviction_choices) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SplitMix64 rng(seed);
    const auto [trace, capacity, count_from] = short_trace(rng);
    const CacheCounts all = belady_min(trace, capacity);
    BOOST_TEST(all.hits + all.misses == trace.size());
    BOOST_TEST(all.hits == best_hits(trace, 0, {}, capacity, 0), "seed " << seed);
    const CacheCounts later = belady_min(trace, capacity, count_from);
    BOOST_TEST(later.hits + later.misses == trace.size() - count_from);
    BOOST_TEST(later.hits <= all.hits);
    BOOST_TEST(later.hits <= best_hits(trace, 0, {}, capacity, count_from), "seed " << seed);
  }
  // A worked case: capacity 2 on a b c a b: c evicts b (next used last), so a hits and b misses.
  const std::vector<uint64_t> t = {1, 2, 3, 1, 2};
  BOOST_TEST(belady_min(t, 2).hits == 1u);
  BOOST_TEST(belady_min(t, 0).misses == 5u);
}

// On longer skewed traces it never hits less than LRU (and here clearly more).
BOOST_AUTO_TEST_CASE(belady_min_hits_at_least_as_often_as_lru) {
  uint64_t belady_total = 0, lru_total = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SplitMix64 rng(seed);
    std::vector<uint64_t> trace(20000);
    for (uint64_t& k : trace) k = rng.next() % (1 + rng.next() % 2000);  // small keys more often
    const size_t capacity = 10 + rng.next() % 200;
    const uint64_t b = belady_min(trace, capacity).hits, l = lru(trace, capacity).hits;
    BOOST_TEST(b >= l, "seed " << seed);
    belady_total += b;
    lru_total += l;
  }
  BOOST_TEST(belady_total > lru_total + lru_total / 10);
}

// A0, the cache that keeps the most probable rows (most_probable_first), never beats MIN: on short
// traces against every choice's best, whatever the ranks. On independent draws from a skewed
// distribution, ranked by their true probabilities, it beats LRU and LFU, which must learn them.
BOOST_AUTO_TEST_CASE(keeping_the_most_probable_rows_lies_between_lfu_and_min_on_independent_draws) {
  const auto by_key = [](uint64_t key) { return key; };
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SplitMix64 rng(seed);
    const auto [trace, capacity, count_from] = short_trace(rng);
    const uint64_t salt = rng.next();
    const auto shuffled = [salt](uint64_t key) { return mix64(key ^ salt) % 3; };  // ties too
    const CacheCounts c = most_probable_first(trace, capacity, shuffled, count_from);
    BOOST_TEST(c.hits + c.misses == trace.size() - count_from);
    BOOST_TEST(
        most_probable_first(trace, capacity, shuffled).hits <= best_hits(trace, 0, {}, capacity, 0),
        "seed " << seed);
  }
  // A worked case: capacity 2 on 3 1 2 1 3 (rank = key): 2 evicts 3, 3 evicts 2.
  const std::vector<uint64_t> t = {3, 1, 2, 1, 3};
  BOOST_TEST(most_probable_first(t, 2, by_key).hits == 1u);
  BOOST_TEST(most_probable_first(t, 0, by_key).misses == 5u);
  uint64_t a0_total = 0, lfu_total = 0, lru_total = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SplitMix64 rng(seed);
    std::vector<uint64_t> trace(20000);
    // Key k is drawn with a probability that falls with k: its rank is k.
    for (uint64_t& k : trace) k = rng.next() % (1 + rng.next() % 2000);
    const size_t capacity = 10 + rng.next() % 200;
    const uint64_t a0 = most_probable_first(trace, capacity, by_key).hits;
    BOOST_TEST(a0 <= belady_min(trace, capacity).hits, "seed " << seed);
    a0_total += a0;
    lfu_total += lfu(trace, capacity).hits;
    lru_total += lru(trace, capacity).hits;
  }
  BOOST_TEST(a0_total > lfu_total);
  BOOST_TEST(a0_total > lru_total + lru_total / 20);
}

// A cache that sees the next `lookahead` accesses (lookahead_min) is LRU or LFU with none and
// hits as often as MIN with the whole trace; in between it never beats MIN, and on skewed traces
// it beats its fallback.
BOOST_AUTO_TEST_CASE(lookahead_min_goes_from_lru_or_lfu_to_min_as_its_window_grows) {
  uint64_t windowed_total = 0, lru_total = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SplitMix64 rng(seed);
    std::vector<uint64_t> trace(20000);
    for (uint64_t& k : trace) k = rng.next() % (1 + rng.next() % 2000);
    const size_t capacity = 10 + rng.next() % 200;
    const uint64_t l = lru(trace, capacity).hits, best = belady_min(trace, capacity).hits;
    for (Fallback f : {Fallback::lru, Fallback::lfu}) {
      BOOST_TEST(lookahead_min(trace, capacity, trace.size(), f).hits == best, "seed " << seed);
      BOOST_TEST(lookahead_min(trace, capacity, SIZE_MAX, f).hits == best, "seed " << seed);
    }
    BOOST_TEST(lookahead_min(trace, capacity, 0, Fallback::lru).hits == l, "seed " << seed);
    BOOST_TEST(lookahead_min(trace, capacity, 0, Fallback::lfu).hits == lfu(trace, capacity).hits,
               "seed " << seed);
    const CacheCounts windowed = lookahead_min(trace, capacity, 4 * capacity, Fallback::lru);
    BOOST_TEST(windowed.hits + windowed.misses == trace.size());
    BOOST_TEST(windowed.hits <= best, "seed " << seed);
    windowed_total += windowed.hits;
    lru_total += l;
  }
  BOOST_TEST(windowed_total > lru_total + lru_total / 20);
  // Short traces: within every choice's best, counted from anywhere.
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SplitMix64 rng(seed);
    std::vector<uint64_t> trace(1 + rng.next() % 11);
    const uint64_t keys = 1 + rng.next() % 5;
    for (uint64_t& k : trace) k = rng.next() % keys;
    const size_t capacity = rng.next() % 4, lookahead = rng.next() % 6;
    const size_t count_from = rng.next() % (trace.size() + 1);
    const CacheCounts got = lookahead_min(trace, capacity, lookahead,
                                          seed % 2 ? Fallback::lru : Fallback::lfu, count_from);
    BOOST_TEST(got.hits + got.misses == trace.size() - count_from);
    BOOST_TEST(got.hits <= best_hits(trace, 0, {}, capacity, count_from), "seed " << seed);
  }
}
