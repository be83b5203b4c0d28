// The parameter-server shard as a pure state machine.
//
// A shard holds the rows (parameters plus optimizer state, created lazily from (key, seed))
// of the keys the shard map gives it, applies pushes with its optimizer, answers pulls, and
// gates pulls by the consistency model: a pull for step t is answered only when the slowest
// sender's clock is at least t - k (BSP: k = 0; ASP: not bounded), and in every model once
// the puller's own writes of step t - 1 have arrived (read-my-writes; see PullRequest::writer).
// Pulls that must wait are queued and answered, in arrival order, as soon as clocks allow; their
// keys go to the store's read-ahead meanwhile (RowStore::read_ahead: a tiered store reads the
// rows it does not hold off the shard's thread, so the answer finds them in memory), as do the
// keys of a worker's PullHint, sent before its pull under any consistency model.
//
// It takes messages and returns messages (into an Outbox): no threads, clocks, sockets or
// storage calls of its own. The driver (an actor, the simulator, a test) delivers messages
// and carries the outbox out.
//
// Pushes are idempotent: a push or clock advance whose clock is not above the sender's
// current clock is acknowledged without being applied (a retry), and one that skips a step is
// refused with PsError{out_of_order}. So no push is applied twice, and a lost one is noticed.
// A push holding a NaN or infinite gradient is refused whole with PsError{bad_request} naming
// the key, before its clock counts: nothing of it reaches a row.
//
// A push in parts (PushRequest::more) is kept, part by part, until its last part comes, and
// then applied as one push, so the rules above hold for the whole of it (a shard that restarts
// with parts kept has applied none of them). Each part is checked as it comes, and
// acknowledged; a part of another step, a clock advance, or a refused part in the middle drops
// the parts kept and is refused with PsError{bad_request} (a clock advance to clock_done still
// counts: the sender is done, and the slowest clock must not wait for it), as is more than
// shard_push_parts_bytes_max of parts. A sender numbers a push's parts by increasing request ids
// (KvClient does): a part whose id is not above the last one kept is a copy (the network's) and
// is dropped, and so is a part, acknowledged, of a step the sender's clock has passed (a push
// applied already: a late copy, or a push re-sent after a resync).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ps/count_min.h"
#include "ps/optimizer.h"
#include "ps/protocol.h"
#include "ps/row_init.h"
#include "ps/shard_map.h"
#include "storage/compact_store.h"
#include "storage/row_store.h"

