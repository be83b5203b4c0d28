// Replication in the simulator (SimOptions::replicas > 1), as the daemons are to run it: each
// shard's primary (ShardPrimary over its ShardCore) forwards what its core takes to its backups
// (ShardBackup) on the next ps hosts, over the modelled network, one FIFO connection per pair
// of hosts; a backup applies each forward on its host's time and sends its acknowledgement
// back; the primary releases the replies its backups have. A crashed ps host loses its primaries
// and its backups: when the coordinator declares it lost (NodesLost), the other primaries stop
// waiting for the backups it kept, and when it joins again the most advanced live backup of each
// of its shards becomes that shard's core on it (ShardBackup::promote); its member is Ready once
// the backup's rows have crossed the network to it, and the clients resync with it as with a
// durable store's restart. Then every shard whose backup was lost or promoted gets a new one, a
// copy of its live primary (rebuild_backups), on the host the lost one had, once that host's
// process is back: so a shard survives any number of crashes, K - 1 at a time.
#include <algorithm>

#include "sim/full_sim.h"

namespace colony::sim::detail {

namespace {

uint64_t forward_bytes(const ReplicaForward& f) {
  uint64_t bytes = header_bytes + 16;  // seq and committed
  if (const auto* push = std::get_if<PushRequest>(&f.message))
    bytes += 8 * push->keys.size() + row_bytes(push->format, push->grads.size()) +
             4 * push->scales.size();
  return bytes;
}

}  // namespace

VirtualNanos FullSim::replica_transfer(uint32_t from_host, uint32_t to_host, uint64_t bytes,
                                       uint64_t connection, VirtualNanos sent) {
  VirtualNanos arrival = net_.transfer(from_host, to_host, bytes, sent < 0 ? now() : sent);
  ++result_.messages;
  result_.bytes += bytes;
  VirtualNanos& last = pair_last_[connection];  // FIFO
  arrival = std::max(arrival, last);
  last = arrival;
  return arrival;
}

void FullSim::replicate(uint32_t shard, std::vector<ReplicaForward>& forwards, VirtualNanos at) {
  if (forwards.empty()) return;
  const uint32_t generation = cores_[shard].generation;
  for (ReplicaForward& f : forwards)
    for (uint32_t slot : replica_sets_[shard]) {
      if (slot == no_slot) continue;
      const uint32_t backup_generation = backups_[slot].generation;
      q_.schedule(at, [this, shard, generation, slot, backup_generation, f]() mutable {
        send_forward(shard, generation, slot, backup_generation, std::move(f));
      });
    }
  forwards.clear();
}

void FullSim::send_forward(uint32_t shard, uint32_t generation, uint32_t slot,
                           uint32_t backup_generation, ReplicaForward f) {
  const Core& c = cores_[shard];
  const uint32_t hf = c.host, ht = backups_[slot].host;
  if (!c.live() || c.generation != generation || hosts_[hf].down) return;  // the sender died
  if (const VirtualNanos heal = healed_at(hf, ht); heal > now()) {
    q_.schedule(heal, [this, shard, generation, slot, backup_generation, f]() mutable {
      send_forward(shard, generation, slot, backup_generation, std::move(f));
    });
    return;
  }
  // One connection from the primary to each backup, keyed apart from the cores' pairs.
  const VirtualNanos arrival = replica_transfer(
      hf, ht, forward_bytes(f), hash_combine(0x4e971ca, (uint64_t{shard} << 32) | slot));
  q_.schedule(arrival, [this, shard, generation, slot, backup_generation, f = std::move(f)] {
    forward_arrives(shard, generation, slot, backup_generation, f);
  });
}

void FullSim::forward_arrives(uint32_t shard, uint32_t generation, uint32_t slot,
                              uint32_t backup_generation, const ReplicaForward& f) {
  Backup& b = backups_[slot];
  if (!b.core || b.generation != backup_generation || hosts_[b.host].down || hosts_[b.host].exited)
    return;
  const uint64_t rows_before = b.core->core().stats().rows_pushed;
  auto ack = b.core->on_forward(f);
  mix(0xf0a4d, slot);
  if (!ack) {
    violation(fmt::format("backup {} of shard {} refused a forward at t={:.6f}s: {}", slot, shard,
                          double(now()) / 1e9, ack.status().message()));
    return;
  }
  // The backup is a core of its host like the others: with a CPU pool, it holds one to apply.
  const uint64_t rows = b.core->core().stats().rows_pushed - rows_before;
  VirtualNanos start = std::max(now(), b.busy_until);
  std::vector<VirtualNanos>& cpus = hosts_[b.host].cpu_free;
  auto cpu = std::min_element(cpus.begin(), cpus.end());
  if (cpu != cpus.end()) start = std::max(start, *cpu);
  b.busy_until = start + static_cast<VirtualNanos>(double(rows) * o_.compute.shard_ns_per_row);
  if (cpu != cpus.end()) *cpu = b.busy_until;
  q_.schedule(b.busy_until, [this, shard, generation, slot, backup_generation, a = *ack] {
    if (backups_[slot].generation != backup_generation || !backups_[slot].core) return;
    send_ack(shard, generation, slot, a);
  });
}

void FullSim::send_ack(uint32_t shard, uint32_t generation, uint32_t slot, ReplicaAck ack) {
  const uint32_t hf = backups_[slot].host, ht = cores_[shard].host;
  if (hosts_[hf].down || hosts_[hf].exited) return;
  if (const VirtualNanos heal = healed_at(hf, ht); heal > now()) {
    q_.schedule(heal, [this, shard, generation, slot, ack] {
      if (backups_[slot].core) send_ack(shard, generation, slot, ack);
    });
    return;
  }
  const VirtualNanos arrival =
      replica_transfer(hf, ht, header_bytes, hash_combine(0xac4, (uint64_t{slot} << 32) | shard));
  q_.schedule(arrival,
              [this, shard, generation, slot, ack] { ack_arrives(shard, generation, slot, ack); });
}

void FullSim::ack_arrives(uint32_t shard, uint32_t generation, uint32_t slot, ReplicaAck ack) {
  Core& c = cores_[shard];
  if (!c.live() || !c.primary || c.generation != generation) return;  // to a process that died
  const auto& set = replica_sets_[shard];
  const auto it = std::find(set.begin(), set.end(), slot);
  if (it == set.end()) return;  // no longer one of its backups
  Outbox out;
  if (Status s = c.primary->on_ack(static_cast<uint32_t>(it - set.begin()), ack, out); !s.ok())
    return;  // a backup the primary was told is lost: its late acknowledgement
  released(c, out);
}

void FullSim::released(Core& c, Outbox& out) {
  if (out.empty()) return;
  check_shard_output(c, nullptr, out);
  emit(c.index, out, std::max(now(), c.busy_until));
}

void FullSim::drop_backups_on(uint32_t host) {
  for (Backup& b : backups_)
    if (b.host == host) b.core.reset();
}

void FullSim::backups_lost(uint32_t host, uint32_t lost_host) {
  // The coordinator declared that member lost: its backups are out of the job (none of them may be
  // promoted: their primaries no longer wait for them), whether or not its process still runs.
  drop_backups_on(lost_host);
  for (uint32_t s = 0; s < o_.ps; ++s) {
    Core& c = cores_[s];
    if (c.host != host || !c.live() || !c.primary) continue;
    Outbox out;
    const auto& set = replica_sets_[s];
    for (uint32_t i = 0; i < set.size(); ++i)
      if (set[i] != no_slot && backups_[set[i]].host == lost_host)
        (void)c.primary->on_backup_lost(i, out);
    released(c, out);
  }
}

Status FullSim::promote(uint32_t shard) {
  Core& c = cores_[shard];
  std::vector<uint32_t> live;
  // A rebuilt backup whose rows are still on their way holds nothing yet: not a replica.
  for (uint32_t slot : replica_sets_[shard])
    if (slot != no_slot && backups_[slot].core && backups_[slot].rows_at <= now())
      live.push_back(slot);
  if (live.empty())
    return Status::not_found(fmt::format(
        "shard {} lost every one of its {} replicas: its rows are gone", shard, o_.replicas));
  // The most advanced: a backup ahead of the promoted one would take its forwards for others.
  const uint32_t best = *std::max_element(live.begin(), live.end(), [&](uint32_t a, uint32_t b) {
    return backups_[a].core->applied() < backups_[b].core->applied();
  });
  Backup& from = backups_[best];
  check_promoted(shard, *from.rows);
  copies_.emplace_back(from.host, uint64_t{from.rows->size()} * from.rows->row_floats() * 4);
  ShardBackup::Promotion p = from.core->promote(static_cast<uint32_t>(live.size() - 1));
  from.core.reset();
  ++from.generation;
  c.shard = std::move(p.core);
  c.primary = std::move(p.primary);
  durable_[shard] = from.rows;  // its commits are now the shard's
  acked_commits_[shard] = durable_[shard]->commits();
  shadows_[shard].restart(durable_[shard]->clocks());
  std::erase(live, best);
  replica_sets_[shard] = std::move(live);
  mix(0x940e, hash_combine(shard, best));
  replicate(shard, p.resend, now());
  return Status();
}

void FullSim::rebuild_backups() {
  if (o_.replicas < 2 || job_over_) return;
  const uint32_t per_shard = o_.replicas - 1;
  for (uint32_t s = 0; s < o_.ps; ++s) {
    Core& c = cores_[s];
    if (!c.live() || !c.primary || hosts_[c.host].down) continue;
    for (uint32_t slot = s * per_shard; slot < (s + 1) * per_shard; ++slot) {
      Backup& b = backups_[slot];
      if (b.core || hosts_[b.host].down || hosts_[b.host].exited) continue;
      const NodeId there = b.host - o_.nodes;  // the shard of that ps host
      COLONY_ASSERT(cores_[there].host == b.host, "ps host {} holds shard {}", b.host, there);
      if (!cores_[there].live() || member_gone(b.host)) continue;
      // The one it replaces is gone: the primary stops waiting for it (if it still did).
      std::vector<uint32_t>& set = replica_sets_[s];
      Outbox out;
      for (uint32_t i = 0; i < set.size(); ++i)
        if (set[i] == slot) {
          (void)c.primary->on_backup_lost(i, out);
          set[i] = no_slot;
        }
      b.rows = durable_[s]->copy();  // the primary's rows, as it committed them
      auto core = c.shard->replica(open_sim_store(b.rows, true));
      COLONY_ASSERT(core.ok(), "{}", core.status().message());
      ShardPrimary::NewBackup added = c.primary->add_backup();
      COLONY_ASSERT(added.backup == set.size(), "backup {} of {}", added.backup, set.size());
      auto backup =
          ShardBackup::rebuilt(std::move(core.value()), std::move(added), replication_faults_);
      COLONY_ASSERT(backup.ok(), "{}", backup.status().message());
      b.core = std::move(backup.value());
      ++b.generation;
      set.push_back(slot);
      // It applies nothing before the rows are there, which leave once the primary has them (a
      // promoted one gets them from its backup first); the primary holds its replies until then.
      b.rows_at = b.busy_until =
          replica_transfer(c.host, b.host, uint64_t{b.rows->size()} * b.rows->row_floats() * 4,
                           hash_combine(0xc09f, (uint64_t{c.host} << 32) | b.host),
                           std::max(now(), primary_rows_at_[s]));
      ++result_.backups_rebuilt;
      mix(0x4eb1, slot);
      timeline(fmt::format("backup of shard {} rebuilt", s), "fault", b.host, 0, now(), -1);
      released(c, out);
    }
  }
}

void FullSim::check_promoted(uint32_t shard, const DurableRows& rows) {
  for (const auto& [sender, acked] : acked_clocks_[shard]) {
    auto it = rows.clocks().find(sender);
    const uint32_t held = it == rows.clocks().end() ? 0 : it->second;
    if (held >= acked) continue;
    result_.acked_commits_lost += acked - held;
    violation(fmt::format(
        "acknowledged push lost: shard {} restarted at t={:.6f}s from a backup that holds node "
        "{}'s pushes up to step {}, but it had acknowledged step {}",
        shard, double(now()) / 1e9, sender, held, acked));
  }
}

void FullSim::check_replicas() {
  for (const Backup& b : backups_) {
    const Core& c = cores_[b.shard];
    if (!b.core || !c.live() || !c.primary || c.primary->held() > 0) continue;
    // Every row the backup holds, the primary holds alike (a row only the primary holds was
    // created by a pull, at its initial value).
    const DurableRows& primary = *durable_[b.shard];
    if (b.core->applied() != c.primary->last_seq()) continue;  // forwards still in flight
    for (const auto& [key, row] : b.rows->rows()) {
      const std::vector<float>* mine = primary.row(key);
      if (!mine || *mine != row) {
        violation(
            fmt::format("replica diverged: backup slot {} of shard {} holds key {:#x} "
                        "unlike its primary",
                        &b - backups_.data(), b.shard, key));
        break;
      }
    }
  }
}

}  // namespace colony::sim::detail
