#define BOOST_TEST_MODULE wire_test
#include <boost/test/unit_test.hpp>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/envelope.h"
#include "actors/wire.capnp.h"
#include "common/bf16.h"
#include "common/fp16.h"
#include "common/hash.h"
#include "common/int8.h"
#include "ps/replication.h"
#include "tests/test_shard.h"

using namespace colony;

namespace {

Envelope random_envelope(SplitMix64& rng, size_t body_bytes) {
  Envelope e;
  e.cluster_id = rng.next();
  e.sender_id = rng.next();
  e.kind = static_cast<uint16_t>(rng.next());
  e.body.resize(body_bytes);
  for (uint8_t& b : e.body) b = static_cast<uint8_t>(rng.next());
  return e;
}

std::vector<uint8_t> encode_ok(const Envelope& e) {
  auto r = encode_envelope(e);
  BOOST_REQUIRE_MESSAGE(r.ok(), (r.ok() ? std::string() : r.status().message()));
  return std::move(r).value();
}

// A decode of untrusted bytes must end in ok or invalid_input, and an ok result must not be
// larger than its input. Returns whether it decoded.
bool decode_is_safe(std::span<const uint8_t> bytes, size_t& bad_outcomes) {
  auto r = decode_envelope(bytes);
  if (r.ok()) {
    if (r.value().body.size() > bytes.size()) ++bad_outcomes;
    if (r.value().version != wire_protocol_version) ++bad_outcomes;
    return true;
  }
  if (r.status().code() != Status::Code::invalid_input || r.status().message().empty())
    ++bad_outcomes;
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(round_trip_of_random_envelopes) {
  size_t failures = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SplitMix64 rng(seed);
    size_t body = rng.next() % (100 * 1024 + 1);
    if (seed % 4 == 0) body = rng.next() % 64;  // plenty of small bodies, including 0
    if (seed == 1) body = 0;
    if (seed == 2) body = 100 * 1024;
    const Envelope e = random_envelope(rng, body);
    const auto bytes = encode_ok(e);
    BOOST_TEST(bytes.size() % 8 == 0u);
    BOOST_TEST(bytes.size() >= body);
    auto d = decode_envelope(bytes);
    if (!d.ok()) {
      BOOST_ERROR("seed " << seed << ": " << d.status().message());
      continue;
    }
    if (!(d.value() == e)) ++failures;
  }
  BOOST_TEST(failures == 0u);
}

BOOST_AUTO_TEST_CASE(round_trip_of_extreme_field_values) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, UINT64_MAX}) {
    Envelope e;
    e.cluster_id = v;
    e.sender_id = ~v;
    e.kind = static_cast<uint16_t>(v);
    e.body = {0, 255, 0};
    auto d = decode_envelope(encode_ok(e));
    BOOST_REQUIRE(d.ok());
    BOOST_TEST((d.value() == e));
  }
}

BOOST_AUTO_TEST_CASE(decode_from_unaligned_buffer) {
  SplitMix64 rng(5);
  const Envelope e = random_envelope(rng, 1000);
  const auto bytes = encode_ok(e);
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  auto d = decode_envelope(std::span<const uint8_t>(shifted.data() + 1, bytes.size()));
  BOOST_REQUIRE(d.ok());
  BOOST_TEST((d.value() == e));
}

BOOST_AUTO_TEST_CASE(empty_input_is_rejected) {
  auto r = decode_envelope({});
  BOOST_REQUIRE(!r.ok());
  BOOST_TEST((r.status().code() == Status::Code::invalid_input));
}

BOOST_AUTO_TEST_CASE(sizes_not_a_multiple_of_eight_are_rejected) {
  SplitMix64 rng(9);
  const auto bytes = encode_ok(random_envelope(rng, 40));
  for (size_t n = 1; n < bytes.size(); ++n) {
    if (n % 8 == 0) continue;
    auto r = decode_envelope(std::span<const uint8_t>(bytes.data(), n));
    BOOST_REQUIRE(!r.ok());
    BOOST_TEST((r.status().code() == Status::Code::invalid_input));
  }
  std::vector<uint8_t> extended = bytes;
  extended.push_back(0);
  auto r = decode_envelope(extended);
  BOOST_REQUIRE(!r.ok());
  BOOST_TEST((r.status().code() == Status::Code::invalid_input));
}

BOOST_AUTO_TEST_CASE(wrong_protocol_version_is_rejected_naming_it) {
  for (uint16_t v :
       {uint16_t{0}, uint16_t{1}, uint16_t{777}, uint16_t{65535}}) {  // 1: before epochs
    Envelope e;
    e.version = v;
    e.body = {1, 2, 3};
    auto r = decode_envelope(encode_ok(e));
    BOOST_REQUIRE(!r.ok());
    BOOST_TEST((r.status().code() == Status::Code::invalid_input));
    const std::string& msg = r.status().message();
    BOOST_TEST(msg.find("version") != std::string::npos, msg);
    BOOST_TEST(msg.find(std::to_string(v)) != std::string::npos, msg);
  }
}

BOOST_AUTO_TEST_CASE(truncated_encodings_never_crash) {
  size_t bad = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SplitMix64 rng(seed);
    const auto bytes = encode_ok(random_envelope(rng, rng.next() % 300));
    for (size_t n = 0; n < bytes.size(); ++n) {
      const bool ok = decode_is_safe(std::span<const uint8_t>(bytes.data(), n), bad);
      // A strict prefix lacks part of the declared segment: it cannot decode.
      if (ok) ++bad;
    }
  }
  BOOST_TEST(bad == 0u);
}

BOOST_AUTO_TEST_CASE(bit_flipped_encodings_never_crash) {
  size_t bad = 0, decoded = 0, total = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SplitMix64 rng(seed * 7919);
    const auto good = encode_ok(random_envelope(rng, rng.next() % 200));
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<uint8_t> bytes = good;
      const int flips = 1 + static_cast<int>(rng.next() % 4);
      for (int f = 0; f < flips; ++f) {
        // Concentrate flips on the segment table and root pointer/struct half the time.
        const size_t limit = rng.next() % 2 ? std::min<size_t>(bytes.size(), 48) : bytes.size();
        const size_t pos = rng.next() % limit;
        bytes[pos] ^= static_cast<uint8_t>(1u << (rng.next() % 8));
      }
      decoded += decode_is_safe(bytes, bad);
      ++total;
    }
  }
  BOOST_TEST(bad == 0u);
  BOOST_TEST_MESSAGE("bit flips: " << decoded << " of " << total << " still decoded");
}

BOOST_AUTO_TEST_CASE(random_garbage_never_crashes) {
  size_t bad = 0;
  for (uint64_t seed = 1; seed <= 3000; ++seed) {
    SplitMix64 rng(seed);
    size_t n = rng.next() % 512;
    if (seed % 3 != 0) n &= ~size_t{7};  // mostly whole words so decoding gets past the size check
    std::vector<uint8_t> bytes(n);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng.next());
    // Often make the segment table plausible (one segment of the right size) so the garbage
    // reaches pointer validation.
    if (seed % 2 == 0 && n >= 16) {
      const uint32_t words = static_cast<uint32_t>(n / 8 - 1);
      bytes[0] = bytes[1] = bytes[2] = bytes[3] = 0;
      bytes[4] = static_cast<uint8_t>(words);
      bytes[5] = static_cast<uint8_t>(words >> 8);
      bytes[6] = bytes[7] = 0;
    }
    (void)decode_is_safe(bytes, bad);
  }
  BOOST_TEST(bad == 0u);
}

BOOST_AUTO_TEST_CASE(segment_table_claiming_huge_sizes_is_rejected) {
  // Segment count / size fields at their maxima must not make the decoder allocate or read
  // beyond the input.
  for (uint32_t count_minus_one : {0u, 1u, 511u, 0xffffffffu}) {
    for (uint32_t size : {0u, 1u, 0x7fffffffu, 0xffffffffu}) {
      std::vector<uint8_t> bytes(64, 0);
      for (int i = 0; i < 4; ++i) bytes[i] = static_cast<uint8_t>(count_minus_one >> (8 * i));
      for (int i = 0; i < 4; ++i) bytes[4 + i] = static_cast<uint8_t>(size >> (8 * i));
      size_t bad = 0;
      (void)decode_is_safe(bytes, bad);
      BOOST_TEST(bad == 0u, "count-1 " << count_minus_one << " size " << size);
    }
  }
}

// ---- Parameter-server messages on the wire ----

namespace {

MessageHeader random_header(SplitMix64& rng) {
  return MessageHeader{static_cast<NodeId>(rng.next()), rng.next(), rng.next()};
}
std::vector<uint64_t> random_keys(SplitMix64& rng, size_t n) {
  std::vector<uint64_t> k(n);
  for (auto& x : k) x = rng.next();
  return k;
}
std::vector<float> random_floats(SplitMix64& rng, size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.uniform() * 2 - 1);
  return v;
}

// `rows` random rows of `width` values rounded to int8 codes under their scales (common/int8.h),
// as a shard's or client's int8 values are; their scales go to `scales`.
std::vector<float> random_int8_rows(SplitMix64& rng, size_t rows, size_t width,
                                    std::vector<float>& scales) {
  std::vector<float> v = random_floats(rng, rows * width);
  scales.resize(rows);
  for (size_t i = 0; i < rows; ++i) scales[i] = round_int8_row({v.data() + i * width, width});
  return v;
}

// Random floats that bf16 holds exactly, as a shard's or client's bf16 values are.
std::vector<float> random_bf16s(SplitMix64& rng, size_t n) {
  std::vector<float> v = random_floats(rng, n);
  for (auto& x : v) x = round_bf16(x * 1e3f);
  return v;
}

// Random floats that fp16 holds exactly, as a shard's or client's fp16 values are.
std::vector<float> random_fp16s(SplitMix64& rng, size_t n) {
  std::vector<float> v = random_floats(rng, n);
  for (auto& x : v) x = round_fp16(x * 1e3f);
  return v;
}

// One message of each kind with random contents.
PullReply int8_reply(SplitMix64& rng, size_t rows, size_t width) {
  PullReply r{random_header(rng), static_cast<uint32_t>(rng.next()), {}, ValueFormat::int8};
  r.values = random_int8_rows(rng, rows, width, r.scales);
  return r;
}

PushRequest int8_push(SplitMix64& rng, size_t rows, size_t width) {
  PushRequest p{random_header(rng), static_cast<uint32_t>(rng.next()), random_keys(rng, rows), {}};
  p.format = ValueFormat::int8;
  p.grads = random_int8_rows(rng, rows, width, p.scales);
  return p;
}

