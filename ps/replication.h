// Primary-backup replication of a shard (`--durability replicated:K`), as two sans-I/O cores.
//
// A replicated shard is one primary and K - 1 backups, each a ShardCore of the same
// configuration in another process. Every message that can change rows or clocks (a push part, a
// clock advance) goes through the primary, which hands it to its core and forwards it, numbered
// in the order the core took it (ReplicaForward::seq, from 1), to every backup; a backup applies
// forwards in that order, so every replica applies the same updates in one order and holds the
// same rows bit for bit. The primary holds back every reply its core makes (acknowledgements,
// pull replies, errors) until each backup has acknowledged every forward made up to that reply
// (ReplicaAck): a client is told a push is done only once the push is on K replicas, and no
// client reads a row that a failover could take back.
//
// Failover: when the primary is lost, the backup that applied the most forwards is promoted
// (ShardBackup::promote): its core resyncs with every sender as a restarted shard does
// (ShardCore::begin_takeover), taking each sender's clock as the backup applied it. The clients
// re-send what was not acknowledged (KvClient::resync); what the backup already had is
// acknowledged as a duplicate. So nothing acknowledged is lost and nothing is applied twice,
// whichever forwards the crash cut off. The other backups stay backups of the new primary: each
// forward says how far every backup has applied (ReplicaForward::committed), a backup keeps the
// forwards past that, and the promoted one sends them again to the others, which apply those they
// lack. So K replicas survive K - 1 failures, one after another.
//
// A push that leaves its keys out (PushRequest::keys_of_pull) names a pull only the primary saw:
// it is forwarded with its keys filled in (ReplicaForward::keys_filled; still naming the pull, so
// that the checks on naming one stay the same), or as it is when the primary does not know them
// (the backups then refuse or drop it as the primary does). A resync (ClockAdvance::resync) is
// forwarded with the clock the primary's core set for its sender, which a promoted core may move
// several steps at once: the backups take that clock (ShardCore::follow_resync) rather than advance
// by one. Pulls and hints are not forwarded: without feature admission a row's initial value
// depends only on its key, so a row a pull created on the primary alone reads the same on a backup.
// Feature admission (admit_after > 1) counts pulls, so it is refused here, and so is stale-row
// eviction (evict_after), whose row stamps and scans follow the slowest sender's clock, which a
// promoted primary reckons differently from its backups until every sender has resynced.
//
// A new backup in place of a lost or promoted one (ShardPrimary::add_backup): the driver copies the
// primary's rows into a store, makes a core over it with ShardCore::replica (in another process:
// ShardCore::from_replica_state, from the rows and the primary core's replica_state(), which it
// checks as the input off the wire it is), and a backup of it with ShardBackup::rebuilt; from
// then on the primary forwards to it as to the others. So a shard that lost a replica gets K
// again, and survives another K - 1 failures.
//
// In another process the copy travels as ReplicaCopy parts (ps/protocol.h): the primary's driver
// makes them with send_copy right after add_backup, ahead of any later forward, and the new
// backup's driver feeds them, in order, to a BackupCopy over an empty store, which builds the
// backup from the last one.
//
// What is not here (the drivers' part, docs/storage.md): placing backups in other processes and
// a coordinator that declares a primary lost and re-routes its shard.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "ps/protocol.h"
#include "ps/shard_core.h"
#include "ps/shard_map.h"

