#include "gpu/reduce.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "common/hash.h"
#include "common/status.h"
#include "gpu/thrust_sum.h"

namespace colony {

namespace {

// Linear probing over {key, stamp, output index}. Instead of clearing the table on every
// call, each call owns a range of stamps: a slot whose stamp is below the call's first
// stamp is empty for this call. Input i of a call writes stamp first + i, which is also how
// a key repeated within one input is caught.
class CpuReducer final : public Reducer {
 public:
  const char* name() const override { return "cpu"; }

  void sum(std::span<const SparseGrads* const> inputs, size_t width, SparseGrads& out) override {
    COLONY_ASSERT(width >= 1, "width={}", width);
    size_t total = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const SparseGrads* in = inputs[i];
      COLONY_ASSERT(in != nullptr, "input {} is null", i);
      COLONY_ASSERT(in != &out, "input {} is also the output", i);
      COLONY_ASSERT(in->values.size() == in->keys.size() * width,
                    "input {}: {} values for {} keys of width {}", i, in->values.size(),
                    in->keys.size(), width);
      total += in->keys.size();
    }
    COLONY_ASSERT(total < std::numeric_limits<uint32_t>::max(), "{} keys in all", total);
    COLONY_ASSERT(inputs.size() < std::numeric_limits<uint32_t>::max() / 2, "{} inputs",
                  inputs.size());

    out.keys.clear();
    out.values.clear();
    out.keys.reserve(total);
    out.values.reserve(total * width);
    if (total == 0) return;

    reserve(total);
    if (uint64_t{next_stamp_} + inputs.size() > std::numeric_limits<uint32_t>::max()) {
      // Once in ~4 billion inputs: forget every stamp and start again.
      for (Slot& s : slots_) s.stamp = 0;
      next_stamp_ = 1;
    }
    const uint32_t first = next_stamp_;
    next_stamp_ += static_cast<uint32_t>(inputs.size());

    for (size_t i = 0; i < inputs.size(); ++i) {
      const SparseGrads& in = *inputs[i];
      const uint32_t stamp = first + static_cast<uint32_t>(i);
      constexpr size_t ahead = 16;  // a large table: the slot of a key ahead is fetched meanwhile
      for (size_t j = 0; j < in.keys.size(); ++j) {
        if (j + ahead < in.keys.size())
          __builtin_prefetch(&slots_[mix64(in.keys[j + ahead]) & mask_]);
        const uint64_t key = in.keys[j];
        const float* src = in.values.data() + j * width;
        size_t pos = mix64(key) & mask_;
        while (true) {
          Slot& s = slots_[pos];
          if (s.stamp < first) {
            s = Slot{key, stamp, static_cast<uint32_t>(out.keys.size())};
            out.keys.push_back(key);
            out.values.insert(out.values.end(), src, src + width);
            break;
          }
          if (s.key == key) {
            COLONY_ASSERT(s.stamp != stamp, "key {} appears twice in input {}", key, i);
            s.stamp = stamp;
            float* dst = out.values.data() + size_t{s.out_index} * width;
            for (size_t w = 0; w < width; ++w) dst[w] += src[w];
            break;
          }
          pos = (pos + 1) & mask_;
        }
      }
    }
  }

  void sum_dense(std::span<const std::span<const float>> inputs, std::span<float> out) override {
    COLONY_ASSERT(!inputs.empty(), "a dense sum of no inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      COLONY_ASSERT(inputs[i].size() == out.size(), "input {} has {} floats, the output {}", i,
                    inputs[i].size(), out.size());
      COLONY_ASSERT(inputs[i].data() + inputs[i].size() <= out.data() ||
                        out.data() + out.size() <= inputs[i].data() || out.empty(),
                    "input {} overlaps the output", i);
    }
    std::copy(inputs[0].begin(), inputs[0].end(), out.begin());
    for (size_t i = 1; i < inputs.size(); ++i) {
      const float* src = inputs[i].data();
      float* dst = out.data();
      for (size_t j = 0; j < out.size(); ++j) dst[j] += src[j];
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    uint32_t stamp = 0;  // 0: never used
    uint32_t out_index = 0;
  };

  // Keeps the load factor at or below 1/2 for `keys` keys. A new table has no live slots, so
  // nothing is rehashed.
  void reserve(size_t keys) {
    if (keys * 2 <= slots_.size()) return;
    const size_t size = std::max<size_t>(16, std::bit_ceil(keys * 2));
    slots_.assign(size, Slot{});
    mask_ = size - 1;
    next_stamp_ = 1;
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  uint32_t next_stamp_ = 1;
};

// gpu/thrust_sum.h on Thrust's host system: the CUDA backend's code, run on the CPU.
class ThrustHostReducer final : public Reducer {
 public:
  const char* name() const override { return "thrust-host"; }

  void sum(std::span<const SparseGrads* const> inputs, size_t width, SparseGrads& out) override {
    COLONY_ASSERT(width >= 1, "width={}", width);
    inputs_.clear();
    size_t total = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const SparseGrads* in = inputs[i];
      COLONY_ASSERT(in != nullptr && in != &out, "input {} is null or the output", i);
      COLONY_ASSERT(in->values.size() == in->keys.size() * width,
                    "input {}: {} values for {} keys of width {}", i, in->values.size(),
                    in->keys.size(), width);
      total += in->keys.size();
      inputs_.push_back({in->keys.data(), in->values.data(), in->keys.size()});
    }
    COLONY_ASSERT(total < std::numeric_limits<uint32_t>::max(), "{} keys in all", total);
    gpu::thrust_sum_host(inputs_.data(), inputs_.size(), width, out.keys, out.values);
  }

  void sum_dense(std::span<const std::span<const float>> inputs, std::span<float> out) override {
    COLONY_ASSERT(!inputs.empty(), "a dense sum of no inputs");
    dense_.clear();
    for (size_t i = 0; i < inputs.size(); ++i) {
      COLONY_ASSERT(inputs[i].size() == out.size(), "input {} has {} floats, the output {}", i,
                    inputs[i].size(), out.size());
      dense_.push_back(inputs[i].data());
    }
    gpu::thrust_sum_dense_host(dense_.data(), dense_.size(), out.size(), out.data());
  }

 private:
  std::vector<gpu::SumInput> inputs_;
  std::vector<const float*> dense_;
};

}  // namespace

std::unique_ptr<Reducer> make_cpu_reducer() {
  return std::make_unique<CpuReducer>();
}

std::unique_ptr<Reducer> make_thrust_host_reducer() {
  return std::make_unique<ThrustHostReducer>();
}

}  // namespace colony
