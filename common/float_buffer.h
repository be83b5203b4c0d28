// FloatBuffer: the float array of a message (a pull reply's values, a push's gradients).
//
// It either owns its floats (a std::vector<float>) or is a read-only view of floats that
// another object keeps alive: the wire decoder hands out views of the bytes ZeroMQ received,
// so a shard applies gradients and a worker copies rows straight from the received message,
// without a copy in between. Reading is the same either way. Writing goes through vec(),
// which first copies a view into owned storage, so a view is never written through.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

namespace colony {

class FloatBuffer {
 public:
  FloatBuffer() = default;
  FloatBuffer(std::vector<float> v) : owned_(std::move(v)) {}  // NOLINT: implicit on purpose
  FloatBuffer(std::initializer_list<float> l) : owned_(l) {}
  FloatBuffer(size_t n, float value) : owned_(n, value) {}

  // A view of `n` floats at `data`, which stay valid as long as `owner` lives.
  static FloatBuffer view(std::shared_ptr<const void> owner, const float* data, size_t n) {
    FloatBuffer b;
    b.owner_ = std::move(owner);
    b.view_ = data;
    b.view_size_ = n;
    b.is_view_ = true;
    return b;
  }

  bool is_view() const { return is_view_; }
  size_t size() const { return is_view_ ? view_size_ : owned_.size(); }
  bool empty() const { return size() == 0; }
  const float* data() const { return is_view_ ? view_ : owned_.data(); }
  const float* begin() const { return data(); }
  const float* end() const { return data() + size(); }
  const float& operator[](size_t i) const { return data()[i]; }
  std::span<const float> span() const { return {data(), size()}; }

  // The owned floats, for building or changing the buffer: a view is copied in first (and
  // stops being a view).
  std::vector<float>& vec() {
    if (is_view_) {
      owned_.assign(view_, view_ + view_size_);
      owner_.reset();
      view_ = nullptr;
      view_size_ = 0;
      is_view_ = false;
    }
    return owned_;
  }

  friend bool operator==(const FloatBuffer& a, const FloatBuffer& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  std::vector<float> owned_;
  std::shared_ptr<const void> owner_;
  const float* view_ = nullptr;
  size_t view_size_ = 0;
  bool is_view_ = false;
};

}  // namespace colony
