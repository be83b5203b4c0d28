#include "actors/core_actors.h"

namespace colony {

void route(JobShared& shared, Outbox& out) {
  for (Outgoing& o : out) {
    COLONY_ASSERT(o.to < shared.nodes.size(), "message to unknown node {}", o.to);
    if (shared.observer) shared.observer(o);
    std::visit([&](auto& m) { caf::anon_send(shared.nodes[o.to], std::move(m)); }, o.message);
  }
  out.clear();
}

namespace {

// Tells the coordinator, once, that a core has finished or failed.
template <class Self, class Core>
void report_once(Self* self, bool& reported, const Core& core, JobShared& shared,
                 const coordinator_actor& coordinator, NodeId id) {
  if (reported) return;
  if (!core.error().ok()) {
    shared.fail(core.error());
    self->send(coordinator, done_atom::value, id, core.error());
    reported = true;
  } else if (core.done()) {
    self->send(coordinator, done_atom::value, id, Status());
    reported = true;
  }
}

}  // namespace

shard_actor::behavior_type shard_fun(shard_actor::stateful_pointer<shard_state> self,
                                     std::shared_ptr<ShardCore> core,
                                     std::shared_ptr<JobShared> shared) {
  auto handle = [self, core, shared](PsMessage m) {
    core->on_message(m, self->state.out);
    route(*shared, self->state.out);
    if (!core->error().ok()) shared->fail(core->error());  // the store failed: end the job
    if (shared->after_shard_message) shared->after_shard_message(*core);
  };
  return {
      [handle](PullRequest& m) { handle(std::move(m)); },
      [handle](PushRequest& m) { handle(std::move(m)); },
      [handle](ClockAdvance& m) { handle(std::move(m)); },
      [](quiesce_atom) { return true; },
      [core](flush_atom) { return core->store().flush(); },
      [core](summary_atom) {
        const ShardStats& st = core->stats();
        ShardSummary s{core->rows(),         core->table_bytes(), st.pulls_deferred,
                       st.rows_not_admitted, st.updates_dropped,  st.rows_evicted};
        s.memory_bytes = core->store().memory_bytes();
        s.pushes_lost = st.pushes_lost;
        return s;
      },
  };
}

worker_actor::behavior_type worker_fun(worker_actor::stateful_pointer<worker_state> self,
                                       std::shared_ptr<WorkerCore> core,
                                       std::shared_ptr<WorkerSource> source,
                                       std::shared_ptr<JobShared> shared,
                                       coordinator_actor coordinator, NodeId id) {
  // After every message: hand in batches while the core wants them, send what it produced,
  // and tell the coordinator once it has finished or failed.
  auto step = [self, core, source, shared, coordinator, id]() {
    auto& st = self->state;
    while (core->error().ok() && core->wants_batch()) {
      Batch batch;
      auto more = source->next(batch);
      if (!more) {
        shared->fail(more.status());
        if (!st.reported) self->send(coordinator, done_atom::value, id, more.status());
        st.reported = true;
        return;
      }
      if (!*more) {
        core->finish(st.out);
        break;
      }
      core->add_batch(std::move(batch), st.out);
    }
    route(*shared, st.out);
    if (shared->after_worker_message) shared->after_worker_message(*core);
    const uint64_t samples = core->stats().samples;
    shared->samples += samples - st.samples_reported;
    st.samples_reported = samples;
    report_once(self, st.reported, *core, *shared, coordinator, id);
  };
  auto handle = [self, core, step](PsMessage m) {
    core->on_message(m, self->state.out);
    step();
  };
  return {
      [step](start_atom) { step(); },
      [handle](PullReply& m) { handle(std::move(m)); },
      [handle](PushAck& m) { handle(std::move(m)); },
      [handle](ShardMapUpdate& m) { handle(std::move(m)); },
      [handle](PsError& m) { handle(std::move(m)); },
      [handle](DenseBroadcast& m) { handle(std::move(m)); },
      [self, core, step](restarted_atom, const std::vector<NodeId>& shards) {
        core->on_shards_restarted(shards, self->state.out);
        step();
      },
  };
}

aggregator_actor::behavior_type aggregator_fun(
    aggregator_actor::stateful_pointer<aggregator_state> self, std::shared_ptr<AggregatorCore> core,
    std::shared_ptr<JobShared> shared, coordinator_actor coordinator, NodeId id) {
  auto handle = [self, core, shared, coordinator, id](PsMessage m) {
    auto& st = self->state;
    core->on_message(m, st.out);
    route(*shared, st.out);
    report_once(self, st.reported, *core, *shared, coordinator, id);
  };
  return {
      [handle](PullRequest& m) { handle(std::move(m)); },
      [handle](PullReply& m) { handle(std::move(m)); },
      [handle](PushRequest& m) { handle(std::move(m)); },
      [handle](ClockAdvance& m) { handle(std::move(m)); },
      [handle](PushAck& m) { handle(std::move(m)); },
      [handle](ShardMapUpdate& m) { handle(std::move(m)); },
      [handle](PsError& m) { handle(std::move(m)); },
      [handle](DenseReduce& m) { handle(std::move(m)); },
      [handle](DenseBroadcast& m) { handle(std::move(m)); },
      [self, core, shared](restarted_atom, const std::vector<NodeId>& shards) {
        core->on_shards_restarted(shards, self->state.out);
        route(*shared, self->state.out);
      },
  };
}

}  // namespace colony