std::vector<PsMessage> random_ps_messages(SplitMix64& rng) {
  const size_t n = rng.next() % 300, width = 1 + rng.next() % 9;
  return {
      PullRequest{random_header(rng), static_cast<uint32_t>(rng.next()),
                  static_cast<NodeId>(rng.next()), random_keys(rng, n)},
      PullReply{random_header(rng), static_cast<uint32_t>(rng.next()),
                random_floats(rng, n * width)},
      PushRequest{random_header(rng), static_cast<uint32_t>(rng.next()), random_keys(rng, n),
                  random_floats(rng, n * width)},
      PullReply{random_header(rng), static_cast<uint32_t>(rng.next()), random_bf16s(rng, n * width),
                ValueFormat::bf16},
      PushRequest{random_header(rng), static_cast<uint32_t>(rng.next()), random_keys(rng, n),
                  random_bf16s(rng, n * width), ValueFormat::bf16},
      PullReply{random_header(rng), static_cast<uint32_t>(rng.next()), random_fp16s(rng, n * width),
                ValueFormat::fp16},
      PushRequest{random_header(rng), static_cast<uint32_t>(rng.next()), random_keys(rng, n),
                  random_fp16s(rng, n * width), ValueFormat::fp16},
      PushRequest{random_header(rng), static_cast<uint32_t>(rng.next()), random_keys(rng, n),
                  random_floats(rng, n * width), ValueFormat::fp32, true},  // a part
      int8_reply(rng, n, width),
      int8_push(rng, n, width),
      [&] {  // keys left out: those of a pull (PushRequest::keys_of_pull)
        PushRequest p{random_header(rng),
                      static_cast<uint32_t>(rng.next()),
                      {},
                      random_bf16s(rng, n * width),
                      ValueFormat::bf16};
        p.keys_of_pull = rng.next() | 1;
        return p;
      }(),
      [&] {
        PushRequest p = int8_push(rng, n, width);
        p.keys.clear();
        p.keys_of_pull = rng.next() | 1;
        return p;
      }(),
      PushAck{random_header(rng)},
      PsError{random_header(rng), PsErrorCode::keys_unknown, "keys?"},
      ClockAdvance{random_header(rng), clock_done},
      ClockAdvance{random_header(rng), static_cast<uint32_t>(rng.next()), true,
                   static_cast<uint32_t>(rng.next())},
      ShardMapUpdate{random_header(rng), rng.next(), static_cast<uint32_t>(rng.next()),
                     static_cast<uint32_t>(rng.next()), rng.next()},
      PsError{random_header(rng), PsErrorCode::out_of_order, std::string(rng.next() % 50, 'x')},
      DenseReduce{random_header(rng), static_cast<uint32_t>(rng.next()), rng.next(),
                  random_floats(rng, n * width)},
      DenseBroadcast{random_header(rng), clock_done, rng.next(), random_floats(rng, n * width)},
      PullHint{random_header(rng), random_keys(rng, n)},
      ReplicaForward{random_header(rng), rng.next(), rng.next(), false,
                     PushRequest{random_header(rng), static_cast<uint32_t>(rng.next()),
                                 random_keys(rng, n), random_floats(rng, n * width)}},
      [&] {  // a push that names a pull, its keys filled in
        PushRequest p = int8_push(rng, n + 1, width);
        p.keys_of_pull = rng.next() | 1;
        return ReplicaForward{random_header(rng), rng.next(), rng.next(), true, std::move(p)};
      }(),
      ReplicaForward{random_header(rng), rng.next(), rng.next(), false,
                     ClockAdvance{random_header(rng), static_cast<uint32_t>(rng.next()), true,
                                  static_cast<uint32_t>(rng.next())}},
      ReplicaAck{random_header(rng), rng.next()},
      [&] {  // a part of a copy, rows only
        ReplicaCopy c{random_header(rng), random_keys(rng, n), {}};
        c.rows.resize(n * width, 0.5f);
        return c;
      }(),
      [&] {  // a part of a copy's tail: kept forwards and push parts, no rows
        ReplicaCopy c{random_header(rng), {}, {}};
        c.kept.push_back(ReplicaForward{random_header(rng), rng.next(), rng.next(), false,
                                        ClockAdvance{random_header(rng), 5}});
        PushRequest kept{random_header(rng), static_cast<uint32_t>(rng.next()), random_keys(rng, n),
                         random_floats(rng, n * width)};
        kept.more = true;
        c.state.parts.push_back(kept);
        return c;
      }(),
      [&] {  // the last part: the rows' rest, the kept forwards and the state
        ReplicaCopy c{random_header(rng), random_keys(rng, n), {}};
        c.rows.resize(n * width, -2.0f);
        c.last = true;
        c.applied = rng.next();
        c.kept.push_back(ReplicaForward{random_header(rng), rng.next(), rng.next(), false,
                                        ClockAdvance{random_header(rng), 3}});
        PushRequest kept{random_header(rng), static_cast<uint32_t>(rng.next()), random_keys(rng, n),
                         random_floats(rng, n * width)};
        c.kept.push_back(ReplicaForward{random_header(rng), rng.next(), rng.next(), false, kept});
        kept.more = true;
        kept.keys_of_pull = rng.next() | 1;  // a part naming its pull, its keys filled in
        c.state.parts.push_back(kept);
        c.state.clocks = {{3, 4}, {5, 6}};
        c.state.keys_dropped = {{5, 7}};
        c.state.last_checkpoint = static_cast<uint32_t>(rng.next());
        return c;
      }(),
  };
}

bool same_header(const MessageHeader& x, const MessageHeader& y) {
  return x.sender == y.sender && x.request_id == y.request_id && x.map_version == y.map_version;
}
bool same_update(const PushRequest& x, const PushRequest& y) {
  return same_header(x.header, y.header) && x.clock == y.clock && x.keys == y.keys &&
         x.grads == y.grads && x.format == y.format && x.more == y.more && x.scales == y.scales &&
         x.keys_of_pull == y.keys_of_pull;
}
bool same_update(const ClockAdvance& x, const ClockAdvance& y) {
  return same_header(x.header, y.header) && x.clock == y.clock && x.resync == y.resync &&
         x.acked_push == y.acked_push;
}
bool same_update(const ReplicaForward& x, const ReplicaForward& y) {
  if (x.seq != y.seq || x.committed != y.committed || x.keys_filled != y.keys_filled ||
      x.message.index() != y.message.index())
    return false;
  if (auto* push = std::get_if<PushRequest>(&x.message))
    return same_update(*push, std::get<PushRequest>(y.message));
  return same_update(std::get<ClockAdvance>(x.message), std::get<ClockAdvance>(y.message));
}

bool same(const PsMessage& a, const PsMessage& b) {
  if (a.index() != b.index()) return false;
  auto h = [](const MessageHeader& x, const MessageHeader& y) {
    return x.sender == y.sender && x.request_id == y.request_id && x.map_version == y.map_version;
  };
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if (!h(x.header, y.header)) return false;
        if constexpr (std::is_same_v<T, PullRequest>)
          return x.clock == y.clock && x.writer == y.writer && x.keys == y.keys;
        if constexpr (std::is_same_v<T, PullHint>) return x.keys == y.keys;
        if constexpr (std::is_same_v<T, PullReply>)
          return x.min_clock == y.min_clock && x.values == y.values && x.format == y.format &&
                 x.scales == y.scales;
        if constexpr (std::is_same_v<T, PushRequest> || std::is_same_v<T, ClockAdvance> ||
                      std::is_same_v<T, ReplicaForward>)
          return same_update(x, y);
        if constexpr (std::is_same_v<T, ReplicaAck>) return x.seq == y.seq;
        if constexpr (std::is_same_v<T, ReplicaCopy>) {
          auto same_forwards = [](const std::vector<ReplicaForward>& p,
                                  const std::vector<ReplicaForward>& q) {
            return std::equal(p.begin(), p.end(), q.begin(), q.end(),
                              [](const auto& f, const auto& g) { return same_update(f, g); });
          };
          auto same_parts = [](const std::vector<PushRequest>& p,
                               const std::vector<PushRequest>& q) {
            return std::equal(p.begin(), p.end(), q.begin(), q.end(),
                              [](const auto& f, const auto& g) { return same_update(f, g); });
          };
          return x.keys == y.keys && x.rows == y.rows && x.last == y.last &&
                 x.applied == y.applied && same_forwards(x.kept, y.kept) &&
                 x.state.clocks == y.state.clocks && x.state.keys_dropped == y.state.keys_dropped &&
                 x.state.last_checkpoint == y.state.last_checkpoint &&
                 same_parts(x.state.parts, y.state.parts);
        }
        if constexpr (std::is_same_v<T, ShardMapUpdate>)
          return x.version == y.version && x.shards == y.shards &&
                 x.vnodes_per_shard == y.vnodes_per_shard && x.seed == y.seed;
        if constexpr (std::is_same_v<T, PsError>) return x.code == y.code && x.message == y.message;
        if constexpr (std::is_same_v<T, DenseReduce> || std::is_same_v<T, DenseBroadcast>)
          return x.step == y.step && x.samples == y.samples && x.values == y.values;
        return true;
      },
      a);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_ps_message_kind_round_trips) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    SplitMix64 rng(seed);
    for (const PsMessage& m : random_ps_messages(rng)) {
      auto bytes = encode_ps_message(m, 77);
      BOOST_REQUIRE(bytes.ok());
      auto back = decode_ps_message(*bytes, 77);
      BOOST_REQUIRE_MESSAGE(back.ok(), (back.ok() ? std::string() : back.status().message()));
      BOOST_TEST(same(m, *back), "kind " << m.index() << " seed " << seed);
    }
  }
}

// A replica forward is a push or a clock advance as a client sent it: the keys it says it filled
// in must be there, for a push that names a pull. Its gradients are not checked against them
// here: the backup's core checks them as the primary's did, and a forward the decoder refused
// would leave the backup a forward short.
BOOST_AUTO_TEST_CASE(replica_forwards_that_lie_about_their_keys_are_refused) {
  SplitMix64 rng(9);
  PushRequest named = int8_push(rng, 4, 3);
  named.keys_of_pull = 5;
  auto decoded = [](const ReplicaForward& f) {
    return decode_ps_message(encode_ps_message(f, 1).value(), 1);
  };
  auto refused = [&](const ReplicaForward& f, const char* why) {
    auto r = decoded(f);
    BOOST_REQUIRE(!r.ok());
    BOOST_TEST(r.status().message().find(why) != std::string::npos, r.status().message());
  };
  // Keys filled in for a push that names no pull, or a clock advance.
  PushRequest plain = int8_push(rng, 4, 3);
  refused({{1, 1, 1}, 1, 0, true, plain}, "names no pull");
  refused({{1, 1, 1}, 1, 0, true, ClockAdvance{{2, 1, 1}, 3}}, "clock advance");
  // A push that names a pull and carries keys, without saying they were filled in.
  refused({{1, 1, 1}, 1, 0, false, named}, "keys of its own");
  // Filled-in keys that the gradients are not whole rows of (a worker's lie the primary's core
  // refused) go through, as int8 rows whose scales are not one a key.
  PushRequest short_rows{{2, 1, 1}, 1, {1, 2, 3}, FloatBuffer(std::vector<float>(7, 1.0f))};
  short_rows.keys_of_pull = 5;
  BOOST_TEST(decoded({{1, 1, 1}, 1, 0, true, short_rows}).ok());
  named.scales.pop_back();
  BOOST_TEST(decoded({{1, 1, 1}, 1, 0, true, named}).ok());
}