namespace colony {

// The most forwards a backup keeps past the last `committed`. A primary's uncommitted forwards
// are those its backups have not all acknowledged, which its held replies bound to a few per
// sender and step; a primary past this many has stopped advancing `committed` (a fault, or a lie
// from its member) and would grow the backup's log without end.
inline constexpr size_t replica_log_max = 1u << 16;
// The most bytes of forwards a backup keeps past the last `committed`, counted as a shard counts
// the parts of a push it keeps (keys and gradients at 8 and 4 bytes a value, int8 scales, and
// replica_forward_overhead_bytes a forward): the count alone would let a primary that stops
// committing, or its member's key lying, make the backup keep 65,536 pushes of up to
// part_bytes_max each, 2 TiB.
inline constexpr uint64_t replica_log_bytes_max = uint64_t{4} << 30;
inline constexpr uint64_t replica_forward_overhead_bytes = 64;

struct ReplicationFaults {
  // Seeded faults the property tests switch on to show that the invariants catch them. Off
  // everywhere else. The primary releases replies without waiting for its backups.
  bool ack_before_backups = false;
  // A promoted backup forgets the clocks it applied: pushes it had are applied again.
  bool promote_without_clocks = false;
};

class ShardPrimary {
 public:
  // The primary over `core` (which must outlive it; the driver keeps owning it), with `backups`
  // backups (K - 1; 0 replicates nothing and holds no reply). Fails with invalid_input when the
  // core's configuration uses feature admission or stale-row eviction.
  static Expected<std::unique_ptr<ShardPrimary>> make(ShardCore& core, uint32_t backups,
                                                      ReplicationFaults faults = {});

  // A message for the shard: handed to the core; forwards for every backup are appended to
  // `forwards`; the core's replies go to `out` now when no forward is unacknowledged, and
  // otherwise once every backup has acknowledged the last forward made so far (on_ack), in the
  // order the core made them. With `discard_replies` (a copy of a message the network made, in
  // the simulator) the core's replies to it are dropped; it is forwarded all the same. A push or
  // clock advance the core drops because its sender has not resynced yet (a promoted core) is not
  // forwarded: the sender sends it again after its resync, and the backups take it then, in the
  // primary's order.
  void on_message(const PsMessage& message, Outbox& out, std::vector<ReplicaForward>& forwards,
                  bool discard_replies = false);
  // A new backup (re-replication), numbered backups() before the call. It starts from a copy of
  // the core as it is now (ShardCore::replica), which holds every forward made so far: the primary
  // takes it as having acknowledged last_seq(), and holds every later reply for it too. The
  // forwards some other live backup has not acknowledged yet go with it (`kept`), so that a
  // promotion of the new backup can send them to that one (ShardBackup::promote).
  struct NewBackup {
    uint32_t backup = 0;
    uint64_t applied = 0;  // last_seq()
    std::vector<ReplicaForward> kept;
  };
  NewBackup add_backup();

  // Backup `backup` (0..backups()-1) has applied every forward up to `seq`: releases the replies
  // every backup has now acknowledged into `out`. Fails with invalid_input, changing nothing, for
  // an unknown backup or a seq above the last forward; an ack below the backup's last one is an
  // old message, and one from a backup already lost (on_backup_lost) was in flight when it was
  // declared lost: both are ignored.
  Status on_ack(uint32_t backup, const ReplicaAck& ack, Outbox& out);
  // The coordinator declared backup `backup` lost: the primary stops waiting for it, and the
  // replies the other backups have acknowledged go to `out`. Fails with invalid_input for an
  // unknown or already lost backup.
  Status on_backup_lost(uint32_t backup, Outbox& out);

  uint32_t backups() const { return static_cast<uint32_t>(acked_.size()); }
  uint32_t backups_live() const;
  // Whether backup `backup` (< backups()) is live: not declared lost (on_backup_lost).
  bool live(uint32_t backup) const { return !lost_[backup]; }
  // The last forward made (0: none).
  uint64_t last_seq() const { return seq_; }
  // Replies held for the backups' acknowledgements.
  size_t held() const { return held_.size(); }
  ShardCore& core() { return *core_; }
  const ShardCore& core() const { return *core_; }

 private:
  friend class ShardBackup;  // a promotion starts a primary at its backup's place
  ShardPrimary(ShardCore& core, uint32_t backups, ReplicationFaults faults, uint64_t seq = 0);
  // The smallest seq every live backup has acknowledged (last_seq() with none live).
  uint64_t acked_by_all() const;
  void release(Outbox& out);

