// The in-process PS service of actors/ps_service.h: shard actors wired as a cluster of one ps
// member and one worker member whose replicas are the blocking clients.
#include "actors/ps_service.h"

#include <chrono>
#include <unordered_set>

#include "actors/core_actors.h"
#include "actors/ps_actors.h"
#include "data/zipf.h"
#include "ps/cluster_layout.h"
#include "ps/shard_core.h"
#include "ps/shard_map.h"
#include "worker/kv_client.h"
#include "worker/wiring.h"

namespace colony {

namespace {

class ActorPsClient final : public PsClient {
 public:
  ActorPsClient(caf::actor_system& system, std::shared_ptr<JobShared> shared,
                std::unique_ptr<KvClient> kv, NodeId id)
      : self_(system), shared_(std::move(shared)), kv_(std::move(kv)) {
    shared_->nodes[id] = caf::actor_cast<caf::actor>(self_);
  }
  Ticket pull(std::span<const uint64_t> keys, uint32_t clock, std::span<float> values) override {
    const Ticket t = kv_->pull(keys, clock, id(), values, out_);
    route(*shared_, out_);
    return t;
  }
  Ticket push(std::span<const uint64_t> keys, std::span<const float> grads,
              uint32_t clock) override {
    const Ticket t = kv_->push(keys, grads, clock, out_);
    route(*shared_, out_);
    return t;
  }
  Status wait(Ticket ticket) override {
    auto feed = [this](PsMessage m) {
      kv_->on_message(m, out_);
      route(*shared_, out_);
    };
    while (kv_->error().ok() && !kv_->done(ticket)) {
      self_->receive(
          [&](PullReply& m) { feed(std::move(m)); }, [&](PushAck& m) { feed(std::move(m)); },
          [&](ShardMapUpdate& m) { feed(std::move(m)); }, [&](PsError& m) { feed(std::move(m)); });
    }
    return kv_->error();
  }
  void finish() override {
    kv_->finish(out_);
    route(*shared_, out_);
  }

 private:
  NodeId id() const { return id_; }
  caf::scoped_actor self_;
  std::shared_ptr<JobShared> shared_;
  std::unique_ptr<KvClient> kv_;
  NodeId id_ = 0;
  Outbox out_;
  friend class ActorPsService;
};

class ActorPsService final : public PsService {
 public:
  explicit ActorPsService(const PsServiceOptions& o)
      : options_(o), config_(o.threads, o.eager_polling), system_(config_) {}
  ~ActorPsService() override {
    for (uint32_t s = 0; s < options_.shards; ++s)
      caf::anon_send_exit(shared_->nodes[s], caf::exit_reason::user_shutdown);
  }
  Status start() {
    spec_.shards = options_.shards;
    spec_.seed = options_.map_seed;
    auto map = ShardMap::make(spec_);
    if (!map) return map.status();
    spec_ = map->spec();
    // Wired as a cluster of one ps member and one worker member whose replicas are the clients,
    // training a model whose rows have the options' width.
    if (options_.width == 0) return Status::invalid_input("row width must be at least 1");
    JobSpec job =
        job_with_model(JobSpec{}, ModelSpec{options_.width == 1 ? ModelKind::lr : ModelKind::fm,
                                            options_.width == 1 ? 1 : options_.width - 1});
    job.optimizer = options_.optimizer;
    job.seed = options_.init.seed;
    job.factor_init_std = options_.init.factor_std;
    job.consistency = options_.consistency;
    std::vector<MemberInfo> members(2);
    members[0].count = options_.shards;
    members[1].role = MemberRole::worker;
    members[1].count = options_.clients;
    auto layout = ClusterLayout::make(plan_layout(std::move(members), job, spec_));
    if (!layout) return layout.status();
    shared_->nodes.resize(options_.shards + options_.clients);
    for (uint32_t s = 0; s < options_.shards; ++s) {
      auto core = ShardCore::make(shard_config(job, *layout, s));
      if (!core) return core.status();
      shared_->nodes[s] = caf::actor_cast<caf::actor>(
          system_.spawn(shard_fun, std::shared_ptr<ShardCore>(std::move(core.value())), shared_,
                        std::shared_ptr<ShardReplication>()));
    }
    return Status();
  }
  Expected<std::unique_ptr<PsClient>> client(uint32_t index) override {
    if (index >= options_.clients)
      return Status::invalid_input(
          fmt::format("client {} does not exist (the service has {})", index, options_.clients));
    const NodeId id = options_.shards + index;
    if (shared_->nodes[id])
      return Status::invalid_input(fmt::format("client {} was already made", index));
    std::vector<NodeId> shard_nodes(options_.shards);
    for (uint32_t s = 0; s < options_.shards; ++s) shard_nodes[s] = s;
    auto kv = KvClient::make({id, spec_, shard_nodes, options_.width});
    if (!kv) return kv.status();
    auto c = std::make_unique<ActorPsClient>(system_, shared_, std::move(kv.value()), id);
    c->id_ = id;
    return std::unique_ptr<PsClient>(std::move(c));
  }

