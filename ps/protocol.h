// The parameter-server protocol: the messages shard, worker and aggregator cores exchange.
//
// Plain structs with no actor or wire types in them (actors/ adds CAF inspect functions and,
// later, the Cap'n Proto codec). Every message names its sender, a request id the sender
// chose (unique per sender) and the shard-map version it was sent under.
//
// Clocks: a worker's clock is the number of steps it has completed. A pull for the batch of
// step t carries clock t; the push of that step's gradients carries clock t + 1. A sender
// that has no keys for a shard in a step sends it a ClockAdvance instead, so every shard
// sees every sender's clock move. A sender that has finished sends clock_done.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/float_buffer.h"
#include "common/status.h"
#include "common/value_format.h"

namespace colony {

// Identifies a core: shards, workers and aggregators share one id space, assigned by the
// coordinator (see ClusterLayout).
using NodeId = uint32_t;
inline constexpr uint32_t clock_done = std::numeric_limits<uint32_t>::max();

struct MessageHeader {
  NodeId sender = 0;
  uint64_t request_id = 0;
  uint64_t map_version = 0;
};

// Keys are unique within a request, in the sender's order; the reply keeps that order.
struct PullRequest {
  MessageHeader header;
  uint32_t clock = 0;  // the step whose batch needs these rows
  // The sender whose pushes carry this puller's gradients: the puller itself (flat push) or
  // its node aggregator (hierarchical). The shard answers only once that sender's clock has
  // reached `clock`, so a worker always reads its own writes.
  NodeId writer = 0;
  std::vector<uint64_t> keys;
};

// How a pull reply's rows and a push's gradients travel (the job's --wire-format): fp32; bf16
// (common/bf16.h), half the bytes; or int8 (common/int8.h), one byte a value and a float32 scale a
// row. A message in bf16 or int8 holds only values that format represents exactly (the shard
// rounds its rows to the nearest, a client its gradients stochastically; an int8 message carries
// its rows' scales), so the wire codec packs them without loss, and an embedded cluster computes
// what daemons do.
// (ValueFormat: common/value_format.h.)

// Requests in parts. A client sends a pull or push of more than `part_bytes` bytes (keys and
// values, as they travel) in parts of at most that many (at least one key each), so that no
// message is near the wire's 64 MiB limit and every message's buffers stay small: pulls as
// several PullRequests, each answered on its own, pushes as PushRequest parts (`more`).
inline constexpr size_t part_bytes_default = size_t{4} << 20;
inline constexpr size_t part_bytes_min = 1024;
inline constexpr size_t part_bytes_max = size_t{32} << 20;
// The most rows whose rounding error a client keeps under error feedback (--error-feedback,
// KvClient::Options::error_feedback_rows).
inline constexpr uint64_t error_feedback_rows_max = uint64_t{1} << 32;
// How a job's rows travel and are kept, as its flags chose (cli/value_format_flags.h;
// docs/storage.md): JobSpec and ClusterOptions carry one.
struct ValueFormats {
  ValueFormat wire = ValueFormat::fp32;   // pull replies (--wire-format)
  ValueFormat push = ValueFormat::fp32;   // pushes (--push-format, by default --wire-format)
  ValueFormat row = ValueFormat::fp32;    // the shards' rows' values (--row-format)
  ValueFormat state = ValueFormat::fp32;  // their optimizer state (--state-format)
  // The largest part of a pull or push message (--part-bytes; KvClient::Options::part_bytes):
  // part_bytes_min..part_bytes_max.
  uint64_t part_bytes = part_bytes_default;
  // Rows per pusher under error feedback (--error-feedback; KvClient::Options): at most
  // error_feedback_rows_max.
  uint64_t error_feedback_rows = 0;
  bool operator==(const ValueFormats&) const = default;
};
// What a shard keeps of each writer's answered pulls for the pushes that leave their keys out
// (ShardCore): an entry a pull part, at most answered_pulls_max of them, and by default at most
// answered_rows_default keys (ShardConfig::answered_rows_max). A client leaves a push's keys out
// only where its pull to that shard fits both: otherwise the shard would have dropped the first
// parts, and the push would be refused for its keys (PsErrorCode::keys_unknown).
inline constexpr size_t answered_pulls_max = 512;
inline constexpr uint64_t answered_rows_default = uint64_t{1} << 24;
// The keys of a part of rows of `width` values in `format`: at least 1.
inline size_t part_keys(size_t part_bytes, size_t width, ValueFormat format) {
  const size_t row = sizeof(uint64_t) + row_bytes(format, width);
  return part_bytes / row > 0 ? part_bytes / row : 1;
}

struct PullReply {
  MessageHeader header;    // request_id echoes the request's
  uint32_t min_clock = 0;  // the shard's minimum clock over senders when it answered
  FloatBuffer values;      // keys.size() x width, in the request's key order
  ValueFormat format = ValueFormat::fp32;  // of `values` (bf16: each bf16-exact)
  std::vector<float> scales{};             // int8: each row's (its values are scale x -127..127)
};

// A push may travel in parts (a request of any size, in messages of at most a few MiB): each
// part is a PushRequest of the same clock, all but the last with `more` set, sent one after
// another with nothing else from that sender to that shard in between. The shard acknowledges
// each part, keeps the parts until the last one arrives, and applies them all at once, as one
// push: the clock, exactly-once and durability rules below are the whole push's.
//
// Keys left out: a worker pushes exactly the keys it pulled for the step, in the same order, so a
// push part may leave `keys` empty and name instead, in `keys_of_pull`, the request id of the
// pull (or pull part) whose keys it carries: one this sender sent this shard for the step before
// `clock`, and had answered. That saves 8 bytes a pushed row. A shard that no longer knows those
// keys (it restarted, or dropped them: ShardConfig::answered_rows_max) refuses the part with
// PsError{keys_unknown}, keeps none of the push's parts, and drops, unanswered, the rest of that
// push's parts that leave their keys out; the sender then sends the whole push again with its
// keys (KvClient does). A push leaves the keys out of all its parts to a shard or of none.
struct PushRequest {
  MessageHeader header;
  uint32_t clock = 0;                      // the sender's clock once this push is applied
  std::vector<uint64_t> keys;              // unique within the push (across its parts too)
  FloatBuffer grads;                       // keys.size() x width: gradients summed over the step
  ValueFormat format = ValueFormat::fp32;  // of `grads` (bf16: each bf16-exact)
  bool more = false;                       // more parts of this push follow
  std::vector<float> scales{};             // int8: each row's, as PullReply's
  uint64_t keys_of_pull = 0;  // nonzero: `keys` is empty and is the named pull's (above)
};

struct PushAck {
  MessageHeader header;  // request_id echoes the push's
};

struct ClockAdvance {
  MessageHeader header;
  uint32_t clock = 0;  // the sender's new clock (clock_done: it will send nothing more)
  // To a shard that restarted (see ShardCore::begin_resync): "my messages start over here;
  // count me at `clock`", followed by the sender's unacknowledged pushes and open pulls.
  bool resync = false;
  // With resync: the clock of the sender's last push this shard acknowledged (0: none). A store
  // whose committed clock is behind it lost acknowledged pushes (ShardStats::pushes_lost).
  uint32_t acked_push = 0;
};

// Sent in answer to a request made under an old map: the sender adopts the map and retries.
struct ShardMapUpdate {
  MessageHeader header;  // request_id echoes the stale request's
  uint64_t version = 0;
  uint32_t shards = 0;
  uint32_t vnodes_per_shard = 0;
  uint64_t seed = 0;
};

enum class PsErrorCode : uint8_t {
  bad_request = 1,  // malformed (sizes disagree, keys repeated, unknown sender)
  out_of_order,     // a push or clock that skips a step
  keys_unknown,     // a push part names a pull whose keys the shard does not hold (keys_of_pull)
};

struct PsError {
  MessageHeader header;  // request_id echoes the failed request's
  PsErrorCode code = PsErrorCode::bad_request;
  std::string message;
};

// Hybrid training of a deep model (docs/models.md): the dense parameters are replicated in
// every worker replica and kept equal by an all-reduce of each step's dense gradients, done by
// reduce and broadcast through the node aggregators. A replica sends its step's gradients to its
// aggregator; the aggregator sums its replicas' (in replica order) and sends the node's sum to
// the root aggregator (the first worker member's); the root sums the nodes' (in aggregator
// order) and broadcasts the total back down the same tree. Every replica then applies the same
// dense optimizer step to the same bits, so the replicas stay bit-identical.
//
// Up the tree: a step's dense gradients summed over `samples` samples (one replica's batch, or a
// node's replicas). step == clock_done: the sender has finished and contributes to no later
// step; its values are empty when the job all-reduces gradients every step, and its final
// parameters when it averages parameters every K steps (JobSpec::dense_sync_every), which ends
// with one more averaging of everyone's final parameters.
struct DenseReduce {
  MessageHeader header;
  uint32_t step = 0;     // the step's clock: the batch's pull clock (0 for a replica's first step)
  uint64_t samples = 0;  // under parameter averaging: the replicas averaged
  FloatBuffer values;    // the model's dense_params() floats: gradients, or parameters
};

// Down the tree: the sum of every contribution to `step` (`samples` in all: the summed
// gradients, or the summed parameters), to the aggregators that contributed and from each to its
// contributing replicas.
struct DenseBroadcast {
  MessageHeader header;
  uint32_t step = 0;
  uint64_t samples = 0;
  FloatBuffer values;
};

// Read-ahead (--read-ahead-batches): the keys of a batch that a worker will pull a few steps from
// now, sent to each shard that owns some of them as soon as the batch is read. A shard hands them
// to its store's read-ahead (RowStore::read_ahead), so that a tiered store reads the rows it does
// not hold off the shard's thread and the pull finds them in memory, under every consistency
// model (a pull that waits at the gate is read ahead without one). Advisory: never answered,
// never re-sent, and a shard drops a hint it cannot use (a stale map, a key it does not own,
// while it resyncs) without telling the sender.
struct PullHint {
  MessageHeader header;
  std::vector<uint64_t> keys;  // unique, all of the receiving shard's
};
// The most batches a worker hints ahead of its pulls (--read-ahead-batches).
inline constexpr uint32_t read_ahead_batches_max = 64;

// Replication of a shard (`--durability replicated:K`, ps/replication.h): its primary sends
// every push part and clock advance its core took to each backup, numbered from 1 in the order
// taken; the backup applies them in that order and acknowledges. The primary's node is the
// shard's; each backup is a node of its own (ClusterLayout::backups_of). Only the primary's
// node sends forwards, to its own backups, and only they acknowledge.
struct ReplicaForward {
  MessageHeader header;  // the primary's node; request_id: `seq`
  uint64_t seq = 0;
  // Every live backup had applied every forward up to this one when it was sent: a backup keeps
  // the forwards after it, for a promotion.
  uint64_t committed = 0;
  // A push part that names a pull's keys (keys_of_pull), with the keys the primary's core took
  // it for filled in (ShardCore::on_filled_push): a backup holds no pull to find them in.
  bool keys_filled = false;
  // What the primary's core took, as its sender (a client) sent it.
  std::variant<PushRequest, ClockAdvance> message;
};

// A backup has applied every forward up to `seq`.
struct ReplicaAck {
  MessageHeader header;  // the backup's node
  uint64_t seq = 0;
};

// What a new backup's core takes from its primary's besides the rows (ShardCore::replica_state,
// ShardCore::from_replica_state), so that a backup can be built in another process: every
// sender's clock, the parts of pushes whose last part has not come, the senders whose push was
// refused for keys left out, and the step of the last checkpoint. Not what only a primary keeps
// (pulls waiting or answered, a resync's progress): a backup never answers.
struct ReplicaState {
  std::vector<std::pair<NodeId, uint32_t>> clocks;  // every sender's, by node id
  // The kept parts of unfinished pushes, by sender and then in the order taken, each with its
  // keys (those of the pull it names filled in).
  std::vector<PushRequest> parts;
  std::vector<std::pair<NodeId, uint32_t>> keys_dropped;  // sender, the refused push's clock
  uint32_t last_checkpoint = 0;
};

// Re-replication across processes (ps/replication.h, ShardPrimary::add_backup): a shard's primary
// sends a new backup in another process the copy it starts from, in parts numbered from 0
// (header.request_id), ahead of any forward to it: the rows as the primary's store holds them
// (row_floats floats each), then what the core carries over besides the rows and where the backup
// stands in the primary's forwards. The kept forwards and the unfinished pushes' parts (the
// copy's tail) may be spread over several parts, each list continued in the next part in order,
// so that no message grows with them; the rest of the state comes in the last part. Only a
// shard's node sends it, to one of its own backups.
struct ReplicaCopy {
  MessageHeader header;  // the primary's node; request_id: the part's number
  std::vector<uint64_t> keys;
  std::vector<float> rows;  // keys.size() rows, one after another
  bool last = false;
  // The last part only: the forwards the copy holds (ShardPrimary::NewBackup::applied).
  uint64_t applied = 0;
  // The tail, in any part, each list continued from the part before: the forwards the backup
  // keeps (ShardPrimary::NewBackup::kept) and the unfinished pushes' parts (ReplicaState::parts).
  std::vector<ReplicaForward> kept{};
  // The last part only, but for its `parts` (the tail, above): the core's state.
  ReplicaState state{};
};
// The most rows, and floats, one part of a copy carries.
inline constexpr size_t replica_copy_rows_max = 1u << 16;
inline constexpr size_t replica_copy_floats_max = size_t{1} << 22;
// The bytes of the tail one part of a copy carries (counted as a backup counts what it keeps:
// replica_log_bytes_max), unless a single forward or push part is larger: it then goes alone.
inline constexpr uint64_t replica_copy_tail_bytes = uint64_t{16} << 20;

// A message addressed to a core.
using PsMessage = std::variant<PullRequest, PullReply, PushRequest, PushAck, ClockAdvance,
                               ShardMapUpdate, PsError, DenseReduce, DenseBroadcast, PullHint,
                               ReplicaForward, ReplicaAck, ReplicaCopy>;
struct Outgoing {
  NodeId to = 0;
  PsMessage message;
};
using Outbox = std::vector<Outgoing>;

enum class ConsistencyKind : uint8_t { bsp, ssp, asp };
struct Consistency {
  ConsistencyKind kind = ConsistencyKind::bsp;
  uint32_t staleness = 0;  // SSP's k; BSP is SSP(0); ASP ignores it
  // Whether a pull for step `clock` may be answered when the slowest sender is at
  // `min_clock`: no read is more than k clocks stale.
  bool allows(uint32_t clock, uint32_t min_clock) const {
    if (kind == ConsistencyKind::asp) return true;
    const uint32_t k = kind == ConsistencyKind::bsp ? 0 : staleness;
    return uint64_t{min_clock} + k >= clock;
  }
  bool operator==(const Consistency&) const = default;
};
// Parses "bsp", "asp" or "ssp:K" (K in 0..1000000).
Expected<Consistency> parse_consistency(const std::string& text);
std::string to_string(const Consistency& c);

}  // namespace colony
