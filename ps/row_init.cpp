#include "ps/row_init.h"

#include <cmath>

#include "common/hash.h"

namespace colony {

void init_row(uint64_t key, const RowInit& init, std::span<float> value) {
  const size_t linear = init.linear < value.size() ? init.linear : value.size();
  for (size_t i = 0; i < linear; ++i) value[i] = 0.0f;
  if (key == bias_key) {
    for (size_t i = linear; i < value.size(); ++i) value[i] = 0.0f;
    return;
  }
  // Uniform on [-a, a] has standard deviation a / sqrt(3).
  const double a = std::sqrt(3.0) * init.factor_std;
  const uint64_t base = hash_combine(key, init.seed);
  for (size_t i = linear; i < value.size(); ++i) {
    const double u = unit_double(hash_combine(base, i));
    value[i] = static_cast<float>((2.0 * u - 1.0) * a);
  }
}

}  // namespace colony
