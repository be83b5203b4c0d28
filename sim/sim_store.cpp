#include "sim/sim_store.h"

namespace colony::sim {

void DurableRows::write(std::unordered_map<uint64_t, std::vector<float>>& batch,
                        const std::vector<std::pair<uint64_t, uint32_t>>& clocks) {
  Undo undo;
  undo.rows.reserve(batch.size());
  for (auto& [key, row] : batch) {
    auto it = rows_.find(key);
    if (it == rows_.end()) {
      undo.rows.emplace_back(key, std::nullopt);
      rows_.emplace(key, std::move(row));
    } else {
      undo.rows.emplace_back(key, std::move(it->second));
      it->second = std::move(row);
    }
  }
  for (auto [sender, clock] : clocks) {
    auto it = clocks_.find(sender);
    if (it != clocks_.end() && clock <= it->second) applied_twice_.emplace_back(sender, clock);
    undo.clocks.emplace_back(
        sender, it == clocks_.end() ? std::nullopt : std::optional<uint32_t>(it->second));
    clocks_[sender] = clock;
  }
  remember(std::move(undo));
}

void DurableRows::remember(Undo undo) {
  ++commits_;
  undo_.push_back(std::move(undo));
  if (undo_.size() > undo_max) undo_.pop_front();
}

void DurableRows::erase(uint64_t key, Undo& undo) {
  auto it = rows_.find(key);
  if (it == rows_.end()) return;
  undo.rows.emplace_back(key, std::move(it->second));
  rows_.erase(it);
}

uint64_t DurableRows::lose_tail(uint64_t n) {
  uint64_t undone = 0;
  for (; undone < n && !undo_.empty(); ++undone) {
    Undo& u = undo_.back();
    for (auto it = u.rows.rbegin(); it != u.rows.rend(); ++it) {
      if (it->second)
        rows_[it->first] = std::move(*it->second);
      else
        rows_.erase(it->first);
    }
    for (auto it = u.clocks.rbegin(); it != u.clocks.rend(); ++it) {
      if (it->second)
        clocks_[it->first] = *it->second;
      else
        clocks_.erase(it->first);
    }
    undo_.pop_back();
    --commits_;
  }
  return undone;
}

class SimRowStore final : public RowStore {
 public:
  SimRowStore(std::shared_ptr<DurableRows> rows, bool forget_clocks)
      : rows_(std::move(rows)), forget_clocks_(forget_clocks) {}
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
    rows_->remember(std::move(undo));
    return {};
  }
  Status commit() override {
    if (!batch_.empty() || !staged_clocks_.empty()) rows_->write(batch_, staged_clocks_);
    batch_.clear();
    staged_clocks_.clear();
    return {};
  }
  void stage_clock(uint64_t sender, uint32_t clock) override {
    staged_clocks_.emplace_back(sender, clock);
  }
  std::map<uint64_t, uint32_t> committed_clocks() const override {
    return forget_clocks_ ? std::map<uint64_t, uint32_t>{} : rows_->clocks();
  }

 private:
  std::shared_ptr<DurableRows> rows_;
  const bool forget_clocks_;
  std::unordered_map<uint64_t, std::vector<float>> batch_;  // handed out since the last commit
  std::vector<std::pair<uint64_t, uint32_t>> staged_clocks_;
};

std::unique_ptr<RowStore> open_sim_store(std::shared_ptr<DurableRows> rows, bool forget_clocks) {
  return std::make_unique<SimRowStore>(std::move(rows), forget_clocks);
}

}  // namespace colony::sim
