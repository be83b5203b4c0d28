// The parameter-server client: push, pull and a ticket to wait on, as a sans-I/O core.
//
// Modelled on ps-lite's KVWorker (Pull/Push/Wait), without its internals. A caller hands in
// keys and buffers and gets a ticket; the client splits the keys by shard with the shard map,
// puts one message per shard into the Outbox (several, in parts, when one would be over
// Options::part_bytes; see PushRequest::more), and reassembles the replies fed back through
// on_message. done(ticket) says when a pull's values are all in place or a push is
// acknowledged by every shard it touched. actors/ps_service.h wraps it in a blocking client
// whose wait() returns when the ticket is done.
//
// Contract:
//   - keys are unique within a call (not necessarily sorted); values and gradients are
//     keys.size() x width floats, row-major, in the keys' order;
//   - a pull's `values` buffer must stay valid and untouched until its ticket is done;
//     push copies what it needs before it returns;
//   - clocks: pull(keys, clock) reads rows for step `clock`; push(..., clock) completes step
//     clock - 1 (the client's clock becomes `clock`); every shard hears of every push (a
//     ClockAdvance where the push has no key for it). See ps/protocol.h;
//   - a push of exactly the keys of the client's pull for the step before (in the same order,
//     under the same map, every part of it answered) leaves the keys out (PushRequest::
//     keys_of_pull), in parts aligned with the pull's where they fit part_bytes; refused for
//     that (PsErrorCode::keys_unknown), it is sent to that shard again with its keys;
//   - a pull answered with a newer shard map is re-sent under that map (counted in
//     retries()); a push answered so, or any other PsError, makes error() non-ok, and no more
//     messages go out;
//   - a reply that answers no open request (one to a pull since re-sent, a duplicate, a
//     peer's mistake), one from another node than the shard the request went to, or a
//     request sent to a client, is dropped and counted in replies_dropped();
//   - one thread (or actor) uses a client at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "ps/protocol.h"
#include "ps/shard_map.h"
#include "storage/key_index.h"

namespace colony {

class KvClient {
 public:
  using Ticket = uint64_t;

  struct Options {
    NodeId id = 0;
    ShardMapSpec map;
    std::vector<NodeId> shard_nodes;  // node id of shard i of the map
    size_t width = 1;                 // floats per row
    // Keep a copy of every push until it is acknowledged, so that resync() can re-send it to
    // a shard that restarted (durable stores). Off: no copies, and resync() is not allowed.
    bool keep_for_resync = false;
    // How pushes carry gradients (the job's --push-format, by default its --wire-format): bf16
    // and fp16 round each one stochastically (common/bf16.h, common/fp16.h), int8 each row to
    // its scale's codes stochastically (common/int8.h), from random bits that are a hash of this
    // client's id, the step, the key and the position in its row: unbiased, and the same in
    // every run.
    ValueFormat push_format = ValueFormat::fp32;
    // The most bytes of keys and rows (pushes in push_format, pull replies in pull_format) one
    // message carries: a larger pull or push to a shard goes in parts (ps/protocol.h), each at
    // most this large but for one key. A push part that leaves its keys out counts them all the
    // same: a shard's forwards to its backups carry them. part_bytes_min..part_bytes_max.
    size_t part_bytes = part_bytes_default;
    // How the shards' pull replies carry rows (the job's --wire-format, ShardConfig::
    // wire_format): it sizes the parts of a pull.
    ValueFormat pull_format = ValueFormat::fp32;
    // Error feedback (the job's --error-feedback): for up to this many rows (the first pushed)
    // the client keeps what rounding to push_format took from each value, and adds it to the
    // row's next push, which rounds to the nearest instead of stochastically; so no part of a
    // gradient is lost, only delayed. A row past the bound rounds stochastically. Costs
    // 4 x width bytes and a hash entry a row. 0: none (and nothing to keep with fp32 pushes).
    uint64_t error_feedback_rows = 0;
  };
  // Fails with invalid_input when the map is bad, shard_nodes does not match it, or part_bytes
  // or error_feedback_rows is out of its range.
  static Expected<std::unique_ptr<KvClient>> make(const Options& options);

