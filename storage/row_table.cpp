#include "storage/row_table.h"

#include <cstring>

namespace colony {

RowTable::RowTable(size_t row_floats) : row_floats_(row_floats) {
  COLONY_ASSERT(row_floats > 0);
  index_.resize(1024);
  mask_ = index_.size() - 1;
}

size_t RowTable::memory_bytes() const {
  return index_.size() * sizeof(Slot) + chunks_.size() * chunk_rows * row_floats_ * sizeof(float);
}

float* RowTable::insert_at(size_t pos, uint64_t key) {
  // Keep the load factor at or below 1/2 so probe sequences stay short.
  if ((rows_ + 1) * 2 > index_.size()) {
    grow();
    pos = home(key);
    while (index_[pos].row_plus_one != 0) pos = (pos + 1) & mask_;
  }
  const uint64_t id = rows_;
  if ((id >> chunk_rows_log2) >= chunks_.size()) {
    chunks_.emplace_back(new float[chunk_rows * row_floats_]);
  }
  float* r = row(id);
  std::memset(r, 0, row_floats_ * sizeof(float));
  index_[pos] = Slot{key, id + 1};
  ++rows_;
  return r;
}

void RowTable::grow() {
  std::vector<Slot> old;
  old.swap(index_);
  index_.assign(old.size() * 2, Slot{});
  mask_ = index_.size() - 1;
  for (const Slot& s : old) {
    if (s.row_plus_one == 0) continue;
    size_t pos = home(s.key);
    while (index_[pos].row_plus_one != 0) pos = (pos + 1) & mask_;
    index_[pos] = s;
  }
}

}  // namespace colony