BOOST_AUTO_TEST_CASE(ps_messages_for_another_cluster_or_kind_are_refused) {
  SplitMix64 rng(3);
  auto bytes = encode_ps_message(PushAck{random_header(rng)}, 1).value();
  auto r = decode_ps_message(bytes, 2);
  BOOST_REQUIRE(!r.ok());
  BOOST_TEST(r.status().message().find("cluster") != std::string::npos);
  Envelope e;
  e.kind = 9;
  auto other = encode_envelope(e).value();
  BOOST_TEST(!decode_ps_message(other, 0).ok());
  e.kind = 0;  // kind 0 but no message in the union
  BOOST_TEST(!decode_ps_message(encode_envelope(e).value(), 0).ok());
}

BOOST_AUTO_TEST_CASE(decoding_damaged_ps_messages_never_crashes) {
  size_t decoded = 0, refused = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SplitMix64 rng(seed);
    for (const PsMessage& m : random_ps_messages(rng)) {
      const auto good = encode_ps_message(m, 5).value();
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<uint8_t> bad = good;
        const int flips = 1 + static_cast<int>(rng.next() % 8);
        for (int f = 0; f < flips; ++f)
          bad[rng.next() % bad.size()] ^= static_cast<uint8_t>(1u << (rng.next() % 8));
        if (trial % 5 == 0) bad.resize(bad.size() / 8 * 8 / 2 / 8 * 8);  // truncated to whole words
        auto r = decode_ps_message(bad, 5);
        if (r.ok()) {
          ++decoded;
        } else {
          ++refused;
          BOOST_REQUIRE(r.status().code() == Status::Code::invalid_input);
        }
      }
    }
  }
  BOOST_TEST_MESSAGE(decoded << " damaged messages decoded, " << refused << " refused");
  BOOST_TEST(refused > 0u);
}

// ---------------------------------------------------------------------------------------------
// Control messages (ps/cluster_protocol.h) and decode_wire_message.

namespace {

std::string random_text(SplitMix64& rng, size_t max) {
  std::string s(rng.next() % (max + 1), ' ');
  for (char& c : s) c = static_cast<char>('a' + rng.next() % 26);
  return s;
}

MemberInfo random_member(SplitMix64& rng) {
  MemberInfo m;
  m.role = rng.next() % 2 ? MemberRole::ps : MemberRole::worker;
  m.endpoint = "tcp://" + random_text(rng, 30) + ":7100";
  m.public_key = rng.next() % 2 ? std::string(40, 'k') : std::string();
  m.count = 1 + static_cast<uint32_t>(rng.next() % 4096);
  m.data = random_text(rng, 100);
  m.first_node = static_cast<uint32_t>(rng.next());
  m.has_aggregator = rng.next() % 2;
  m.aggregator = static_cast<uint32_t>(rng.next());
  m.durable = rng.next() % 2;
  m.incarnation = rng.next();
  m.store = random_text(rng, 20);
  m.resumed_from = static_cast<uint32_t>(rng.next());
  return m;
}

JobSpec random_job(SplitMix64& rng) {
  JobSpec j;
  j.model = static_cast<uint8_t>(rng.next() % 2);
  j.dim = 1 + static_cast<uint32_t>(rng.next() % 1024);
  j.optimizer.kind = static_cast<OptimizerKind>(rng.next() % 4);
  j.optimizer.lr = static_cast<float>(rng.next() % 1000) / 997.0f;
  j.optimizer.l1 = static_cast<float>(rng.next() % 100);
  j.optimizer.l2 = static_cast<float>(rng.next() % 100);
  j.seed = rng.next();
  j.factor_init_std = 0.5f;
  j.batch = 1 + static_cast<uint32_t>(rng.next() % 10000);
  j.epochs = 1 + static_cast<uint32_t>(rng.next() % 100);
  j.consistency = {static_cast<ConsistencyKind>(rng.next() % 3),
                   static_cast<uint32_t>(rng.next() % 100)};
  j.hierarchical = rng.next() % 2;
  j.max_inflight = 1 + static_cast<uint32_t>(rng.next() % 64);
  j.read_ahead_batches = static_cast<uint32_t>(rng.next() % (read_ahead_batches_max + 1));
  j.replicas = 1 + static_cast<uint32_t>(rng.next() % colony::shard_replicas_max);
  j.skip_bad_lines = rng.next();
  j.use_cache = rng.next() % 2;
  j.admit_after = static_cast<uint32_t>(rng.next() % 256);
  j.evict_after = static_cast<uint32_t>(rng.next());
  j.checkpoint_every = static_cast<uint32_t>(rng.next());
  j.model = static_cast<uint8_t>(rng.next() % (control_model_max + 1));
  j.fields = 1 + static_cast<uint32_t>(rng.next() % control_fields_max);
  j.dense = static_cast<uint32_t>(rng.next() % (control_dense_max + 1));
  j.mlp.resize(rng.next() % (control_layers_max + 1));
  for (uint32_t& units : j.mlp) units = 1 + static_cast<uint32_t>(rng.next() % 65536);
  j.bottom.resize(rng.next() % 4);
  for (uint32_t& units : j.bottom) units = 1 + static_cast<uint32_t>(rng.next() % 1024);
  j.cross_layers = static_cast<uint32_t>(rng.next() % (control_cross_layers_max + 1));
  j.dense_optimizer = static_cast<uint8_t>(rng.next() % 3);
  j.dense_lr = static_cast<float>(rng.next() % 1000) / 1e5f;
  j.dense_beta1 = static_cast<float>(rng.next() % 1000) / 1e3f;
  j.dense_beta2 = static_cast<float>(rng.next() % 1000) / 1e3f;
  j.dense_eps = static_cast<float>(rng.next() % 1000) * 1e-10f;
  j.dense_weight_decay = static_cast<float>(rng.next() % 1000) / 1e4f;
  j.dense_momentum = static_cast<float>(rng.next() % 1000) / 1e3f;
  j.dense_sync_every = 1 + static_cast<uint32_t>(rng.next() % control_dense_sync_every_max);
  if (const uint64_t d = rng.next() % 4) j.durability = Durability(d - 1);
  j.skip_not_finite = rng.next() % 2 == 1;
  j.formats.wire = ValueFormat(rng.next() % (value_format_max + 1));
  j.formats.part_bytes = part_bytes_min + rng.next() % (part_bytes_max - part_bytes_min + 1);
  j.formats.row = ValueFormat(rng.next() % (value_format_max + 1));
  j.formats.state = ValueFormat(rng.next() % (value_format_max + 1));
  j.formats.push = ValueFormat(rng.next() % (value_format_max + 1));
  j.formats.error_feedback_rows = rng.next() % (error_feedback_rows_max + 1);
  return j;
}

std::vector<ShardCheckpoint> random_checkpoints(SplitMix64& rng) {
  std::vector<ShardCheckpoint> out(rng.next() % 4);
  for (ShardCheckpoint& c : out) {
    c.shard = static_cast<uint32_t>(rng.next());
    c.dir = random_text(rng, 40);
    c.rows = rng.next();
    for (size_t i = rng.next() % 5; i > 0; --i)
      c.sender_clocks.emplace_back(rng.next(), static_cast<uint32_t>(rng.next()));
  }
  return out;
}

DenseState random_dense_state(SplitMix64& rng) {
  DenseState d;
  d.shape = random_text(rng, 100);
  d.step = static_cast<uint32_t>(rng.next());
  d.params = random_floats(rng, rng.next() % 300);
  d.optimizer_state = random_floats(rng, rng.next() % 600);
  d.optimizer_steps = rng.next();
  return d;
}

std::vector<ControlMessage> random_control_messages(SplitMix64& rng) {
  Welcome w;
  const size_t members = 1 + rng.next() % 20;
  for (size_t i = 0; i < members; ++i) w.members.push_back(random_member(rng));
  w.you = static_cast<uint32_t>(rng.next() % members);
  w.job = random_job(rng);
  w.map = ShardMapSpec{rng.next(), static_cast<uint32_t>(rng.next()),
                       static_cast<uint32_t>(rng.next()), rng.next()};
  w.coordinator_node = static_cast<uint32_t>(rng.next());
  w.workers_total = static_cast<uint32_t>(rng.next());
  w.split_data = rng.next() % 2;
  w.heartbeat_ms = 1 + static_cast<uint32_t>(rng.next() % 5000);
  w.heartbeat_timeout_ms = 1 + static_cast<uint32_t>(rng.next() % 50000);
  w.backups_only = rng.next() % 2;
  for (size_t i = rng.next() % 5; i > 0; --i)
    w.placed.push_back({static_cast<uint32_t>(rng.next()), static_cast<uint32_t>(rng.next())});
  MemberDone d{random_text(rng, 200),
               rng.next() % 2 == 0,
               WorkerCounters{rng.next(), 0.25 * double(rng.next() % 1000), rng.next(), rng.next(),
                              rng.next(), rng.next(), rng.next(), rng.next(), rng.next(),
                              rng.next(), double(rng.next() % 1000) / 3.0, rng.next(), rng.next()},
               rng.next() % 2 == 0,
               random_floats(rng, rng.next() % 3 == 0 ? 0 : rng.next() % 2000),
               rng.next()};
  NodesLost lost;
  for (size_t i = rng.next() % 10; i > 0; --i)
    lost.nodes.push_back(static_cast<uint32_t>(rng.next()));
  lost.reason = random_text(rng, 100);
  lost.epoch = rng.next();
  const uint32_t from = static_cast<uint32_t>(rng.next());
  auto counts = [&rng](size_t n) {
    std::vector<uint64_t> v(n);
    for (uint64_t& x : v) x = rng.next();
    return v;
  };
  MemberLoad load{rng.next(), rng.next(), counts(rng.next() % 40), counts(rng.next() % 40),
                  counts(rng.next() % 40)};
  for (LoadHistogram* h : {&load.staleness, &load.pull_latency, &load.push_latency})
    *h = LoadHistogram{counts(rng.next() % 20), double(rng.next() % 100000) / 7.0};
  load.rows_pulled = counts(rng.next() % 40);
  for (uint64_t k = rng.next() % 40; k > 0; --k)
    load.hot_keys.push_back({static_cast<uint32_t>(rng.next()), rng.next(), rng.next()});
  for (uint64_t k = rng.next() % 40; k > 0; --k)
    load.shards.push_back(static_cast<NodeId>(rng.next()));
  return {
      {from, Join{random_member(rng)}},
      {from, std::move(w)},
      {from, Ready{}},
      {from, Start{}},
      {from, Heartbeat{rng.next()}},
      {from, Heartbeat{rng.next(), std::move(load)}},
      {from, Heartbeat{rng.next(), MemberLoad{}}},
      {from, std::move(d)},
      {from, std::move(lost)},
      {from, Leave{random_text(rng, 300), rng.next() % 2 == 1}},
      {from, Shutdown{random_text(rng, 300)}},
      {from, Refuse{random_text(rng, 300)}},
      {from, Joined{random_text(rng, 300)}},
      {from, ShardsRestarted{{static_cast<uint32_t>(rng.next()), static_cast<uint32_t>(rng.next())},
                             rng.next()}},
      {from, ShardSummaryRequest{}},
      {from, ShardSummary{rng.next(), rng.next(), rng.next(), rng.next(), rng.next(), rng.next(),
                          rng.next(), rng.next(), double(rng.next() % 1000) / 7.0, rng.next(),
                          rng.next(), rng.next(), rng.next(), rng.next(), rng.next()}},
      {from, ShardsMoved{{static_cast<uint32_t>(rng.next()), static_cast<uint32_t>(rng.next())},
                         static_cast<uint32_t>(rng.next()),
                         rng.next(),
                         {static_cast<uint32_t>(rng.next())}}},
      {from, Promoted{{static_cast<uint32_t>(rng.next())}}},
      {from, BackupsPlaced{{{static_cast<uint32_t>(rng.next()), static_cast<uint32_t>(rng.next())},
                            {static_cast<uint32_t>(rng.next()), 2}},
                           rng.next()}},
      {from, BackupsCopied{{static_cast<uint32_t>(rng.next()), static_cast<uint32_t>(rng.next())}}},
      {from, ReportApplied{{static_cast<uint32_t>(rng.next()), static_cast<uint32_t>(rng.next())}}},
      {from, Applied{{static_cast<uint32_t>(rng.next()), static_cast<uint32_t>(rng.next())},
                     {rng.next(), rng.next()},
                     rng.next()}},
      {from, ShardsCheckpointed{static_cast<uint32_t>(rng.next()), random_checkpoints(rng)}},
      {from,
       CheckpointComplete{static_cast<uint32_t>(rng.next()), random_checkpoints(rng),
                          rng.next() % 2 ? std::optional(random_dense_state(rng)) : std::nullopt}},
      {from, DenseCheckpointed{random_dense_state(rng)}},
      {from, DenseStart{random_dense_state(rng)}},
  };
}

bool same_checkpoints(const std::vector<ShardCheckpoint>& a,
                      const std::vector<ShardCheckpoint>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].shard != b[i].shard || a[i].dir != b[i].dir || a[i].rows != b[i].rows ||
        a[i].sender_clocks != b[i].sender_clocks)
      return false;
  return true;
}

