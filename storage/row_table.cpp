#include "storage/row_table.h"

#include <cstring>

namespace colony {

RowTable::RowTable(size_t row_floats) : row_floats_(row_floats) {
  COLONY_ASSERT(row_floats > 0);
}

size_t RowTable::memory_bytes() const {
  return index_.memory_bytes() + chunks_.size() * chunk_rows * row_floats_ * sizeof(float);
}

uint64_t RowTable::new_row() {
  uint64_t id;
  if (!free_rows_.empty()) {
    id = free_rows_.back();
    free_rows_.pop_back();
  } else {
    id = next_row_++;
  }
  if ((id >> chunk_rows_log2) >= chunks_.size()) {
    chunks_.emplace_back(new float[chunk_rows * row_floats_]);
  }
  std::memset(row(id), 0, row_floats_ * sizeof(float));
  return id;
}

bool RowTable::erase(uint64_t key) {
  const uint64_t id = index_.erase(key);
  if (id == KeyIndex::missing) return false;
  free_rows_.push_back(id);
  return true;
}

void RowTable::clear() {
  index_.clear();
  next_row_ = 0;
  free_rows_.clear();
}

}  // namespace colony
