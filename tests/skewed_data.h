// A libsvm key stream skewed onto one shard, for the hot-shard alert's tests: most of each
// row's features hash to shard 0 of the job's shard map (the default --seed 1 places them).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/hash.h"
#include "ps/shard_map.h"

namespace colony::test {

// `rows` libsvm rows with random labels: 18 features drawn from 200,000 on shard 0 and one from
// 2,000 on each other shard of `shards`.
inline std::string skewed_libsvm(uint32_t shards, int rows) {
  ShardMapSpec spec;
  spec.shards = shards;
  spec.seed = 1;
  const ShardMap map = ShardMap::make(spec).value();
  std::vector<std::vector<uint64_t>> pool(shards);  // libsvm indices by the shard of their key
  auto filled = [&pool] {
    for (size_t s = 0; s < pool.size(); ++s)
      if (pool[s].size() < (s == 0 ? 200000u : 2000u)) return false;
    return true;
  };
  for (uint64_t index = 1; !filled(); ++index)
    pool[map.shard_of(make_key(0, mix64(index)))].push_back(index);
  SplitMix64 rng(7);
  std::string text;
  for (int row = 0; row < rows; ++row) {
    text += rng.next() % 2 ? "1" : "0";
    std::set<uint64_t> features;  // libsvm wants each index once, in order
    while (features.size() < 18) features.insert(pool[0][rng.next() % pool[0].size()]);
    for (uint32_t s = 1; s < shards; ++s) features.insert(pool[s][rng.next() % 2000]);
    for (uint64_t f : features) text += " " + std::to_string(f) + ":1";
    text += "\n";
  }
  return text;
}

}  // namespace colony::test