namespace colony {

struct ShardConfig {
  NodeId id = 0;
  uint32_t shard_index = 0;  // this shard's number in the shard map
  size_t width = 1;          // parameters per row
  OptimizerConfig optimizer;
  RowInit init;
  Consistency consistency;
  std::vector<NodeId> senders;  // the cores whose pushes and clocks this shard waits for
  ShardMapSpec map;
  // Feature admission (Monolith, DeepRec): a key gets a row only once it has been pulled
  // `admit_after` times, counted in a count-min sketch of admit_sketch_width x 4 byte
  // counters (ps/count_min.h; it may admit a key a little early, never late). Until then a
  // pull returns the key's initial row and a push to it is dropped (counted). 0 or 1: every
  // key gets a row when first pulled.
  uint32_t admit_after = 0;
  size_t admit_sketch_width = size_t{1} << 22;
  // Checkpoints: every time the slowest sender's clock reaches a multiple of this (0: never),
  // checkpoint_due() names that step once. See checkpoint_due for what a checkpoint holds.
  uint32_t checkpoint_every = 0;
  // Row eviction (Monolith, DeepRec): a row not updated during the last `evict_after` steps
  // (of the slowest sender's clock) is removed (0: never). Each row then carries the clock of
  // its last update as one more float after the optimizer state. The shard looks for such
  // rows every evict_after / 2 steps (at least every step), scanning the whole store.
  uint32_t evict_after = 0;
  // How pull replies carry the rows (the job's --wire-format): bf16 rounds each value to the
  // nearest bf16, int8 each row to the nearest of its scale's codes, while training (a read once
  // every sender is done gets fp32); the rows themselves stay fp32.
  ValueFormat wire_format = ValueFormat::fp32;
  // The most keys of the pulls one sender may have waiting for the consistency gate (8 bytes
  // each; the default, 2^27, is 1 GiB); past it, or past shard_waiting_pulls_per_sender_max
  // pulls, a pull is refused with PsError{bad_request}.
  uint64_t waiting_pull_keys_max = uint64_t{1} << 27;
  // The most keys (and row pointers) a shard keeps per writer from its recent pulls, so that
  // their pushes may leave the keys out and need not look the rows up again (16 bytes each; the
  // default, 2^24, is 256 MiB). A pull of more keys is answered but not kept: its push must
  // carry its keys (or is refused with PsErrorCode::keys_unknown), and looks its rows up.
  uint64_t answered_rows_max = answered_rows_default;
  // A seeded fault site (FoundationDB's BUGGIFY) that only the simulator switches on: pulls
  // skip the consistency bound (read-my-writes still holds). Off everywhere else.
  bool fault_skip_consistency_gate = false;
  // Another simulator-only site: begin_resync() does nothing, so a shard restarted over its
  // durable store takes its peers' messages as if it had never stopped.
  bool fault_skip_resync = false;
};

// The most pulls one sender may have waiting at a shard for the consistency gate: a client has
// at most its max-inflight steps (at most 64) of pulls open, each in parts (PushRequest::more
// says how a request is split); ShardConfig::waiting_pull_keys_max bounds their keys.
inline constexpr size_t shard_waiting_pulls_per_sender_max = 64 * 1024;
// The most bytes (keys and gradients, as fp32) of the parts of one sender's push a shard keeps
// while waiting for its last part (PushRequest::more): 4 GiB.
inline constexpr uint64_t shard_push_parts_bytes_max = uint64_t{4} << 30;
// What each part kept counts toward that bound besides its keys and gradients, so that parts
// without keys cannot be kept without end.
inline constexpr uint64_t shard_push_part_overhead_bytes = 256;

struct ShardStats {
  uint64_t pulls_answered = 0;
  uint64_t pulls_deferred = 0;  // answered later than they arrived, because of the gate
  uint64_t pushes_applied = 0;
  uint64_t pushes_duplicate = 0;
  uint64_t pushes_reusing_pull_rows = 0;  // applied without looking the rows up again
  uint64_t push_parts = 0;                // parts kept for a push's last part (PushRequest::more)
  uint64_t rows_pulled = 0;
  uint64_t rows_pushed = 0;
  uint64_t stale_map_replies = 0;
  uint64_t dropped_before_resync =
      0;  // messages a restarted shard dropped (their senders re-send them)
  uint64_t rows_not_admitted = 0;  // pulled rows answered with the initial row (no row yet)
  uint64_t updates_dropped = 0;    // pushed rows dropped: the key had not been admitted
  uint64_t rows_evicted = 0;       // rows removed for not being updated for evict_after steps
  // Replies sent to a shard (dropped), and pulls past shard_waiting_pulls_per_sender_max or
  // waiting_pull_keys_max, or of more keys than a reply of part_bytes_max holds (refused with a
  // PsError): a peer's mistake or lie.
  uint64_t messages_refused = 0;
  // Acknowledged pushes a restarted shard found missing: at each sender's first resync, how far
  // the clock of its last acknowledged push (ClockAdvance::acked_push) is ahead of the clock the
  // store committed for it (RowStore::committed_clocks), in steps: at most the pushes lost (some
  // of those steps may have been clock advances). Zero under --durability log or fsync.
  uint64_t pushes_lost = 0;
  // Pull hints handed to the store's read-ahead, and hints dropped (a stale map, a key of another
  // shard, while resyncing or once the job is over): see PullHint.
  uint64_t hints = 0;
  uint64_t hints_dropped = 0;
  // Push parts that left their keys out naming a pull this shard did not hold (refused with
  // PsErrorCode::keys_unknown), and the rest of those pushes' parts, dropped (PushRequest).
  uint64_t push_keys_unknown = 0;
  uint64_t push_parts_dropped = 0;
  uint64_t push_parts_keys_left_out = 0;  // parts taken as the keys of the pull they named
  // Push parts dropped as copies: of a part kept already (a request id not above the last one
  // kept), or of a push applied already (a step the sender's clock has passed; acknowledged).
  uint64_t push_parts_duplicate = 0;
  // Pushes refused because a gradient was NaN or infinite (nothing of them applied).
  uint64_t pushes_not_finite = 0;
  // Row updates refused because, from a finite gradient, they would have made the row (or its
  // optimizer state) NaN or infinite: an overflowing step size. The row keeps its last finite
  // value; the rest of the push applies. last_row_not_finite names the last such update.
  uint64_t updates_not_finite = 0;
};

// The last row update a shard refused as not finite (ShardStats::updates_not_finite).
struct RowNotFinite {
  uint64_t key = 0;
  NodeId sender = 0;
  uint32_t clock = 0;  // the push's step
};

class ShardCore {
 public:
  // Fails with invalid_input for a bad optimizer setting, an empty sender list, a shard
  // index outside the map, or a store whose rows are not row_floats(config) floats.
  // Without a store, rows are kept in memory (MemoryRowStore).
  static Expected<std::unique_ptr<ShardCore>> make(const ShardConfig& config,
                                                   std::unique_ptr<RowStore> store = nullptr);
  // Floats a row of this configuration takes in the store: the width, the optimizer's
  // state, and with evict_after the clock of the last update. Fails as make does for a bad
  // optimizer setting.
  static Expected<size_t> row_floats(const ShardConfig& config);
  // The parts of such a row for a compact store (storage/compact_store.h): the width in
  // `values` format; each of the optimizer's state vectors in `state` format (in int8 and fp16,
  // as square roots: RowPart::root), and its scalars
  // (Adam's step count) in fp32; the clock (with evict_after) in fp32. Scalars and clocks stay
  // exact. Fails as row_floats does, and as check_state_format (ps/optimizer.h).
  static Expected<std::vector<RowPart>> row_parts(const ShardConfig& config, ValueFormat values,
                                                  ValueFormat state);

