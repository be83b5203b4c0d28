#include "actors/envelope.h"

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/orphan.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <tuple>
#include <variant>

#include "actors/wire.capnp.h"
#include "common/bf16.h"
#include "common/fp16.h"
#include "common/int8.h"
#include "ps/replication.h"

namespace colony {

namespace {

// The words of a received message, frame by frame: each frame read in place when it is
// word-aligned (any malloc'd buffer is), copied otherwise. One frame is the flat format (with
// its segment table); several are the segments themselves.
class FrameWords {
 public:
  Status init(std::span<const SharedBytes> frames) {
    if (frames.empty() || frames.size() > wire_frames_max)
      return Status::invalid_input(
          fmt::format("message of {} frames, expected 1 to {}", frames.size(), wire_frames_max));
    frames_ = frames;
    size_t bytes = 0;
    for (const SharedBytes& f : frames) bytes += f.size();
    if (bytes > wire_message_bytes_max)
      return Status::invalid_input(fmt::format("message of {} bytes exceeds the {} byte limit",
                                               bytes, wire_message_bytes_max));
    for (const SharedBytes& f : frames) {
      if (f.empty())
        return Status::invalid_input(frames.size() == 1 ? "empty message" : "empty frame");
      if (f.size() % sizeof(capnp::word) != 0)
        return Status::invalid_input(fmt::format("{} of {} bytes is not a whole number of words",
                                                 frames.size() == 1 ? "message" : "frame",
                                                 f.size()));
      const size_t n = f.size() / sizeof(capnp::word);
      if (reinterpret_cast<uintptr_t>(f.data()) % alignof(capnp::word) == 0) {
        words_.push_back(kj::arrayPtr(reinterpret_cast<const capnp::word*>(f.data()), n));
        in_place_.push_back(true);
      } else {
        copies_.push_back(kj::heapArray<capnp::word>(n));
        std::memcpy(copies_.back().begin(), f.data(), f.size());
        words_.push_back(copies_.back().asPtr());
        in_place_.push_back(false);
      }
      total_words_ += n;
    }
    return Status();
  }

  bool flat() const { return words_.size() == 1; }
  kj::ArrayPtr<const capnp::word> flat_words() const { return words_[0]; }
  kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments() const {
    return kj::arrayPtr(words_.data(), words_.size());
  }
  size_t total_words() const { return total_words_; }

  // What keeps bytes [p, p + n) alive where they lie: the owner of the frame they were read
  // from in place, or null (copied here, or a frame without an owner).
  std::shared_ptr<const void> owner_of(const void* p, size_t n) const {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < frames_.size(); ++i) {
      const SharedBytes& f = frames_[i];
      if (in_place_[i] && b >= f.data() && b + n <= f.data() + f.size()) return f.owner();
    }
    return nullptr;
  }

 private:
  std::span<const SharedBytes> frames_;
  std::vector<kj::Array<capnp::word>> copies_;
  std::vector<kj::ArrayPtr<const capnp::word>> words_;
  std::vector<bool> in_place_;
  size_t total_words_ = 0;
};

// Bounds for reading untrusted messages: no more traversal than twice the message, shallow.
capnp::ReaderOptions reader_options(size_t words) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words * 2 + 64;
  options.nestingLimit = 16;
  return options;
}

// The flat (unpacked) serialization of `builder`, written straight into the result: one copy
// of the contents, not two.
Expected<std::vector<uint8_t>> to_bytes(capnp::MessageBuilder& builder) {
  auto segments = builder.getSegmentsForOutput();
  const size_t bytes = capnp::computeSerializedSizeInWords(segments) * sizeof(capnp::word);
  if (bytes > wire_message_bytes_max)
    return Status::invalid_input(fmt::format("message of {} bytes exceeds the {} byte limit", bytes,
                                             wire_message_bytes_max));
  // Appended into reserved room: no zero-filling pass before the copy.
  struct Appender final : kj::OutputStream {
    std::vector<uint8_t>& out;
    explicit Appender(std::vector<uint8_t>& o) : out(o) {}
    void write(const void* buffer, size_t size) override {
      const auto* p = static_cast<const uint8_t*>(buffer);
      out.insert(out.end(), p, p + size);
    }
  };
  std::vector<uint8_t> out;
  out.reserve(bytes);
  Appender stream(out);
  capnp::writeMessage(stream, segments);
  COLONY_ASSERT(out.size() == bytes, "wrote {} of {} bytes", out.size(), bytes);
  return out;
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
  return to_bytes(message);
}

Expected<Envelope> decode_envelope(std::span<const uint8_t> bytes) {
  const SharedBytes frame(bytes);
  FrameWords words;
  if (Status s = words.init(std::span<const SharedBytes>(&frame, 1)); !s.ok()) return s;
  const capnp::ReaderOptions options = reader_options(words.total_words());
  Envelope out;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
    capnp::FlatArrayMessageReader reader(words.flat_words(), options);
    auto root = reader.getRoot<wire::Envelope>();
    out.version = root.getVersion();
    out.cluster_id = root.getClusterId();
    out.sender_id = root.getSenderId();
    out.kind = root.getKind();
    auto body = root.getBody();
    out.body.assign(body.begin(), body.end());
  });
  KJ_IF_MAYBE (e, error) {
    return Status::invalid_input(std::string("malformed message: ") + e->getDescription().cStr());
  }
  if (out.version != wire_protocol_version)
    return Status::invalid_input(
        fmt::format("protocol version {} is not supported (this build speaks {})", out.version,
                    wire_protocol_version));
  return out;
}

namespace {

static_assert(std::endian::native == std::endian::little,
              "float blobs are little-endian on the wire");

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

// Sets a float blob. A blob of whole words, from a word-aligned buffer (any vector's), becomes a
// segment of the message as it is, without a copy (Cap'n Proto's external data). `v` must
// outlive the builder. Others are copied in.
template <class Adopt, class Set>
void set_floats(capnp::MessageBuilder& message, const FloatBuffer& v, Adopt adopt, Set set) {
  const size_t bytes = v.size() * sizeof(float);
  if (bytes > 0 && bytes % sizeof(capnp::word) == 0 &&
      reinterpret_cast<uintptr_t>(v.data()) % alignof(capnp::word) == 0) {
    adopt(message.getOrphanage().referenceExternalData(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(v.data()), bytes)));
  } else {
    set(kj::arrayPtr(reinterpret_cast<const kj::byte*>(v.data()), bytes));
  }
}

// Keys travel as a List(UInt64): little-endian words, which is how this (little-endian) host
// holds them, so they are copied in and out in one block. The list's raw bytes come from
// Cap'n Proto's AnyList view; a builder's list lies in the builder's own writable segment.
void set_keys(capnp::List<uint64_t>::Builder list, const std::vector<uint64_t>& keys) {
  if (keys.empty()) return;
  kj::ArrayPtr<const kj::byte> raw = capnp::AnyList::Reader(list.asReader()).getRawBytes();
  COLONY_ASSERT(raw.size() == keys.size() * sizeof(uint64_t), "key list of {} bytes for {} keys",
                raw.size(), keys.size());
  std::memcpy(const_cast<kj::byte*>(raw.begin()), keys.data(), raw.size());
}

// A float blob as a FloatBuffer: a view of the received bytes where they can be kept (read in
// place, with an owner, float-aligned), a copy otherwise.
Status read_floats(capnp::Data::Reader data, const FrameWords& words, FloatBuffer& out,
                   const char* what) {
  if (data.size() % sizeof(float) != 0)
    return Status::invalid_input(
        fmt::format("{} blob of {} bytes is not a whole number of floats", what, data.size()));
  const size_t n = data.size() / sizeof(float);
  if (n == 0) {
    out = FloatBuffer();
    return Status();
  }
  const bool aligned = reinterpret_cast<uintptr_t>(data.begin()) % alignof(float) == 0;
  if (auto owner = aligned ? words.owner_of(data.begin(), data.size()) : nullptr) {
    out = FloatBuffer::view(std::move(owner), reinterpret_cast<const float*>(data.begin()), n);
    return Status();
  }
  std::vector<float> v(n);
  std::memcpy(v.data(), data.begin(), data.size());
  out = FloatBuffer(std::move(v));
  return Status();
}

