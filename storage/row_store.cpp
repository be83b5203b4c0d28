#include "storage/row_store.h"

#include <algorithm>
#include <vector>

namespace colony {

Status RowStore::for_each_in_range(uint64_t begin, uint64_t end,
                                   const std::function<void(uint64_t, const float*)>& f) const {
  std::vector<std::pair<uint64_t, const float*>> rows;
  for_each([&](uint64_t key, const float* row) {
    if (key >= begin && key < end) rows.emplace_back(key, row);
  });
  std::sort(rows.begin(), rows.end());
  for (const auto& [key, row] : rows) f(key, row);
  return {};
}

}  // namespace colony
