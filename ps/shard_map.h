// Which parameter-server shard owns a key: consistent hashing with virtual nodes.
//
// The map is a pure function of its ShardMapSpec, so every worker and shard that holds the
// same spec routes every key the same way, and a spec is all that travels on the wire.
//
// Placement (part of the wire contract: a reimplementation must match it bit for bit):
//   - a key sits on the ring at mix64(key). Keys are hashed first because their low bits are
//     not uniform (make_key puts the field id in the top 8 bits);
//   - shard s owns vnodes_per_shard ring points, point v at
//     hash_combine(hash_combine(seed, s), v), for v in [0, vnodes_per_shard);
//   - a key belongs to the shard of the first point at or after its position, wrapping past
//     2^64 - 1 to the first point. Points are ordered by (position, shard), so on the (2^-64)
//     chance of two points colliding the lower shard id wins.
// Adding shard S to a map of S shards (same seed and vnodes) only adds points, so the only
// keys that move are those that now belong to shard S, about 1/(S+1) of them.
//
// Lookup: the 2^k equal buckets of the hash space (2^k = the number of points rounded up to a
// power of two, so about one point per bucket) each record the index of the first point at
// or after the bucket's start. shard_of reads that index and scans forward past the points
// below the key (on average under one, never past the next bucket's first point); a sentinel
// at position 2^64 - 1 carrying the first point's shard ends every scan and does the wrap.
// Memory: 12 bytes a point plus 4 bytes a bucket.
//
// Thread-safety: immutable after make(); shard_of may be called from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/hash.h"
#include "common/status.h"

namespace colony {

// Bounds checked by ShardMap::make. The point bound keeps a map to about 64 MB; with the
// default vnodes_per_shard it allows 1024 shards (4 MB at 64 shards).
inline constexpr uint32_t shard_map_shards_max = 65536;
inline constexpr uint32_t shard_map_vnodes_max = 65536;
inline constexpr uint64_t shard_map_points_max = uint64_t{1} << 22;

// Everything needed to rebuild the same map anywhere.
struct ShardMapSpec {
  // Increases whenever the shard set changes; not used for placement, carried so that peers
  // can tell maps apart.
  uint64_t version = 1;
  uint32_t shards = 1;
  // The arc a shard owns has a relative spread of about 1/sqrt(vnodes_per_shard). Measured
  // with 64 shards and Zipf keys (tests/shard_map_test.cpp, 5 seeds), the busiest shard's
  // distinct keys over the mean, Zipf exponents 1.05 to 1.2: up to 1.19 at 512 vnodes, 1.09
  // at 2048, 1.06 at 4096.
  uint32_t vnodes_per_shard = 4096;
  uint64_t seed = 0;
  bool operator==(const ShardMapSpec&) const = default;
};

class ShardMap {
 public:
  // Builds the map of `spec`. Fails with invalid_input when shards is 0 or above
  // shard_map_shards_max, vnodes_per_shard is 0 or above shard_map_vnodes_max, or
  // shards * vnodes_per_shard is above shard_map_points_max. O(points log points).
  static Expected<ShardMap> make(const ShardMapSpec& spec);

  // The shard in [0, shards()) that owns `key`. O(1) expected: one hash, one bucket read and
  // a scan of about one point.
  uint32_t shard_of(uint64_t key) const {
    const uint64_t h = mix64(key);
    uint32_t i = bucket_first_[h >> bucket_shift_];
    // Two branch-free steps cover most buckets; the loop finishes crowded ones.
    i += point_pos_[i] < h;
    i += point_pos_[i] < h;
    while (point_pos_[i] < h) ++i;
    return point_shard_[i];
  }

  const ShardMapSpec& spec() const { return spec_; }
  uint64_t version() const { return spec_.version; }
  uint32_t shards() const { return spec_.shards; }
  // Bytes held by the ring and the bucket table.
  size_t memory_bytes() const;

 private:
  ShardMap() = default;

  ShardMapSpec spec_;
  // Ring points sorted by (position, shard), then the sentinel at position 2^64 - 1.
  std::vector<uint64_t> point_pos_;
  std::vector<uint32_t> point_shard_;
  // bucket_first_[b]: index of the first point at or after b << bucket_shift_.
  std::vector<uint32_t> bucket_first_;
  int bucket_shift_ = 63;
};

}  // namespace colony
