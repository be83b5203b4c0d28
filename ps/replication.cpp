#include "ps/replication.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include <fmt/format.h>

namespace colony {

namespace {

Status check_replicable(const ShardCore* core) {
  if (!core) return Status::invalid_input("replication: no shard core");
  if (core->config().admit_after > 1)
    return Status::invalid_input(
        "replication: feature admission (admit_after > 1) counts pulls, which only the primary "
        "sees; a replicated shard admits every key");
  if (core->config().evict_after > 0)
    return Status::invalid_input(
        "replication: stale-row eviction (evict_after) stamps rows with the slowest sender's "
        "clock, which a promoted primary counts as 0 for the senders it has not resynced yet "
        "and its backups do not: the replicas' rows would differ");
  return Status();
}

// What a kept push part counts against replica_log_bytes_max (and a copy's tail).
uint64_t push_kept_bytes(const PushRequest& push) {
  return replica_forward_overhead_bytes + push.keys.size() * sizeof(uint64_t) +
         (push.grads.size() + push.scales.size()) * sizeof(float);
}

// What a kept forward counts against replica_log_bytes_max.
uint64_t forward_kept_bytes(const ReplicaForward& f) {
  if (const auto* push = std::get_if<PushRequest>(&f.message)) return push_kept_bytes(*push);
  return replica_forward_overhead_bytes;
}

}  // namespace

Expected<std::unique_ptr<ShardPrimary>> ShardPrimary::make(ShardCore& core, uint32_t backups,
                                                           ReplicationFaults faults) {
  if (Status s = check_replicable(&core); !s.ok()) return s;
  return std::unique_ptr<ShardPrimary>(new ShardPrimary(core, backups, faults));
}

ShardPrimary::ShardPrimary(ShardCore& core, uint32_t backups, ReplicationFaults faults,
                           uint64_t seq)
    : core_(&core), faults_(faults), seq_(seq), acked_(backups, 0), lost_(backups, false) {}

void ShardPrimary::on_message(const PsMessage& message, Outbox& out,
                              std::vector<ReplicaForward>& forwards, bool discard_replies) {
  std::optional<std::variant<PushRequest, ClockAdvance>> forward;
  bool filled = false;
  if (backups_live() > 0) {
    if (const auto* push = std::get_if<PushRequest>(&message)) {
      // The backups never saw the pull a push may name: it goes with its keys, still naming the
      // pull (ShardCore takes the keys as the pull's: the checks on naming a pull stay the same).
      // One whose keys the core does not know goes as it is: the backups refuse or drop it just
      // as the core does.
      const std::vector<uint64_t>* keys = push->keys_of_pull ? core_->push_keys(*push) : nullptr;
      PushRequest copy = *push;
      if (keys) {
        copy.keys = *keys;
        filled = true;
      }
      forward = std::move(copy);
    } else if (const auto* clock = std::get_if<ClockAdvance>(&message)) {
      forward = *clock;
    }
  }
  const uint64_t dropped = core_->stats().dropped_before_resync;
  scratch_.clear();
  core_->on_message(message, scratch_);
  if (auto* clock = forward ? std::get_if<ClockAdvance>(&*forward) : nullptr;
      clock && clock->resync) {
    // A resync sets the sender's clock as the core decides (a promoted core: to the later of the
    // one announced and the one it applied; otherwise one step at most): the backups follow the
    // clock it set (ShardCore::follow_resync). One from a node that is not a sender changes
    // nothing: not forwarded.
    const std::optional<uint32_t> now = core_->sender_clock(clock->header.sender);
    if (now && clock->header.map_version == core_->config().map.version)
      clock->clock = *now;
    else
      forward.reset();
  }
  // A promoted core drops what a sender sends before its resync (ShardCore::begin_takeover), and
  // the sender sends it again after: a backup, which is not resyncing, would apply it now, at
  // another place in the order than the primary later does.
  if (forward && core_->stats().dropped_before_resync == dropped) {
    ++seq_;
    const MessageHeader header{core_->config().id, seq_, core_->config().map.version};
    forwards.push_back({header, seq_, acked_by_all(), filled, std::move(*forward)});
    unacked_.push_back(forwards.back());
  }
  if (!discard_replies)
    for (Outgoing& reply : scratch_) held_.push_back({seq_, std::move(reply)});
  release(out);
}

ShardPrimary::NewBackup ShardPrimary::add_backup() {
  acked_.push_back(seq_);
  lost_.push_back(false);
  return {backups() - 1, seq_, {unacked_.begin(), unacked_.end()}};
}

Status ShardPrimary::on_ack(uint32_t backup, const ReplicaAck& ack, Outbox& out) {
  if (backup >= acked_.size())
    return Status::invalid_input("replication: an acknowledgement from backup " +
                                 std::to_string(backup) + ", which is not a backup of this shard");
  if (ack.seq > seq_)
    return Status::invalid_input("replication: backup " + std::to_string(backup) +
                                 " acknowledged forward " + std::to_string(ack.seq) +
                                 ", past the last one sent (" + std::to_string(seq_) + ")");
  // Sent before its member was declared lost (or left), and still on the way then.
  if (lost_[backup]) return Status();
  acked_[backup] = std::max(acked_[backup], ack.seq);
  release(out);
  return Status();
}

Status ShardPrimary::on_backup_lost(uint32_t backup, Outbox& out) {
  if (backup >= acked_.size() || lost_[backup])
    return Status::invalid_input("replication: backup " + std::to_string(backup) +
                                 " is not a live backup of this shard");
  lost_[backup] = true;
  release(out);
  return Status();
}

uint32_t ShardPrimary::backups_live() const {
  return static_cast<uint32_t>(std::count(lost_.begin(), lost_.end(), false));
}

uint64_t ShardPrimary::acked_by_all() const {
  uint64_t acked = seq_;
  for (size_t b = 0; b < acked_.size(); ++b)
    if (!lost_[b]) acked = std::min(acked, acked_[b]);
  return acked;
}

void ShardPrimary::release(Outbox& out) {
  const uint64_t all = acked_by_all();
  while (!unacked_.empty() && unacked_.front().seq <= all) unacked_.pop_front();
  const uint64_t acked = faults_.ack_before_backups ? seq_ : all;
  size_t n = 0;
  while (n < held_.size() && held_[n].seq <= acked) out.push_back(std::move(held_[n++].reply));
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
}

Expected<std::unique_ptr<ShardBackup>> ShardBackup::make(std::unique_ptr<ShardCore> core,
                                                         ReplicationFaults faults) {
  if (Status s = check_replicable(core.get()); !s.ok()) return s;
  return std::unique_ptr<ShardBackup>(new ShardBackup(std::move(core), faults));
}

Expected<std::unique_ptr<ShardBackup>> ShardBackup::rebuilt(std::unique_ptr<ShardCore> core,
                                                            ShardPrimary::NewBackup added,
                                                            ReplicationFaults faults) {
  auto made = make(std::move(core), faults);
  if (!made) return made.status();
  uint64_t bytes = 0;
  for (const ReplicaForward& f : added.kept) bytes += forward_kept_bytes(f);
  if (added.kept.size() > replica_log_max || bytes > replica_log_bytes_max)
    return Status::invalid_input("replication: a new backup was handed " +
                                 std::to_string(added.kept.size()) + " forwards (" +
                                 std::to_string(bytes) + " bytes) to keep, over the " +
                                 std::to_string(replica_log_max) + " forwards and " +
                                 std::to_string(replica_log_bytes_max) + " bytes a backup keeps");
  (*made)->applied_ = added.applied;
  (*made)->log_ = std::move(added.kept);
  (*made)->log_bytes_ = bytes;
  return made;
}

Expected<ReplicaAck> ShardBackup::on_forward(const ReplicaForward& forward) {
  // A core whose store failed stops applying anything: acknowledging would tell the primary a
  // push is on this replica when it is not.
  if (!core_->error().ok()) return store_failed(forward.seq);
  if (forward.seq <= applied_) return ReplicaAck{{}, applied_};  // a duplicate
  if (forward.seq != applied_ + 1)
    return Status::invalid_input("replication: forward " + std::to_string(forward.seq) +
                                 " came after forward " + std::to_string(applied_) +
                                 ": the ones between were lost");
  if (forward.committed >= forward.seq)
    return Status::invalid_input("replication: forward " + std::to_string(forward.seq) +
                                 " says every backup had applied up to forward " +
                                 std::to_string(forward.committed) + " before it was sent");
  // What this backup would keep with it: the kept forwards past its `committed` (the log is in
  // seq order), and itself.
  const auto first_kept =
      std::partition_point(log_.begin(), log_.end(),
                           [&](const ReplicaForward& f) { return f.seq <= forward.committed; });
  const size_t keep = static_cast<size_t>(log_.end() - first_kept) + 1;
  if (keep > replica_log_max)
    return Status::invalid_input(
        "replication: forward " + std::to_string(forward.seq) + " would leave " +
        std::to_string(keep) + " forwards uncommitted, over the " +
        std::to_string(replica_log_max) + " a backup keeps: its primary stopped committing");
  uint64_t bytes = log_bytes_ + forward_kept_bytes(forward);
  for (auto f = log_.begin(); f != first_kept; ++f) bytes -= forward_kept_bytes(*f);
  if (bytes > replica_log_bytes_max)
    return Status::invalid_input(
        "replication: forward " + std::to_string(forward.seq) + " would leave " +
        std::to_string(bytes) + " bytes of forwards uncommitted, over the " +
        std::to_string(replica_log_bytes_max) + " a backup keeps: its primary stopped committing");
  const auto* push = std::get_if<PushRequest>(&forward.message);
  // Filled-in keys may be none: the named pull had none, and the primary took the part so.
  if (forward.keys_filled && (!push || push->keys_of_pull == 0))
    return Status::invalid_input("replication: forward " + std::to_string(forward.seq) +
                                 " says it filled in the keys of a push that names no pull");
  scratch_.clear();
  const auto* clock = std::get_if<ClockAdvance>(&forward.message);
  if (clock && clock->resync)  // the clock the primary's core set for it
    core_->follow_resync(*clock, scratch_);
  else if (forward.keys_filled)
    core_->on_filled_push(*push, scratch_);
  else  // the primary answers the clients
    std::visit([&](const auto& m) { core_->on_message(PsMessage(m), scratch_); }, forward.message);
  if (!core_->error().ok()) return store_failed(forward.seq);
  applied_ = forward.seq;
  // Kept until every backup has it (a promotion of this one re-sends them to the others).
  log_.erase(log_.begin(), first_kept);
  log_.push_back(forward);
  log_bytes_ = bytes;
  return ReplicaAck{{}, applied_};
}

Status ShardBackup::store_failed(uint64_t seq) const {
  return Status::io_error("replication: the backup's store failed, so forward " +
                          std::to_string(seq) + " is not applied: " + core_->error().message());
}

ShardBackup::Promotion ShardBackup::promote(uint32_t backups) {
  if (faults_.promote_without_clocks)
    core_->begin_resync();  // the store's committed clocks: none in memory
  else
    core_->begin_takeover();
  Promotion p;
  p.core = std::move(core_);
  p.primary.reset(new ShardPrimary(*p.core, backups, faults_, applied_));
  if (backups > 0) {
    p.resend = std::move(log_);
    log_bytes_ = 0;
    // The others have at least what the oldest kept forward says every backup had.
    const uint64_t committed = p.resend.empty() ? applied_ : p.resend.front().seq - 1;
    std::fill(p.primary->acked_.begin(), p.primary->acked_.end(), committed);
    for (ReplicaForward& f : p.resend) f.committed = committed;
    p.primary->unacked_.assign(p.resend.begin(), p.resend.end());
  }
  return p;
}

}  // namespace colony