  ShardCore* core_;
  ReplicationFaults faults_;
  uint64_t seq_ = 0;
  std::vector<uint64_t> acked_;  // by backup
  std::vector<bool> lost_;       // by backup
  struct Held {
    uint64_t seq;  // released once every live backup has acknowledged it
    Outgoing reply;
  };
  std::vector<Held> held_;  // in the order the core made them
  // The forwards past acked_by_all(), in seq order (for add_backup): as many as the backups keep.
  std::deque<ReplicaForward> unacked_;
  Outbox scratch_;
};

class ShardBackup {
 public:
  // A backup over `core` (the primary's configuration, the same node id: a promoted backup
  // answers as the shard). Fails as ShardPrimary::make.
  static Expected<std::unique_ptr<ShardBackup>> make(std::unique_ptr<ShardCore> core,
                                                     ReplicationFaults faults = {});

  // A backup added to a live shard (ShardPrimary::add_backup): `core` is the primary's copy
  // (ShardCore::replica), holding the forwards up to `added.applied`; it keeps `added.kept`
  // for a promotion. Fails as make(), and with invalid_input for more kept forwards than
  // replica_log_max or replica_log_bytes_max allow (`added` may come off the wire).
  static Expected<std::unique_ptr<ShardBackup>> rebuilt(std::unique_ptr<ShardCore> core,
                                                        ShardPrimary::NewBackup added,
                                                        ReplicationFaults faults = {});

  // Applies `forward` when it is the next in order and returns the seq to acknowledge: every
  // forward up to it applied (its header is the driver's to fill in: the backup's node). A
  // forward already applied (a duplicate) is acknowledged again and not applied. Fails with
  // invalid_input, applying nothing, for a forward past the next (one was lost: the backup can no
  // longer follow the primary), keys filled in for a push that names no pull, a
  // `committed` at or past the forward's own seq (no backup can have applied a forward not yet
  // sent), or one that would leave more than replica_log_max forwards, or replica_log_bytes_max
  // bytes of them, kept; and with io_error
  // once its core's store has failed (ShardCore::error(): a write the store refused), this
  // forward unapplied or applied only in part. Either way the backup is then out of date and
  // must not be promoted.
  Expected<ReplicaAck> on_forward(const ReplicaForward& forward);
  // The last forward applied.
  uint64_t applied() const { return applied_; }
  // Forwards kept for a promotion (those past the last ReplicaForward::committed).
  size_t kept() const { return log_.size(); }
  // Their bytes, as replica_log_bytes_max counts them.
  uint64_t kept_bytes() const { return log_bytes_; }
  const ShardCore& core() const { return *core_; }
  // For the driver's upkeep of the store (ShardCore::store: flush); messages go through
  // on_forward only.
  ShardCore& core() { return *core_; }

  struct Promotion {
    std::unique_ptr<ShardCore> core;
    std::unique_ptr<ShardPrimary> primary;  // over `core`
    // For every remaining backup, in order: the forwards it may lack.
    std::vector<ReplicaForward> resend;
  };
  // Failover: this backup becomes the shard's primary, with `backups` backups (the others still
  // live, numbered anew). Its core resyncs with every sender (ShardCore::begin_takeover): each
  // sender's clock is the later of the one it announces and the one this backup applied. The new
  // primary numbers its forwards on from applied(), and holds its replies until every backup has
  // acknowledged `resend`. The driver must promote a backup that applied at least as many
  // forwards as any live one (ask each its applied()): one ahead of it would take the new
  // primary's forwards for those it had. The backup is spent.
  Promotion promote(uint32_t backups);

