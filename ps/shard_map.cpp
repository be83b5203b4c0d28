#include "ps/shard_map.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace colony {

Expected<ShardMap> ShardMap::make(const ShardMapSpec& spec) {
  if (spec.shards == 0 || spec.shards > shard_map_shards_max) {
    return Status::invalid_input(fmt::format("shard map version {}: {} shards, want 1 to {}",
                                             spec.version, spec.shards, shard_map_shards_max));
  }
  if (spec.vnodes_per_shard == 0 || spec.vnodes_per_shard > shard_map_vnodes_max) {
    return Status::invalid_input(
        fmt::format("shard map version {}: {} virtual nodes per shard, want 1 to {}", spec.version,
                    spec.vnodes_per_shard, shard_map_vnodes_max));
  }
  const uint64_t points = uint64_t{spec.shards} * spec.vnodes_per_shard;
  if (points > shard_map_points_max) {
    return Status::invalid_input(fmt::format(
        "shard map version {}: {} shards x {} virtual nodes = {} ring points, above the bound "
        "of {}; use fewer virtual nodes per shard",
        spec.version, spec.shards, spec.vnodes_per_shard, points, shard_map_points_max));
  }

  std::vector<std::pair<uint64_t, uint32_t>> ring;
  ring.reserve(points);
  for (uint32_t s = 0; s < spec.shards; ++s) {
    const uint64_t shard_hash = hash_combine(spec.seed, s);
    for (uint32_t v = 0; v < spec.vnodes_per_shard; ++v)
      ring.emplace_back(hash_combine(shard_hash, v), s);
  }
  std::sort(ring.begin(), ring.end());

  ShardMap m;
  m.spec_ = spec;
  m.point_pos_.reserve(points + 1);
  m.point_shard_.reserve(points + 1);
  for (const auto& [pos, shard] : ring) {
    m.point_pos_.push_back(pos);
    m.point_shard_.push_back(shard);
  }
  // Keys past the last point wrap to the first; no key is above the sentinel, so every scan
  // stops at or before it.
  m.point_pos_.push_back(std::numeric_limits<uint64_t>::max());
  m.point_shard_.push_back(ring.front().second);

  const int bucket_bits = std::max(1, std::countr_zero(std::bit_ceil(points)));
  m.bucket_shift_ = 64 - bucket_bits;
  const size_t buckets = size_t{1} << bucket_bits;
  m.bucket_first_.resize(buckets);
  uint32_t i = 0;
  for (size_t b = 0; b < buckets; ++b) {
    const uint64_t start = uint64_t{b} << m.bucket_shift_;
    while (m.point_pos_[i] < start) ++i;
    m.bucket_first_[b] = i;
  }
  return m;
}

size_t ShardMap::memory_bytes() const {
  return point_pos_.size() * sizeof(uint64_t) + point_shard_.size() * sizeof(uint32_t) +
         bucket_first_.size() * sizeof(uint32_t);
}

}  // namespace colony