  // Sends the pulls of `keys` for step `clock`, filling `values` as replies arrive.
  // `writer` is who pushes this client's gradients (itself, or its node aggregator). When given,
  // `*min_clock` (which, like `values`, must stay valid until the ticket is done) is lowered to
  // each reply's PullReply::min_clock: how stale the oldest shard's answer was.
  Ticket pull(std::span<const uint64_t> keys, uint32_t clock, NodeId writer,
              std::span<float> values, Outbox& out, uint32_t* min_clock = nullptr);
  // Sends `grads` of `keys`, one push per shard (a ClockAdvance to shards without keys), in
  // parts where it is over part_bytes; the ticket is done once every part is acknowledged.
  Ticket push(std::span<const uint64_t> keys, std::span<const float> grads, uint32_t clock,
              Outbox& out);
  // Read-ahead: sends `keys` (unique), which a pull of a coming step will ask for, to the shards
  // that own them as PullHints (ps/protocol.h), in parts of at most part_bytes of keys. No
  // ticket: nothing is answered, kept or re-sent. Counted in hint_messages().
  void hint(std::span<const uint64_t> keys, Outbox& out);
  // Tells every shard this client is done (no ticket: nothing is acknowledged).
  void finish(Outbox& out);

  // A reply addressed to this client (PullReply, PushAck, ShardMapUpdate, PsError). A PsError
  // from the shard a request went to fails the client (error(), naming the shard's reason) when
  // it refuses a request still open, but a push part that left its keys out (sent again with
  // them), or a ClockAdvance that no later reply from that shard shows taken; a reply that
  // answers nothing open is dropped and counted (replies_dropped()).
  void on_message(const PsMessage& message, Outbox& out);
  // Shard `shard` (an index of the map) restarted over its durable store and lost whatever
  // was in flight (ShardCore::begin_resync): sends it a resync ClockAdvance with this client's
  // clock before its oldest unacknowledged push, then every push and clock advance since, and
  // the shard's part of every unanswered pull, in order. Without keep_for_resync (the shards
  // are not durable, so none restarted) or for a shard index outside the map, it sends
  // nothing, counts the notice in replies_dropped() and returns false.
  bool resync(uint32_t shard, Outbox& out);
  uint64_t pushes_resent() const { return pushes_resent_; }
  // Pushes to a shard sent again with their keys after the shard refused one that left them out
  // (PsErrorCode::keys_unknown).
  uint64_t pushes_keyed_again() const { return pushes_keyed_again_; }
  bool done(Ticket ticket) const { return !open_.contains(ticket); }
  size_t open_tickets() const { return open_.size(); }
  const Status& error() const { return error_; }
  uint64_t retries() const { return retries_; }
  uint64_t replies_dropped() const { return replies_dropped_; }
  uint64_t messages_sent() const { return messages_sent_; }  // pulls, pushes and advances
  uint64_t hint_messages() const { return hint_messages_; }
  uint64_t push_bytes() const { return push_bytes_; }
  // Keys sent in pulls (re-sent ones too) and the values of the replies taken, in the bytes
  // they take on the wire.
  uint64_t pull_bytes() const { return pull_bytes_; }
  const ShardMap& map() const { return map_; }