 private:
  ShardBackup(std::unique_ptr<ShardCore> core, ReplicationFaults faults)
      : core_(std::move(core)), faults_(faults) {}
  Status store_failed(uint64_t seq) const;
  std::unique_ptr<ShardCore> core_;
  ReplicationFaults faults_;
  uint64_t applied_ = 0;
  std::vector<ReplicaForward> log_;  // applied, past the last committed
  uint64_t log_bytes_ = 0;           // of log_
  Outbox scratch_;
};

// The primary's side of a copy across processes: the copy a new backup starts from, `added`
// (ShardPrimary::add_backup, just called) over `core`'s rows as its store holds them now, handed
// to `send` as ReplicaCopy parts numbered from 0, from the shard's node: first the rows, at most
// `rows_per_part` a part (1 to replica_copy_rows_max, fewer where a part would pass
// replica_copy_floats_max floats); then the tail (added.kept, the forwards the other backups
// lack, and the core's unfinished pushes' parts), at most `tail_bytes_per_part` of it a part
// (counted as replica_log_bytes_max counts; a forward or push part larger than that goes alone);
// the last part, which holds no rows, ends the tail and carries the rest of added and of the
// core's replica_state(). Fails with invalid_input for a bad rows_per_part or a
// tail_bytes_per_part of 0, and with the store's io_error when its rows cannot be read (parts may
// have been sent by then: the copy is spent).
Status send_copy(ShardCore& core, ShardPrimary::NewBackup added, size_t rows_per_part,
                 const std::function<void(ReplicaCopy&&)>& send,
                 uint64_t tail_bytes_per_part = replica_copy_tail_bytes);

// The new backup's side: takes a copy's parts in order into an empty store, then builds the
// backup (ShardCore::from_replica_state, ShardBackup::rebuilt). Parts come off the wire: each is
// checked before any of it is written.
class BackupCopy {
 public:
  // Fails with invalid_input when `store` is not empty or its rows are not
  // ShardCore::row_floats(config) floats, and as ShardMap::make for config.map.
  static Expected<std::unique_ptr<BackupCopy>> make(const ShardConfig& config,
                                                    std::unique_ptr<RowStore> store,
                                                    ReplicationFaults faults = {});
  // The next part. Fails with invalid_input for a part after the last, one
  // out of order (its request id is not the number of parts taken), a part over
  // replica_copy_rows_max rows or replica_copy_floats_max floats, rows that are not row_floats
  // floats a key or not finite, a key of another shard or one taken before, a part before the last
  // with state only the last carries (clocks, refusals, a checkpoint, forwards applied), a tail
  // past what a backup keeps (replica_log_max forwards, replica_log_bytes_max bytes of them), push
  // parts past replica_log_max, from a node that is no sender, or past what a core keeps of a
  // sender's (shard_push_parts_bytes_max bytes),
  // or (the last part) a state from_replica_state or kept forwards rebuilt() refuse; with io_error
  // when the store cannot write it. A part's rows and tail are checked before any of them is
  // written or kept, but for a key taken before; the last part's state after its rows are
  // written. After a failure the copy is spent (every later part fails).
  Status on_part(const ReplicaCopy& part);
  // Whether the last part was taken and the backup built.
  bool done() const { return backup_ != nullptr || taken_; }
  // The backup, once, after the last part (nullptr before, after it was taken, and once a part
  // failed).
  std::unique_ptr<ShardBackup> take();
  uint64_t rows() const { return rows_; }
  uint64_t parts() const { return parts_; }

 private:
  BackupCopy(const ShardConfig& config, std::unique_ptr<RowStore> store, ShardMap map,
             ReplicationFaults faults)
      : config_(config), store_(std::move(store)), map_(std::move(map)), faults_(faults) {}
  Status check_rows(const ReplicaCopy& part) const;
  ShardConfig config_;
  std::unique_ptr<RowStore> store_;
  ShardMap map_;
  ReplicationFaults faults_;
  std::unique_ptr<ShardBackup> backup_;
  bool taken_ = false;
  bool failed_ = false;
  uint64_t parts_ = 0;
  uint64_t rows_ = 0;
  std::vector<std::pair<float*, bool>> slots_;
  // The tail taken so far, and the bytes of each as on_part counts them.
  std::vector<ReplicaForward> kept_;
  std::vector<PushRequest> tail_parts_;
  uint64_t kept_bytes_ = 0;
  std::unordered_map<NodeId, uint64_t> parts_bytes_;  // by sender
};

}  // namespace colony
