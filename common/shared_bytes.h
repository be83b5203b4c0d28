// SharedBytes: bytes that some other object keeps alive (a received ZeroMQ frame, an encoded
// message), with a handle on that object, so that whoever reads them can keep them too (a
// FloatBuffer view of a received push's gradients) without copying.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace colony {

class SharedBytes {
 public:
  SharedBytes() = default;
  // `data` stays valid as long as `owner` lives. A null owner: the caller keeps the bytes alive
  // for as long as this handle is used (nothing may hold on to them).
  SharedBytes(std::shared_ptr<const void> owner, const uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  explicit SharedBytes(std::span<const uint8_t> borrowed)
      : data_(borrowed.data()), size_(borrowed.size()) {}
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  operator std::span<const uint8_t>() const { return {data_, size_}; }
  std::vector<uint8_t> to_vector() const { return {data_, data_ + size_}; }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace colony
