#include "sim/sim_store.h"

namespace colony::sim {

void DurableRows::write(std::unordered_map<uint64_t, std::vector<float>>& batch) {
  Undo undo;
  undo.reserve(batch.size());
  for (auto& [key, row] : batch) {
    auto it = rows_.find(key);
    if (it == rows_.end()) {
      undo.emplace_back(key, std::nullopt);
      rows_.emplace(key, std::move(row));
    } else {
      undo.emplace_back(key, std::move(it->second));
      it->second = std::move(row);
    }
  }
  ++commits_;
  undo_.push_back(std::move(undo));
  if (undo_.size() > undo_max) undo_.pop_front();
}

void DurableRows::erase(uint64_t key, Undo& undo) {
  auto it = rows_.find(key);
  if (it == rows_.end()) return;
  undo.emplace_back(key, std::move(it->second));
  rows_.erase(it);
}

uint64_t DurableRows::lose_tail(uint64_t n) {
  uint64_t undone = 0;
  for (; undone < n && !undo_.empty(); ++undone) {
    Undo& u = undo_.back();
    for (auto it = u.rbegin(); it != u.rend(); ++it) {
      if (it->second)
        rows_[it->first] = std::move(*it->second);
      else
        rows_.erase(it->first);
    }
    undo_.pop_back();
    --commits_;
  }
  return undone;
}

class SimRowStore final : public RowStore {
 public:
  explicit SimRowStore(std::shared_ptr<DurableRows> rows) : rows_(std::move(rows)) {}
  float* find(uint64_t key) override {
    if (auto it = batch_.find(key); it != batch_.end()) return it->second.data();
    auto it = rows_->rows_.find(key);
    return it == rows_->rows_.end() ? nullptr : it->second.data();
  }
  std::pair<float*, bool> find_or_insert(uint64_t key) override {
    if (auto it = batch_.find(key); it != batch_.end()) return {it->second.data(), false};
    auto durable = rows_->rows_.find(key);
    const bool inserted = durable == rows_->rows_.end();
    auto& row = batch_[key];
    row = inserted ? std::vector<float>(rows_->row_floats_, 0.0f) : durable->second;
    return {row.data(), inserted};
  }
  void prefetch(uint64_t) const override {}
  bool stable_rows() const override { return false; }
  size_t size() const override {
    size_t n = rows_->rows_.size();
    for (const auto& [key, row] : batch_) n += rows_->rows_.count(key) == 0;
    return n;
  }
  size_t row_floats() const override { return rows_->row_floats_; }
  size_t memory_bytes() const override { return size() * row_floats() * sizeof(float); }
  Status for_each(const std::function<void(uint64_t, const float*)>& f) const override {
    for (const auto& [key, row] : rows_->rows_) f(key, row.data());
    return {};
  }
  Status erase(std::span<const uint64_t> keys) override {
    DurableRows::Undo undo;
    for (uint64_t k : keys) {
      batch_.erase(k);
      rows_->erase(k, undo);
    }
    // An erase is a commit of its own: it survives a crash.
    ++rows_->commits_;
    rows_->undo_.push_back(std::move(undo));
    if (rows_->undo_.size() > DurableRows::undo_max) rows_->undo_.pop_front();
    return {};
  }
  Status commit() override {
    if (!batch_.empty()) rows_->write(batch_);
    batch_.clear();
    return {};
  }

 private:
  std::shared_ptr<DurableRows> rows_;
  std::unordered_map<uint64_t, std::vector<float>> batch_;  // handed out since the last commit
};

std::unique_ptr<RowStore> open_sim_store(std::shared_ptr<DurableRows> rows) {
  return std::make_unique<SimRowStore>(std::move(rows));
}

}  // namespace colony::sim