namespace colony {

Status send_copy(ShardCore& core, ShardPrimary::NewBackup added, size_t rows_per_part,
                 const std::function<void(ReplicaCopy&&)>& send, uint64_t tail_bytes_per_part) {
  const size_t width = core.store().row_floats();
  if (rows_per_part == 0 || rows_per_part > replica_copy_rows_max)
    return Status::invalid_input(fmt::format("replication: a copy of {} rows a part, outside 1..{}",
                                             rows_per_part, replica_copy_rows_max));
  if (tail_bytes_per_part == 0)
    return Status::invalid_input("replication: a copy's tail of 0 bytes a part");
  const size_t per_part = std::max<size_t>(
      1, std::min(rows_per_part, replica_copy_floats_max / std::max<size_t>(1, width)));
  const ShardConfig& config = core.config();
  uint64_t part = 0;
  ReplicaCopy next;
  auto header = [&] { return MessageHeader{config.id, part++, config.map.version}; };
  next.header = header();
  Status read = core.store().for_each([&](uint64_t key, const float* row) {
    next.keys.push_back(key);
    next.rows.insert(next.rows.end(), row, row + width);
    if (next.keys.size() < per_part) return;
    send(std::move(next));
    next = ReplicaCopy{};
    next.header = header();
  });
  if (!read.ok()) return read;
  if (!next.keys.empty()) {  // the state goes in parts of its own, apart from any rows
    send(std::move(next));
    next = ReplicaCopy{};
    next.header = header();
  }
  // The tail: a part is sent once the next forward or push part would take it past the bytes.
  ReplicaState state = core.replica_state();
  uint64_t bytes = 0;
  auto make_room = [&](uint64_t more) {
    if (bytes > 0 && bytes + more > tail_bytes_per_part) {
      send(std::move(next));
      next = ReplicaCopy{};
      next.header = header();
      bytes = 0;
    }
    bytes += more;
  };
  for (ReplicaForward& f : added.kept) {
    make_room(forward_kept_bytes(f));
    next.kept.push_back(std::move(f));
  }
  for (PushRequest& p : state.parts) {
    make_room(push_kept_bytes(p));
    next.state.parts.push_back(std::move(p));
  }
  state.parts = std::move(next.state.parts);  // what the last part carries of them
  next.last = true;
  next.applied = added.applied;
  next.state = std::move(state);
  send(std::move(next));
  return Status();
}

Expected<std::unique_ptr<BackupCopy>> BackupCopy::make(const ShardConfig& config,
                                                       std::unique_ptr<RowStore> store,
                                                       ReplicationFaults faults) {
  if (!store || store->size() != 0)
    return Status::invalid_input(fmt::format(
        "replication: the store of a new backup of shard {} is not empty", config.shard_index));
  auto floats = ShardCore::row_floats(config);
  if (!floats) return floats.status();
  if (store->row_floats() != *floats)
    return Status::invalid_input(
        fmt::format("replication: the store of a new backup of shard {} keeps rows of {} floats, "
                    "the shard's are {}",
                    config.shard_index, store->row_floats(), *floats));
  auto map = ShardMap::make(config.map);
  if (!map) return map.status();
  return std::unique_ptr<BackupCopy>(
      new BackupCopy(config, std::move(store), std::move(map.value()), faults));
}

Status BackupCopy::check_rows(const ReplicaCopy& part) const {
  const size_t width = store_->row_floats();
  if (part.keys.size() > replica_copy_rows_max || part.rows.size() > replica_copy_floats_max)
    return Status::invalid_input(fmt::format(
        "{} rows of {} floats, over the {} rows and {} floats a part carries", part.keys.size(),
        part.rows.size(), replica_copy_rows_max, replica_copy_floats_max));
  if (part.rows.size() != part.keys.size() * width)
    return Status::invalid_input(
        fmt::format("{} floats for {} rows of {}", part.rows.size(), part.keys.size(), width));
  for (uint64_t key : part.keys)
    if (map_.shard_of(key) != config_.shard_index)
      return Status::invalid_input(
          fmt::format("key {} belongs to shard {}", key, map_.shard_of(key)));
  for (size_t i = 0; i < part.rows.size(); ++i)
    if (!std::isfinite(part.rows[i]))
      return Status::invalid_input(
          fmt::format("the row of key {} is not finite", part.keys[i / width]));
  return Status();
}

Status BackupCopy::on_part(const ReplicaCopy& part) {
  auto refuse = [&](const std::string& why) {
    failed_ = true;
    return Status::invalid_input(
        fmt::format("replication: part {} of the copy for a new backup of shard {}: {}",
                    part.header.request_id, config_.shard_index, why));
  };
  if (failed_) return refuse("the copy failed before");
  if (done()) return refuse("the copy is complete already");
  if (part.header.request_id != parts_)
    return refuse(fmt::format("out of order (part {} is next)", parts_));
  if (Status s = check_rows(part); !s.ok()) return refuse(s.message());
  if (!part.last && (part.applied != 0 || !part.state.clocks.empty() ||
                     !part.state.keys_dropped.empty() || part.state.last_checkpoint != 0))
    return refuse("state only the last part carries, in a part before it");
  // The tail is counted as the backup's log counts forwards, and each sender's push parts at most
  // as the core counts them (shard_push_parts_bytes_max a sender; from_replica_state checks the
  // rest at the last part), and is kept in memory of its own (below): a part's frame is not held
  // for a few bytes of it.
  uint64_t kept_bytes = kept_bytes_;
  for (const ReplicaForward& f : part.kept) kept_bytes += forward_kept_bytes(f);
  if (kept_.size() + part.kept.size() > replica_log_max || kept_bytes > replica_log_bytes_max)
    return refuse(fmt::format(
        "a tail of {} forwards ({} bytes), over the {} forwards and {} bytes a backup keeps",
        kept_.size() + part.kept.size(), kept_bytes, replica_log_max, replica_log_bytes_max));
  if (tail_parts_.size() + part.state.parts.size() > replica_log_max)
    return refuse(fmt::format("a tail of {} push parts, over the {} a copy carries",
                              tail_parts_.size() + part.state.parts.size(), replica_log_max));
  std::unordered_map<NodeId, uint64_t> parts_bytes = parts_bytes_;
  for (const PushRequest& p : part.state.parts) {
    const NodeId sender = p.header.sender;
    if (std::find(config_.senders.begin(), config_.senders.end(), sender) == config_.senders.end())
      return refuse(fmt::format("a push part from node {}, which is not a sender", sender));
    if ((parts_bytes[sender] += push_kept_bytes(p)) > shard_push_parts_bytes_max)
      return refuse(fmt::format("push parts from node {} past the {} bytes a sender's may keep",
                                sender, shard_push_parts_bytes_max));
  }
  if (Status s = store_->load_for_write(part.keys, slots_); !s.ok()) {
    failed_ = true;
    return s;
  }
  const size_t width = store_->row_floats();
  for (size_t i = 0; i < part.keys.size(); ++i) {
    if (!slots_[i].second) {
      (void)store_->commit();  // hands the batch's rows back; the copy is spent
      return refuse(fmt::format("key {} came before", part.keys[i]));
    }
    std::copy_n(part.rows.data() + i * width, width, slots_[i].first);
  }
  if (Status s = store_->commit(); !s.ok()) {
    failed_ = true;
    return s;
  }
  ++parts_;
  rows_ += part.keys.size();
  for (const ReplicaForward& f : part.kept)
    if (auto* push = std::get_if<PushRequest>(&kept_.emplace_back(f).message)) push->grads.vec();
  for (const PushRequest& p : part.state.parts) tail_parts_.emplace_back(p).grads.vec();
  kept_bytes_ = kept_bytes;
  parts_bytes_ = std::move(parts_bytes);
  if (!part.last) return Status();
  const ReplicaState state{part.state.clocks, std::move(tail_parts_), part.state.keys_dropped,
                           part.state.last_checkpoint};
  auto core = ShardCore::from_replica_state(config_, std::move(store_), state);
  if (!core) return refuse(core.status().message());
  auto backup = ShardBackup::rebuilt(
      std::move(core.value()), ShardPrimary::NewBackup{0, part.applied, std::move(kept_)}, faults_);
  if (!backup) return refuse(backup.status().message());
  backup_ = std::move(backup.value());
  return Status();
}

std::unique_ptr<ShardBackup> BackupCopy::take() {
  if (failed_) return nullptr;
  if (backup_) taken_ = true;
  return std::move(backup_);
}

}  // namespace colony