// Values in `format` (ps/protocol.h ValueFormat): fp32 as set_floats writes them; bf16 packed
// two bytes each, the upper halves of values the cores made bf16-exact (one that is not is cut
// toward zero: still a bf16 value); fp16 packed two bytes each (values the cores made
// fp16-exact; another is rounded to the nearest); int8 one byte each, the code of each value under
// its row's scale (common/int8.h), and the scales beside them (`set_scales`).
template <class Adopt, class Set, class Init, class SetScales>
void set_values(capnp::MessageBuilder& message, const FloatBuffer& v, ValueFormat format,
                const std::vector<float>& scales, Adopt adopt, Set set, Init init,
                SetScales set_scales) {
  if (format == ValueFormat::fp32) return set_floats(message, v, adopt, set);
  const float* in = v.data();
  if (format == ValueFormat::int8) {
    COLONY_ASSERT(v.empty() || (!scales.empty() && v.size() % scales.size() == 0),
                  "int8 values: {} values for {} row scales", v.size(), scales.size());
    capnp::Data::Builder out = init(static_cast<unsigned>(v.size()));
    const size_t width = scales.empty() ? 0 : v.size() / scales.size();
    for (size_t row = 0; row < scales.size(); ++row) {
      const float inverse = int8_inverse(scales[row]);
      for (size_t j = row * width; j < (row + 1) * width; ++j)
        out[j] = static_cast<uint8_t>(int8_code_by(in[j], inverse));
    }
    set_scales(kj::arrayPtr(reinterpret_cast<const kj::byte*>(scales.data()),
                            scales.size() * sizeof(float)));
    return;
  }
  capnp::Data::Builder out = init(static_cast<unsigned>(v.size() * sizeof(uint16_t)));
  // A builder's blob starts word-aligned in its segment.
  auto* bits = reinterpret_cast<uint16_t*>(out.begin());
  if (format == ValueFormat::fp16) {
    for (size_t i = 0; i < v.size(); ++i) bits[i] = to_fp16(in[i]);
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) bits[i] = to_bf16(in[i]);
}

// Values in the wire's `format` byte, as floats (int8: with the rows' `scales_blob`, whose
// scales it also returns in `scales`); refuses an unknown format, a blob that is not a whole
// number of values, or int8 values that are not a whole number of rows of `rows` rows (0: as
// many as the scales say), or scales not a whole number of floats.
Status read_values(capnp::Data::Reader data, uint8_t format, capnp::Data::Reader scales_blob,
                   size_t rows, const FrameWords& words, FloatBuffer& out,
                   std::vector<float>& scales, const char* what) {
  if (format == uint8_t(ValueFormat::fp32)) return read_floats(data, words, out, what);
  if (format == uint8_t(ValueFormat::int8)) {
    if (scales_blob.size() % sizeof(float) != 0)
      return Status::invalid_input(fmt::format(
          "{}: scales blob of {} bytes is not a whole number of floats", what, scales_blob.size()));
    scales.resize(scales_blob.size() / sizeof(float));
    if (!scales.empty()) std::memcpy(scales.data(), scales_blob.begin(), scales_blob.size());
    if (rows == 0) rows = scales.size();
    if (scales.size() != rows || (rows == 0 ? data.size() != 0 : data.size() % rows != 0))
      return Status::invalid_input(fmt::format("{}: {} int8 values with {} row scales for {} rows",
                                               what, data.size(), scales.size(), rows));
    std::vector<float> v(data.size());
    const size_t width = rows == 0 ? 0 : data.size() / rows;
    for (size_t row = 0; row < rows; ++row)
      for (size_t j = row * width; j < (row + 1) * width; ++j)
        v[j] = int8_value(scales[row], static_cast<int8_t>(data[j]));
    out = FloatBuffer(std::move(v));
    return Status();
  }
  if (format != uint8_t(ValueFormat::bf16) && format != uint8_t(ValueFormat::fp16))
    return Status::invalid_input(fmt::format("{} in unknown value format {}", what, format));
  const bool bf16 = format == uint8_t(ValueFormat::bf16);
  if (data.size() % sizeof(uint16_t) != 0)
    return Status::invalid_input(
        fmt::format("{} blob of {} bytes is not a whole number of {} values", what, data.size(),
                    bf16 ? "bf16" : "fp16"));
  std::vector<float> v(data.size() / sizeof(uint16_t));
  auto convert = [&](auto from) {
    if (reinterpret_cast<uintptr_t>(data.begin()) % alignof(uint16_t) == 0) {
      const auto* bits = reinterpret_cast<const uint16_t*>(data.begin());
      for (size_t i = 0; i < v.size(); ++i) v[i] = from(bits[i]);
    } else {
      for (size_t i = 0; i < v.size(); ++i) {
        uint16_t bits = 0;
        std::memcpy(&bits, data.begin() + i * sizeof(uint16_t), sizeof(bits));
        v[i] = from(bits);
      }
    }
  };
  if (bf16)
    convert(from_bf16);
  else
    convert(from_fp16);
  out = FloatBuffer(std::move(v));
  return Status();
}

// A received key list: of whatever element size the sender wrote (Cap'n Proto lets a reader
// upgrade lists), so only a list of plain 8-byte elements is copied as one block.
std::vector<uint64_t> read_keys(capnp::List<uint64_t>::Reader list) {
  std::vector<uint64_t> keys;
  const capnp::AnyList::Reader any(list);
  if (any.getElementSize() == capnp::ElementSize::EIGHT_BYTES) {
    kj::ArrayPtr<const kj::byte> raw = any.getRawBytes();  // word-aligned, as all segment data
    const auto* p = reinterpret_cast<const uint64_t*>(raw.begin());
    keys.assign(p, p + raw.size() / sizeof(uint64_t));
    return keys;
  }
  keys.reserve(list.size());
  for (unsigned i = 0; i < list.size(); ++i) keys.push_back(list[i]);
  return keys;
}

}  // namespace

namespace {

// A DenseReduce or DenseBroadcast: the values as PullReply's, a segment of their own where they
// can be.
template <class W, class M>
void set_dense(capnp::MessageBuilder& builder, W w, const M& m) {
  set_header(w, m.header);
  w.setStep(m.step);
  w.setSamples(m.samples);
  set_floats(
      builder, m.values, [&](capnp::Orphan<capnp::Data>&& o) { w.adoptValues(std::move(o)); },
      [&](kj::ArrayPtr<const kj::byte> b) { w.setValues(b); });
}

void set_push(capnp::MessageBuilder& builder, wire::PushRequest::Builder w, const PushRequest& m) {
  set_header(w, m.header);
  w.setClock(m.clock);
  set_keys(w.initKeys(m.keys.size()), m.keys);
  w.setFormat(static_cast<uint8_t>(m.format));
  w.setMore(m.more);
  w.setKeysOfPull(m.keys_of_pull);
  set_values(
      builder, m.grads, m.format, m.scales,
      [&](capnp::Orphan<capnp::Data>&& o) { w.adoptGrads(std::move(o)); },
      [&](kj::ArrayPtr<const kj::byte> b) { w.setGrads(b); },
      [&](unsigned bytes) { return w.initGrads(bytes); },
      [&](kj::ArrayPtr<const kj::byte> b) { w.setScales(b); });
}

void set_clock(wire::ClockAdvance::Builder w, const ClockAdvance& m) {
  set_header(w, m.header);
  w.setClock(m.clock);
  w.setResync(m.resync);
  w.setAckedPush(m.acked_push);
}

// Every alternative of PsMessage has its branch in build_ps and read_ps (and a name in
// ClusterLayout's checks): a new message must be added to each.
static_assert(std::variant_size_v<PsMessage> == 13, "a ps message kind without a wire encoding");

void set_forward(capnp::MessageBuilder& builder, wire::ReplicaForward::Builder w,
                 const ReplicaForward& m) {
  set_header(w, m.header);
  w.setSeq(m.seq);
  w.setCommitted(m.committed);
  w.setKeysFilled(m.keys_filled);
  if (auto* push = std::get_if<PushRequest>(&m.message))
    set_push(builder, w.initPush(), *push);
  else
    set_clock(w.initClock(), std::get<ClockAdvance>(m.message));
}

void set_copy(capnp::MessageBuilder& builder, wire::ReplicaCopy::Builder w, const ReplicaCopy& m) {
  set_header(w, m.header);
  set_keys(w.initKeys(m.keys.size()), m.keys);
  w.setRows(kj::arrayPtr(reinterpret_cast<const kj::byte*>(m.rows.data()),
                         m.rows.size() * sizeof(float)));
  w.setLast(m.last);
  auto kept = w.initKept(static_cast<unsigned>(m.kept.size()));
  for (unsigned i = 0; i < m.kept.size(); ++i) set_forward(builder, kept[i], m.kept[i]);
  auto parts = w.initParts(static_cast<unsigned>(m.state.parts.size()));
  for (unsigned i = 0; i < m.state.parts.size(); ++i) set_push(builder, parts[i], m.state.parts[i]);
  if (!m.last) return;
  w.setApplied(m.applied);
  auto nodes = w.initClockNodes(static_cast<unsigned>(m.state.clocks.size()));
  auto clocks = w.initClockValues(static_cast<unsigned>(m.state.clocks.size()));
  for (unsigned i = 0; i < m.state.clocks.size(); ++i) {
    nodes.set(i, m.state.clocks[i].first);
    clocks.set(i, m.state.clocks[i].second);
  }
  auto dropped_nodes = w.initDroppedNodes(static_cast<unsigned>(m.state.keys_dropped.size()));
  auto dropped_clocks = w.initDroppedClocks(static_cast<unsigned>(m.state.keys_dropped.size()));
  for (unsigned i = 0; i < m.state.keys_dropped.size(); ++i) {
    dropped_nodes.set(i, m.state.keys_dropped[i].first);
    dropped_clocks.set(i, m.state.keys_dropped[i].second);
  }
  w.setLastCheckpoint(m.state.last_checkpoint);
}

// Builds the envelope of a ps message; float arrays become external segments where they can
// (`message` must outlive `builder`).
void build_ps(capnp::MessageBuilder& builder, const PsMessage& message, uint64_t cluster_id,
              NodeId receiver) {
  auto root = builder.initRoot<wire::Envelope>();
  root.setVersion(wire_protocol_version);
  root.setClusterId(cluster_id);
  root.setKind(wire_kind_ps);
  root.setReceiver(receiver);
  auto ps = root.initPs();
  const MessageHeader& header =
      std::visit([](const auto& m) -> const MessageHeader& { return m.header; }, message);
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
    w.setFormat(static_cast<uint8_t>(m->format));
    set_values(
        builder, m->values, m->format, m->scales,
        [&](capnp::Orphan<capnp::Data>&& o) { w.adoptValues(std::move(o)); },
        [&](kj::ArrayPtr<const kj::byte> b) { w.setValues(b); },
        [&](unsigned bytes) { return w.initValues(bytes); },
        [&](kj::ArrayPtr<const kj::byte> b) { w.setScales(b); });
  } else if (auto* m = std::get_if<PushRequest>(&message)) {
    set_push(builder, ps.initPushRequest(), *m);
  } else if (auto* m = std::get_if<PushAck>(&message)) {
    set_header(ps.initPushAck(), m->header);
  } else if (auto* m = std::get_if<ClockAdvance>(&message)) {
    set_clock(ps.initClockAdvance(), *m);
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
  } else if (auto* m = std::get_if<DenseReduce>(&message)) {
    set_dense(builder, ps.initDenseReduce(), *m);
  } else if (auto* m = std::get_if<DenseBroadcast>(&message)) {
    set_dense(builder, ps.initDenseBroadcast(), *m);
  } else if (auto* m = std::get_if<PullHint>(&message)) {
    auto w = ps.initPullHint();
    set_header(w, m->header);
    set_keys(w.initKeys(m->keys.size()), m->keys);
  } else if (auto* m = std::get_if<ReplicaForward>(&message)) {
    set_forward(builder, ps.initReplicaForward(), *m);
  } else if (auto* m = std::get_if<ReplicaAck>(&message)) {
    auto w = ps.initReplicaAck();
    set_header(w, m->header);
    w.setSeq(m->seq);
  } else if (auto* m = std::get_if<ReplicaCopy>(&message)) {
    set_copy(builder, ps.initReplicaCopy(), *m);
  }
}

}  // namespace

