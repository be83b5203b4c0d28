// libFuzzer target over the wire decoders (envelopes, ps and control messages): any bytes must decode to a message or to an
// invalid_input Status, never crash, hang or read out of bounds (run under ASan and UBSan).
#include <cstdint>
#include <cstdlib>
#include <span>

#include "actors/envelope.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto e = colony::decode_envelope(bytes);
  if (!e.ok() && e.status().code() != colony::Status::Code::invalid_input) std::abort();
  if (e.ok() && e.value().body.size() > size) std::abort();  // never larger than its input
  auto m = colony::decode_wire_message(bytes, e.ok() ? e.value().cluster_id : 0);
  if (!m.ok() && m.status().code() != colony::Status::Code::invalid_input) std::abort();
  return 0;
}