bool same_body(const ControlBody& a, const ControlBody& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, Join>) return x.member == y.member;
        if constexpr (std::is_same_v<T, Welcome>)
          return x.you == y.you && x.members == y.members && x.job == y.job &&
                 x.map.version == y.map.version && x.map.shards == y.map.shards &&
                 x.map.vnodes_per_shard == y.map.vnodes_per_shard && x.map.seed == y.map.seed &&
                 x.coordinator_node == y.coordinator_node && x.workers_total == y.workers_total &&
                 x.split_data == y.split_data && x.heartbeat_ms == y.heartbeat_ms &&
                 x.heartbeat_timeout_ms == y.heartbeat_timeout_ms &&
                 x.backups_only == y.backups_only && x.placed == y.placed;
        if constexpr (std::is_same_v<T, Heartbeat>)
          return x.samples == y.samples && x.load == y.load;
        if constexpr (std::is_same_v<T, MemberDone>)
          return x.error == y.error && x.drained == y.drained && x.counters == y.counters &&
                 x.read_from_cache == y.read_from_cache && x.dense == y.dense &&
                 x.dense_steps == y.dense_steps;
        if constexpr (std::is_same_v<T, NodesLost>)
          return x.nodes == y.nodes && x.reason == y.reason && x.epoch == y.epoch;
        if constexpr (std::is_same_v<T, Leave>)
          return x.reason == y.reason && x.drained == y.drained;
        if constexpr (std::is_same_v<T, Shutdown>) return x.error == y.error;
        if constexpr (std::is_same_v<T, Refuse>) return x.reason == y.reason;
        if constexpr (std::is_same_v<T, Joined>) return x.status == y.status;
        if constexpr (std::is_same_v<T, ShardsRestarted>)
          return x.nodes == y.nodes && x.epoch == y.epoch;
        if constexpr (std::is_same_v<T, ShardSummary>) return x == y;
        if constexpr (std::is_same_v<T, ShardsMoved>)
          return x.shards == y.shards && x.member == y.member && x.epoch == y.epoch &&
                 x.backups == y.backups;
        if constexpr (std::is_same_v<T, Promoted>) return x.shards == y.shards;
        if constexpr (std::is_same_v<T, ReportApplied>) return x.backups == y.backups;
        if constexpr (std::is_same_v<T, BackupsPlaced>)
          return x.placed == y.placed && x.epoch == y.epoch;
        if constexpr (std::is_same_v<T, BackupsCopied>) return x.backups == y.backups;
        if constexpr (std::is_same_v<T, Applied>)
          return x.backups == y.backups && x.applied == y.applied && x.epoch == y.epoch;
        if constexpr (std::is_same_v<T, ShardsCheckpointed>)
          return x.step == y.step && same_checkpoints(x.shards, y.shards);
        if constexpr (std::is_same_v<T, CheckpointComplete>)
          return x.step == y.step && same_checkpoints(x.shards, y.shards) && x.dense == y.dense;
        if constexpr (std::is_same_v<T, DenseCheckpointed> || std::is_same_v<T, DenseStart>)
          return x.state == y.state;
        return true;  // Ready, Start, ShardSummaryRequest
      },
      a);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_control_message_kind_round_trips) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    SplitMix64 rng(seed);
    for (ControlMessage& m : random_control_messages(rng)) {
      m.incarnation = rng.next();  // what every member's message says of its process
      auto bytes = encode_control_message(m, 9);
      BOOST_REQUIRE(bytes.ok());
      auto back = decode_wire_message(*bytes, 9);
      BOOST_REQUIRE_MESSAGE(back.ok(), (back.ok() ? std::string() : back.status().message()));
      BOOST_TEST(back->is_control);
      BOOST_TEST(back->control.from == m.from);
      BOOST_TEST(back->control.incarnation == m.incarnation);
      BOOST_TEST(same_body(m.body, back->control.body),
                 "kind " << m.body.index() << " seed " << seed);
      BOOST_TEST(!decode_ps_message(*bytes, 9).ok());     // a control message is not a ps message
      BOOST_TEST(!decode_wire_message(*bytes, 10).ok());  // nor another cluster's
    }
  }
}

BOOST_AUTO_TEST_CASE(ps_messages_carry_their_receiver) {
  SplitMix64 rng(11);
  auto bytes = encode_ps_message(PushAck{random_header(rng)}, 4, 1234).value();
  auto m = decode_wire_message(bytes, 4);
  BOOST_REQUIRE(m.ok());
  BOOST_TEST(!m->is_control);
  BOOST_TEST(m->receiver == 1234u);
}

BOOST_AUTO_TEST_CASE(control_messages_out_of_range_are_refused_with_a_reason) {
  auto refused = [](ControlBody body, const std::string& why) {
    auto bytes = encode_control_message(ControlMessage{0, std::move(body)}, 1);
    BOOST_REQUIRE(bytes.ok());
    auto r = decode_wire_message(*bytes, 1);
    BOOST_REQUIRE(!r.ok());
    BOOST_TEST((r.status().code() == Status::Code::invalid_input));
    BOOST_TEST(r.status().message().find(why) != std::string::npos, r.status().message());
  };
  MemberInfo m;
  m.endpoint = "tcp://10.0.0.1:7100";
  m.count = 0;
  refused(Join{m}, "cores");
  m.count = 1;
  m.public_key = "short";
  refused(Join{m}, "public key");
  m.public_key.clear();
  m.endpoint = std::string(control_text_bytes_max + 1, 'x');
  refused(Join{m}, "endpoint");
  m.endpoint = "tcp://10.0.0.1:7100";
  Welcome w;
  w.members = {m};
  w.you = 1;
  refused(w, "member 1 of 1");
  w.you = 0;
  w.job.batch = 0;
  refused(w, "zero batch");
  w.job.batch = 1;
  w.job.max_inflight = 65;
  refused(w, "in-flight");
  w.job.max_inflight = 2;
  w.job.dim = 5000;
  refused(w, "dim");
  w.job.dim = 8;
  w.heartbeat_ms = 0;
  refused(w, "heartbeat");
  w.heartbeat_ms = 100;
  refused(Shutdown{std::string(control_text_bytes_max + 1, 'e')}, "shutdown error");

  // A deep model's shape and dense optimizer, one field out of range at a time.
  auto job_refused = [&](auto damage, const std::string& why) {
    Welcome x = w;
    damage(x.job);
    refused(x, why);
  };
  job_refused([](JobSpec& j) { j.model = 5; }, "model kind 5");
  job_refused([](JobSpec& j) { j.fields = 0; }, "fields 0 outside 1..255");
  job_refused([](JobSpec& j) { j.fields = 256; }, "fields 256 outside 1..255");
  job_refused([](JobSpec& j) { j.dense = 1025; }, "dense features 1025");
  job_refused([](JobSpec& j) { j.mlp.assign(17, 64); }, "mlp of 17 layers, over 16");
  job_refused([](JobSpec& j) { j.mlp = {400, 0, 400}; }, "mlp layer of 0 units");
  job_refused([](JobSpec& j) { j.bottom = {65537}; }, "bottom mlp layer of 65537 units");
  job_refused([](JobSpec& j) { j.cross_layers = 17; }, "cross layers 17");
  job_refused([](JobSpec& j) { j.dense_optimizer = 3; }, "dense optimizer kind 3");
  job_refused([](JobSpec& j) { j.dense_sync_every = 0; }, "dense sync every 0 steps");
  job_refused([](JobSpec& j) { j.dense_sync_every = 1000001; }, "dense sync every 1000001");
  job_refused([](JobSpec& j) { j.dense_lr = std::numeric_limits<float>::quiet_NaN(); },
              "learning rate nan is not finite");
  job_refused([](JobSpec& j) { j.dense_eps = std::numeric_limits<float>::infinity(); },
              "epsilon inf is not finite");
  job_refused([](JobSpec& j) { j.dense_momentum = -std::numeric_limits<float>::infinity(); },
              "momentum -inf is not finite");
  // The bounds themselves are accepted.
  Welcome edge = w;
  edge.job.model = 4;
  edge.job.fields = 255;
  edge.job.dense = 1024;
  edge.job.mlp.assign(16, 65536);
  edge.job.bottom = {1};
  edge.job.cross_layers = 16;
  edge.job.dense_optimizer = 2;
  edge.job.dense_sync_every = 1000000;
  auto back = decode_wire_message(encode_control_message(ControlMessage{0, edge}, 1).value(), 1);
  BOOST_REQUIRE_MESSAGE(back.ok(), (back.ok() ? std::string() : back.status().message()));
  BOOST_TEST((std::get<Welcome>(back->control.body).job == edge.job));
}