  // A copy of this core to serve as a new backup of its shard (ps/replication.h: a backup rebuilt
  // from its live primary): the same configuration over `store`, which must hold this core's rows
  // as they are now (the driver copies them), and what applying the same forwards further depends
  // on: each sender's clock, the parts of pushes whose last part has not come, the pushes refused
  // for keys left out, and the step of the last checkpoint (replica_state()); not the eviction
  // scan's, as replication refuses eviction. Not what only a primary keeps (pulls waiting or
  // answered, a resync's progress): a backup never answers. Fails as from_replica_state() does (a
  // store whose rows are not row_floats(config()) floats; a configuration replication refuses).
  Expected<std::unique_ptr<ShardCore>> replica(std::unique_ptr<RowStore> store) const;
  // What replica() carries over besides the rows, to build the copy in another process.
  ReplicaState replica_state() const;
  // The core replica() makes, from `config` (the primary's), `store` (the primary's rows) and
  // `state` (its replica_state()). `state` may have come off the wire: fails with invalid_input,
  // naming what is wrong, for a configuration with feature admission or stale-row eviction (which
  // replication refuses), a store whose rows are not row_floats(config) floats, clocks that are
  // not exactly the config's senders' (each once), a part its core could not have kept (one that
  // is the last of its push, from a node that is no sender, under another map, of a step its
  // sender's clock has passed, without its keys, with keys of another shard or gradients not
  // finite, in the same push as parts of another step, repeating an earlier part's request id, or
  // past shard_push_parts_bytes_max for its sender), a refusal for keys left out of a node that is
  // no sender, named twice or with parts kept, or a last checkpoint that is no multiple of
  // checkpoint_every. Fails as make() otherwise.
  static Expected<std::unique_ptr<ShardCore>> from_replica_state(const ShardConfig& config,
                                                                 std::unique_ptr<RowStore> store,
                                                                 const ReplicaState& state);

  // `sender`'s clock, or nullopt when it is not a sender of this shard.
  std::optional<uint32_t> sender_clock(NodeId sender) const {
    auto it = clocks_.find(sender);
    return it == clocks_.end() ? std::nullopt : std::optional(it->second);
  }
  // Replication (ps/replication.h): a push part that names a pull's keys (keys_of_pull), with the
  // keys the primary's core took it for in `r.keys` (a backup holds no pull): handled as
  // on_message handles the part on the primary, the named pull's keys being `r.keys`.
  void on_filled_push(const PushRequest& r, Outbox& out);
  // Replication (ps/replication.h): a backup takes what its primary's core did with a sender's
  // resync (a ClockAdvance with `resync`, whose effect depends on whether the primary is resyncing
  // after a promotion), `r.clock` being the sender's clock on the primary after it: the sender's
  // clock becomes the later of its own and that one, and the parts of a push it had not finished,
  // and a push refused for keys left out, are forgotten (the sender sends them again whole).
  // Nothing for a node that is not a sender, or under another map (as on_message).
  void follow_resync(const ClockAdvance& r, Outbox& out);