Expected<std::vector<uint8_t>> encode_ps_message(const PsMessage& message, uint64_t cluster_id,
                                                 NodeId receiver) {
  capnp::MallocMessageBuilder builder;
  build_ps(builder, message, cluster_id, receiver);
  return to_bytes(builder);
}

size_t EncodedFrames::bytes() const {
  size_t n = 0;
  for (const auto& f : frames) n += f.size();
  return n;
}

Expected<EncodedFrames> encode_ps_frames(PsMessage&& message, uint64_t cluster_id,
                                         NodeId receiver) {
  struct Held {
    PsMessage message;
    capnp::MallocMessageBuilder builder;
  };
  auto held = std::make_shared<Held>();
  held->message = std::move(message);
  build_ps(held->builder, held->message, cluster_id, receiver);
  auto segments = held->builder.getSegmentsForOutput();
  EncodedFrames out;
  if (segments.size() == 1 || segments.size() > wire_frames_max) {
    auto flat = to_bytes(held->builder);
    if (!flat) return flat.status();
    auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(*flat));
    out.frames.emplace_back(bytes->data(), bytes->size());
    out.owner = std::move(bytes);
    return out;
  }
  size_t total = 0;
  for (auto seg : segments) {
    out.frames.emplace_back(reinterpret_cast<const uint8_t*>(seg.begin()),
                            seg.size() * sizeof(capnp::word));
    total += out.frames.back().size();
  }
  if (total > wire_message_bytes_max)
    return Status::invalid_input(fmt::format("message of {} bytes exceeds the {} byte limit", total,
                                             wire_message_bytes_max));
  out.owner = std::move(held);
  return out;
}