 private:
  PsServiceOptions options_;
  SystemConfig config_;
  caf::actor_system system_;
  std::shared_ptr<JobShared> shared_ = std::make_shared<JobShared>();
  ShardMapSpec spec_;
};

}  // namespace

Expected<std::unique_ptr<PsService>> PsService::make(const PsServiceOptions& options) {
  if (options.shards < 1) return Status::invalid_input("a PS service needs at least one shard");
  if (options.clients < 1) return Status::invalid_input("a PS service needs at least one client");
  auto service = std::make_unique<ActorPsService>(options);
  if (Status s = service->start(); !s.ok()) return s;
  return std::unique_ptr<PsService>(std::move(service));
}

Expected<PsBenchFigure> measure_ps_round_trips(size_t width, size_t keys_per_request,
                                               uint64_t round_trips, uint64_t seed) {
  PsServiceOptions o;
  o.width = width;
  o.optimizer = default_optimizer_config(OptimizerKind::sgd);
  o.init = RowInit{seed, 1, 0.01f};
  o.consistency = {ConsistencyKind::asp, 0};
  o.threads = 1;
  o.eager_polling = true;  // round trips are latency-bound: keep the shard's thread awake
  auto service = PsService::make(o);
  if (!service) return service.status();
  auto client = (*service)->client(0);
  if (!client) return client.status();
  PsClient& kv = **client;

  // A few dozen distinct requests of unique Zipf-skewed keys, made before timing starts.
  ZipfSampler zipf(10000000, 1.1);
  SplitMix64 rng(seed);
  std::vector<std::vector<uint64_t>> requests(32);
  for (auto& keys : requests) {
    std::unordered_set<uint64_t> seen;
    while (keys.size() < keys_per_request) {
      const uint64_t key = make_key(1, mix64(zipf(rng)));
      if (seen.insert(key).second) keys.push_back(key);
    }
  }
  std::vector<float> values(keys_per_request * width), grads(keys_per_request * width, 1e-3f);
  uint32_t clock = 0;
  auto round_trip = [&](const std::vector<uint64_t>& keys) -> Status {
    if (Status s = kv.wait(kv.pull(keys, clock, values)); !s.ok()) return s;
    return kv.wait(kv.push(keys, grads, ++clock));
  };
  for (const auto& keys : requests)  // warm-up: create the rows
    if (Status s = round_trip(keys); !s.ok()) return s;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < round_trips; ++i)
    if (Status s = round_trip(requests[i % requests.size()]); !s.ok()) return s;
  PsBenchFigure f;
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  f.rows = 2 * round_trips * keys_per_request;
  // A pull sends the keys and gets the rows back; its push sends the gradients alone (the keys
  // left out: PushRequest::keys_of_pull).
  f.bytes = round_trips * keys_per_request * (sizeof(uint64_t) + 2 * width * sizeof(float));
  kv.finish();
  return f;
}

}  // namespace colony
