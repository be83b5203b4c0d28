#include "actors/envelope.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <bit>
#include <cstring>

#include "actors/wire.capnp.h"

namespace colony {

namespace {

// Checks the size of untrusted bytes and copies them into words: a received buffer is not
// guaranteed to be 8-byte aligned, which Cap'n Proto's flat reader needs.
Status to_words(std::span<const uint8_t> bytes, kj::Array<capnp::word>& words) {
  if (bytes.empty()) return Status::invalid_input("empty message");
  if (bytes.size() > wire_message_bytes_max)
    return Status::invalid_input(fmt::format("message of {} bytes exceeds the {} byte limit", bytes.size(),
                                             wire_message_bytes_max));
  if (bytes.size() % sizeof(capnp::word) != 0)
    return Status::invalid_input(fmt::format("message of {} bytes is not a whole number of words", bytes.size()));
  words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  return Status();
}

// Bounds for reading untrusted messages: no more traversal than twice the message, shallow.
capnp::ReaderOptions reader_options(size_t words) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words * 2 + 64;
  options.nestingLimit = 16;
  return options;
}

}  // namespace

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
  kj::Array<capnp::word> words;
  if (Status s = to_words(bytes, words); !s.ok()) return s;
  const capnp::ReaderOptions options = reader_options(words.size());
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

namespace {

static_assert(std::endian::native == std::endian::little, "float blobs are little-endian on the wire");

template <class B>
void set_header(B builder, const MessageHeader& h) {
  auto w = builder.initHeader();
  w.setSender(h.sender);
  w.setRequestId(h.request_id);
  w.setMapVersion(h.map_version);
}

MessageHeader get_header(wire::Header::Reader r) {
  return MessageHeader{r.getSender(), r.getRequestId(), r.getMapVersion()};
}

kj::ArrayPtr<const kj::byte> float_bytes(const std::vector<float>& v) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(v.data()), v.size() * sizeof(float));
}

template <class L>
void set_keys(L list, const std::vector<uint64_t>& keys) {
  for (unsigned i = 0; i < keys.size(); ++i) list.set(i, keys[i]);
}

Status read_floats(capnp::Data::Reader data, std::vector<float>& out, const char* what) {
  if (data.size() % sizeof(float) != 0)
    return Status::invalid_input(fmt::format("{} blob of {} bytes is not a whole number of floats", what,
                                             data.size()));
  out.resize(data.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), data.begin(), data.size());
  return Status();
}

std::vector<uint64_t> read_keys(capnp::List<uint64_t>::Reader list) {
  std::vector<uint64_t> keys(list.size());
  for (unsigned i = 0; i < list.size(); ++i) keys[i] = list[i];
  return keys;
}

}  // namespace

