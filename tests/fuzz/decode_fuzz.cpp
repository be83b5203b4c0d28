// libFuzzer target over the wire decoders (envelopes, ps and control messages, one frame or
// several): any bytes must decode to a message or to an invalid_input Status, never crash, hang
// or read out of bounds (run under ASan and UBSan).
//
// Each input is decoded twice: whole, as one flat frame; and as a list of frames in this
// framing: one byte of frame count, then per frame a 4-byte little-endian length and its bytes
// (a length running past the end takes what is left). The frames are copied into word-aligned
// buffers with owners, as received ZeroMQ frames are, so float arrays come back as views, and
// every float of a decoded message is read.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "actors/envelope.h"

namespace {

void check(const colony::Expected<colony::WireMessage>& m) {
  if (!m.ok()) {
    if (m.status().code() != colony::Status::Code::invalid_input) std::abort();
    return;
  }
  if (m.value().is_control) return;
  volatile float sum = 0;
  if (auto* r = std::get_if<colony::PullReply>(&m.value().ps))
    for (float x : r->values) sum = sum + x;
  if (auto* p = std::get_if<colony::PushRequest>(&m.value().ps))
    for (float x : p->grads) sum = sum + x;
  if (auto* r = std::get_if<colony::DenseReduce>(&m.value().ps))
    for (float x : r->values) sum = sum + x;
  if (auto* b = std::get_if<colony::DenseBroadcast>(&m.value().ps))
    for (float x : b->values) sum = sum + x;
}

std::vector<colony::SharedBytes> frames_of(const uint8_t* data, size_t size) {
  std::vector<colony::SharedBytes> frames;
  if (size == 0) return frames;
  const size_t count = data[0];
  size_t at = 1;
  for (size_t i = 0; i < count && at <= size; ++i) {
    uint32_t length = 0;
    if (size - at >= 4) {
      std::memcpy(&length, data + at, 4);
      at += 4;
    }
    const size_t n = std::min<size_t>(length, size - at);
    auto buffer = std::make_shared<std::vector<uint64_t>>(n / 8 + 1);
    std::memcpy(buffer->data(), data + at, n);
    frames.emplace_back(buffer, reinterpret_cast<const uint8_t*>(buffer->data()), n);
    at += n;
  }
  return frames;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto e = colony::decode_envelope(bytes);
  if (!e.ok() && e.status().code() != colony::Status::Code::invalid_input) std::abort();
  if (e.ok() && e.value().body.size() > size) std::abort();  // never larger than its input
  const uint64_t cluster = e.ok() ? e.value().cluster_id : 0;
  check(colony::decode_wire_message(bytes, cluster));
  const auto frames = frames_of(data, size);
  check(colony::decode_wire_message(frames, cluster));
  // The cluster id of a framed seed is in its first frame.
  if (!frames.empty())
    if (auto first = colony::decode_envelope(frames[0]); first.ok())
      check(colony::decode_wire_message(frames, first.value().cluster_id));
  return 0;
}
