#include "actors/embedded_cluster.h"

#include <atomic>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <unordered_set>

#include "actors/core_actors.h"
#include "actors/ps_actors.h"
#include "actors/ps_service.h"
#include "actors/shard_keeper.h"

#include <caf/scheduler/test_coordinator.hpp>
#include "data/zipf.h"
#include "gpu/reduce.h"
#include "ps/shard_core.h"
#include "ps/shard_map.h"
#include "storage/checkpoint.h"
#include "storage/dense_file.h"
#include "worker/aggregator_core.h"
#include "worker/counters.h"
#include "worker/kv_client.h"
#include "worker/wiring.h"
#include "worker/worker_core.h"

namespace colony {

Expected<PushMode> parse_push_mode(const std::string& text) {
  if (text == "flat") return PushMode::flat;
  if (text == "hierarchical") return PushMode::hierarchical;
  return Status::invalid_input("push mode \"" + text + "\" is not one of flat, hierarchical");
}

const char* to_string(PushMode mode) {
  return mode == PushMode::flat ? "flat" : "hierarchical";
}

Expected<uint32_t> parse_dense_sync(const std::string& text) {
  const std::string prefix = "every:";
  uint32_t k = 0;
  if (text.rfind(prefix, 0) == 0) {
    const char* begin = text.data() + prefix.size();
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(begin, end, k);
    if (ec == std::errc() && ptr == end && begin != end && k >= 1 && k <= dense_sync_every_max)
      return k;
  }
  return Status::invalid_input(fmt::format(
      "\"{}\" is not every:K with K in 1..{} (every:1: all-reduce the dense gradients every step)",
      text, dense_sync_every_max));
}

namespace {

struct coordinator_state {
  static inline const char* name = "colony.coordinator";
  size_t expected = 0;
  size_t finished = 0;
  bool answered = false;
  caf::typed_response_promise<Status> promise;
};

coordinator_actor::behavior_type coordinator_fun(
    coordinator_actor::stateful_pointer<coordinator_state> self) {
  return {
      [self](run_atom, const std::vector<caf::actor>& workers, uint32_t expected) {
        auto& st = self->state;
        st.expected = expected;
        st.promise = self->make_response_promise<Status>();
        for (auto& w : workers) caf::anon_send(w, start_atom::value);
        return st.promise;
      },
      [self](done_atom, NodeId, Status& error) {
        auto& st = self->state;
        ++st.finished;
        if (st.answered) return;
        // The first failure ends the job; otherwise it ends when everyone has finished.
        if (!error.ok() || st.finished == st.expected) {
          st.answered = true;
          st.promise.deliver(std::move(error));
        }
      },
  };
}

}  // namespace

JobSpec job_spec(const ClusterJob& job) {
  const ClusterOptions& c = job.cluster;
  JobSpec j = job_with_model(JobSpec{}, job.trainer.model);
  j.optimizer = job.trainer.optimizer;
  j.seed = job.trainer.seed;
  j.factor_init_std = job.trainer.factor_init_std;
  j.batch = static_cast<uint32_t>(job.batch);
  j.epochs = static_cast<uint32_t>(job.epochs);
  j.consistency = c.consistency;
  j.hierarchical = c.push == PushMode::hierarchical;
  j.max_inflight = static_cast<uint32_t>(c.max_inflight);
  j.read_ahead_batches = c.read_ahead_batches;
  j.skip_bad_lines = job.reader.skip_bad_lines;
  j.use_cache = job.reader.use_cache;
  j.admit_after = c.admit_after;
  j.evict_after = c.evict_after;
  j.checkpoint_every = c.checkpoint_every;
  j = job_with_dense_optimizer(j, job.trainer.dense_optimizer);
  j.dense_sync_every = c.dense_sync_every;
  j.skip_not_finite = job.trainer.skip_not_finite;
  j.formats = c.formats;
  return j;
}

struct EmbeddedCluster::Impl {
  Impl(size_t threads, bool deterministic)
      : config(threads, false, deterministic), system(config) {}
  ~Impl() {
    for (auto& a : shared->nodes) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    if (auto* sched = test_scheduler()) sched->run();  // no threads: run the exits here
  }
  caf::scheduler::test_coordinator* test_scheduler() {
    return job.cluster.deterministic_seed
               ? dynamic_cast<caf::scheduler::test_coordinator*>(&system.scheduler())
               : nullptr;
  }