 private:
  // A pull request (part) answered: which of a pull's positions[shard] it asked.
  struct Part {
    uint64_t request_id = 0;
    uint32_t first = 0;
    uint32_t count = 0;
  };
  // A pull whose parts were all answered, kept for its push to leave the keys out
  // (PushRequest::keys_of_pull).
  struct Pulled {
    uint32_t clock = 0;
    uint64_t map_version = 0;
    std::vector<uint64_t> keys;
    std::vector<std::vector<uint32_t>> positions;  // per shard: indices into keys
    std::vector<std::vector<Part>> parts;          // per shard: by `first`, answered ones only
  };
  // The parts of a push sent to a shard without their keys, until acknowledged: what to send
  // again with the keys if the shard refuses one (PsErrorCode::keys_unknown).
  struct Elided {
    std::shared_ptr<const Pulled> pull;
    std::vector<PushRequest> parts;  // as sent (the gradients shared with the messages)
  };
  struct Open {
    size_t pending = 0;  // replies still due
    bool is_pull = false;
    // Pulls only: what to re-send under a new map, and where each shard's rows go.
    std::vector<uint64_t> keys;
    uint32_t clock = 0;
    NodeId writer = 0;
    std::span<float> values;
    uint32_t* min_clock = nullptr;
    std::vector<std::vector<uint32_t>> positions;  // per shard: indices into keys
    std::vector<std::vector<Part>> answered;       // per shard: the parts answered so far
    // Pushes only: by shard, the parts sent without their keys.
    std::unordered_map<uint32_t, Elided> elided;
  };
  // An open request: its ticket and shard, and for a pull, which of positions[shard] it asks.
  struct Request {
    Ticket ticket = 0;
    uint32_t shard = 0;
    uint32_t first = 0;
    uint32_t count = 0;
  };
  // What this client sent a shard since its oldest unacknowledged push (keep_for_resync).
  struct Sent {
    uint32_t clock = 0;
    bool is_push = false;
    bool acked = false;
    uint64_t request_id = 0;  // a push's: its last part's
    Ticket ticket = 0;
    std::vector<PushRequest> parts;  // is_push only
  };
  KvClient(const Options& options, ShardMap map);
  void log_sent(uint32_t shard, Sent sent);
  void send_pulls(Ticket ticket, Open& open, Outbox& out);
  // Sends the pull of positions[shard][first, first + count) of `open`.
  void send_pull(Ticket ticket, const Open& open, uint32_t shard, uint32_t first, uint32_t count,
                 Outbox& out);
  void fail(Status s);
  // Sends shard `shard` a ClockAdvance to `clock` (a resync naming `acked_push` with `resync`)
  // under a new request id, kept in clock_requests_.
  void send_clock(uint32_t shard, uint32_t clock, Outbox& out, bool resync = false,
                  uint32_t acked_push = 0);
  // The pull of step clock - 1 whose keys are `keys` (in order) under the current map, answered
  // whole, or nullptr.
  std::shared_ptr<const Pulled> pulled_for(std::span<const uint64_t> keys, uint32_t clock) const;
  // Sends the push of `ticket` to `shard` again, every part with its keys (a part left them out
  // and the shard did not know them).
  void resend_with_keys(Ticket ticket, Open& open, uint32_t shard, Outbox& out);
  // The residual of `key`'s row under error feedback (width floats, valid until the next
  // call), a new one at zero if the bound allows; nullptr without error feedback or past it.
  float* residual_of(uint64_t key);
  // Rounds `row`, the gradients `key` pushes at `step` (a hash of client id and clock), to
  // push_format (not fp32): with error feedback or stochastically. Returns int8's row scale.
  float round_push_row(uint64_t key, uint64_t step, std::span<float> row);

  Options options_;
  ShardMap map_;
  std::unordered_map<Ticket, Open> open_;
  std::unordered_map<uint64_t, Request> requests_;  // by request id
  std::vector<std::vector<uint32_t>> scratch_;      // per shard, for pushes
  KeyIndex residual_slot_;                          // error feedback: a key's row slot
  std::vector<float> residuals_;                    // slot x width
  uint64_t next_request_ = 1;
  Ticket next_ticket_ = 1;
  uint64_t retries_ = 0;
  uint64_t replies_dropped_ = 0;
  uint64_t messages_sent_ = 0;
  uint64_t push_bytes_ = 0;
  uint64_t pull_bytes_ = 0;
  uint64_t pushes_resent_ = 0;
  uint64_t hint_messages_ = 0;
  std::vector<std::deque<Sent>> sent_;  // per shard (keep_for_resync)
  // Pulls answered whole whose step has not been pushed yet, oldest first: at most pulled_max
  // of them and pulled_keys_max keys together (12 bytes each), past which the oldest are
  // forgotten (their pushes carry their keys).
  std::deque<std::shared_ptr<const Pulled>> pulled_;
  uint64_t pulled_keys_ = 0;
  static constexpr size_t pulled_max = 66;  // the most steps in flight (64), and some
  static constexpr uint64_t pulled_keys_max = uint64_t{1} << 22;
  uint64_t pushes_keyed_again_ = 0;
  std::vector<uint32_t> last_clock_;  // per shard: the clock of the latest push or advance
  std::vector<uint32_t> acked_push_;  // per shard: the clock of the latest acknowledged push
  // Per shard: the request ids of the ClockAdvances sent to it that no later reply from it shows
  // taken (a shard answers one sender in the order it sent), oldest first, the latest
  // clock_requests_max. Nothing answers a ClockAdvance but a refusal (PsError), which would
  // otherwise name no request this client knows, and leave its clock behind for good.
  static constexpr size_t clock_requests_max = 1024;
  std::vector<std::deque<uint64_t>> clock_requests_;
  Status error_;
};

}  // namespace colony
