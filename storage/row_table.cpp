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
  float* r = row(id);
  std::memset(r, 0, row_floats_ * sizeof(float));
  index_[pos] = Slot{key, id + 1};
  ++rows_;
  return r;
}

bool RowTable::erase(uint64_t key) {
  size_t pos = home(key);
  while (true) {
    const Slot& s = index_[pos];
    if (s.row_plus_one == 0) return false;
    if (s.key == key) break;
    pos = (pos + 1) & mask_;
  }
  free_rows_.push_back(index_[pos].row_plus_one - 1);
  // Backward-shift deletion: move later entries of the probe run into the hole when their
  // home position allows, so that lookups never stop early at it.
  size_t hole = pos;
  for (size_t next = (pos + 1) & mask_; index_[next].row_plus_one != 0; next = (next + 1) & mask_) {
    const size_t h = home(index_[next].key);
    if (((next - h) & mask_) >= ((next - hole) & mask_)) {
      index_[hole] = index_[next];
      hole = next;
    }
  }
  index_[hole] = Slot{};
  --rows_;
  return true;
}

void RowTable::clear() {
  // An index for this many rows at the load factor of 1/2 (grown back as needed): one large
  // batch does not make every later clear() sweep its whole index.
  size_t slots = 1024;
  while (slots < 4 * rows_) slots *= 2;
  if (slots < index_.size()) {
    index_.assign(slots, Slot{});
    mask_ = slots - 1;
  } else {
    std::fill(index_.begin(), index_.end(), Slot{});
  }
  rows_ = 0;
  next_row_ = 0;
  free_rows_.clear();
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