// A deep model's job travels whole in the Welcome, every new field at a value other than its
// default; the final dense parameters travel in MemberDone.
BOOST_AUTO_TEST_CASE(a_deep_models_job_and_dense_parameters_round_trip) {
  MemberInfo m;
  m.endpoint = "tcp://10.0.0.1:7100";
  m.count = 2;
  Welcome w;
  w.members = {m};
  w.job.model = 3;  // dlrm
  w.job.fields = 26;
  w.job.dense = 13;
  w.job.mlp = {512, 256, 1};
  w.job.bottom = {512, 256, 16};
  w.job.cross_layers = 6;
  w.job.dense_optimizer = 1;  // adamw
  w.job.dense_lr = 3e-4f;
  w.job.dense_beta1 = 0.8f;
  w.job.dense_beta2 = 0.98f;
  w.job.dense_eps = 1e-6f;
  w.job.dense_weight_decay = 0.01f;
  w.job.dense_momentum = 0.5f;
  w.job.dense_sync_every = 8;
  const JobSpec defaults;
  BOOST_TEST(w.job.fields != defaults.fields);
  BOOST_TEST(w.job.cross_layers != defaults.cross_layers);
  BOOST_TEST(w.job.dense_momentum != defaults.dense_momentum);
  auto bytes = encode_control_message(ControlMessage{4, w}, 1);
  BOOST_REQUIRE(bytes.ok());
  auto back = decode_wire_message(*bytes, 1);
  BOOST_REQUIRE_MESSAGE(back.ok(), (back.ok() ? std::string() : back.status().message()));
  BOOST_TEST((std::get<Welcome>(back->control.body).job == w.job));

  MemberDone d;
  d.counters.samples = 1000;
  d.dense = {1.5f, -0.0f, 3e-38f, std::numeric_limits<float>::max(), 7.0f};
  auto done = decode_wire_message(encode_control_message(ControlMessage{4, d}, 1).value(), 1);
  BOOST_REQUIRE(done.ok());
  const auto& x = std::get<MemberDone>(done->control.body);
  BOOST_TEST(std::memcmp(x.dense.data(), d.dense.data(), d.dense.size() * sizeof(float)) == 0);
  BOOST_TEST(x.dense.size() == d.dense.size());
  BOOST_TEST(x.counters.samples == 1000u);
}

namespace {

// An envelope of `kind` built field by field, as a peer of any version could write it.
std::vector<uint8_t> raw_envelope(uint64_t cluster_id, uint16_t kind,
                                  const std::function<void(wire::Envelope::Builder)>& fill) {
  capnp::MallocMessageBuilder builder;
  auto root = builder.initRoot<wire::Envelope>();
  root.setVersion(wire_protocol_version);
  root.setClusterId(cluster_id);
  root.setKind(kind);
  fill(root);
  auto words = capnp::messageToFlatArray(builder);
  auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

// A control message and a ps message built field by field.
std::vector<uint8_t> raw_control(uint64_t cluster_id,
                                 const std::function<void(wire::Control::Builder)>& fill) {
  return raw_envelope(cluster_id, wire_kind_control,
                      [&](wire::Envelope::Builder e) { fill(e.initControl()); });
}
std::vector<uint8_t> raw_ps(uint64_t cluster_id,
                            const std::function<void(wire::PsMessage::Builder)>& fill) {
  return raw_envelope(cluster_id, wire_kind_ps,
                      [&](wire::Envelope::Builder e) { fill(e.initPs()); });
}

}  // namespace

// A copy's tail may come in any part, the rest of its state in the last only: a part before the
// last that carries clocks, refusals, a checkpoint or a count of forwards applied is refused.
BOOST_AUTO_TEST_CASE(a_copy_part_before_the_last_carries_no_state) {
  auto part = [](const std::function<void(wire::ReplicaCopy::Builder)>& fill) {
    return decode_ps_message(raw_ps(1,
                                    [&](wire::PsMessage::Builder ps) {
                                      auto c = ps.initReplicaCopy();
                                      c.initHeader();  // sender 0, as the envelope says
                                      c.setLast(false);
                                      fill(c);
                                    }),
                             1);
  };
  auto tail = part([](wire::ReplicaCopy::Builder c) {
    c.initKept(1)[0].initClock().setClock(4);
    c.initParts(1)[0].setMore(true);
  });
  BOOST_REQUIRE_MESSAGE(tail.ok(), (tail.ok() ? std::string() : tail.status().message()));
  BOOST_TEST(std::get<ReplicaCopy>(*tail).kept.size() == 1u);
  BOOST_TEST(std::get<ReplicaCopy>(*tail).state.parts.size() == 1u);
  for (const auto& [what, fill] :
       std::vector<std::pair<const char*, std::function<void(wire::ReplicaCopy::Builder)>>>{
           {"applied", [](auto c) { c.setApplied(9); }},
           {"clocks", [](auto c) { c.initClockNodes(1).set(0, 7); }},
           {"clock values", [](auto c) { c.initClockValues(1).set(0, 2); }},
           {"refusals", [](auto c) { c.initDroppedNodes(1).set(0, 7); }},
           {"refused clocks", [](auto c) { c.initDroppedClocks(1).set(0, 2); }},
           {"checkpoint", [](auto c) { c.setLastCheckpoint(2); }}}) {
    auto refused = part(fill);
    BOOST_REQUIRE_MESSAGE(!refused.ok(), what);
    BOOST_TEST(refused.status().message().find("in a part before the last") != std::string::npos,
               what << ": " << refused.status().message());
  }
}

// --wire-format bf16: a push's gradients and a reply's rows take two bytes a value, and come
// back bit for bit.
BOOST_AUTO_TEST_CASE(bf16_values_take_half_the_bytes_and_come_back_exactly) {
  SplitMix64 rng(8);
  const std::vector<uint64_t> keys = random_keys(rng, 1000);
  const std::vector<float> grads = random_bf16s(rng, keys.size() * 8);
  const PushRequest fp32{random_header(rng), 4, keys, grads};
  PushRequest bf16 = fp32;
  bf16.format = ValueFormat::bf16;
  const auto wide = encode_ps_message(fp32, 1).value(), narrow = encode_ps_message(bf16, 1).value();
  BOOST_TEST(wide.size() - narrow.size() >= grads.size() * 2);
  BOOST_TEST(wide.size() - narrow.size() < grads.size() * 2 + 64);
  const auto back = decode_ps_message(narrow, 1).value();
  BOOST_TEST(same(bf16, back));
}

// --wire-format int8: a byte a value and a float32 scale a row, and back bit for bit.
BOOST_AUTO_TEST_CASE(int8_rows_take_a_byte_a_value_and_come_back_exactly) {
  SplitMix64 rng(9);
  const PushRequest int8 = int8_push(rng, 1000, 8);
  PushRequest fp32 = int8;
  fp32.format = ValueFormat::fp32;
  fp32.scales.clear();
  const auto wide = encode_ps_message(fp32, 1).value(), narrow = encode_ps_message(int8, 1).value();
  BOOST_TEST(wide.size() - narrow.size() >= 1000u * (32 - 12));
  BOOST_TEST(wide.size() - narrow.size() < 1000u * (32 - 12) + 64);
  const auto back = decode_ps_message(narrow, 1).value();
  BOOST_TEST(same(int8, back));
  const PullReply reply = int8_reply(rng, 300, 9);
  BOOST_TEST(same(reply, decode_ps_message(encode_ps_message(reply, 1).value(), 1).value()));
}

// A value blob in a format this build does not know, not a whole number of bf16 values, or int8
// values whose scales do not match their rows, is refused naming it; nothing is read into floats.
BOOST_AUTO_TEST_CASE(values_in_an_unknown_format_or_of_odd_length_are_refused) {
  const kj::byte five[5] = {1, 2, 3, 4, 5}, eight[8] = {};
  const std::vector<std::pair<std::vector<uint8_t>, std::string>> cases = {
      {raw_ps(1,
              [&](wire::PsMessage::Builder ps) {
                auto r = ps.initPullReply();
                r.setValues(kj::arrayPtr(eight, 8));
                r.setFormat(4);
              }),
       "pull reply values in unknown value format 4"},
      {raw_ps(1,
              [&](wire::PsMessage::Builder ps) {
                auto r = ps.initPullReply();
                r.setValues(kj::arrayPtr(eight, 8));
                r.setScales(kj::arrayPtr(five, 5));
                r.setFormat(2);
              }),
       "pull reply values: scales blob of 5 bytes is not a whole number of floats"},
      {raw_ps(1,
              [&](wire::PsMessage::Builder ps) {
                auto r = ps.initPullReply();
                r.setValues(kj::arrayPtr(five, 5));
                r.setScales(kj::arrayPtr(eight, 8));
                r.setFormat(2);
              }),
       "pull reply values: 5 int8 values with 2 row scales for 2 rows"},
      {raw_ps(1,
              [&](wire::PsMessage::Builder ps) {
                auto p = ps.initPushRequest();
                p.initKeys(1).set(0, 7);
                p.setGrads(kj::arrayPtr(eight, 8));
                p.setScales(kj::arrayPtr(eight, 8));
                p.setFormat(2);
              }),
       "push gradients: 8 int8 values with 2 row scales for 1 rows"},
      {raw_ps(1,
              [&](wire::PsMessage::Builder ps) {
                auto p = ps.initPushRequest();
                p.initKeys(1).set(0, 7);
                p.setGrads(kj::arrayPtr(five, 5));
                p.setFormat(1);
              }),
       "push gradients blob of 5 bytes is not a whole number of bf16 values"},
      {raw_ps(1,
              [&](wire::PsMessage::Builder ps) {
                auto p = ps.initPushRequest();
                p.initKeys(2).set(0, 7);
                p.setGrads(kj::arrayPtr(eight, 8));
                p.setKeysOfPull(3);
              }),
       "push names the keys of pull 3 and carries 2 keys of its own"},
  };
  for (const auto& [bytes, why] : cases) {
    auto back = decode_ps_message(bytes, 1);
    BOOST_REQUIRE(!back.ok());
    BOOST_TEST(back.status().message().find(why) != std::string::npos, back.status().message());
  }
}

// The roundings: to the nearest (ties to even) and stochastic (the mean over its random bits is
// the value); NaN and the infinities are kept.
BOOST_AUTO_TEST_CASE(bf16_rounding_is_nearest_or_unbiased) {
  BOOST_TEST(round_bf16(1.0f) == 1.0f);
  const float step = std::ldexp(1.0f, -7);  // bf16's spacing in [1, 2)
  BOOST_TEST(round_bf16(1.0f + step * 0.49f) == 1.0f);
  BOOST_TEST(round_bf16(1.0f + step * 0.51f) == 1.0f + step);
  BOOST_TEST(round_bf16(1.0f + step * 0.5f) == 1.0f);                // a tie, to even
  BOOST_TEST(round_bf16(1.0f + step * 1.5f) == 1.0f + 2 * step);     // a tie, to even
  BOOST_TEST(round_bf16(-(1.0f + step * 0.51f)) == -(1.0f + step));  // symmetric
  BOOST_TEST(std::isnan(round_bf16(std::nanf(""))));
  BOOST_TEST(std::isnan(round_bf16_stochastic(std::nanf(""), 0xFFFF)));
  BOOST_TEST(round_bf16(INFINITY) == INFINITY);
  BOOST_TEST(round_bf16_stochastic(-INFINITY, 0xFFFF) == -INFINITY);
  SplitMix64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const float v = static_cast<float>((rng.uniform() * 2 - 1) * std::pow(10.0, trial % 9 - 4));
    double sum = 0;
    for (uint32_t r = 0; r < 65536; ++r) {  // every random value once: the exact mean
      const float x = round_bf16_stochastic(v, r);
      BOOST_REQUIRE(is_bf16(x));
      sum += x;
    }
    BOOST_TEST(sum / 65536 == double(v), boost::test_tools::tolerance(1e-6));
    BOOST_TEST(to_bf16(round_bf16(v)) == to_bf16(round_bf16(from_bf16(to_bf16(round_bf16(v))))));
  }
}

