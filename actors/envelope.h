// The envelope every wire message travels in, and its Cap'n Proto codec.
//
// Decoding is for untrusted bytes: it never crashes, never reads out of bounds and never
// allocates more than a bounded multiple of its input. Anything malformed is an
// invalid_input Status saying what was wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/shared_bytes.h"
#include "common/status.h"
#include "ps/cluster_protocol.h"
#include "ps/protocol.h"

namespace colony {

inline constexpr uint16_t wire_protocol_version = 5;
// The largest encoded message accepted (and produced): 64 MiB.
inline constexpr size_t wire_message_bytes_max = size_t{64} << 20;

struct Envelope {
  uint16_t version = wire_protocol_version;
  uint64_t cluster_id = 0;
  uint64_t sender_id = 0;
  uint16_t kind = 0;
  std::vector<uint8_t> body;
  bool operator==(const Envelope&) const = default;
};

// Encodes `e` as a Cap'n Proto message (unpacked, single segment). Fails with invalid_input
// when the result would exceed wire_message_bytes_max.
Expected<std::vector<uint8_t>> encode_envelope(const Envelope& e);

// Decodes bytes made by encode_envelope (from any peer). Fails with invalid_input for a
// message that is empty, too large, not a whole number of words, structurally malformed, or of
// an unknown protocol version.
Expected<Envelope> decode_envelope(std::span<const uint8_t> bytes);

// Parameter-server messages (ps/protocol.h) on the wire: an Envelope of kind 0 whose `ps`
// field holds the message; the envelope's sender id is the message's sender.
//
// encode_ps_message fails with invalid_input when the result would exceed
// wire_message_bytes_max. decode_ps_message is for untrusted bytes: besides what
// decode_envelope checks, it fails with invalid_input for another cluster's message, a kind
// other than 0, no message in the union, an envelope sender that differs from the message's,
// a float blob whose size is not a multiple of 4, gradients that are not a whole number of
// rows of the push's keys, an unknown error code, and dense values (DenseReduce,
// DenseBroadcast) of more than wire_dense_floats_max floats.
// `receiver` is the node the message is for (the envelope carries it; decode_ps_message ignores
// it, decode_wire_message returns it).
Expected<std::vector<uint8_t>> encode_ps_message(const PsMessage& message, uint64_t cluster_id,
                                                 NodeId receiver = 0);
Expected<PsMessage> decode_ps_message(std::span<const uint8_t> bytes, uint64_t cluster_id);

// The most frames a message may travel in.
inline constexpr size_t wire_frames_max = 16;

// A message encoded for sending without copying it: its bytes in one or more frames, which
// `owner` keeps alive. One frame is the flat format that encode_ps_message makes; several
// are the message's Cap'n Proto segments in order, without a segment table (the frames' sizes
// are the table), and a float array of whole words is a segment of its own, sent from where
// the message holds it.
struct EncodedFrames {
  std::shared_ptr<const void> owner;
  std::vector<std::span<const uint8_t>> frames;
  size_t bytes() const;
};

// As encode_ps_message, taking the message over (the frames refer into it).
Expected<EncodedFrames> encode_ps_frames(PsMessage&& message, uint64_t cluster_id,
                                         NodeId receiver = 0);

// Control messages (ps/cluster_protocol.h) on the wire: an Envelope of kind 1 whose `control`
// field holds the message.
inline constexpr uint16_t wire_kind_ps = 0;
inline constexpr uint16_t wire_kind_control = 1;
// Bounds on a control message's contents, checked by the decoder.
inline constexpr size_t control_text_bytes_max = 4096;  // endpoints, paths, reasons
inline constexpr size_t control_members_max = 8192;
inline constexpr size_t control_nodes_max = 1u << 20;
inline constexpr uint32_t control_model_max = 4;   // ModelKind: 0 lr 1 fm 2 deepfm 3 dlrm 4 dcn
inline constexpr uint32_t control_dim_max = 1024;  // an FM's factor dimension
inline constexpr uint32_t control_max_inflight_max = 64;  // steps a worker keeps in flight
inline constexpr uint32_t control_admit_after_max = 255;  // the admission sketch's counters
// A deep model's shape (JobSpec): field slots 1..max, dense features 0..max, hidden layers
// (mlp, bottom) of at most control_layers_max entries of 1..control_layer_width_max units each.
inline constexpr uint32_t control_fields_max = 255;
inline constexpr uint32_t control_dense_max = 1024;
inline constexpr size_t control_layers_max = 16;
inline constexpr uint32_t control_layer_width_max = 65536;
inline constexpr uint32_t control_cross_layers_max = 16;
inline constexpr uint32_t control_dense_optimizer_max = 2;  // 0 adam, 1 adamw, 2 sgd momentum
inline constexpr uint32_t control_dense_sync_every_max = 1000000;  // steps between averagings
// The most floats of a deep model's dense parameters on the wire: MemberDone::dense and the
// values of DenseReduce and DenseBroadcast. (wire_message_bytes_max bounds them further.)
inline constexpr size_t wire_dense_floats_max = size_t{1} << 28;

Expected<std::vector<uint8_t>> encode_control_message(const ControlMessage& message,
                                                      uint64_t cluster_id);

// Whatever a cluster socket receives: a parameter-server message for a node, or a control
// message.
struct WireMessage {
  bool is_control = false;
  NodeId receiver = 0;  // ps messages
  PsMessage ps;
  ControlMessage control;
};
// Decodes untrusted bytes as decode_ps_message does, accepting kind 0 (ps) and kind 1
// (control). A control message also fails with invalid_input for a text over
// control_text_bytes_max, a list over its bound, a public key that is neither empty nor 40
// characters, or a value out of range (role, model, optimizer, consistency, a zero batch,
// epoch count, replica count, dim over max 1024, max in-flight over 64, zero heartbeat times;
// a deep model's fields outside 1..255, dense features over 1024, mlp or bottom of more than
// 16 layers or a layer outside 1..65536 units, cross layers over 16, an unknown dense
// optimizer, a dense optimizer setting that is NaN or infinite, dense_sync_every outside
// 1..1000000, message parts outside part_bytes_min..part_bytes_max), or dense parameters
// (MemberDone's, a DenseState's) of more than wire_dense_floats_max floats or not a whole number of
// floats, a dense optimizer state of more than twice that, or a dense shape over dense_shape_max
// bytes.
Expected<WireMessage> decode_wire_message(std::span<const uint8_t> bytes, uint64_t cluster_id);
// The same for a message received as frames (one: the flat format; 2..wire_frames_max: the
// segments, as EncodedFrames describes). Fails with invalid_input also for no frames, too
// many, or an empty one. A float array that lies word-aligned in a frame with an owner comes
// back as a FloatBuffer view of that frame (kept alive by its owner), so it is not copied;
// otherwise (and always from the overload above) it is copied.
Expected<WireMessage> decode_wire_message(std::span<const SharedBytes> frames, uint64_t cluster_id);

}  // namespace colony
