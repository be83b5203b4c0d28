#include "storage/row_store.h"

#include <algorithm>
#include <filesystem>
#include <vector>

namespace colony {

Status RowStore::for_each_in_range(uint64_t begin, uint64_t end,
                                   const std::function<void(uint64_t, const float*)>& f) const {
  std::vector<std::pair<uint64_t, const float*>> rows;
  if (Status s = for_each([&](uint64_t key, const float* row) {
        if (key >= begin && key < end) rows.emplace_back(key, row);
      });
      !s.ok())
    return s;
  std::sort(rows.begin(), rows.end());
  for (const auto& [key, row] : rows) f(key, row);
  return {};
}

Status RowStore::checkpoint(const std::string& dir, const StoreIdentity& identity) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec))
    return Status::io_error(fmt::format("{}: cannot write a checkpoint there: it exists", dir));
  RocksTableOptions o;
  o.path = dir;
  o.block_cache_bytes = size_t{1} << 20;
  auto table = RocksTable::open(o, identity);
  if (!table) return table.status();
  constexpr size_t batch_rows = 10000;
  const size_t rf = row_floats();
  std::vector<uint64_t> keys;
  std::vector<float> rows;
  Status result;
  auto write = [&]() {
    if (result.ok()) result = (*table)->write(keys, rows, keys.size());
    keys.clear();
    rows.clear();
  };
  if (Status s = for_each([&](uint64_t key, const float* row) {
        keys.push_back(key);
        rows.insert(rows.end(), row, row + rf);
        if (keys.size() == batch_rows) write();
      });
      !s.ok())
    return s;
  write();
  if (!result.ok()) return result;
  return (*table)->flush();
}

}  // namespace colony