namespace {

// A DenseReduce or DenseBroadcast, its values read as PullReply's.
template <class M, class R>
Status read_dense(R r, const FrameWords& words, M& m, const char* what) {
  m.header = get_header(r.getHeader());
  m.step = r.getStep();
  m.samples = r.getSamples();
  capnp::Data::Reader values = r.getValues();
  if (values.size() / sizeof(float) > wire_dense_floats_max)
    return Status::invalid_input(
        fmt::format("{} of {} bytes, over {} floats", what, values.size(), wire_dense_floats_max));
  return read_floats(values, words, m.values, what);
}

// A push, its gradients read as PullReply's values. `keys_filled` (a replica forward's): a push
// that names its pull's keys carries them.
Status read_push(wire::PushRequest::Reader r, const FrameWords& words, bool keys_filled,
                 PushRequest& m) {
  m = PushRequest{get_header(r.getHeader()), r.getClock(), read_keys(r.getKeys()), {}};
  // Keys filled in by a primary are checked against the gradients as the primary's core checked
  // them (ShardCore::on_filled_push), not here: a backup must take what its primary took.
  Status status =
      read_values(r.getGrads(), r.getFormat(), r.getScales(), keys_filled ? 0 : m.keys.size(),
                  words, m.grads, m.scales, "push gradients");
  m.format = ValueFormat(std::min(r.getFormat(), value_format_max));
  m.more = r.getMore();
  m.keys_of_pull = r.getKeysOfPull();
  if (!status.ok()) return status;
  // A push that names its pull's keys has no keys of its own, and its row count is known only
  // to the shard that answered the pull, which checks the gradients against it. A primary
  // forwards one to its backups with the keys it took it for, and each backup's core checks the
  // gradients against them as the primary's did.
  if (keys_filled && m.keys_of_pull == 0)  // (the named pull may have had no keys)
    return Status::invalid_input(
        "a replica forward fills in the keys of a push that names no pull");
  if (!keys_filled && m.keys_of_pull != 0 && !m.keys.empty())
    return Status::invalid_input(
        fmt::format("push names the keys of pull {} and carries {} keys of its own", m.keys_of_pull,
                    m.keys.size()));
  if (m.keys_of_pull == 0 &&
      (m.keys.empty() ? !m.grads.empty() : m.grads.size() % m.keys.size() != 0))
    return Status::invalid_input(
        fmt::format("push of {} keys carries {} gradient floats, not a whole number of rows",
                    m.keys.size(), m.grads.size()));
  return status;
}

ClockAdvance read_clock(wire::ClockAdvance::Reader r) {
  return ClockAdvance{get_header(r.getHeader()), r.getClock(), r.getResync(), r.getAckedPush()};
}

Status read_forward(wire::ReplicaForward::Reader r, const FrameWords& words, ReplicaForward& m) {
  m = ReplicaForward{
      get_header(r.getHeader()), r.getSeq(), r.getCommitted(), r.getKeysFilled(), {}};
  if (r.which() == wire::ReplicaForward::PUSH) {
    PushRequest push;
    Status status = read_push(r.getPush(), words, m.keys_filled, push);
    m.message = std::move(push);
    return status;
  }
  if (r.which() == wire::ReplicaForward::CLOCK) {
    m.message = read_clock(r.getClock());
    if (m.keys_filled)
      return Status::invalid_input("a replica forward fills in the keys of a clock advance");
    return Status();
  }
  return Status::invalid_input("a replica forward holds neither a push nor a clock advance");
}

Status read_floats(capnp::Data::Reader blob, std::vector<float>& out, size_t max, const char* what);

// A part of a copy; the shard's own checks (BackupCopy::on_part, ShardCore::from_replica_state)
// judge the rows and the state, here only their shapes.
Status read_copy(wire::ReplicaCopy::Reader r, const FrameWords& words, ReplicaCopy& m) {
  m.header = get_header(r.getHeader());
  if (r.getKeys().size() > replica_copy_rows_max)
    return Status::invalid_input(fmt::format("a replica copy of {} rows, over {}",
                                             r.getKeys().size(), replica_copy_rows_max));
  m.keys = read_keys(r.getKeys());
  if (Status s = read_floats(r.getRows(), m.rows, replica_copy_floats_max, "replica copy rows");
      !s.ok())
    return s;
  m.last = r.getLast();
  // The tail may come in any part. Counted before anything is made of them: a list of empty
  // elements costs the sender a word each. A backup keeps no more forwards than replica_log_max
  // (ShardBackup::rebuilt); no more push parts are taken either.
  if (r.getKept().size() > replica_log_max || r.getParts().size() > replica_log_max)
    return Status::invalid_input(fmt::format(
        "a replica copy's state lists over {} forwards or push parts", replica_log_max));
  m.kept.resize(r.getKept().size());
  for (unsigned i = 0; i < m.kept.size(); ++i)
    if (Status s = read_forward(r.getKept()[i], words, m.kept[i]); !s.ok()) return s;
  m.state.parts.resize(r.getParts().size());
  for (unsigned i = 0; i < m.state.parts.size(); ++i) {
    auto part = r.getParts()[i];
    // A kept part carries its keys, those of the pull it names included.
    if (Status s = read_push(part, words, part.getKeysOfPull() != 0, m.state.parts[i]); !s.ok())
      return s;
  }
  if (!m.last) {
    if (r.getApplied() != 0 || r.hasClockNodes() || r.hasClockValues() || r.hasDroppedNodes() ||
        r.hasDroppedClocks() || r.getLastCheckpoint() != 0)
      return Status::invalid_input("a replica copy's state in a part before the last");
    return Status();
  }
  m.applied = r.getApplied();
  if (r.getClockNodes().size() > control_nodes_max ||
      r.getDroppedNodes().size() > control_nodes_max)
    return Status::invalid_input(
        fmt::format("a replica copy's state lists over {} senders", control_nodes_max));
  if (r.getClockNodes().size() != r.getClockValues().size() ||
      r.getDroppedNodes().size() != r.getDroppedClocks().size())
    return Status::invalid_input("a replica copy's clocks or refusals of unequal lengths");
  for (unsigned i = 0; i < r.getClockNodes().size(); ++i)
    m.state.clocks.emplace_back(r.getClockNodes()[i], r.getClockValues()[i]);
  for (unsigned i = 0; i < r.getDroppedNodes().size(); ++i)
    m.state.keys_dropped.emplace_back(r.getDroppedNodes()[i], r.getDroppedClocks()[i]);
  m.state.last_checkpoint = r.getLastCheckpoint();
  return Status();
}

// Decodes the ps union of an envelope; `status` says what was wrong.
Status read_ps(wire::PsMessage::Reader ps, uint64_t envelope_sender, const FrameWords& words,
               PsMessage& out) {
  Status status;
  switch (ps.which()) {
    case wire::PsMessage::PULL_REQUEST: {
      auto r = ps.getPullRequest();
      out = PullRequest{get_header(r.getHeader()), r.getClock(), r.getWriter(),
                        read_keys(r.getKeys())};
      break;
    }
    case wire::PsMessage::PULL_REPLY: {
      auto r = ps.getPullReply();
      PullReply m{get_header(r.getHeader()), r.getMinClock(), {}};
      status = read_values(r.getValues(), r.getFormat(), r.getScales(), 0, words, m.values,
                           m.scales, "pull reply values");
      m.format = ValueFormat(std::min(r.getFormat(), value_format_max));
      out = std::move(m);
      break;
    }
    case wire::PsMessage::PUSH_REQUEST: {
      PushRequest m;
      status = read_push(ps.getPushRequest(), words, false, m);
      out = std::move(m);
      break;
    }
    case wire::PsMessage::PUSH_ACK:
      out = PushAck{get_header(ps.getPushAck().getHeader())};
      break;
    case wire::PsMessage::CLOCK_ADVANCE:
      out = read_clock(ps.getClockAdvance());
      break;
    case wire::PsMessage::SHARD_MAP_UPDATE: {
      auto r = ps.getShardMapUpdate();
      out = ShardMapUpdate{get_header(r.getHeader()), r.getVersion(), r.getShards(),
                           r.getVnodesPerShard(), r.getSeed()};
      break;
    }
    case wire::PsMessage::PS_ERROR: {
      auto r = ps.getPsError();
      const uint8_t code = r.getCode();
      if (code != static_cast<uint8_t>(PsErrorCode::bad_request) &&
          code != static_cast<uint8_t>(PsErrorCode::out_of_order) &&
          code != static_cast<uint8_t>(PsErrorCode::keys_unknown))
        return Status::invalid_input(fmt::format("unknown error code {}", code));
      out = PsError{get_header(r.getHeader()), static_cast<PsErrorCode>(code),
                    std::string(r.getMessage().cStr())};
      break;
    }
    case wire::PsMessage::DENSE_REDUCE: {
      DenseReduce m;
      status = read_dense(ps.getDenseReduce(), words, m, "dense reduce values");
      out = std::move(m);
      break;
    }
    case wire::PsMessage::DENSE_BROADCAST: {
      DenseBroadcast m;
      status = read_dense(ps.getDenseBroadcast(), words, m, "dense broadcast values");
      out = std::move(m);
      break;
    }
    case wire::PsMessage::PULL_HINT: {
      auto r = ps.getPullHint();
      out = PullHint{get_header(r.getHeader()), read_keys(r.getKeys())};
      break;
    }
    case wire::PsMessage::REPLICA_FORWARD: {
      ReplicaForward m;
      status = read_forward(ps.getReplicaForward(), words, m);
      out = std::move(m);
      break;
    }
    case wire::PsMessage::REPLICA_COPY: {
      ReplicaCopy m;
      if (Status s = read_copy(ps.getReplicaCopy(), words, m); !s.ok()) return s;
      out = std::move(m);
      break;
    }
    case wire::PsMessage::REPLICA_ACK: {
      auto r = ps.getReplicaAck();
      out = ReplicaAck{get_header(r.getHeader()), r.getSeq()};
      break;
    }
    default:
      return Status::invalid_input("message holds no parameter-server message");
  }
  const NodeId sender = std::visit([](const auto& m) { return m.header.sender; }, out);
  if (status.ok() && sender != envelope_sender)
    status = Status::invalid_input(fmt::format(
        "envelope sender {} differs from the message's sender {}", envelope_sender, sender));
  return status;
}

Status read_text(capnp::Text::Reader t, std::string& out, const char* what) {
  if (t.size() > control_text_bytes_max)
    return Status::invalid_input(
        fmt::format("{} of {} bytes exceeds {}", what, t.size(), control_text_bytes_max));
  out.assign(t.cStr(), t.size());
  return Status();
}

Status read_member(wire::MemberInfo::Reader r, MemberInfo& m) {
  if (r.getRole() > 1)
    return Status::invalid_input(fmt::format("unknown member role {}", r.getRole()));
  m.role = static_cast<MemberRole>(r.getRole());
  if (Status s = read_text(r.getEndpoint(), m.endpoint, "member endpoint"); !s.ok()) return s;
  if (Status s = read_text(r.getPublicKey(), m.public_key, "member public key"); !s.ok()) return s;
  if (!m.public_key.empty() && m.public_key.size() != 40)
    return Status::invalid_input(
        fmt::format("member public key of {} characters, expected 40", m.public_key.size()));
  if (Status s = read_text(r.getData(), m.data, "member data path"); !s.ok()) return s;
  m.count = r.getCount();
  if (m.count == 0 || m.count > 4096)
    return Status::invalid_input(fmt::format("member hosts {} cores, expected 1..4096", m.count));
  m.first_node = r.getFirstNode();
  m.has_aggregator = r.getHasAggregator();
  m.aggregator = r.getAggregator();
  m.durable = r.getDurable();
  m.incarnation = r.getIncarnation();
  m.resumed_from = r.getResumedFrom();
  if (Status s = read_text(r.getStore(), m.store, "member store"); !s.ok()) return s;
  return Status();
}

void write_member(wire::MemberInfo::Builder w, const MemberInfo& m) {
  w.setRole(static_cast<uint8_t>(m.role));
  w.setEndpoint(m.endpoint);
  w.setPublicKey(m.public_key);
  w.setCount(m.count);
  w.setData(m.data);
  w.setFirstNode(m.first_node);
  w.setHasAggregator(m.has_aggregator);
  w.setAggregator(m.aggregator);
  w.setDurable(m.durable);
  w.setIncarnation(m.incarnation);
  w.setStore(m.store);
  w.setResumedFrom(m.resumed_from);
}

void write_job(wire::JobSpec::Builder w, const JobSpec& j) {
  w.setModel(j.model);
  w.setDim(j.dim);
  auto o = w.initOptimizer();
  o.setKind(static_cast<uint8_t>(j.optimizer.kind));
  o.setLr(j.optimizer.lr);
  o.setL1(j.optimizer.l1);
  o.setL2(j.optimizer.l2);
  o.setAdagradInit(j.optimizer.adagrad_init);
  o.setFtrlBeta(j.optimizer.ftrl_beta);
  o.setAdamBeta1(j.optimizer.adam_beta1);
  o.setAdamBeta2(j.optimizer.adam_beta2);
  o.setAdamEps(j.optimizer.adam_eps);
  w.setSeed(j.seed);
  w.setFactorInitStd(j.factor_init_std);
  w.setBatch(j.batch);
  w.setEpochs(j.epochs);
  w.setConsistency(static_cast<uint8_t>(j.consistency.kind));
  w.setStaleness(j.consistency.staleness);
  w.setHierarchical(j.hierarchical);
  w.setMaxInflight(j.max_inflight);
  w.setSkipBadLines(j.skip_bad_lines);
  w.setUseCache(j.use_cache);
  w.setAdmitAfter(j.admit_after);
  w.setEvictAfter(j.evict_after);
  w.setCheckpointEvery(j.checkpoint_every);
  w.setFields(j.fields);
  w.setDense(j.dense);
  auto mlp = w.initMlp(static_cast<unsigned>(j.mlp.size()));
  for (unsigned i = 0; i < j.mlp.size(); ++i) mlp.set(i, j.mlp[i]);
  auto bottom = w.initBottom(static_cast<unsigned>(j.bottom.size()));
  for (unsigned i = 0; i < j.bottom.size(); ++i) bottom.set(i, j.bottom[i]);
  w.setCrossLayers(j.cross_layers);
  w.setDenseOptimizer(j.dense_optimizer);
  w.setDenseLr(j.dense_lr);
  w.setDenseBeta1(j.dense_beta1);
  w.setDenseBeta2(j.dense_beta2);
  w.setDenseEps(j.dense_eps);
  w.setDenseWeightDecay(j.dense_weight_decay);
  w.setDenseMomentum(j.dense_momentum);
  w.setDenseSyncEvery(j.dense_sync_every);
  w.setDurability(j.durability ? uint8_t(1 + int(*j.durability)) : 0);
  w.setSkipNotFinite(j.skip_not_finite);
  w.setWireFormat(static_cast<uint8_t>(j.formats.wire));
  w.setPartBytes(j.formats.part_bytes);
  w.setRowFormat(static_cast<uint8_t>(j.formats.row));
  w.setStateFormat(static_cast<uint8_t>(j.formats.state));
  w.setPushFormat(static_cast<uint8_t>(j.formats.push));
  w.setErrorFeedbackRows(j.formats.error_feedback_rows);
  w.setReadAheadBatches(j.read_ahead_batches);
  w.setReplicas(j.replicas);
}

// A deep model's hidden layer sizes: at most control_layers_max, each 1..control_layer_width_max.
Status read_layers(capnp::List<uint32_t>::Reader r, std::vector<uint32_t>& out, const char* what) {
  if (r.size() > control_layers_max)
    return Status::invalid_input(
        fmt::format("{} of {} layers, over {}", what, r.size(), control_layers_max));
  out.clear();
  for (uint32_t units : r) {
    if (units < 1 || units > control_layer_width_max)
      return Status::invalid_input(
          fmt::format("{} layer of {} units, outside 1..{}", what, units, control_layer_width_max));
    out.push_back(units);
  }
  return Status();
}

// The dense optimizer's settings are range-checked by the member (DenseOptimizer::make); a NaN
// or infinity is refused here, where it arrives.
Status read_finite(float value, float& out, const char* what) {
  if (!std::isfinite(value))
    return Status::invalid_input(fmt::format("dense optimizer {} {} is not finite", what, value));
  out = value;
  return Status();
}

Status read_job(wire::JobSpec::Reader r, JobSpec& j) {
  if (r.getModel() > control_model_max)
    return Status::invalid_input(fmt::format("unknown model kind {}", r.getModel()));
  j.model = r.getModel();
  j.dim = r.getDim();
  if (j.dim < 1 || j.dim > control_dim_max)
    return Status::invalid_input(fmt::format("dim {} outside 1..{}", j.dim, control_dim_max));
  auto o = r.getOptimizer();
  if (o.getKind() > static_cast<uint8_t>(OptimizerKind::adam))
    return Status::invalid_input(fmt::format("unknown optimizer kind {}", o.getKind()));
  j.optimizer.kind = static_cast<OptimizerKind>(o.getKind());
  j.optimizer.lr = o.getLr();
  j.optimizer.l1 = o.getL1();
  j.optimizer.l2 = o.getL2();
  j.optimizer.adagrad_init = o.getAdagradInit();
  j.optimizer.ftrl_beta = o.getFtrlBeta();
  j.optimizer.adam_beta1 = o.getAdamBeta1();
  j.optimizer.adam_beta2 = o.getAdamBeta2();
  j.optimizer.adam_eps = o.getAdamEps();
  j.seed = r.getSeed();
  j.factor_init_std = r.getFactorInitStd();
  j.batch = r.getBatch();
  j.epochs = r.getEpochs();
  if (j.batch == 0 || j.epochs == 0)
    return Status::invalid_input("job with a zero batch or epoch count");
  if (r.getConsistency() > static_cast<uint8_t>(ConsistencyKind::asp))
    return Status::invalid_input(fmt::format("unknown consistency kind {}", r.getConsistency()));
  j.consistency = {static_cast<ConsistencyKind>(r.getConsistency()), r.getStaleness()};
  j.hierarchical = r.getHierarchical();
  j.max_inflight = r.getMaxInflight();
  if (j.max_inflight < 1 || j.max_inflight > control_max_inflight_max)
    return Status::invalid_input(
        fmt::format("max in-flight {} outside 1..{}", j.max_inflight, control_max_inflight_max));
  j.skip_bad_lines = r.getSkipBadLines();
  j.use_cache = r.getUseCache();
  j.admit_after = r.getAdmitAfter();
  if (j.admit_after > control_admit_after_max)
    return Status::invalid_input(
        fmt::format("admit-after {} over {}", j.admit_after, control_admit_after_max));
  j.evict_after = r.getEvictAfter();
  j.checkpoint_every = r.getCheckpointEvery();
  j.fields = r.getFields();
  if (j.fields < 1 || j.fields > control_fields_max)
    return Status::invalid_input(
        fmt::format("fields {} outside 1..{}", j.fields, control_fields_max));
  j.dense = r.getDense();
  if (j.dense > control_dense_max)
    return Status::invalid_input(
        fmt::format("dense features {} over {}", j.dense, control_dense_max));
  if (Status s = read_layers(r.getMlp(), j.mlp, "mlp"); !s.ok()) return s;
  if (Status s = read_layers(r.getBottom(), j.bottom, "bottom mlp"); !s.ok()) return s;
  j.cross_layers = r.getCrossLayers();
  if (j.cross_layers > control_cross_layers_max)
    return Status::invalid_input(
        fmt::format("cross layers {} over {}", j.cross_layers, control_cross_layers_max));
  j.dense_optimizer = r.getDenseOptimizer();
  if (j.dense_optimizer > control_dense_optimizer_max)
    return Status::invalid_input(fmt::format("unknown dense optimizer kind {}", j.dense_optimizer));
  for (auto [value, out, what] :
       {std::tuple{r.getDenseLr(), &j.dense_lr, "learning rate"},
        std::tuple{r.getDenseBeta1(), &j.dense_beta1, "beta1"},
        std::tuple{r.getDenseBeta2(), &j.dense_beta2, "beta2"},
        std::tuple{r.getDenseEps(), &j.dense_eps, "epsilon"},
        std::tuple{r.getDenseWeightDecay(), &j.dense_weight_decay, "weight decay"},
        std::tuple{r.getDenseMomentum(), &j.dense_momentum, "momentum"}})
    if (Status s = read_finite(value, *out, what); !s.ok()) return s;
  j.dense_sync_every = r.getDenseSyncEvery();
  if (j.dense_sync_every < 1 || j.dense_sync_every > control_dense_sync_every_max)
    return Status::invalid_input(fmt::format("dense sync every {} steps, outside 1..{}",
                                             j.dense_sync_every, control_dense_sync_every_max));
  const uint8_t durability = r.getDurability();
  if (durability > 3) return Status::invalid_input(fmt::format("durability {}", durability));
  j.durability = durability ? std::optional(Durability(durability - 1)) : std::nullopt;
  j.skip_not_finite = r.getSkipNotFinite();
  for (auto [what, got, format] : {std::tuple{"wire format", r.getWireFormat(), &j.formats.wire},
                                   std::tuple{"row format", r.getRowFormat(), &j.formats.row},
                                   std::tuple{"state format", r.getStateFormat(), &j.formats.state},
                                   std::tuple{"push format", r.getPushFormat(), &j.formats.push}}) {
    if (got > value_format_max)
      return Status::invalid_input(fmt::format("unknown {} {}", what, got));
    *format = ValueFormat(got);
  }
  j.formats.error_feedback_rows = r.getErrorFeedbackRows();
  if (j.formats.error_feedback_rows > error_feedback_rows_max)
    return Status::invalid_input(fmt::format("error feedback for {} rows, over {}",
                                             j.formats.error_feedback_rows,
                                             error_feedback_rows_max));
  j.read_ahead_batches = r.getReadAheadBatches();
  if (j.read_ahead_batches > read_ahead_batches_max)
    return Status::invalid_input(fmt::format("read-ahead of {} batches, over {}",
                                             j.read_ahead_batches, read_ahead_batches_max));
  j.replicas = r.getReplicas();
  if (j.replicas == 0 || j.replicas > shard_replicas_max)
    return Status::invalid_input(
        fmt::format("{} replicas of each shard, outside 1..{}", j.replicas, shard_replicas_max));
  j.formats.part_bytes = r.getPartBytes();
  if (j.formats.part_bytes < part_bytes_min || j.formats.part_bytes > part_bytes_max)
    return Status::invalid_input(fmt::format("message parts of {} bytes, outside {}..{}",
                                             j.formats.part_bytes, part_bytes_min, part_bytes_max));
  return Status();
}

// A float32 blob: a whole number of floats, at most `max` of them.
Status read_floats(capnp::Data::Reader blob, std::vector<float>& out, size_t max,
                   const char* what) {
  if (blob.size() % sizeof(float) != 0)
    return Status::invalid_input(
        fmt::format("{} of {} bytes are not a whole number of floats", what, blob.size()));
  if (blob.size() / sizeof(float) > max)
    return Status::invalid_input(
        fmt::format("{} of {} bytes, over {} floats", what, blob.size(), max));
  out.resize(blob.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), blob.begin(), blob.size());
  return Status();
}

