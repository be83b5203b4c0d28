#include "data/holdout.h"

#include <bit>
#include <cmath>

#include "common/hash.h"

namespace colony {

bool row_held_out(const Batch& batch, size_t row, double fraction) {
  uint64_t h = hash_combine(0x686f6c646f7574ULL, std::bit_cast<uint32_t>(batch.labels[row]));
  const auto keys = batch.row_keys(row);
  const auto values = batch.row_values(row);
  for (size_t i = 0; i < keys.size(); ++i)
    h = hash_combine(hash_combine(h, keys[i]), std::bit_cast<uint32_t>(values[i]));
  for (float x : batch.row_dense(row)) h = hash_combine(h, std::bit_cast<uint32_t>(x));
  return unit_double(h) < fraction;
}

namespace {

class HoldoutReader : public BatchReader {
 public:
  HoldoutReader(std::unique_ptr<BatchReader> inner, const HoldoutSplit& split, size_t batch_rows)
      : inner_(std::move(inner)), split_(split), batch_rows_(batch_rows) {}

  Expected<bool> next(Batch& out) override {
    out.clear();
    while (out.rows() < batch_rows_) {
      if (row_ == in_.rows()) {
        if (done_) break;
        auto more = inner_->next(in_);
        if (!more) return more.status();
        row_ = 0;
        if (!*more) {
          done_ = true;
          break;
        }
      }
      // Runs of rows on the kept side are appended at once.
      size_t end = row_;
      while (end < in_.rows() && out.rows() + (end - row_) < batch_rows_ &&
             row_held_out(in_, end, split_.fraction) == split_.keep_held_out)
        ++end;
      if (end > row_) out.append_rows(in_, row_, end - row_);
      row_ = end;
      if (row_ < in_.rows() && out.rows() < batch_rows_) ++row_;  // a row of the other side
    }
    rows_ += out.rows();
    return !out.empty();
  }

  ReaderStats stats() const override {
    ReaderStats s = inner_->stats();
    s.rows = rows_;
    const double share = split_.keep_held_out ? split_.fraction : 1.0 - split_.fraction;
    s.rows_total = static_cast<uint64_t>(std::llround(double(s.rows_total) * share));
    return s;
  }

 private:
  std::unique_ptr<BatchReader> inner_;
  HoldoutSplit split_;
  size_t batch_rows_;
  Batch in_;
  size_t row_ = 0;
  bool done_ = false;
  uint64_t rows_ = 0;
};

}  // namespace

std::unique_ptr<BatchReader> make_holdout_reader(std::unique_ptr<BatchReader> inner,
                                                 const HoldoutSplit& split, size_t batch_rows) {
  return std::make_unique<HoldoutReader>(std::move(inner), split, batch_rows);
}

}  // namespace colony