// fp16 (IEEE half): nearest rounding, ties to even; stochastic rounding's mean over its random
// bits is the value, in the normal and the subnormal range; both saturate at +-65504 and keep NaN
// and the infinities; the bits come back exactly.
BOOST_AUTO_TEST_CASE(fp16_rounding_is_nearest_or_unbiased_and_saturates) {
  const float step = std::ldexp(1.0f, -10);  // fp16's spacing in [1, 2)
  BOOST_TEST(round_fp16(1.0f + step * 0.49f) == 1.0f);
  BOOST_TEST(round_fp16(1.0f + step * 0.51f) == 1.0f + step);
  BOOST_TEST(round_fp16(1.0f + step * 0.5f) == 1.0f);             // a tie, to even
  BOOST_TEST(round_fp16(1.0f + step * 1.5f) == 1.0f + 2 * step);  // a tie, to even
  BOOST_TEST(round_fp16(-(1.0f + step * 0.51f)) == -(1.0f + step));
  BOOST_TEST(round_fp16(1e6f) == fp16_max);
  BOOST_TEST(round_fp16(-70000.0f) == -fp16_max);
  BOOST_TEST(round_fp16_stochastic(1e9f, 0xFFFFFFFFu) == fp16_max);
  BOOST_TEST(round_fp16(INFINITY) == INFINITY);
  BOOST_TEST(round_fp16_stochastic(-INFINITY, 7) == -INFINITY);
  BOOST_TEST(std::isnan(round_fp16(std::nanf(""))));
  BOOST_TEST(std::isnan(round_fp16_stochastic(std::nanf(""), 7)));
  BOOST_TEST(round_fp16(1e-9f) == 0.0f);
  SplitMix64 rng(15);
  for (int trial = 0; trial < 24; ++trial) {
    // From 1e-7 (subnormal) to 1e4.
    const float v = static_cast<float>((rng.uniform() * 2 - 1) * std::pow(10.0, trial % 12 - 7));
    double sum = 0;
    constexpr uint32_t n = 1u << 16;
    for (uint32_t r = 0; r < n; ++r) {  // random values evenly over 2^32: the mean within 2^-16
      const float x = round_fp16_stochastic(v, r << 16);
      BOOST_REQUIRE(is_fp16(x));
      sum += x;
    }
    const float gap = std::fabs(round_fp16_stochastic(v, 0) - round_fp16_stochastic(v, ~0u));
    BOOST_TEST(std::fabs(sum / n - double(v)) <= double(gap) * 0x1p-15 + 1e-12, v);
    BOOST_TEST(from_fp16(to_fp16(round_fp16(v))) == round_fp16(v));
  }
}

// --wire-format fp16: two bytes a value, and back bit for bit.
BOOST_AUTO_TEST_CASE(fp16_values_take_half_the_bytes_and_come_back_exactly) {
  SplitMix64 rng(16);
  const std::vector<uint64_t> keys = random_keys(rng, 1000);
  const PushRequest fp32{random_header(rng), 4, keys, random_fp16s(rng, keys.size() * 8)};
  PushRequest fp16 = fp32;
  fp16.format = ValueFormat::fp16;
  const auto wide = encode_ps_message(fp32, 1).value(), narrow = encode_ps_message(fp16, 1).value();
  BOOST_TEST(wide.size() - narrow.size() >= keys.size() * 8 * 2);
  BOOST_TEST(same(fp16, decode_ps_message(narrow, 1).value()));
}

// int8 rows: nearest rounding gives values that the codes give back; stochastic rounding's mean
// over every random value is the value; a row not finite is all NaN, an all-zero row scale 0.
BOOST_AUTO_TEST_CASE(int8_rounding_is_nearest_or_unbiased) {
  std::vector<float> row = {1.0f, -0.5f, 0.3f, 127.0f};
  const float s = round_int8_row(row);
  BOOST_TEST(s == 1.0f);
  BOOST_TEST(row == (std::vector<float>{1.0f, -0.0f, 0.0f, 127.0f}));  // -0.5 ties to even (0)
  SplitMix64 rng(6);
  for (int trial = 0; trial < 3; ++trial) {
    const float top = static_cast<float>(std::pow(10.0, trial * 2 - 3));
    const float v = static_cast<float>(rng.uniform() * 2 - 1) * top;
    double sum = 0;
    uint64_t not_codes = 0;                      // values that are not a code's
    for (uint32_t r = 0; r < (1u << 24); ++r) {  // every random value once: the exact mean
      float x[2] = {v, top};
      const float scale = round_int8_row_stochastic(std::span<float>(x, 2),
                                                    [&](size_t j) { return j == 0 ? r << 8 : 0u; });
      not_codes += x[1] != int8_value(scale, 127);
      not_codes += x[0] != int8_value(scale, int8_code(x[0], scale));
      sum += x[0];
    }
    BOOST_TEST(not_codes == 0u);
    BOOST_TEST(sum / (1u << 24) == double(v), boost::test_tools::tolerance(1e-5));
  }
  std::vector<float> zeros = {0.0f, -0.0f};
  BOOST_TEST(round_int8_row(zeros) == 0.0f);
  BOOST_TEST(zeros[0] == 0.0f);
  std::vector<float> bad = {1.0f, INFINITY};
  BOOST_TEST(std::isnan(round_int8_row(bad)));
  BOOST_TEST((std::isnan(bad[0]) && std::isnan(bad[1])));
}

// The compact store codes its int8 rows straight from the values (int8_codes_stochastic): the
// same codes and scale as rounding the values (round_int8_row_stochastic) and coding them, for
// rows of every magnitude, ties, the bounds, zeros and a row that is not finite.
BOOST_AUTO_TEST_CASE(int8_codes_are_those_of_the_rounded_values) {
  SplitMix64 rng(12);
  uint64_t differ = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const size_t n = 1 + rng.next() % 40;
    const float top = static_cast<float>(std::pow(10.0, double(rng.next() % 13) - 6));
    std::vector<float> row(n);
    for (float& v : row) v = static_cast<float>(rng.uniform() * 2 - 1) * top;
    if (trial % 7 == 0) row[0] = top;  // a value on the bound
    if (trial % 11 == 0) std::fill(row.begin(), row.end(), 0.0f);
    if (trial % 13 == 0) row[n - 1] = NAN;
    const uint64_t seed = rng.next();
    auto random = [&](size_t j) { return uint32_t(mix64(seed + j) >> 32); };
    std::vector<int8_t> codes(n);
    const float s = int8_codes_stochastic(std::span<const float>(row), random, codes.data());
    std::vector<float> rounded = row;
    const float t = round_int8_row_stochastic(std::span<float>(rounded), random);
    differ += std::memcmp(&s, &t, sizeof s) != 0;
    for (size_t j = 0; j < n; ++j)
      differ += std::isfinite(t) ? codes[j] != int8_code(rounded[j], t) : codes[j] != 0;
  }
  BOOST_TEST(differ == 0u);
}

namespace {
// A Welcome of one ps member and an FM job with only the fields an LR or FM job needs set, as a
// peer that knows no other fields writes it; `more` sets others.
std::vector<uint8_t> raw_welcome(const std::function<void(wire::JobSpec::Builder)>& more) {
  return raw_control(1, [&](wire::Control::Builder c) {
    auto w = c.initWelcome();
    auto member = w.initMembers(1)[0];
    member.setCount(1);
    auto job = w.initJob();
    job.setModel(1);
    job.setDim(8);
    job.setBatch(32);
    job.setEpochs(1);
    job.setMaxInflight(1);
    more(job);
    w.setHeartbeatMs(100);
    w.setHeartbeatTimeoutMs(1000);
  });
}
}  // namespace