  // Handles one message addressed to this shard; replies go to `out`. A reply kind (which only
  // clients take) is dropped and counted in stats().messages_refused; a pull of more keys than
  // part_keys(part_bytes_max, width, wire_format) (clients pull in parts: ps/protocol.h), or a
  // push part of more keys, its own or its pull's, than part_keys(part_bytes_max, width, its
  // format), is refused with a PsError and counted there too. Replies go to the
  // message's sender: the driver must have checked that it is a node it can reach
  // (ClusterLayout::check_ps_message).
  void on_message(const PsMessage& message, Outbox& out);

  // The keys a push carries: its own, or those of the pull it names (PushRequest::keys_of_pull)
  // while this shard holds them and would take the part; nullptr when it would refuse or drop
  // the part for its keys. For drivers that follow what the shard applies (the simulator).
  const std::vector<uint64_t>* push_keys(const PushRequest& r) const;
  // The slowest sender's clock (clock_done when all have finished).
  uint32_t min_clock() const { return min_clock_; }
  const ShardStats& stats() const { return stats_; }
  // The last update refused as not finite (meaningful once stats().updates_not_finite > 0).
  const RowNotFinite& last_row_not_finite() const { return last_row_not_finite_; }
  size_t rows() const { return store_->size(); }
  // A digest of the rows that differ from their initial row (key, values, optimizer state and
  // stamps as the store gives them): a wrapping sum over those rows of a hash of each, so equal
  // for two shards holding the same rows whatever their order (replication's check that a backup
  // equals its primary), and how many rows it covers. A row still exactly as it was made (values
  // and optimizer state; the stamp aside) reads as a row that is not there, and is left out: a
  // pull makes its keys' rows on the primary alone (pulls are not forwarded), so a row pulled and
  // never pushed (a lost worker's last step) would otherwise set a backup apart from its primary.
  // Rows kept in fewer bits (a compact row or state format) read back rounded, so theirs are
  // counted. Fails with the store's error.
  struct RowsDigest {
    uint64_t digest = 0;
    uint64_t rows = 0;
  };
  Expected<RowsDigest> rows_digest() const;
  // The rows' bytes: values, optimizer state and stamps, as the store keeps them (the report's
  // table_bytes).
  uint64_t table_bytes() const { return uint64_t{rows()} * store_->row_bytes(); }
  // The parameters of `key` (its initial row when never touched); size width. Asserts that
  // the store could read it (tests; drivers use row_values and handle the error).
  void row_value(uint64_t key, std::span<float> out);
  // The parameters of every key (initial rows for keys never touched) into out (keys.size() *
  // width floats), in one batch against the store. Fails with the store's error (as error()).
  Status row_values(std::span<const uint64_t> keys, std::span<float> out);
  // The first store failure (a read or write of rows), naming the shard and the store's path.
  // Once set, the shard ignores every message: its rows may be incomplete, so it must not
  // answer as if nothing happened. The driver ends the job with it.
  const Status& error() const { return error_; }
  // Once after the slowest sender's clock has reached a multiple of checkpoint_every, that
  // multiple (the newest one reached, if several were crossed at once); nullopt otherwise.
  // The driver then checkpoints the store before handing the core its next message, so the
  // checkpoint holds every update of the steps before that clock from every sender, and,
  // under SSP and ASP, any update of later steps that faster senders had already pushed
  // (sender_clocks() says which: a sender's clock c means its steps < c are in). A shard that
  // restarted or took over (begin_resync, begin_takeover) names none for the steps its slowest
  // clock has reached when the last sender resyncs: its rows are those it had, past those steps,
  // and their copies (taken before by the process it replaced) are no cut of them.
  std::optional<uint32_t> checkpoint_due() {
    auto due = checkpoint_due_;
    checkpoint_due_.reset();
    return due;
  }
  // Every sender's clock (clock_done when it has finished), by node id.
  std::vector<std::pair<NodeId, uint32_t>> sender_clocks() const;

  // Restarting a shard from a checkpoint (recovery). The new core, made over the restored
  // store, takes the senders' current clocks (which the senders know: they announce them
  // when they reconnect), so that their next pushes follow on; the updates between the
  // checkpoint and the crash are lost (the driver counts them). Fails with invalid_input for
  // a node that is not a sender.
  Status resume_clocks(const std::vector<std::pair<NodeId, uint32_t>>& clocks);
  // The pulls waiting for the gate, removed from the core (a restarted shard gets them
  // again: the workers re-send pulls that a crashed shard never answered).
  std::deque<PullRequest> take_waiting();

