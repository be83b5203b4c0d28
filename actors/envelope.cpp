#include "actors/envelope.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>

#include "actors/wire.capnp.h"

namespace colony {

Expected<std::vector<uint8_t>> encode_envelope(const Envelope& e) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<wire::Envelope>();
  root.setVersion(e.version);
  root.setClusterId(e.cluster_id);
  root.setSenderId(e.sender_id);
  root.setKind(e.kind);
  root.setBody(kj::arrayPtr(e.body.data(), e.body.size()));
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  if (bytes.size() > wire_message_bytes_max)
    return Status::invalid_input(fmt::format("message of {} bytes exceeds the {} byte limit",
                                             bytes.size(), wire_message_bytes_max));
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

Expected<Envelope> decode_envelope(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return Status::invalid_input("empty message");
  if (bytes.size() > wire_message_bytes_max)
    return Status::invalid_input(fmt::format("message of {} bytes exceeds the {} byte limit",
                                             bytes.size(), wire_message_bytes_max));
  if (bytes.size() % sizeof(capnp::word) != 0)
    return Status::invalid_input(fmt::format("message of {} bytes is not a whole number of words",
                                             bytes.size()));
  // A received buffer is not guaranteed 8-byte aligned: copy into words.
  auto words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words.size() * 2 + 64;
  options.nestingLimit = 16;
  Envelope out;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
    capnp::FlatArrayMessageReader reader(words.asPtr(), options);
    auto root = reader.getRoot<wire::Envelope>();
    out.version = root.getVersion();
    out.cluster_id = root.getClusterId();
    out.sender_id = root.getSenderId();
    out.kind = root.getKind();
    auto body = root.getBody();
    out.body.assign(body.begin(), body.end());
  });
  KJ_IF_MAYBE(e, error) {
    return Status::invalid_input(std::string("malformed message: ") + e->getDescription().cStr());
  }
  if (out.version != wire_protocol_version)
    return Status::invalid_input(fmt::format("protocol version {} is not supported (this build speaks {})",
                                             out.version, wire_protocol_version));
  return out;
}

}  // namespace colony