Expected<std::vector<uint8_t>> encode_ps_message(const PsMessage& message, uint64_t cluster_id) {
  capnp::MallocMessageBuilder builder;
  auto root = builder.initRoot<wire::Envelope>();
  root.setVersion(wire_protocol_version);
  root.setClusterId(cluster_id);
  root.setKind(0);
  auto ps = root.initPs();
  const MessageHeader& header = std::visit([](const auto& m) -> const MessageHeader& { return m.header; }, message);
  root.setSenderId(header.sender);
  if (auto* m = std::get_if<PullRequest>(&message)) {
    auto w = ps.initPullRequest();
    set_header(w, m->header);
    w.setClock(m->clock);
    w.setWriter(m->writer);
    set_keys(w.initKeys(m->keys.size()), m->keys);
  } else if (auto* m = std::get_if<PullReply>(&message)) {
    auto w = ps.initPullReply();
    set_header(w, m->header);
    w.setMinClock(m->min_clock);
    w.setValues(float_bytes(m->values));
  } else if (auto* m = std::get_if<PushRequest>(&message)) {
    auto w = ps.initPushRequest();
    set_header(w, m->header);
    w.setClock(m->clock);
    set_keys(w.initKeys(m->keys.size()), m->keys);
    w.setGrads(float_bytes(m->grads));
  } else if (auto* m = std::get_if<PushAck>(&message)) {
    set_header(ps.initPushAck(), m->header);
  } else if (auto* m = std::get_if<ClockAdvance>(&message)) {
    auto w = ps.initClockAdvance();
    set_header(w, m->header);
    w.setClock(m->clock);
  } else if (auto* m = std::get_if<ShardMapUpdate>(&message)) {
    auto w = ps.initShardMapUpdate();
    set_header(w, m->header);
    w.setVersion(m->version);
    w.setShards(m->shards);
    w.setVnodesPerShard(m->vnodes_per_shard);
    w.setSeed(m->seed);
  } else if (auto* m = std::get_if<PsError>(&message)) {
    auto w = ps.initPsError();
    set_header(w, m->header);
    w.setCode(static_cast<uint8_t>(m->code));
    w.setMessage(m->message);
  }
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  auto bytes = words.asBytes();
  if (bytes.size() > wire_message_bytes_max)
    return Status::invalid_input(fmt::format("message of {} bytes exceeds the {} byte limit", bytes.size(),
                                             wire_message_bytes_max));
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

Expected<PsMessage> decode_ps_message(std::span<const uint8_t> bytes, uint64_t cluster_id) {
  kj::Array<capnp::word> words;
  if (Status s = to_words(bytes, words); !s.ok()) return s;
  const capnp::ReaderOptions options = reader_options(words.size());
  PsMessage out;
  Status status;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
    capnp::FlatArrayMessageReader reader(words.asPtr(), options);
    auto root = reader.getRoot<wire::Envelope>();
    if (root.getVersion() != wire_protocol_version) {
      status = Status::invalid_input(fmt::format("protocol version {} is not supported (this build speaks {})",
                                                 root.getVersion(), wire_protocol_version));
      return;
    }
    if (root.getClusterId() != cluster_id) {
      status = Status::invalid_input(fmt::format("message for cluster {:#x}, this is cluster {:#x}",
                                                 root.getClusterId(), cluster_id));
      return;
    }
    if (root.getKind() != 0 || !root.hasPs()) {
      status = Status::invalid_input(fmt::format("message of kind {} holds no parameter-server message",
                                                 root.getKind()));
      return;
    }
    auto ps = root.getPs();
    switch (ps.which()) {
      case wire::PsMessage::PULL_REQUEST: {
        auto r = ps.getPullRequest();
        out = PullRequest{get_header(r.getHeader()), r.getClock(), r.getWriter(), read_keys(r.getKeys())};
        break;
      }
      case wire::PsMessage::PULL_REPLY: {
        auto r = ps.getPullReply();
        PullReply m{get_header(r.getHeader()), r.getMinClock(), {}};
        status = read_floats(r.getValues(), m.values, "pull reply values");
        out = std::move(m);
        break;
      }
      case wire::PsMessage::PUSH_REQUEST: {
        auto r = ps.getPushRequest();
        PushRequest m{get_header(r.getHeader()), r.getClock(), read_keys(r.getKeys()), {}};
        status = read_floats(r.getGrads(), m.grads, "push gradients");
        if (status.ok() && (m.keys.empty() ? !m.grads.empty() : m.grads.size() % m.keys.size() != 0))
          status = Status::invalid_input(fmt::format("push of {} keys carries {} gradient floats, not a whole "
                                                     "number of rows", m.keys.size(), m.grads.size()));
        out = std::move(m);
        break;
      }
      case wire::PsMessage::PUSH_ACK:
        out = PushAck{get_header(ps.getPushAck().getHeader())};
        break;
      case wire::PsMessage::CLOCK_ADVANCE: {
        auto r = ps.getClockAdvance();
        out = ClockAdvance{get_header(r.getHeader()), r.getClock()};
        break;
      }
      case wire::PsMessage::SHARD_MAP_UPDATE: {
        auto r = ps.getShardMapUpdate();
        out = ShardMapUpdate{get_header(r.getHeader()), r.getVersion(), r.getShards(), r.getVnodesPerShard(),
                             r.getSeed()};
        break;
      }
      case wire::PsMessage::PS_ERROR: {
        auto r = ps.getPsError();
        const uint8_t code = r.getCode();
        if (code != static_cast<uint8_t>(PsErrorCode::bad_request) &&
            code != static_cast<uint8_t>(PsErrorCode::out_of_order)) {
          status = Status::invalid_input(fmt::format("unknown error code {}", code));
          return;
        }
        out = PsError{get_header(r.getHeader()), static_cast<PsErrorCode>(code), std::string(r.getMessage().cStr())};
        break;
      }
      default:
        status = Status::invalid_input("message holds no parameter-server message");
        return;
    }
    const NodeId sender = std::visit([](const auto& m) { return m.header.sender; }, out);
    if (status.ok() && sender != root.getSenderId())
      status = Status::invalid_input(fmt::format("envelope sender {} differs from the message's sender {}",
                                                 root.getSenderId(), sender));
  });
  KJ_IF_MAYBE(e, error) {
    return Status::invalid_input(std::string("malformed message: ") + e->getDescription().cStr());
  }
  if (!status.ok()) return status;
  return out;
}

}  // namespace colony
