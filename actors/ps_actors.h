// CAF glue for the parameter-server protocol: inspect functions for the messages of
// ps/protocol.h, the atoms, and the typed actor interfaces of shards, workers, aggregators
// and the coordinator. Included only by actors/ sources: CAF headers are heavy.
#pragma once

#include <caf/all.hpp>

#include "ps/cluster_protocol.h"
#include "ps/protocol.h"

namespace colony {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MessageHeader& x) {
  return f(caf::meta::type_name("MessageHeader"), x.sender, x.request_id, x.map_version);
}
// A FloatBuffer travels (and prints) as its floats; a loaded one owns them.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FloatBuffer& x) {
  std::vector<float> floats;
  if constexpr (Inspector::reads_state) floats.assign(x.begin(), x.end());
  return f(floats, caf::meta::load_callback([&]() -> caf::error {
             x = FloatBuffer(std::move(floats));
             return caf::none;
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PullRequest& x) {
  return f(caf::meta::type_name("PullRequest"), x.header, x.clock, x.writer, x.keys);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PullReply& x) {
  return f(caf::meta::type_name("PullReply"), x.header, x.min_clock, x.values, x.format, x.scales);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PushRequest& x) {
  return f(caf::meta::type_name("PushRequest"), x.header, x.clock, x.keys, x.grads, x.format,
           x.more, x.scales, x.keys_of_pull);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PushAck& x) {
  return f(caf::meta::type_name("PushAck"), x.header);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ClockAdvance& x) {
  return f(caf::meta::type_name("ClockAdvance"), x.header, x.clock, x.resync, x.acked_push);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardMapUpdate& x) {
  return f(caf::meta::type_name("ShardMapUpdate"), x.header, x.version, x.shards,
           x.vnodes_per_shard, x.seed);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PsError& x) {
  return f(caf::meta::type_name("PsError"), x.header, x.code, x.message);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DenseReduce& x) {
  return f(caf::meta::type_name("DenseReduce"), x.header, x.step, x.samples, x.values);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DenseBroadcast& x) {
  return f(caf::meta::type_name("DenseBroadcast"), x.header, x.step, x.samples, x.values);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PullHint& x) {
  return f(caf::meta::type_name("PullHint"), x.header, x.keys);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ReplicaAck& x) {
  return f(caf::meta::type_name("ReplicaAck"), x.header, x.seq);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardSummary& x) {
  return f(caf::meta::type_name("ShardSummary"), x.table_rows, x.table_bytes, x.pulls_deferred,
           x.rows_not_admitted, x.updates_dropped, x.rows_evicted, x.pushes_lost,
           x.updates_not_finite);
}

using start_atom = caf::atom_constant<caf::atom("start")>;
using summary_atom = caf::atom_constant<caf::atom("summary")>;
using quiesce_atom = caf::atom_constant<caf::atom("quiesce")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using restarted_atom = caf::atom_constant<caf::atom("restarted")>;
using backup_lost_atom = caf::atom_constant<caf::atom("backuplost")>;
using promote_atom = caf::atom_constant<caf::atom("promote")>;
using applied_atom = caf::atom_constant<caf::atom("applied")>;
using add_backup_atom = caf::atom_constant<caf::atom("addbackup")>;

// A parameter-server shard: pulls, pushes, clocks and pull hints in; replies go out to the
// senders.
// `quiesce` answers once everything queued before it has been handled; `flush` writes the rows
// its store holds only in memory (a tiered store's cache) to disk and answers how that went;
// `summary` answers with the shard's table size and counters (a ShardSummary of this one shard).
// A replicated shard's primary also takes its backups' acknowledgements (ReplicaAck),
// `backup_lost` (a backup node the coordinator declared lost: the primary stops waiting for it)
// and `add_backup` (a backup node placed on another member, reached through the actor given: the
// primary sends it a copy, ReplicaCopy parts, and forwards to it from then on).
using shard_actor = caf::typed_actor<
    caf::reacts_to<PullRequest>, caf::reacts_to<PushRequest>, caf::reacts_to<ClockAdvance>,
    caf::reacts_to<PullHint>, caf::reacts_to<ReplicaAck>, caf::reacts_to<backup_lost_atom, NodeId>,
    caf::reacts_to<add_backup_atom, NodeId, caf::actor>, caf::replies_to<quiesce_atom>::with<bool>,
    caf::replies_to<flush_atom>::with<Status>, caf::replies_to<summary_atom>::with<ShardSummary>>;

// A backup of a replicated shard (ps/replication.h): its primary's forwards in, acknowledgements
// out; `quiesce`, `flush` and `summary` as a shard's (its summary counts its rows as a backup's).
// `promote` (failover): the backup is spent from then on, its ShardBackup the caller's to promote
// once the answer is in; forwards still arriving (from the lost primary) are dropped. `applied`
// answers how far it applied its primary's forwards, once it has handled what came before. A
// backup placed on a ps that rejoined takes its copy first (ReplicaCopy parts, BackupCopy).
using backup_actor = caf::typed_actor<
    caf::reacts_to<ReplicaForward>, caf::reacts_to<ReplicaCopy>,
    caf::replies_to<promote_atom>::with<bool>, caf::replies_to<applied_atom>::with<uint64_t>,
    caf::replies_to<quiesce_atom>::with<bool>, caf::replies_to<flush_atom>::with<Status>,
    caf::replies_to<summary_atom>::with<ShardSummary>>;

// A worker replica: started by the coordinator, then driven by the replies it gets.
// `restarted` (shard nodes): those shards restarted over durable stores; re-send what they lost.
using worker_actor = caf::typed_actor<caf::reacts_to<start_atom>, caf::reacts_to<PullReply>,
                                      caf::reacts_to<PushAck>, caf::reacts_to<ShardMapUpdate>,
                                      caf::reacts_to<PsError>, caf::reacts_to<DenseBroadcast>,
                                      caf::reacts_to<restarted_atom, std::vector<NodeId>>>;

// A node aggregator (hierarchical push; the dense all-reduce of a deep model).
using aggregator_actor = caf::typed_actor<
    caf::reacts_to<PullRequest>, caf::reacts_to<PullReply>, caf::reacts_to<PushRequest>,
    caf::reacts_to<ClockAdvance>, caf::reacts_to<PushAck>, caf::reacts_to<ShardMapUpdate>,
    caf::reacts_to<PsError>, caf::reacts_to<DenseReduce>, caf::reacts_to<DenseBroadcast>,
    caf::reacts_to<restarted_atom, std::vector<NodeId>>>;

// The coordinator: `run` (the workers to start, how many reports to wait for) starts the
// workers and is answered when every worker and aggregator has finished (an ok Status) or one
// has failed (its error, with its code: bad input, a store's io error, ...).
using coordinator_actor =
    caf::typed_actor<caf::replies_to<run_atom, std::vector<caf::actor>, uint32_t>::with<Status>,
                     caf::reacts_to<done_atom, NodeId, Status>>;

}  // namespace colony

// Errors between actors are our own Status (code and message); they never leave the process
// (the wire carries its own error messages), so no inspect function is needed.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(colony::Status)
// A replica forward holds a std::variant, which CAF 0.17 cannot inspect; it travels between
// processes in our own codec (actors/envelope.h), never in CAF's.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(colony::ReplicaForward)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(colony::ReplicaCopy)