// A JobSpec written without the deep-model fields (as before they existed) reads as the
// defaults of JobSpec: an LR or FM job, which passes the decoder's checks.
BOOST_AUTO_TEST_CASE(a_job_without_the_deep_model_fields_reads_as_the_defaults) {
  const auto bytes = raw_welcome([](wire::JobSpec::Builder) {});
  auto back = decode_wire_message(bytes, 1);
  BOOST_REQUIRE_MESSAGE(back.ok(), (back.ok() ? std::string() : back.status().message()));
  const JobSpec& j = std::get<Welcome>(back->control.body).job;
  const JobSpec defaults;
  BOOST_TEST(j.fields == defaults.fields);
  BOOST_TEST(j.dense == defaults.dense);
  BOOST_TEST(j.mlp.empty());
  BOOST_TEST(j.bottom.empty());
  BOOST_TEST(j.cross_layers == defaults.cross_layers);
  BOOST_TEST(j.dense_optimizer == defaults.dense_optimizer);
  BOOST_TEST(j.dense_lr == defaults.dense_lr);
  BOOST_TEST(j.dense_beta1 == defaults.dense_beta1);
  BOOST_TEST(j.dense_beta2 == defaults.dense_beta2);
  BOOST_TEST(j.dense_eps == defaults.dense_eps);
  BOOST_TEST(j.dense_weight_decay == defaults.dense_weight_decay);
  BOOST_TEST(j.dense_momentum == defaults.dense_momentum);
  BOOST_TEST(j.dense_sync_every == defaults.dense_sync_every);
  BOOST_TEST(!j.durability.has_value());  // each ps store's default
  BOOST_TEST(j.formats.part_bytes == defaults.formats.part_bytes);
}

// Issue 14: a job's durability off the wire is one the stores know, or the Welcome is refused.
BOOST_AUTO_TEST_CASE(a_job_with_an_unknown_wire_format_is_refused) {
  const auto bytes = raw_welcome([](wire::JobSpec::Builder job) { job.setWireFormat(4); });
  auto back = decode_wire_message(bytes, 1);
  BOOST_REQUIRE(!back.ok());
  BOOST_TEST(back.status().message().find("unknown wire format 4") != std::string::npos,
             back.status().message());
  // The shards' row and state formats likewise (--row-format, --state-format).
  back =
      decode_wire_message(raw_welcome([](wire::JobSpec::Builder job) { job.setRowFormat(7); }), 1);
  BOOST_REQUIRE(!back.ok());
  BOOST_TEST(back.status().message().find("unknown row format 7") != std::string::npos);
  back = decode_wire_message(
      raw_welcome([](wire::JobSpec::Builder job) { job.setStateFormat(255); }), 1);
  BOOST_REQUIRE(!back.ok());
  BOOST_TEST(back.status().message().find("unknown state format 255") != std::string::npos);
  // And the pushes' (--push-format).
  back =
      decode_wire_message(raw_welcome([](wire::JobSpec::Builder job) { job.setPushFormat(4); }), 1);
  BOOST_REQUIRE(!back.ok());
  BOOST_TEST(back.status().message().find("unknown push format 4") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_job_with_error_feedback_over_its_bound_is_refused) {
  const auto raw = raw_welcome(
      [](wire::JobSpec::Builder job) { job.setErrorFeedbackRows(error_feedback_rows_max + 1); });
  auto back = decode_wire_message(raw, 1);
  BOOST_REQUIRE(!back.ok());
  BOOST_TEST(
      back.status().message().find("error feedback for 4294967297 rows") != std::string::npos,
      back.status().message());
}

BOOST_AUTO_TEST_CASE(a_job_reading_ahead_more_batches_than_its_bound_is_refused) {
  const auto raw = raw_welcome(
      [](wire::JobSpec::Builder job) { job.setReadAheadBatches(read_ahead_batches_max + 1); });
  auto back = decode_wire_message(raw, 1);
  BOOST_REQUIRE(!back.ok());
  BOOST_TEST(back.status().message().find("read-ahead of 65 batches") != std::string::npos,
             back.status().message());
}

BOOST_AUTO_TEST_CASE(a_job_with_replicas_out_of_range_is_refused) {
  for (uint32_t replicas : {0u, colony::shard_replicas_max + 1}) {
    const auto raw = raw_welcome([&](wire::JobSpec::Builder job) { job.setReplicas(replicas); });
    auto back = decode_wire_message(raw, 1);
    BOOST_REQUIRE(!back.ok());
    BOOST_TEST(back.status().message().find(fmt::format("{} replicas of each shard", replicas)) !=
                   std::string::npos,
               back.status().message());
  }
}

BOOST_AUTO_TEST_CASE(a_job_with_message_parts_out_of_range_is_refused) {
  for (uint64_t bytes : {uint64_t{0}, uint64_t{part_bytes_min - 1}, uint64_t{part_bytes_max + 1}}) {
    const auto raw = raw_welcome([&](wire::JobSpec::Builder job) { job.setPartBytes(bytes); });
    auto back = decode_wire_message(raw, 1);
    BOOST_REQUIRE(!back.ok());
    BOOST_TEST(back.status().message().find(fmt::format("message parts of {} bytes", bytes)) !=
                   std::string::npos,
               back.status().message());
  }
}

BOOST_AUTO_TEST_CASE(a_job_with_an_unknown_durability_is_refused) {
  const auto bytes = raw_welcome([](wire::JobSpec::Builder job) { job.setDurability(4); });
  auto back = decode_wire_message(bytes, 1);
  BOOST_REQUIRE(!back.ok());
  BOOST_TEST(back.status().message().find("durability 4") != std::string::npos,
             back.status().message());
}

BOOST_AUTO_TEST_CASE(dense_floats_that_are_not_whole_floats_are_refused) {
  const kj::byte six[6] = {1, 2, 3, 4, 5, 6};
  auto refused = [](const std::vector<uint8_t>& bytes, const std::string& why) {
    auto r = decode_wire_message(bytes, 1);
    BOOST_REQUIRE(!r.ok());
    BOOST_TEST((r.status().code() == Status::Code::invalid_input));
    BOOST_TEST(r.status().message().find(why) != std::string::npos, r.status().message());
  };
  refused(raw_ps(1,
                 [&](wire::PsMessage::Builder ps) {
                   ps.initDenseReduce().setValues(kj::arrayPtr(six, sizeof(six)));
                 }),
          "dense reduce values blob of 6 bytes is not a whole number of floats");
  refused(raw_ps(1,
                 [&](wire::PsMessage::Builder ps) {
                   ps.initDenseBroadcast().setValues(kj::arrayPtr(six, sizeof(six)));
                 }),
          "dense broadcast values blob of 6 bytes is not a whole number of floats");
  refused(raw_control(1,
                      [&](wire::Control::Builder c) {
                        c.initDone().setDense(kj::arrayPtr(six, sizeof(six)));
                      }),
          "dense parameters of 6 bytes are not a whole number of floats");
  refused(raw_control(1,
                      [&](wire::Control::Builder c) {
                        c.initDenseStart().setOptimizerState(kj::arrayPtr(six, sizeof(six)));
                      }),
          "dense optimizer state of 6 bytes are not a whole number of floats");
  refused(raw_control(1,
                      [&](wire::Control::Builder c) {
                        c.initDenseCheckpointed().setShape(std::string(5000, 'x'));
                      }),
          "dense shape of 5000 bytes exceeds 4096");
  // Whole floats decode, as the envelope's sender (0) is the message's.
  const kj::byte eight[8] = {};
  auto ok = decode_wire_message(
      raw_ps(1,
             [&](wire::PsMessage::Builder ps) {
               ps.initDenseReduce().setValues(kj::arrayPtr(eight, sizeof(eight)));
             }),
      1);
  BOOST_REQUIRE(ok.ok());
  BOOST_TEST(std::get<DenseReduce>(ok->ps).values.size() == 2u);
}

BOOST_AUTO_TEST_CASE(decoding_damaged_control_messages_never_crashes) {
  size_t refused = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SplitMix64 rng(seed * 31);
    for (const ControlMessage& m : random_control_messages(rng)) {
      const auto good = encode_control_message(m, 5).value();
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<uint8_t> bad = good;
        const int flips = 1 + static_cast<int>(rng.next() % 8);
        for (int f = 0; f < flips; ++f)
          bad[rng.next() % bad.size()] ^= static_cast<uint8_t>(1u << (rng.next() % 8));
        auto r = decode_wire_message(bad, 5);
        if (!r.ok()) {
          ++refused;
          BOOST_REQUIRE(r.status().code() == Status::Code::invalid_input);
        }
      }
    }
  }
  BOOST_TEST(refused > 0u);
}

// Received bytes are read in place when word-aligned and copied first when not: both decode the
// same message.
BOOST_AUTO_TEST_CASE(unaligned_bytes_decode_like_aligned_ones) {
  SplitMix64 rng(21);
  for (const PsMessage& m : random_ps_messages(rng)) {
    const auto bytes = encode_ps_message(m, 3).value();
    std::vector<uint8_t> shifted(bytes.size() + 1);
    std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
    auto a = decode_ps_message(bytes, 3);
    auto b = decode_ps_message(std::span<const uint8_t>(shifted).subspan(1), 3);
    BOOST_REQUIRE(a.ok());
    BOOST_REQUIRE(b.ok());
    BOOST_TEST(same(*a, *b));
    BOOST_TEST(same(m, *b));
  }
}

// ---- Messages as frames (encode_ps_frames, decode_wire_message over frames) ----

