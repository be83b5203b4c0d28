// Hashing and counter-based randomness shared by readers, models and the generator.
//
// Everything here is a pure function of its arguments: no state, no clock. That is
// what makes row initialisation, data generation and key routing reproducible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace colony {

// A bijective 64-bit finaliser (SplitMix64 / Stafford variant 13). Distinct inputs give
// distinct outputs, so hashing an index with it never introduces collisions.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Combines two words into one hash (order matters).
constexpr uint64_t hash_combine(uint64_t a, uint64_t b) {
  return mix64(a ^ mix64(b + 0x632be59bd9b4e019ULL));
}

// FNV-1a over bytes, then finalised: for hashing the text of a categorical value.
constexpr uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return mix64(h);
}

// FNV-1a (64-bit) over bytes, not finalised: the checksum of files Colony writes (dense
// layers, the push log). Catches torn and flipped bytes, not tampering.
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ULL) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

// Feature keys: the top 8 bits hold the field id, the low 56 bits a hash of the value.
// Field 0 is used by formats without fields (libsvm); field 255 is reserved.
inline constexpr int key_field_bits = 8;
inline constexpr uint64_t key_value_mask = (uint64_t{1} << (64 - key_field_bits)) - 1;
constexpr uint64_t make_key(uint32_t field, uint64_t value_hash) {
  return (uint64_t{field} << (64 - key_field_bits)) | (value_hash & key_value_mask);
}
constexpr uint32_t key_field(uint64_t key) {
  return static_cast<uint32_t>(key >> (64 - key_field_bits));
}

// The model's global bias lives in a row of its own under this key, which no reader produces
// (field 255 is reserved).
inline constexpr uint64_t bias_key = make_key(255, 0);
// Models that treat a dense feature like a sparse one (LR, FM, DeepFM's FM part) keep dense
// feature i's parameters in a row under this key (field 255, so no reader produces it).
constexpr uint64_t dense_key(uint32_t i) {
  return make_key(255, uint64_t{i} + 1);
}
// The highest field a data format may use (255 is the bias's).
inline constexpr uint32_t key_field_max = 254;

// Uniform double in [0, 1) from a 64-bit hash (53 random bits).
constexpr double unit_double(uint64_t h) {
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// A seeded, splittable generator for the data generator and tests. Not for cryptography.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : state_(seed) {}
  constexpr uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  constexpr double uniform() { return unit_double(next()); }  // [0, 1)

 private:
  uint64_t state_;
};

}  // namespace colony