  // Restarting a shard in a new process over its durable store (a `colony ps` killed and
  // started again). Nothing the crashed process knew survives but the committed rows, so the
  // core starts over with its peers: every node that talks to it sends a ClockAdvance with
  // `resync` set (its clock before its oldest unacknowledged push), then re-sends its
  // unacknowledged pushes and clock advances and its unanswered pulls, in order. Until a node
  // has resynced, whatever else it sends is dropped (counted in dropped_before_resync: it is
  // all re-sent), and pulls wait until every sender has resynced. Pushes the crashed process
  // had applied but not acknowledged come again. Over a store that commits each sender's clock
  // with its rows (RowStore::stage_clock: RocksDB), a sender's first resync sets its clock to
  // the later of the resync's and the committed one, so those pushes are acknowledged as
  // duplicates and applied exactly once (a clock advance without rows is committed too). A
  // resync ahead of the committed clock names acknowledged steps the store lost (stats().
  // pushes_lost: a store that is not durable, or a tiered store without its push log). A later
  // resync is an ordinary clock advance (it never moves a clock back). Once every sender is done,
  // pulls from anyone are answered (the coordinator's evaluation). Call before the first message.
  void begin_resync();
  // Failover (ps/replication.h): this core, a backup that applied every push and clock advance
  // its primary forwarded, becomes the shard. As begin_resync, except that each sender's clock as
  // this core applied it stands for the committed one (so what it already applied is a duplicate
  // when re-sent), and the parts of a push whose last part never came are dropped (the sender
  // re-sends the whole push). Call before the first message of a client.
  void begin_takeover();
  // The store (for the driver: flush, checkpoint, statistics). Not for changing rows.
  RowStore& store() { return *store_; }
  // Calls f(key, parameters) for every row held. Fails as RowStore::for_each.
  template <class F>
  [[nodiscard]] Status for_each_row(F&& f) const {
    return store_->for_each(
        [&](uint64_t key, const float* row) { f(key, std::span<const float>(row, width_)); });
  }
  const ShardConfig& config() const { return config_; }

 private:
  ShardCore(const ShardConfig& config, std::unique_ptr<Optimizer> optimizer, ShardMap map,
            std::unique_ptr<RowStore> store);
  void on_pull(const PullRequest& r, Outbox& out);
  void on_push(const PushRequest& r, Outbox& out);
  // on_push, with the named pull's keys given (`filled`, on_filled_push) or looked up (null).
  void take_push(const PushRequest& r, const std::vector<uint64_t>* filled, Outbox& out);
  void on_clock(const ClockAdvance& r, Outbox& out);
  void on_hint(const PullHint& h);
  // Accepts a new clock from a sender: false (with a PsError queued) if it is out of order or
  // from an unknown sender, and sets `duplicate` when it is a retry.
  bool advance(const MessageHeader& h, uint32_t clock, bool& duplicate, Outbox& out);
  // Whether step `clock` of `sender` is one this core applied already: a message of it is a late
  // copy, or one sent again after a resync, and must not touch what is open for the sender now
  // (its push in parts, a push refused for its keys).
  bool applied_already(NodeId sender, uint32_t clock) const {
    auto it = clocks_.find(sender);
    return it != clocks_.end() && clock <= it->second;
  }
  bool stale(const MessageHeader& h, Outbox& out);
  // The first of `keys` that does not belong to this shard under its map, or nullptr.
  const uint64_t* foreign_key(const std::vector<uint64_t>& keys) const;
  // False (with a PsError queued) when a key does not belong to this shard under its map.
  bool owns_all(const MessageHeader& h, const std::vector<uint64_t>& keys, Outbox& out);
  bool may_answer(const PullRequest& r) const;
  // While resyncing: handles a resync, and says whether any other message may be handled.
  bool admit_while_resyncing(const PsMessage& message, Outbox& out);
  // A resync from r's sender (on_clock, follow_resync) while parts of its push are kept: a late
  // copy of one sent before those parts (a lower request id: the simulator's network duplicates
  // messages) changes nothing and returns false; a newer one (a client resyncing again after the
  // first resync's parts were lost on the way, which FIFO links do not do), or the coordinator's
  // word that the sender is done (clock_done, request id 0), drops them, as the sender sends that
  // push whole again after it (KvClient::resync) or never, and returns true. Without kept parts:
  // true.
  bool resync_over_parts(const ClockAdvance& r);
  void answer(const PullRequest& r, Outbox& out);
  void release_waiting(Outbox& out);
  // Removes the rows not updated during the last evict_after steps.
  void evict_stale_rows();
  // The row of `key`, created (initialised) when it has none.
  float* row(uint64_t key) { return initialised(key, store_->find_or_insert(key)); }
  // The row of `found` (RowStore::find_or_insert's answer for `key`), initialised if it was
  // inserted.
  float* initialised(uint64_t key, std::pair<float*, bool> found);
  // The row of `key` for a pull: found, or created when admission allows; nullptr when the
  // key is not admitted yet (counts the sighting).
  float* admitted_row(uint64_t key);
  // The row of `key` for a push: nullptr when the key has no row (not admitted).
  float* existing_row(uint64_t key);
  // False (keeping the first failure in error_) when `s` is an error.
  bool store_ok(Status s);