namespace {

// The frames as a receiver holds them: each copied into its own word-aligned buffer, owned by
// the handle (as a received ZeroMQ frame is). `shift` moves each frame one byte off alignment.
std::vector<SharedBytes> received(const EncodedFrames& sent, bool shift = false) {
  std::vector<SharedBytes> out;
  for (auto f : sent.frames) {
    auto buffer = std::make_shared<std::vector<uint64_t>>(f.size() / 8 + 2);
    auto* p = reinterpret_cast<uint8_t*>(buffer->data()) + (shift ? 1 : 0);
    std::memcpy(p, f.data(), f.size());
    out.emplace_back(buffer, p, f.size());
  }
  return out;
}

// encode_ps_frames of a copy of `m`, which must succeed.
EncodedFrames frames_ok(const PsMessage& m, uint64_t cluster, NodeId receiver = 0) {
  auto sent = encode_ps_frames(PsMessage(m), cluster, receiver);
  BOOST_REQUIRE_MESSAGE(sent.ok(), (sent.ok() ? std::string() : sent.status().message()));
  return std::move(sent).value();
}

const FloatBuffer* floats_of(const PsMessage& m) {
  if (auto* r = std::get_if<PullReply>(&m)) return &r->values;
  if (auto* p = std::get_if<PushRequest>(&m)) return &p->grads;
  if (auto* r = std::get_if<DenseReduce>(&m)) return &r->values;
  if (auto* b = std::get_if<DenseBroadcast>(&m)) return &b->values;
  return nullptr;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_ps_message_kind_round_trips_as_frames) {
  size_t multi = 0, views = 0, dense_views = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    SplitMix64 rng(seed);
    for (const PsMessage& m : random_ps_messages(rng)) {
      std::optional<EncodedFrames> sent = frames_ok(m, 77, 9);
      BOOST_REQUIRE(!sent->frames.empty());
      BOOST_REQUIRE(sent->frames.size() <= wire_frames_max);
      if (sent->frames.size() > 1) ++multi;
      auto frames = received(*sent);
      auto back = decode_wire_message(frames, 77);
      BOOST_REQUIRE_MESSAGE(back.ok(), (back.ok() ? std::string() : back.status().message()));
      BOOST_TEST(!back->is_control);
      BOOST_TEST(back->receiver == 9u);
      frames.clear();  // a view keeps its frame alive by itself
      sent.reset();
      BOOST_TEST(same(m, back->ps), "kind " << m.index() << " seed " << seed);
      if (const FloatBuffer* f = floats_of(back->ps); f && f->is_view()) {
        ++views;
        const bool dense = std::holds_alternative<DenseReduce>(back->ps) ||
                           std::holds_alternative<DenseBroadcast>(back->ps);
        dense_views += dense;
      }
    }
  }
  // Float arrays of whole words travel as segments of their own and are read in place.
  BOOST_TEST(multi > 50u);
  BOOST_TEST(views > 20u);
  BOOST_TEST(dense_views > 10u);  // DenseReduce and DenseBroadcast values as PullReply's
}

// A shard may keep more of a sender's push in parts than one message carries (64 MiB): a copy
// for a new backup taken then goes out, and comes in, in parts that each encode, and the backup
// built from them keeps every part (ps/replication.h send_copy, BackupCopy).
BOOST_AUTO_TEST_CASE(a_copy_whose_tail_passes_a_message_travels_in_parts) {
  const ShardConfig sc = colony::testing::small_adagrad_shard();  // sender 7, rows of 3 floats
  auto core = std::move(ShardCore::make(sc).value());
  auto primary = std::move(ShardPrimary::make(*core, 1).value());
  Outbox out;
  std::vector<ReplicaForward> forwards;
  // 24 MB of keys and gradients a push part: over the copy's 16 MiB tail budget, each goes alone
  // (one item may pass the budget, up to 32 MiB), three together over one message's 64 MiB.
  constexpr size_t keys_a_part = 1'200'000;
  uint64_t key = 1;
  for (uint64_t id = 1; id <= 3; ++id) {
    PushRequest p{{7, id, 1}, 1, {}, FloatBuffer(keys_a_part * 3, 0.5f)};
    for (size_t i = 0; i < keys_a_part; ++i) p.keys.push_back(key++);
    p.more = true;
    primary->on_message(p, out, forwards);
  }
  BOOST_REQUIRE(core->replica_state().parts.size() == 3u);
  BOOST_REQUIRE(primary->on_backup_lost(0, out).ok());
  std::vector<ReplicaCopy> parts;
  BOOST_REQUIRE(send_copy(*core, primary->add_backup(), 4096, [&](ReplicaCopy&& part) {
                  parts.push_back(std::move(part));
                }).ok());
  BOOST_TEST(parts.size() == 3u);  // one push part each, the last with the state
  auto copy =
      BackupCopy::make(sc, std::make_unique<MemoryRowStore>(core->store().row_floats())).value();
  uint64_t bytes = 0;
  for (ReplicaCopy& part : parts) {
    auto sent = encode_ps_frames(PsMessage(std::move(part)), 5, 1);
    BOOST_REQUIRE_MESSAGE(sent.ok(), (sent.ok() ? std::string() : sent.status().message()));
    BOOST_TEST(sent->bytes() <= wire_message_bytes_max);
    bytes += sent->bytes();
    auto back = decode_wire_message(received(*sent), 5);
    BOOST_REQUIRE_MESSAGE(back.ok(), (back.ok() ? std::string() : back.status().message()));
    const Status taken = copy->on_part(std::get<ReplicaCopy>(back->ps));
    BOOST_REQUIRE_MESSAGE(taken.ok(), taken.message());
  }
  BOOST_TEST(bytes > wire_message_bytes_max);  // the copy could not have gone in one message
  std::unique_ptr<ShardBackup> backup = copy->take();
  BOOST_REQUIRE(backup);
  const ReplicaState state = backup->core().replica_state();
  BOOST_REQUIRE(state.parts.size() == 3u);
  for (size_t i = 0; i < 3; ++i) {
    BOOST_TEST(state.parts[i].header.request_id == i + 1);
    BOOST_TEST(state.parts[i].keys.size() == keys_a_part);
    BOOST_TEST(!state.parts[i].grads.is_view());  // its own floats, not the received frame's
  }
}

BOOST_AUTO_TEST_CASE(frames_without_an_owner_or_off_alignment_are_copied) {
  SplitMix64 rng(5);
  const PsMessage m =
      PushRequest{random_header(rng), 3, random_keys(rng, 64), random_floats(rng, 64 * 4)};
  const auto sent = frames_ok(m, 1);
  BOOST_REQUIRE(sent.frames.size() > 1);
  // No owner: the caller's bytes, so nothing may be kept.
  std::vector<SharedBytes> borrowed;
  for (auto f : sent.frames) borrowed.emplace_back(f);
  auto a = decode_wire_message(borrowed, 1);
  BOOST_REQUIRE(a.ok());
  BOOST_TEST(same(m, a->ps));
  BOOST_TEST(!floats_of(a->ps)->is_view());
  // Off alignment: copied into words first, so nothing is kept either.
  auto b = decode_wire_message(received(sent, /*shift=*/true), 1);
  BOOST_REQUIRE(b.ok());
  BOOST_TEST(same(m, b->ps));
  BOOST_TEST(!floats_of(b->ps)->is_view());
}

BOOST_AUTO_TEST_CASE(bad_frame_lists_are_refused_naming_what_is_wrong) {
  SplitMix64 rng(8);
  auto frames = received(frames_ok(PullReply{random_header(rng), 1, random_floats(rng, 512)}, 1));
  BOOST_REQUIRE(frames.size() > 1);
  auto refused = [](const std::vector<SharedBytes>& f, const std::string& words) {
    auto r = decode_wire_message(f, 1);
    BOOST_REQUIRE(!r.ok());
    BOOST_TEST((r.status().code() == Status::Code::invalid_input));
    BOOST_TEST(r.status().message().find(words) != std::string::npos, r.status().message());
  };
  refused({}, "0 frames");
  refused(std::vector<SharedBytes>(wire_frames_max + 1, frames[0]), "frames, expected 1 to");
  auto empty = frames;
  empty.insert(empty.begin() + 1, SharedBytes());
  refused(empty, "empty frame");
  auto ragged = frames;
  ragged[1] = SharedBytes(ragged[1].owner(), ragged[1].data(), ragged[1].size() - 4);
  refused(ragged, "not a whole number of words");
  auto missing = frames;
  missing.pop_back();  // the floats' segment is gone: the pointer to it is out of bounds
  refused(missing, "malformed");
}

BOOST_AUTO_TEST_CASE(damaged_frames_never_crash) {
  size_t decoded = 0, refused = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SplitMix64 rng(seed);
    for (const PsMessage& m : random_ps_messages(rng)) {
      const auto sent = frames_ok(m, 5);
      for (int trial = 0; trial < 20; ++trial) {
        auto frames = received(sent);
        // Own copies to damage: flip bits in any frame, and sometimes reorder or repeat frames.
        std::vector<std::vector<uint8_t>> bytes;
        for (const SharedBytes& f : frames) bytes.push_back(f.to_vector());
        for (int f = 0; f < 1 + static_cast<int>(rng.next() % 8); ++f) {
          auto& b = bytes[rng.next() % bytes.size()];
          if (!b.empty()) b[rng.next() % b.size()] ^= static_cast<uint8_t>(1u << (rng.next() % 8));
        }
        if (trial % 4 == 1 && bytes.size() > 1) std::swap(bytes.front(), bytes.back());
        if (trial % 4 == 2) bytes.push_back(bytes.front());
        std::vector<SharedBytes> damaged;
        for (auto& b : bytes) {
          auto buffer = std::make_shared<std::vector<uint64_t>>(b.size() / 8 + 1);
          std::memcpy(buffer->data(), b.data(), b.size());
          damaged.emplace_back(buffer, reinterpret_cast<const uint8_t*>(buffer->data()), b.size());
        }
        auto r = decode_wire_message(damaged, 5);
        if (r.ok()) {
          ++decoded;
        } else {
          BOOST_TEST((r.status().code() == Status::Code::invalid_input));
          ++refused;
        }
      }
    }
  }
  BOOST_TEST(decoded > 0u);
  BOOST_TEST(refused > 0u);
}

BOOST_AUTO_TEST_CASE(a_float_buffer_view_is_copied_before_it_is_changed) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3});
  FloatBuffer view = FloatBuffer::view(owner, owner->data(), owner->size());
  FloatBuffer other = view;  // shares the view
  BOOST_TEST(view.is_view());
  BOOST_TEST((view == FloatBuffer{1, 2, 3}));
  BOOST_TEST(owner.use_count() == 3);
  view.vec().push_back(4);
  BOOST_TEST(!view.is_view());
  BOOST_TEST((view == FloatBuffer{1, 2, 3, 4}));
  BOOST_TEST((*owner == std::vector<float>{1, 2, 3}));  // the viewed floats are untouched
  BOOST_TEST((other == FloatBuffer{1, 2, 3}));
  BOOST_TEST(owner.use_count() == 2);
}

// An Applied whose answers are not one per backup named is refused when read, as a lie.
BOOST_AUTO_TEST_CASE(an_applied_with_answers_not_one_per_backup_is_refused) {
  for (const Applied& a : {Applied{{5, 6}, {1}}, Applied{{5}, {1, 2}}}) {
    auto bytes = encode_control_message({1, a}, 9);
    BOOST_REQUIRE(bytes.ok());
    auto back = decode_wire_message(*bytes, 9);
    BOOST_REQUIRE(!back.ok());
    BOOST_TEST(back.status().message().find("applied forwards of") != std::string::npos,
               back.status().message());
  }
  auto ok = decode_wire_message(encode_control_message({1, Applied{{5, 6}, {1, 2}}}, 9).value(), 9);
  BOOST_TEST(ok.ok());
}