  SystemConfig config;
  caf::actor_system system;
  ClusterJob job;
  ShardMapSpec map_spec;
  std::optional<ShardMap> map;
  std::shared_ptr<JobShared> shared = std::make_shared<JobShared>();
  std::vector<std::shared_ptr<ShardCore>> shards;
  std::shared_ptr<ShardKeeper> keeper;
  std::string dense_shape;  // a deep model's (worker/wiring.h); empty for LR and FM
  std::vector<std::shared_ptr<WorkerCore>> workers;
  std::vector<std::shared_ptr<WorkerSource>> sources;
  std::vector<std::shared_ptr<AggregatorCore>> aggregators;
  coordinator_actor coordinator;
  std::vector<caf::actor> worker_handles;
  uint32_t expected_reports = 0;
  std::unique_ptr<Model> model;  // for predict
  BatchIndex index;
  std::vector<float> rows;
  std::vector<std::vector<uint64_t>> shard_keys;  // predict's keys and slots by shard
  std::vector<std::vector<size_t>> shard_slots;
  std::vector<float> shard_rows;
  bool ran = false;
};

EmbeddedCluster::EmbeddedCluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EmbeddedCluster::~EmbeddedCluster() = default;

namespace {
// A deep model's dense layers to start from: the store's dense.bin when it has one (left by an
// earlier run of the job, or by `colony checkpoint restore`); none for a store without, unless
// it holds rows, which are then refused rather than paired with fresh dense layers.
Expected<std::shared_ptr<const DenseState>> load_dense_start(const StoreSpec& store,
                                                             const std::string& shape,
                                                             uint64_t rows_in_store) {
  if (store.kind == StoreKind::memory) return std::shared_ptr<const DenseState>();
  const std::string path = dense_store_path(store.dir);
  auto saved = read_dense_state(path);
  if (!saved) {
    if (saved.status().code() != Status::Code::not_found) return saved.status();
    if (rows_in_store == 0) return std::shared_ptr<const DenseState>();
    return Status::invalid_input(
        fmt::format("--store {}: holds {} rows of an earlier run but not its dense layers ({} is "
                    "missing): start from an empty store, or restore a checkpoint into one "
                    "(colony checkpoint restore)",
                    to_string(store), rows_in_store, path));
  }
  if (saved->shape != shape)
    return Status::invalid_input(
        fmt::format("{}: holds the dense layers of \"{}\"; this job's are \"{}\": start from "
                    "an empty store, or train the model that wrote it",
                    path, saved->shape, shape));
  return std::shared_ptr<const DenseState>(
      std::make_shared<const DenseState>(std::move(saved.value())));
}
}  // namespace

Expected<std::unique_ptr<EmbeddedCluster>> EmbeddedCluster::make(const ClusterJob& job) {
  const ClusterOptions& c = job.cluster;
  if (c.shards < 1) return Status::invalid_input("--shards must be at least 1");
  if (c.workers < 1) return Status::invalid_input("--workers must be at least 1");
  if (c.max_inflight < 1) return Status::invalid_input("max in-flight steps must be at least 1");
  if (c.read_ahead_batches > read_ahead_batches_max)
    return Status::invalid_input(fmt::format("--read-ahead-batches {} is over {}",
                                             c.read_ahead_batches, read_ahead_batches_max));
  if (job.epochs < 1) return Status::invalid_input("--epochs must be at least 1");
  if (job.batch < 1) return Status::invalid_input("--batch must be at least 1");
  if (c.dense_sync_every < 1) return Status::invalid_input("--dense-sync every:K needs K >= 1");
  auto model = Model::make(job.trainer.model);
  if (!model) return model.status();
  if ((*model)->dense_params() > 0 && c.workers > 1 && c.push != PushMode::hierarchical)
    return Status::invalid_input(fmt::format(
        "--model {} with {} workers needs --push hierarchical: the node aggregators all-reduce "
        "its dense layers",
        to_string(job.trainer.model.kind), c.workers));
  auto impl = std::make_unique<Impl>(c.threads, c.deterministic_seed != 0);
  impl->model = std::move(model.value());
  impl->job = job;
  impl->shared->observer = job.observer;
  impl->shared->metrics = job.cluster.metrics;
  impl->shared->timeline = job.cluster.timeline;
  Impl& m = *impl;
  m.map_spec = ShardMapSpec{};
  m.map_spec.shards = c.shards;
  m.map_spec.seed = job.trainer.seed;
  auto map = ShardMap::make(m.map_spec);
  if (!map) return map.status();
  m.map_spec = map->spec();
  m.map.emplace(std::move(map.value()));

  const bool hier = c.push == PushMode::hierarchical;
  const uint32_t group = hier ? (c.replicas_per_node == 0 ? c.workers : c.replicas_per_node) : 1;
  // One ps member holding every shard; a worker member per node of `group` replicas, each with
  // an aggregator under hierarchical push. Nothing here restarts and resyncs: not durable.
  std::vector<MemberInfo> members(1);
  members[0].role = MemberRole::ps;
  members[0].count = c.shards;
  for (uint32_t w = 0; w < c.workers; w += group) {
    MemberInfo node;
    node.role = MemberRole::worker;
    node.count = std::min(group, c.workers - w);
    members.push_back(node);
  }
  const JobSpec spec = job_spec(job);
  auto layout = ClusterLayout::make(plan_layout(std::move(members), spec, m.map_spec));
  if (!layout) return layout.status();
  const size_t width = job.trainer.model.width();
  ClusterOptions& co = m.job.cluster;
  if (co.checkpoint_every && co.checkpoint_dir.empty()) {
    if (co.store.kind == StoreKind::memory)
      return Status::invalid_input(
          "--checkpoint-every: give --checkpoint-dir (the memory store has no folder)");
    co.checkpoint_dir = (std::filesystem::path(co.store.dir) / "checkpoints").string();
  }
  if (Status s = check_checkpoint_root_free(co.checkpoint_dir, co.checkpoint_every); !s.ok())
    return s;
  if (co.restart_after_pushes && !co.checkpoint_every)
    return Status::invalid_input("a shard restart needs checkpoints (checkpoint_every)");
  std::vector<ShardConfig> shard_configs;
  std::vector<StoreIdentity> identities;

  m.shared->nodes.resize(layout->nodes());
  for (NodeId s = 0; s < layout->shards(); ++s) {
    ShardConfig sc = shard_config(spec, *layout, s);
    auto row_floats = ShardCore::row_floats(sc);
    if (!row_floats) return row_floats.status();
    const StoreIdentity identity{store_fingerprint(job.trainer), s, c.shards, *row_floats};
    if (c.formats.row != ValueFormat::fp32 || c.formats.state != ValueFormat::fp32) {
      auto parts = ShardCore::row_parts(sc, c.formats.row, c.formats.state);
      if (!parts) return parts.status();
      co.store.compact_parts = std::move(parts.value());
    }
    auto store = open_shard_store(co.store, identity);
    if (!store) return store.status();
    // This job's senders count their clocks from 0: an earlier run's must not stand for theirs.
    if (Status cleared = (*store)->clear_clocks(); !cleared.ok()) return cleared;
    shard_configs.push_back(sc);
    identities.push_back(identity);
    auto core = ShardCore::make(sc, std::move(store.value()));
    if (!core) return core.status();
    m.shards.push_back(std::move(core.value()));
  }
  m.dense_shape = dense_shape(spec);
  std::shared_ptr<const DenseState> dense_start;
  if (!m.dense_shape.empty()) {
    uint64_t rows = 0;
    for (const auto& shard : m.shards) rows += shard->rows();
    auto start = load_dense_start(c.store, m.dense_shape, rows);
    if (!start) return start.status();
    dense_start = std::move(start.value());
  }
  std::vector<NodeId> replicas, aggregators;
  for (uint32_t i = 0; i < layout->members().size(); ++i) {
    const MemberInfo& member = layout->members()[i];
    if (member.role != MemberRole::worker) continue;
    for (NodeId n = member.first_node; n < member.first_node + member.count; ++n) {
      WorkerConfig wc = worker_config(spec, *layout, n);
      // The job's wire spec has neither: a worker's own choices.
      wc.model.device = job.trainer.model.device;
      wc.model.compute_threads = job.trainer.model.compute_threads;
      wc.dense_start = dense_start;
      // The first replica trains the most batches (the others never reach a step it does not).
      if (replicas.empty() && !m.dense_shape.empty())
        wc.dense_checkpoint_every = co.checkpoint_every;
      if (replicas.size() == co.poison_worker) wc.poison_step = co.poison_step;
      auto core = WorkerCore::make(wc);
      if (!core) return core.status();
      m.workers.push_back(std::move(core.value()));
      m.sources.push_back(
          std::make_shared<WorkerSource>(m.job, static_cast<uint32_t>(replicas.size()), c.workers));
      replicas.push_back(n);
    }
    if (!member.has_aggregator) continue;
    auto core = AggregatorCore::make(aggregator_config(spec, *layout, i), make_cpu_reducer());
    if (!core) return core.status();
    m.aggregators.push_back(std::move(core.value()));
    aggregators.push_back(member.aggregator);
  }

  m.keeper = std::make_shared<ShardKeeper>(co, std::move(shard_configs), std::move(identities),
                                           width, m.dense_shape, m.shared);
  if (co.checkpoint_every) {
    m.shared->after_shard_message = [keeper =
                                         std::weak_ptr<ShardKeeper>(m.keeper)](ShardCore& core) {
      if (auto k = keeper.lock()) k->after_message(core);
    };
    if (!m.dense_shape.empty())
      m.shared->after_worker_message =
          [keeper = std::weak_ptr<ShardKeeper>(m.keeper)](WorkerCore& core) {
            if (auto k = keeper.lock()) k->after_worker_message(core);
          };
  }

  // Load for the driver's alerts, sized before any actor runs.
  for (size_t w = 0; w < replicas.size(); ++w) {
    m.shared->worker_slot[replicas[w]] = w;
    m.shared->worker_busy_ns.emplace_back(0);
    m.shared->worker_steps.emplace_back(0);
  }
  for (NodeId s = 0; s < layout->shards(); ++s) {
    m.shared->shard_rows.emplace_back(0);
    m.shared->shard_rows_pulled.emplace_back(0);
    m.shared->shard_bytes.emplace_back(0);
  }
  m.shared->slow_slot = co.slow_worker;
  m.shared->slow_ms = co.slow_ms;

  // Spawn: the coordinator first (workers report to it), then every core's actor.
  m.coordinator = m.system.spawn(coordinator_fun);
  for (NodeId s = 0; s < layout->shards(); ++s)
    m.shared->nodes[s] = caf::actor_cast<caf::actor>(
        m.system.spawn(shard_fun, m.shards[s], m.shared, std::shared_ptr<ShardReplication>()));
  for (size_t w = 0; w < replicas.size(); ++w) {
    auto h = m.system.spawn(worker_fun, m.workers[w], m.sources[w], m.shared, m.coordinator,
                            replicas[w]);
    m.shared->nodes[replicas[w]] = caf::actor_cast<caf::actor>(h);
    m.worker_handles.push_back(caf::actor_cast<caf::actor>(h));
  }
  for (size_t a = 0; a < aggregators.size(); ++a)
    m.shared->nodes[aggregators[a]] = caf::actor_cast<caf::actor>(
        m.system.spawn(aggregator_fun, m.aggregators[a], m.shared, m.coordinator, aggregators[a]));
  m.expected_reports = static_cast<uint32_t>(replicas.size() + aggregators.size());
  return std::unique_ptr<EmbeddedCluster>(new EmbeddedCluster(std::move(impl)));
}

Expected<ClusterResult> EmbeddedCluster::run(
    const std::function<void(const ClusterProgress&)>& progress) {
  Impl& m = *impl_;
  COLONY_ASSERT(!m.ran, "EmbeddedCluster::run called twice");
  m.ran = true;
  if (auto* sched = m.test_scheduler()) {
    // One message at a time, the next actor to run drawn from the seed.
    caf::anon_send(m.coordinator, run_atom::value, m.worker_handles, m.expected_reports);
    SplitMix64 rng(m.job.cluster.deterministic_seed);
    while (sched->has_job()) {
      std::swap(sched->jobs.front(), sched->jobs[rng.next() % sched->jobs.size()]);
      sched->run_once();
    }
    {
      std::lock_guard<std::mutex> lock(m.shared->mutex);
      if (!m.shared->first_error.ok()) return m.shared->first_error;
    }
    for (const auto& w : m.workers)
      if (!w->done())
        return Status::internal("the job stalled: no message left to deliver, a worker not done");
    for (const auto& a : m.aggregators)
      if (!a->done())
        return Status::internal(
            "the job stalled: no message left to deliver, an aggregator not done");
    return finish();
  }
  caf::scoped_actor self{m.system};
  self->send(m.coordinator, run_atom::value, m.worker_handles, m.expected_reports);
  bool finished = false;
  Status error;
  while (!finished) {
    self->receive(
        [&](Status& e) {
          error = std::move(e);
          finished = true;
        },
        caf::after(std::chrono::milliseconds(200)) >>
            [&] {
              if (progress) progress(m.shared->progress());
              // A shard whose store failed stops answering: end the job with its error.
              std::lock_guard<std::mutex> lock(m.shared->mutex);
              if (!m.shared->first_error.ok()) finished = true;
            });
  }
  {
    std::lock_guard<std::mutex> lock(m.shared->mutex);
    if (!m.shared->first_error.ok()) return m.shared->first_error;
  }
  if (!error.ok()) return error;
  // Let every shard handle what is still queued for it (the workers' last clocks) before the
  // driver reads the cores.
  for (size_t s = 0; s < m.shards.size(); ++s) {
    auto shard = caf::actor_cast<shard_actor>(m.shared->nodes[s]);
    self->request(shard, caf::infinite, quiesce_atom::value)
        .receive([](bool) {}, [](caf::error&) {});
  }
  // Once more at the end, every shard quiet: a job shorter than the period, and what happened
  // in its last one (a gradient alert, an update refused), is reported too.
  if (progress) progress(m.shared->progress());
  return finish();
}

Expected<ClusterResult> EmbeddedCluster::finish() {
  // Rows a tiered store holds only in memory go to disk, so that the store left behind is
  // the job's final model.
  for (auto& shard : impl_->shards) {
    if (!shard->error().ok()) return shard->error();
    if (Status s = shard->store().flush(); !s.ok()) return s;
  }
  // A deep model's final dense layers go beside the rows, so that a job continuing the store
  // continues them too.
  const StoreSpec& store = impl_->job.cluster.store;
  if (!impl_->dense_shape.empty() && store.kind != StoreKind::memory) {
    DenseState state = final_dense_replica().dense_state();
    state.shape = impl_->dense_shape;
    if (Status s = write_dense_state(dense_store_path(store.dir), state); !s.ok()) return s;
  }
  return collect();
}

ClusterResult EmbeddedCluster::collect() const {
  const Impl& m = *impl_;
  ClusterResult r;
  std::vector<const WorkerCore*> replicas;
  for (const auto& w : m.workers) replicas.push_back(w.get());
  std::vector<const AggregatorCore*> aggregators;
  for (const auto& a : m.aggregators) aggregators.push_back(a.get());
  r.counters = core_counters(replicas, aggregators);
  for (const auto& s : m.shards) {
    r.pulls_deferred += s->stats().pulls_deferred;
    r.pushes_applied += s->stats().pushes_applied;
    r.pushes_duplicate += s->stats().pushes_duplicate;
    r.model_rows += s->rows();
    r.model_bytes += s->store().memory_bytes();
    r.table_bytes += s->table_bytes();
    r.updates_dropped += s->stats().updates_dropped;
    r.rows_evicted += s->stats().rows_evicted;
    const StoreStats store = s->store().stats();
    r.cache_hits += store.cache_hits;
    r.cache_misses += store.cache_misses;
    r.rows_read_ahead += store.read_ahead_rows;
    r.pull_hints += s->stats().hints;
  }
  r.checkpoints = m.keeper->checkpoints();
  r.last_checkpoint_step = m.keeper->last_step();
  r.shard_restarts = m.keeper->restarts();
  r.updates_lost = m.keeper->updates_lost();
  for (const auto& w : m.workers) r.dense_digests.push_back(w->dense_digest());
  const auto dense = final_dense();
  r.dense.assign(dense.begin(), dense.end());
  const ReaderStats& rs = m.sources.front()->last_stats();
  r.counters.bad_lines_skipped = rs.bad_lines_skipped;
  r.read_from_cache = rs.from_cache;
  return r;
}

void EmbeddedCluster::row_value(uint64_t key, std::span<float> out) const {
  const uint64_t keys[1] = {key};
  const Status s = impl_->shards[impl_->map->shard_of(key)]->row_values(keys, out);
  COLONY_ASSERT(s.ok(), "{}", s.message());
}

Status EmbeddedCluster::error() const {
  for (const auto& shard : impl_->shards)
    if (!shard->error().ok()) return shard->error();
  return {};
}

const WorkerCore& EmbeddedCluster::final_dense_replica() const {
  std::vector<const WorkerCore*> replicas;
  for (const auto& w : impl_->workers) replicas.push_back(w.get());
  return latest_dense(replicas);
}

std::span<const float> EmbeddedCluster::final_dense() const {
  return final_dense_replica().dense();
}

Status EmbeddedCluster::predict(const Batch& batch, std::vector<float>& logits) {
  Impl& m = *impl_;
  const size_t width = m.job.trainer.model.width();
  if (Status s = m.model->check(batch); !s.ok()) return s;
  m.index.build(batch, m.job.trainer.model.dense_rows());
  const auto keys = m.index.unique_keys();
  m.rows.resize(keys.size() * width);
  // One batch per shard: a store on disk reads its rows in one go.
  const size_t shards = m.shards.size();
  m.shard_keys.resize(shards);
  m.shard_slots.resize(shards);
  for (size_t s = 0; s < shards; ++s) {
    m.shard_keys[s].clear();
    m.shard_slots[s].clear();
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t s = m.map->shard_of(keys[i]);
    m.shard_keys[s].push_back(keys[i]);
    m.shard_slots[s].push_back(i);
  }
  for (size_t s = 0; s < shards; ++s) {
    m.shard_rows.resize(m.shard_keys[s].size() * width);
    // A failure is kept in the shard (error()) and ends the job after evaluation.
    if (!m.shards[s]->row_values(m.shard_keys[s], m.shard_rows).ok()) continue;
    for (size_t j = 0; j < m.shard_slots[s].size(); ++j)
      std::copy_n(&m.shard_rows[j * width], width, &m.rows[m.shard_slots[s][j] * width]);
  }
  logits.resize(batch.rows());
  m.model->forward(batch, m.index.slots(), m.rows, final_dense(), logits);
  return Status();
}

std::string store_fingerprint(const TrainerConfig& t) {
  // keys=2: Criteo's columns became fields 0..25 and dense features (rows of an older store
  // would be unreachable, so it is refused rather than continued).
  return fmt::format("colony-train model={} width={} optimizer={} seed={} keys=2",
                     to_string(t.model.kind), t.model.width(), to_string(t.optimizer.kind), t.seed);
}

}  // namespace colony