  ShardConfig config_;
  std::unique_ptr<Optimizer> optimizer_;
  ShardMap map_;
  size_t width_;
  size_t state_;
  std::unique_ptr<RowStore> store_;
  std::unordered_map<NodeId, uint32_t> clocks_;
  uint32_t min_clock_ = 0;
  std::deque<PullRequest> waiting_;
  // The pulls and keys of waiting_, by sender.
  struct Held {
    uint64_t pulls = 0;
    uint64_t keys = 0;
  };
  std::unordered_map<NodeId, Held> held_;
  // The keys and rows of recent pulls, by writer and step: a worker pushes exactly the keys it
  // pulled, in the same order, so the push may leave the keys out (PushRequest::keys_of_pull),
  // and can update those rows without looking them up again (a store with stable rows). A push
  // whose keys are not a pull's, in order, is looked up key by key.
  struct AnsweredPull {
    uint32_t clock;
    NodeId sender;  // who pulled (the writer's replicas may pull under its name)
    uint64_t request_id;
    std::vector<uint64_t> keys;
    std::vector<float*> rows;  // empty when not kept (unstable rows, or dropped at an eviction)
  };
  // Keeps the keys of a pull being answered for its push; the entry, to fill its rows, or
  // nullptr when it is over answered_rows_max.
  AnsweredPull* remember(const PullRequest& r);
  // The answered pull a push that leaves its keys out names, or nullptr.
  const AnsweredPull* pull_named_by(const PushRequest& r) const;
  // A push whose keys are known: checked, kept as a part, or applied.
  void apply_push(const PushRequest& r, Outbox& out);
  struct Answered {
    std::deque<AnsweredPull> pulls;
    uint64_t rows = 0;  // the sum of pulls' keys.size(), at most answered_rows_max
  };
  std::unordered_map<NodeId, Answered> answered_;
  static constexpr uint32_t answered_steps_max = 8;  // steps kept, per writer
  ShardStats stats_;
  RowNotFinite last_row_not_finite_;
  std::vector<float> saved_row_;                     // Optimizer::apply_finite's scratch
  std::vector<std::pair<float*, bool>> write_rows_;  // apply_push: RowStore::load_for_write's rows
  Status error_;
  std::unique_ptr<CountMinSketch> sketch_;  // only with admission
  uint32_t last_checkpoint_ = 0;
  size_t stamp_ = 0;  // 1 with eviction: the row's last-update clock after its state
  uint32_t next_eviction_scan_ = 0;
  std::vector<uint64_t> evict_keys_;
  std::optional<uint32_t> checkpoint_due_;
  // Since begin_resync or begin_takeover, until every sender has resynced: the checkpoint steps
  // the minimum then passes are skipped (checkpoint_due).
  bool skip_cut_after_resync_ = false;
  bool resyncing_ = false;               // see begin_resync
  bool senders_resynced_ = false;        // every sender resynced since (release_waiting keeps it)
  std::unordered_set<NodeId> resynced_;  // nodes whose resync arrived
  std::map<uint64_t, uint32_t> durable_clocks_;  // the store's committed clocks at the restart
  // Pushes in parts whose last part has not come, by sender (PushRequest::more).
  struct PushParts {
    uint32_t clock = 0;
    uint64_t bytes = 0;
    std::vector<PushRequest> parts;
    std::unordered_set<uint64_t> pulls_named;  // the parts' keys_of_pull (those not 0)
  };
  std::unordered_map<NodeId, PushParts> parts_;
  // Senders whose push left its keys out and was refused for it (PsErrorCode::keys_unknown), and
  // that push's clock: the rest of its parts that leave their keys out are dropped.
  std::unordered_map<NodeId, uint32_t> keys_dropped_;
};

}  // namespace colony