Status read_dense_state(wire::DenseState::Reader r, DenseState& d) {
  if (r.getShape().size() > dense_shape_max)
    return Status::invalid_input(
        fmt::format("dense shape of {} bytes exceeds {}", r.getShape().size(), dense_shape_max));
  d.shape.assign(r.getShape().cStr(), r.getShape().size());
  d.step = r.getStep();
  if (Status s = read_floats(r.getParams(), d.params, wire_dense_floats_max, "dense parameters");
      !s.ok())
    return s;
  // Adam keeps two moments per parameter; no dense optimizer keeps more.
  if (Status s = read_floats(r.getOptimizerState(), d.optimizer_state, 2 * wire_dense_floats_max,
                             "dense optimizer state");
      !s.ok())
    return s;
  d.optimizer_steps = r.getOptimizerSteps();
  return Status();
}

void write_dense_state(wire::DenseState::Builder w, const DenseState& d) {
  w.setShape(d.shape);
  w.setStep(d.step);
  w.setParams(kj::arrayPtr(reinterpret_cast<const kj::byte*>(d.params.data()),
                           d.params.size() * sizeof(float)));
  w.setOptimizerState(kj::arrayPtr(reinterpret_cast<const kj::byte*>(d.optimizer_state.data()),
                                   d.optimizer_state.size() * sizeof(float)));
  w.setOptimizerSteps(d.optimizer_steps);
}

Status read_checkpointed(wire::Checkpointed::Reader r, uint32_t& step,
                         std::vector<ShardCheckpoint>& shards) {
  step = r.getStep();
  if (r.getShards().size() > control_nodes_max)
    return Status::invalid_input(
        fmt::format("{} shard checkpoints, over {}", r.getShards().size(), control_nodes_max));
  for (auto c : r.getShards()) {
    ShardCheckpoint x;
    x.shard = c.getShard();
    if (Status s = read_text(c.getDir(), x.dir, "checkpoint folder"); !s.ok()) return s;
    x.rows = c.getRows();
    auto nodes = c.getSenderNodes();
    auto clocks = c.getSenderClocks();
    if (nodes.size() != clocks.size() || nodes.size() > control_nodes_max)
      return Status::invalid_input(fmt::format("checkpoint of shard {}: {} senders with {} clocks",
                                               x.shard, nodes.size(), clocks.size()));
    for (unsigned i = 0; i < nodes.size(); ++i) x.sender_clocks.emplace_back(nodes[i], clocks[i]);
    shards.push_back(std::move(x));
  }
  return Status();
}

void write_checkpointed(wire::Checkpointed::Builder w, uint32_t step,
                        const std::vector<ShardCheckpoint>& shards) {
  w.setStep(step);
  auto list = w.initShards(static_cast<unsigned>(shards.size()));
  for (unsigned i = 0; i < shards.size(); ++i) {
    const ShardCheckpoint& x = shards[i];
    list[i].setShard(x.shard);
    list[i].setDir(x.dir);
    list[i].setRows(x.rows);
    auto nodes = list[i].initSenderNodes(static_cast<unsigned>(x.sender_clocks.size()));
    auto clocks = list[i].initSenderClocks(static_cast<unsigned>(x.sender_clocks.size()));
    for (unsigned j = 0; j < x.sender_clocks.size(); ++j) {
      nodes.set(j, x.sender_clocks[j].first);
      clocks.set(j, x.sender_clocks[j].second);
    }
  }
}

// A list of node ids, at most control_nodes_max of them (`what` names them in the error).
Status read_nodes(capnp::List<uint32_t>::Reader r, std::vector<NodeId>& out, const char* what) {
  if (r.size() > control_nodes_max)
    return Status::invalid_input(fmt::format("{} {}, over {}", r.size(), what, control_nodes_max));
  out.clear();
  for (uint32_t id : r) out.push_back(id);
  return Status();
}

void write_nodes(capnp::List<uint32_t>::Builder w, const std::vector<NodeId>& nodes) {
  for (unsigned i = 0; i < nodes.size(); ++i) w.set(i, nodes[i]);
}

// Node placements, at most control_nodes_max of them.
Status read_placements(wire::Placements::Reader r, std::vector<NodePlacement>& out,
                       const char* what) {
  if (r.getNodes().size() != r.getMembers().size())
    return Status::invalid_input(fmt::format("{}: {} nodes for {} members", what,
                                             r.getNodes().size(), r.getMembers().size()));
  if (r.getNodes().size() > control_nodes_max)
    return Status::invalid_input(
        fmt::format("{} {}, over {}", r.getNodes().size(), what, control_nodes_max));
  out.clear();
  for (unsigned i = 0; i < r.getNodes().size(); ++i)
    out.push_back({r.getNodes()[i], r.getMembers()[i]});
  return Status();
}

void write_placements(wire::Placements::Builder w, const std::vector<NodePlacement>& placed) {
  auto nodes = w.initNodes(static_cast<unsigned>(placed.size()));
  auto members = w.initMembers(static_cast<unsigned>(placed.size()));
  for (unsigned i = 0; i < placed.size(); ++i) {
    nodes.set(i, placed[i].node);
    members.set(i, placed[i].member);
  }
}

Status read_control(wire::Control::Reader r, ControlMessage& m) {
  m.from = r.getFrom();
  m.incarnation = r.getIncarnation();
  switch (r.which()) {
    case wire::Control::JOIN: {
      Join j;
      if (Status s = read_member(r.getJoin(), j.member); !s.ok()) return s;
      m.body = std::move(j);
      return Status();
    }
    case wire::Control::WELCOME: {
      auto w = r.getWelcome();
      Welcome x;
      x.you = w.getYou();
      auto members = w.getMembers();
      if (members.size() > control_members_max)
        return Status::invalid_input(
            fmt::format("welcome lists {} members, over {}", members.size(), control_members_max));
      if (x.you >= members.size())
        return Status::invalid_input(
            fmt::format("welcome addressed to member {} of {}", x.you, members.size()));
      x.members.resize(members.size());
      for (unsigned i = 0; i < members.size(); ++i)
        if (Status s = read_member(members[i], x.members[i]); !s.ok()) return s;
      if (Status s = read_job(w.getJob(), x.job); !s.ok()) return s;
      x.map.version = w.getMapVersion();
      x.map.shards = w.getMapShards();
      x.map.vnodes_per_shard = w.getMapVnodesPerShard();
      x.map.seed = w.getMapSeed();
      x.coordinator_node = w.getCoordinatorNode();
      x.workers_total = w.getWorkersTotal();
      x.split_data = w.getSplitData();
      x.heartbeat_ms = w.getHeartbeatMs();
      x.heartbeat_timeout_ms = w.getHeartbeatTimeoutMs();
      x.resume = w.getResume();
      x.backups_only = w.getBackupsOnly();
      if (Status s = read_placements(w.getPlaced(), x.placed, "welcome placements"); !s.ok())
        return s;
      if (x.heartbeat_ms == 0 || x.heartbeat_timeout_ms == 0)
        return Status::invalid_input("welcome with a zero heartbeat interval or timeout");
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::READY:
      m.body = Ready{};
      return Status();
    case wire::Control::START:
      m.body = Start{};
      return Status();
    case wire::Control::HEARTBEAT: {
      Heartbeat h{r.getHeartbeat()};
      if (r.hasLoad()) {
        auto l = r.getLoad();
        h.load = MemberLoad{l.getRssBytes(), l.getRowsMemoryBytes(), read_keys(l.getBusyNs()),
                            read_keys(l.getSteps()), read_keys(l.getRowsServed())};
        auto histogram = [](wire::LoadHistogram::Reader r) {
          return LoadHistogram{read_keys(r.getCounts()), r.getSum()};
        };
        h.load->staleness = histogram(l.getStaleness());
        h.load->pull_latency = histogram(l.getPullLatency());
        h.load->push_latency = histogram(l.getPushLatency());
        h.load->rows_pulled = read_keys(l.getRowsPulled());
        for (auto k : l.getHotKeys())
          h.load->hot_keys.push_back({k.getShard(), k.getKey(), k.getPulls()});
        for (uint32_t n : l.getShards()) h.load->shards.push_back(n);
      }
      m.body = std::move(h);
      return Status();
    }
    case wire::Control::DONE: {
      auto d = r.getDone();
      MemberDone x;
      if (Status s = read_text(d.getError(), x.error, "done error"); !s.ok()) return s;
      x.drained = d.getDrained();
      x.counters.samples = d.getSamples();
      x.counters.loss_sum = d.getLossSum();
      x.counters.steps = d.getSteps();
      x.counters.pull_messages = d.getPullMessages();
      x.counters.push_messages = d.getPushMessages();
      x.counters.push_bytes = d.getPushBytes();
      x.counters.bad_lines_skipped = d.getBadLinesSkipped();
      x.counters.pushes_resent = d.getPushesResent();
      x.counters.replies_dropped = d.getRepliesDropped();
      x.counters.bad_messages = d.getBadMessages();
      x.counters.cpu_seconds = d.getCpuSeconds();
      x.counters.steps_skipped = d.getStepsSkipped();
      x.counters.pull_bytes = d.getPullBytes();
      x.read_from_cache = d.getReadFromCache();
      x.dense_steps = d.getDenseSteps();
      if (Status s =
              read_floats(d.getDense(), x.dense, wire_dense_floats_max, "done's dense parameters");
          !s.ok())
        return s;
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::NODES_LOST: {
      auto n = r.getNodesLost();
      NodesLost x;
      if (Status s = read_nodes(n.getNodes(), x.nodes, "lost nodes"); !s.ok()) return s;
      if (Status s = read_text(n.getReason(), x.reason, "lost reason"); !s.ok()) return s;
      x.epoch = r.getEpoch();
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::LEAVE: {
      Leave x;
      if (Status s = read_text(r.getLeave(), x.reason, "leave reason"); !s.ok()) return s;
      x.drained = r.getDrained();
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::SHUTDOWN: {
      Shutdown x;
      if (Status s = read_text(r.getShutdown(), x.error, "shutdown error"); !s.ok()) return s;
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::REFUSE: {
      Refuse x;
      if (Status s = read_text(r.getRefuse(), x.reason, "refuse reason"); !s.ok()) return s;
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::SHARDS_RESTARTED: {
      ShardsRestarted x;
      if (Status s = read_nodes(r.getShardsRestarted(), x.nodes, "restarted nodes"); !s.ok())
        return s;
      x.epoch = r.getEpoch();
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::SHARDS_MOVED: {
      auto n = r.getShardsMoved();
      ShardsMoved x;
      if (Status s = read_nodes(n.getShards(), x.shards, "moved shards"); !s.ok()) return s;
      if (Status s = read_nodes(n.getBackups(), x.backups, "backups of moved shards"); !s.ok())
        return s;
      x.member = n.getMember();
      x.epoch = r.getEpoch();
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::BACKUPS_PLACED: {
      BackupsPlaced x;
      if (Status s = read_placements(r.getBackupsPlaced(), x.placed, "placed backups"); !s.ok())
        return s;
      x.epoch = r.getEpoch();
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::BACKUPS_COPIED: {
      BackupsCopied x;
      if (Status s = read_nodes(r.getBackupsCopied(), x.backups, "copied backups"); !s.ok())
        return s;
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::PROMOTED: {
      Promoted x;
      if (Status s = read_nodes(r.getPromoted(), x.shards, "promoted shards"); !s.ok()) return s;
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::REPORT_APPLIED: {
      ReportApplied x;
      if (Status s = read_nodes(r.getReportApplied(), x.backups, "backups asked"); !s.ok())
        return s;
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::APPLIED: {
      auto n = r.getApplied();
      Applied x;
      if (Status s = read_nodes(n.getBackups(), x.backups, "backups applied"); !s.ok()) return s;
      if (n.getApplied().size() != x.backups.size())
        return Status::invalid_input(fmt::format("applied forwards of {} backups for {} nodes",
                                                 n.getApplied().size(), x.backups.size()));
      for (uint64_t seq : n.getApplied()) x.applied.push_back(seq);
      x.epoch = r.getEpoch();
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::JOINED: {
      Joined x;
      if (Status s = read_text(r.getJoined(), x.status, "joined status"); !s.ok()) return s;
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::SHARD_SUMMARY_REQUEST:
      m.body = ShardSummaryRequest{};
      return Status();
    case wire::Control::SHARD_SUMMARY: {
      auto x = r.getShardSummary();
      m.body = ShardSummary{x.getTableRows(),       x.getTableBytes(),       x.getPullsDeferred(),
                            x.getRowsNotAdmitted(), x.getUpdatesDropped(),   x.getRowsEvicted(),
                            x.getBadMessages(),     x.getMemoryBytes(),      x.getCpuSeconds(),
                            x.getPushesLost(),      x.getUpdatesNotFinite(), x.getBackupRows(),
                            x.getRowsDigest(),      x.getBackupDigest(),     x.getReplicatedRows()};
      return Status();
    }
    case wire::Control::SHARDS_CHECKPOINTED: {
      ShardsCheckpointed x;
      if (Status s = read_checkpointed(r.getShardsCheckpointed(), x.step, x.shards); !s.ok())
        return s;
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::CHECKPOINT_COMPLETE: {
      CheckpointComplete x;
      auto c = r.getCheckpointComplete();
      if (Status s = read_checkpointed(c, x.step, x.shards); !s.ok()) return s;
      if (c.getHasDense()) {
        x.dense.emplace();
        if (Status s = read_dense_state(c.getDense(), *x.dense); !s.ok()) return s;
      }
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::DENSE_CHECKPOINTED: {
      DenseCheckpointed x;
      if (Status s = read_dense_state(r.getDenseCheckpointed(), x.state); !s.ok()) return s;
      m.body = std::move(x);
      return Status();
    }
    case wire::Control::DENSE_START: {
      DenseStart x;
      if (Status s = read_dense_state(r.getDenseStart(), x.state); !s.ok()) return s;
      m.body = std::move(x);
      return Status();
    }
    default:
      return Status::invalid_input("control message holds nothing");
  }
}

}  // namespace

Expected<std::vector<uint8_t>> encode_control_message(const ControlMessage& message,
                                                      uint64_t cluster_id) {
  capnp::MallocMessageBuilder builder;
  auto root = builder.initRoot<wire::Envelope>();
  root.setVersion(wire_protocol_version);
  root.setClusterId(cluster_id);
  root.setSenderId(message.from);
  root.setKind(wire_kind_control);
  auto c = root.initControl();
  c.setFrom(message.from);
  c.setIncarnation(message.incarnation);
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, Join>) {
          write_member(c.initJoin(), b.member);
        } else if constexpr (std::is_same_v<T, Welcome>) {
          auto w = c.initWelcome();
          w.setYou(b.you);
          auto members = w.initMembers(static_cast<unsigned>(b.members.size()));
          for (unsigned i = 0; i < b.members.size(); ++i) write_member(members[i], b.members[i]);
          write_job(w.initJob(), b.job);
          w.setMapVersion(b.map.version);
          w.setMapShards(b.map.shards);
          w.setMapVnodesPerShard(b.map.vnodes_per_shard);
          w.setMapSeed(b.map.seed);
          w.setCoordinatorNode(b.coordinator_node);
          w.setWorkersTotal(b.workers_total);
          w.setSplitData(b.split_data);
          w.setHeartbeatMs(b.heartbeat_ms);
          w.setHeartbeatTimeoutMs(b.heartbeat_timeout_ms);
          w.setResume(b.resume);
          w.setBackupsOnly(b.backups_only);
          if (!b.placed.empty()) write_placements(w.initPlaced(), b.placed);
        } else if constexpr (std::is_same_v<T, Ready>) {
          c.setReady();
        } else if constexpr (std::is_same_v<T, Start>) {
          c.setStart();
        } else if constexpr (std::is_same_v<T, Heartbeat>) {
          c.setHeartbeat(b.samples);
          if (b.load) {
            auto l = c.initLoad();
            l.setRssBytes(b.load->rss_bytes);
            l.setRowsMemoryBytes(b.load->rows_memory_bytes);
            set_keys(l.initBusyNs(static_cast<unsigned>(b.load->busy_ns.size())), b.load->busy_ns);
            set_keys(l.initSteps(static_cast<unsigned>(b.load->steps.size())), b.load->steps);
            set_keys(l.initRowsServed(static_cast<unsigned>(b.load->rows_served.size())),
                     b.load->rows_served);
            auto histogram = [](wire::LoadHistogram::Builder w, const LoadHistogram& h) {
              set_keys(w.initCounts(static_cast<unsigned>(h.counts.size())), h.counts);
              w.setSum(h.sum);
            };
            histogram(l.initStaleness(), b.load->staleness);
            histogram(l.initPullLatency(), b.load->pull_latency);
            histogram(l.initPushLatency(), b.load->push_latency);
            set_keys(l.initRowsPulled(static_cast<unsigned>(b.load->rows_pulled.size())),
                     b.load->rows_pulled);
            auto hot = l.initHotKeys(static_cast<unsigned>(b.load->hot_keys.size()));
            for (unsigned k = 0; k < hot.size(); ++k) {
              hot[k].setShard(b.load->hot_keys[k].shard);
              hot[k].setKey(b.load->hot_keys[k].key);
              hot[k].setPulls(b.load->hot_keys[k].pulls);
            }
            auto shards = l.initShards(static_cast<unsigned>(b.load->shards.size()));
            for (unsigned k = 0; k < shards.size(); ++k) shards.set(k, b.load->shards[k]);
          }
        } else if constexpr (std::is_same_v<T, MemberDone>) {
          auto d = c.initDone();
          d.setError(b.error);
          d.setDrained(b.drained);
          d.setSamples(b.counters.samples);
          d.setLossSum(b.counters.loss_sum);
          d.setSteps(b.counters.steps);
          d.setPullMessages(b.counters.pull_messages);
          d.setPushMessages(b.counters.push_messages);
          d.setPushBytes(b.counters.push_bytes);
          d.setBadLinesSkipped(b.counters.bad_lines_skipped);
          d.setPushesResent(b.counters.pushes_resent);
          d.setRepliesDropped(b.counters.replies_dropped);
          d.setBadMessages(b.counters.bad_messages);
          d.setCpuSeconds(b.counters.cpu_seconds);
          d.setStepsSkipped(b.counters.steps_skipped);
          d.setPullBytes(b.counters.pull_bytes);
          d.setReadFromCache(b.read_from_cache);
          d.setDenseSteps(b.dense_steps);
          d.setDense(kj::arrayPtr(reinterpret_cast<const kj::byte*>(b.dense.data()),
                                  b.dense.size() * sizeof(float)));
        } else if constexpr (std::is_same_v<T, NodesLost>) {
          auto n = c.initNodesLost();
          write_nodes(n.initNodes(static_cast<unsigned>(b.nodes.size())), b.nodes);
          n.setReason(b.reason);
          c.setEpoch(b.epoch);
        } else if constexpr (std::is_same_v<T, Leave>) {
          c.setLeave(b.reason);
          c.setDrained(b.drained);
        } else if constexpr (std::is_same_v<T, Shutdown>) {
          c.setShutdown(b.error);
        } else if constexpr (std::is_same_v<T, ShardsRestarted>) {
          write_nodes(c.initShardsRestarted(static_cast<unsigned>(b.nodes.size())), b.nodes);
          c.setEpoch(b.epoch);
        } else if constexpr (std::is_same_v<T, Refuse>) {
          c.setRefuse(b.reason);
        } else if constexpr (std::is_same_v<T, ShardSummaryRequest>) {
          c.setShardSummaryRequest();
        } else if constexpr (std::is_same_v<T, ShardSummary>) {
          auto x = c.initShardSummary();
          x.setTableRows(b.table_rows);
          x.setTableBytes(b.table_bytes);
          x.setPullsDeferred(b.pulls_deferred);
          x.setRowsNotAdmitted(b.rows_not_admitted);
          x.setUpdatesDropped(b.updates_dropped);
          x.setRowsEvicted(b.rows_evicted);
          x.setBadMessages(b.bad_messages);
          x.setMemoryBytes(b.memory_bytes);
          x.setCpuSeconds(b.cpu_seconds);
          x.setPushesLost(b.pushes_lost);
          x.setUpdatesNotFinite(b.updates_not_finite);
          x.setBackupRows(b.backup_rows);
          x.setRowsDigest(b.rows_digest);
          x.setBackupDigest(b.backup_digest);
          x.setReplicatedRows(b.replicated_rows);
        } else if constexpr (std::is_same_v<T, ShardsMoved>) {
          auto x = c.initShardsMoved();
          write_nodes(x.initShards(static_cast<unsigned>(b.shards.size())), b.shards);
          write_nodes(x.initBackups(static_cast<unsigned>(b.backups.size())), b.backups);
          x.setMember(b.member);
          c.setEpoch(b.epoch);
        } else if constexpr (std::is_same_v<T, Promoted>) {
          write_nodes(c.initPromoted(static_cast<unsigned>(b.shards.size())), b.shards);
        } else if constexpr (std::is_same_v<T, BackupsPlaced>) {
          write_placements(c.initBackupsPlaced(), b.placed);
          c.setEpoch(b.epoch);
        } else if constexpr (std::is_same_v<T, BackupsCopied>) {
          write_nodes(c.initBackupsCopied(static_cast<unsigned>(b.backups.size())), b.backups);
        } else if constexpr (std::is_same_v<T, ReportApplied>) {
          write_nodes(c.initReportApplied(static_cast<unsigned>(b.backups.size())), b.backups);
        } else if constexpr (std::is_same_v<T, Applied>) {
          auto x = c.initApplied();
          write_nodes(x.initBackups(static_cast<unsigned>(b.backups.size())), b.backups);
          auto applied = x.initApplied(static_cast<unsigned>(b.applied.size()));
          for (unsigned i = 0; i < b.applied.size(); ++i) applied.set(i, b.applied[i]);
          c.setEpoch(b.epoch);
        } else if constexpr (std::is_same_v<T, ShardsCheckpointed>) {
          write_checkpointed(c.initShardsCheckpointed(), b.step, b.shards);
        } else if constexpr (std::is_same_v<T, CheckpointComplete>) {
          auto w = c.initCheckpointComplete();
          write_checkpointed(w, b.step, b.shards);
          w.setHasDense(b.dense.has_value());
          if (b.dense) write_dense_state(w.initDense(), *b.dense);
        } else if constexpr (std::is_same_v<T, DenseCheckpointed>) {
          write_dense_state(c.initDenseCheckpointed(), b.state);
        } else if constexpr (std::is_same_v<T, DenseStart>) {
          write_dense_state(c.initDenseStart(), b.state);
        } else {
          static_assert(std::is_same_v<T, Joined>);
          c.setJoined(b.status);
        }
      },
      message.body);
  return to_bytes(builder);
}

Expected<WireMessage> decode_wire_message(std::span<const SharedBytes> frames,
                                          uint64_t cluster_id) {
  FrameWords words;
  if (Status s = words.init(frames); !s.ok()) return s;
  const capnp::ReaderOptions options = reader_options(words.total_words());
  WireMessage out;
  Status status;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
    auto read = [&](capnp::MessageReader& reader) {
      auto root = reader.getRoot<wire::Envelope>();
      if (root.getVersion() != wire_protocol_version) {
        status = Status::invalid_input(
            fmt::format("protocol version {} is not supported (this build speaks {})",
                        root.getVersion(), wire_protocol_version));
        return;
      }
      if (root.getClusterId() != cluster_id) {
        status = Status::invalid_input(fmt::format(
            "message for cluster {:#x}, this is cluster {:#x}", root.getClusterId(), cluster_id));
        return;
      }
      if (root.getKind() == wire_kind_ps && root.hasPs()) {
        out.receiver = root.getReceiver();
        status = read_ps(root.getPs(), root.getSenderId(), words, out.ps);
      } else if (root.getKind() == wire_kind_control && root.hasControl()) {
        out.is_control = true;
        status = read_control(root.getControl(), out.control);
      } else {
        status = Status::invalid_input(
            fmt::format("message of kind {} holds no message of that kind", root.getKind()));
      }
    };
    if (words.flat()) {
      capnp::FlatArrayMessageReader reader(words.flat_words(), options);
      read(reader);
    } else {
      capnp::SegmentArrayMessageReader reader(words.segments(), options);
      read(reader);
    }
  });
  KJ_IF_MAYBE (e, error) {
    return Status::invalid_input(std::string("malformed message: ") + e->getDescription().cStr());
  }
  if (!status.ok()) return status;
  return out;
}

Expected<WireMessage> decode_wire_message(std::span<const uint8_t> bytes, uint64_t cluster_id) {
  const SharedBytes frame(bytes);
  return decode_wire_message(std::span<const SharedBytes>(&frame, 1), cluster_id);
}

Expected<PsMessage> decode_ps_message(std::span<const uint8_t> bytes, uint64_t cluster_id) {
  auto m = decode_wire_message(bytes, cluster_id);
  if (!m) return m.status();
  if (m->is_control)
    return Status::invalid_input("message of kind 1 holds no parameter-server message");
  return std::move(m->ps);
}

}  // namespace colony
