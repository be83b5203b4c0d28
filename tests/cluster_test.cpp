// The embedded cluster: PS shards, workers, aggregators and the coordinator as CAF actors.
#define BOOST_TEST_MODULE cluster_test
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "actors/embedded_cluster.h"
#include "data/generator.h"
#include "tests/deep_data.h"
#include "worker/trainer.h"

using namespace colony;

namespace {

std::shared_ptr<const std::vector<Batch>> small_data(uint64_t rows) {
  GenOptions g;
  g.rows = rows;
  g.test_rows = 10;
  g.seed = 5;
  g.vocab_scale = 0.01;
  return std::make_shared<std::vector<Batch>>(generate_in_memory(g).train);
}

ClusterJob job_on(std::shared_ptr<const std::vector<Batch>> data) {
  ClusterJob j;
  j.trainer.model = {ModelKind::fm, 4};
  j.trainer.optimizer = default_optimizer_config(OptimizerKind::ftrl);
  j.batch = 128;
  j.memory = std::move(data);
  j.cluster.threads = 2;
  return j;
}

ClusterResult run(EmbeddedCluster& c) {
  auto r = c.run(nullptr);
  BOOST_REQUIRE_MESSAGE(r.ok(), (r.ok() ? std::string() : r.status().message()));
  return *r;
}

// Rows of `keys` whose bits differ between the trainer and the cluster.
size_t rows_differing(const LocalTrainer& trainer, const EmbeddedCluster& cluster,
                      const std::vector<uint64_t>& keys, size_t width) {
  std::vector<float> a(width), c(width);
  size_t differ = 0;
  for (uint64_t key : keys) {
    trainer.row_value(key, a);
    cluster.row_value(key, c);
    differ += std::memcmp(a.data(), c.data(), width * sizeof(float)) != 0;
  }
  return differ;
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_worker_bsp_gives_the_single_process_trainers_weights_bit_for_bit) {
  auto data = small_data(20000);
  for (PushMode push : {PushMode::flat, PushMode::hierarchical}) {
    ClusterJob j = job_on(data);
    j.epochs = 2;
    j.cluster.shards = 3;
    j.cluster.workers = 1;
    j.cluster.push = push;
    j.cluster.max_inflight = 2;
    auto cluster = std::move(EmbeddedCluster::make(j).value());
    const ClusterResult r = run(*cluster);
    BOOST_TEST(r.counters.samples == 40000u);

    auto trainer = std::move(LocalTrainer::make(j.trainer).value());
    std::vector<uint64_t> keys{bias_key};
    for (int epoch = 0; epoch < 2; ++epoch) {
      auto reader = make_memory_reader(data, j.batch);
      Batch b;
      while (*reader->next(b)) {
        BOOST_REQUIRE(trainer->train_batch(b).ok());
        if (epoch == 0) keys.insert(keys.end(), b.keys.begin(), b.keys.end());
      }
    }
    const size_t differ = rows_differing(*trainer, *cluster, keys, j.trainer.model.width());
    BOOST_TEST(differ == 0u, to_string(push)
                                 << ": " << differ << " of " << keys.size() << " rows differ");
  }
}

// The CUDA backend's device code built for the host (gpu/fm_pass.h) in the cluster's workers: the
// single-process CPU trainer's weights, bit for bit.
BOOST_AUTO_TEST_CASE(one_worker_bsp_on_the_device_code_gives_the_cpu_trainers_weights) {
  auto data = small_data(10000);
  for (ModelKind kind : {ModelKind::lr, ModelKind::fm}) {
    ClusterJob j = job_on(data);
    j.trainer.model.kind = kind;
    j.cluster.shards = 2;
    j.cluster.workers = 1;
    j.cluster.push = PushMode::hierarchical;
    ClusterJob on_device = j;
    on_device.trainer.model.device.backend = Backend::device_host;
    auto cluster = std::move(EmbeddedCluster::make(on_device).value());
    const ClusterResult r = run(*cluster);
    BOOST_TEST(r.counters.samples == 10000u);
    auto trainer = std::move(LocalTrainer::make(j.trainer).value());
    std::vector<uint64_t> keys{bias_key};
    auto reader = make_memory_reader(data, j.batch);
    Batch b;
    while (*reader->next(b)) {
      BOOST_REQUIRE(trainer->train_batch(b).ok());
      keys.insert(keys.end(), b.keys.begin(), b.keys.end());
    }
    const size_t differ = rows_differing(*trainer, *cluster, keys, j.trainer.model.width());
    BOOST_TEST(differ == 0u, to_string(kind)
                                 << ": " << differ << " of " << keys.size() << " rows differ");
  }
}

namespace {

std::shared_ptr<const std::vector<Batch>> deep_data(uint64_t rows, size_t batch) {
  return std::make_shared<std::vector<Batch>>(testing::deep_batches(rows, batch));
}

ClusterJob deep_job(ModelKind kind, std::shared_ptr<const std::vector<Batch>> data) {
  ClusterJob j = job_on(std::move(data));
  j.trainer.model = testing::small_deep_model(kind);
  j.cluster.push = PushMode::hierarchical;
  return j;
}

}  // namespace

// Hybrid training with one worker: the dense gradients go through the aggregator's all-reduce
// (a sum of one) and come back unchanged, so every model trains exactly as the single-process
// trainer does: the same rows and the same dense parameters, bit for bit; so does every model on
// the CUDA backend's device code built for the host (gpu/deep_pass.h) in the worker.
BOOST_AUTO_TEST_CASE(one_worker_bsp_trains_every_deep_model_bit_for_bit_as_the_local_trainer) {
  auto data = deep_data(6000, 128);
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn}) {
    for (PushMode push : {PushMode::flat, PushMode::hierarchical}) {
      for (Backend backend : {Backend::cpu, Backend::device_host}) {
        BOOST_TEST_CONTEXT(to_string(kind) << ", " << to_string(push) << " push, "
                                           << device_text(DeviceChoice{backend, 0})) {
          ClusterJob j = deep_job(kind, data);
          j.epochs = 2;
          j.cluster.shards = 2;
          j.cluster.push = push;
          ClusterJob on = j;
          on.trainer.model.device.backend = backend;
          auto cluster = std::move(EmbeddedCluster::make(on).value());
          const ClusterResult r = run(*cluster);

          auto trainer = std::move(LocalTrainer::make(j.trainer).value());
          std::vector<uint64_t> keys{bias_key};
          for (int epoch = 0; epoch < 2; ++epoch)
            for (const Batch& b : *data) {
              BOOST_REQUIRE(trainer->train_batch(b).ok());
              if (epoch == 0) keys.insert(keys.end(), b.keys.begin(), b.keys.end());
            }
          BOOST_REQUIRE(!trainer->dense().empty());
          BOOST_REQUIRE(r.dense.size() == trainer->dense().size());
          BOOST_TEST(std::memcmp(r.dense.data(), trainer->dense().data(),
                                 r.dense.size() * sizeof(float)) == 0);
          const size_t differ = rows_differing(*trainer, *cluster, keys, j.trainer.model.width());
          BOOST_TEST(differ == 0u, differ << " of " << keys.size() << " rows differ");
          std::vector<float> za, zc;
          BOOST_REQUIRE(trainer->predict(data->front(), za).ok());
          BOOST_REQUIRE(cluster->predict(data->front(), zc).ok());
          BOOST_TEST(std::memcmp(za.data(), zc.data(), za.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

// Four workers on two nodes: after every all-reduce the replicas' dense parameters are the same
// bits (their digests chain a hash of the parameters after each one), under any interleaving
// of the actors' messages, with gradients all-reduced every step or parameters averaged.
BOOST_AUTO_TEST_CASE(dense_replicas_are_bit_identical_after_every_all_reduce) {
  auto data = deep_data(4096, 64);  // 64 batches: 16 steps for each of 4 workers
  for (uint32_t every : {1u, 3u}) {
    for (uint64_t seed : {0u, 3u, 11u}) {
      BOOST_TEST_CONTEXT("every " << every << ", schedule seed " << seed) {
        ClusterJob j = deep_job(ModelKind::deepfm, data);
        j.cluster.shards = 2;
        j.cluster.workers = 4;
        j.cluster.replicas_per_node = 2;
        j.cluster.dense_sync_every = every;
        j.cluster.deterministic_seed = seed;
        j.cluster.consistency = {ConsistencyKind::ssp, 1};
        auto cluster = std::move(EmbeddedCluster::make(j).value());
        const ClusterResult r = run(*cluster);
        BOOST_TEST(r.counters.samples == 4096u);
        BOOST_REQUIRE(r.dense_digests.size() == 4u);
        for (uint64_t d : r.dense_digests) BOOST_TEST(d == r.dense_digests.front());
        BOOST_TEST(r.dense_digests.front() != 0u);  // an all-reduce happened
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(workers_share_each_epoch_and_train_every_sample_once) {
  auto data = small_data(10000);
  for (uint32_t workers : {2u, 3u, 5u}) {
    ClusterJob j = job_on(data);
    j.epochs = 2;
    j.cluster.shards = 2;
    j.cluster.workers = workers;
    j.cluster.consistency = {ConsistencyKind::ssp, 1};
    auto cluster = std::move(EmbeddedCluster::make(j).value());
    const ClusterResult r = run(*cluster);
    BOOST_TEST(r.counters.samples == 20000u, workers << " workers");
    BOOST_TEST(r.counters.steps == 2u * ((10000 + 127) / 128), workers << " workers");
  }
}

// Must show: with 4 replicas a node, hierarchical push and pull (the node's one push and one pull
// per shard and step) send at most a third of the flat mode's messages per sample, each.
BOOST_AUTO_TEST_CASE(hierarchical_push_and_pull_send_at_most_a_third_of_flat_messages) {
  auto data = small_data(20000);
  double pushes[2] = {0, 0}, pulls[2] = {0, 0}, pull_bytes[2] = {0, 0};
  for (PushMode push : {PushMode::flat, PushMode::hierarchical}) {
    ClusterJob j = job_on(data);
    j.cluster.shards = 4;
    j.cluster.workers = 4;
    j.cluster.replicas_per_node = 4;
    j.cluster.push = push;
    j.cluster.consistency = {ConsistencyKind::ssp, 2};
    const bool h = push == PushMode::hierarchical;
    // The shards' pull traffic: keys asked (8 bytes each) and rows answered.
    uint64_t bytes = 0;
    j.observer = [&](const Outgoing& o) {
      if (const auto* p = std::get_if<PullRequest>(&o.message); p && o.to < 4)
        bytes += p->keys.size() * sizeof(uint64_t);
      if (const auto* p = std::get_if<PullReply>(&o.message); p && p->header.sender < 4)
        bytes += p->values.size() * sizeof(float);
    };
    auto cluster = std::move(EmbeddedCluster::make(j).value());
    const ClusterResult r = run(*cluster);
    pushes[h] = double(r.counters.push_messages) / double(r.counters.samples);
    pulls[h] = double(r.counters.pull_messages) / double(r.counters.samples);
    pull_bytes[h] = double(bytes) / double(r.counters.samples);
  }
  BOOST_TEST_MESSAGE("per sample: push messages flat "
                     << pushes[0] << ", hierarchical " << pushes[1] << "; pull messages flat "
                     << pulls[0] << ", hierarchical " << pulls[1] << "; shards' pull bytes flat "
                     << pull_bytes[0] << ", hierarchical " << pull_bytes[1]);
  BOOST_TEST(pull_bytes[1] < pull_bytes[0]);
  BOOST_TEST(pushes[1] <= pushes[0] / 3.0);
  BOOST_TEST(pulls[1] <= pulls[0] / 3.0);
}

// Hierarchical pull: the replicas of a node ask their aggregator, which sends one pull per shard
// and step for the whole node, each key once; the rows the replicas train on are the same, so
// one node of 4 replicas trains as it did with one pull per replica. Under random schedules.
BOOST_AUTO_TEST_CASE(a_node_pulls_each_step_once_per_shard_for_all_its_replicas) {
  auto data = small_data(8192);
  for (uint64_t seed : {1u, 2u, 3u}) {
    BOOST_TEST_CONTEXT("schedule seed " << seed) {
      ClusterJob j = job_on(data);
      j.cluster.shards = 3;
      j.cluster.workers = 4;
      j.cluster.replicas_per_node = 2;
      j.cluster.push = PushMode::hierarchical;
      j.cluster.consistency = {ConsistencyKind::ssp, 1};
      j.cluster.deterministic_seed = seed;
      const NodeId first_aggregator = 3 + 4;
      std::map<std::tuple<NodeId, NodeId, uint32_t>, int> pulls;  // (from, shard, step)
      uint64_t from_replicas_to_shards = 0, keys_to_shards = 0, keys_asked = 0;
      j.observer = [&](const Outgoing& o) {
        const auto* p = std::get_if<PullRequest>(&o.message);
        if (!p) return;
        if (o.to < 3) {
          ++pulls[{p->header.sender, o.to, p->clock}];
          from_replicas_to_shards += p->header.sender < first_aggregator;
          keys_to_shards += p->keys.size();
        } else {
          keys_asked += p->keys.size();
        }
      };
      auto cluster = std::move(EmbeddedCluster::make(j).value());
      const ClusterResult r = run(*cluster);
      BOOST_TEST(r.counters.samples == 8192u);
      BOOST_TEST(from_replicas_to_shards == 0u);
      int most = 0;
      for (const auto& [k, n] : pulls) most = std::max(most, n);
      BOOST_TEST(most == 1);  // one pull per aggregator, shard and step
      BOOST_TEST(r.counters.pull_messages == pulls.size());
      BOOST_TEST(keys_to_shards < keys_asked);  // keys the node's replicas share go once
      BOOST_TEST_MESSAGE("keys asked by replicas " << keys_asked << ", pulled from shards "
                                                   << keys_to_shards);
    }
  }
}

namespace {

// Watches every message of a deterministic run: staleness of every pull answered, how far
// each worker runs ahead of the slowest, and the pushes that reach the shards.
struct Checker {
  Consistency bound;
  uint32_t shards = 0;
  uint32_t first_worker = 0, workers = 0;
  std::map<std::pair<NodeId, uint64_t>, uint32_t> pull_clock;
  std::map<NodeId, uint32_t> clock;  // per worker; clock_done once finished
  uint64_t pushes_to_shards = 0, stale_reads = 0, ran_ahead = 0;

  void observe(const Outgoing& o) {
    const NodeId from = std::visit([](const auto& m) { return m.header.sender; }, o.message);
    if (auto* p = std::get_if<PullRequest>(&o.message))
      pull_clock[{from, p->header.request_id}] = p->clock;
    if (auto* r = std::get_if<PullReply>(&o.message)) {
      if (!bound.allows(pull_clock.at({o.to, r->header.request_id}), r->min_clock)) ++stale_reads;
    }
    if (o.to < shards && std::holds_alternative<PushRequest>(o.message)) ++pushes_to_shards;
    const bool from_worker = from >= first_worker && from < first_worker + workers;
    if (!from_worker) return;
    uint32_t c = 0;
    if (auto* p = std::get_if<PushRequest>(&o.message))
      c = p->clock;
    else if (auto* a = std::get_if<ClockAdvance>(&o.message))
      c = a->clock;
    else
      return;
    clock[from] = std::max(clock[from], c);
    if (c == clock_done || bound.kind == ConsistencyKind::asp) return;
    uint32_t slowest = clock_done;
    for (uint32_t w = first_worker; w < first_worker + workers; ++w)
      slowest = std::min(slowest, clock[w]);
    const uint32_t k = bound.kind == ConsistencyKind::bsp ? 0 : bound.staleness;
    if (c > slowest + k + 1) ++ran_ahead;
  }
};

struct DeterministicRun {
  Checker checker;
  ClusterResult result;
};

DeterministicRun run_deterministic(std::shared_ptr<const std::vector<Batch>> data,
                                   ClusterOptions options, Consistency checked) {
  DeterministicRun d;
  d.checker.bound = checked;
  d.checker.shards = options.shards;
  d.checker.first_worker = options.shards;
  d.checker.workers = options.workers;
  ClusterJob j = job_on(std::move(data));
  j.cluster = options;
  j.observer = [&d](const Outgoing& o) { d.checker.observe(o); };
  auto cluster = std::move(EmbeddedCluster::make(j).value());
  d.result = run(*cluster);
  return d;
}

}  // namespace

// Must show: over many seeds and message orderings (CAF's test scheduler, no threads), SSP(k)
// never answers a pull more than k clocks stale, BSP never lets a worker run ahead, and no
// push is lost or applied twice.
BOOST_AUTO_TEST_CASE(actors_keep_the_consistency_bounds_under_random_schedules) {
  auto data = small_data(3000);
  struct Mode {
    Consistency c;
    PushMode push;
  };
  const Mode modes[] = {{{ConsistencyKind::bsp, 0}, PushMode::flat},
                        {{ConsistencyKind::ssp, 1}, PushMode::flat},
                        {{ConsistencyKind::ssp, 3}, PushMode::flat},
                        {{ConsistencyKind::bsp, 0}, PushMode::hierarchical},
                        {{ConsistencyKind::ssp, 2}, PushMode::hierarchical},
                        {{ConsistencyKind::asp, 0}, PushMode::flat}};
  int runs = 0;
  for (const Mode& m : modes) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      ClusterOptions o;
      o.shards = 2;
      o.workers = 3;
      o.consistency = m.c;
      o.push = m.push;
      o.max_inflight = 1 + seed % 3;
      o.deterministic_seed = seed;
      const DeterministicRun d = run_deterministic(data, o, m.c);
      BOOST_TEST_CONTEXT(to_string(m.c) << " " << to_string(m.push) << " seed " << seed) {
        BOOST_TEST(d.checker.stale_reads == 0u);
        BOOST_TEST(d.checker.ran_ahead == 0u);
        BOOST_TEST(d.result.pushes_applied == d.checker.pushes_to_shards);
        BOOST_TEST(d.result.pushes_duplicate == 0u);
        BOOST_TEST(d.result.counters.samples == 3000u);
      }
      ++runs;
    }
  }
  BOOST_TEST_MESSAGE(runs << " deterministic runs checked");
}

// The checker can fail: a cluster run under ASP, checked against BSP's bound, is caught.
BOOST_AUTO_TEST_CASE(the_consistency_checker_catches_a_cluster_that_skips_the_gate) {
  auto data = small_data(3000);
  int caught = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    ClusterOptions o;
    o.shards = 2;
    o.workers = 3;
    o.consistency = {ConsistencyKind::asp, 0};
    o.deterministic_seed = seed;
    const DeterministicRun d = run_deterministic(data, o, {ConsistencyKind::bsp, 0});
    caught += d.checker.stale_reads > 0 || d.checker.ran_ahead > 0;
  }
  BOOST_TEST(caught >= 8);
}

BOOST_AUTO_TEST_CASE(a_deterministic_run_replays_exactly) {
  auto data = small_data(3000);
  ClusterOptions o;
  o.shards = 2;
  o.workers = 3;
  o.consistency = {ConsistencyKind::ssp, 2};
  o.deterministic_seed = 42;
  ClusterJob j = job_on(data);
  j.cluster = o;
  std::vector<float> a(5), b(5);
  {
    auto c = std::move(EmbeddedCluster::make(j).value());
    run(*c);
    c->row_value(bias_key, a);
  }
  {
    auto c = std::move(EmbeddedCluster::make(j).value());
    run(*c);
    c->row_value(bias_key, b);
  }
  BOOST_TEST(std::memcmp(a.data(), b.data(), sizeof(float) * 5) == 0);
}

BOOST_AUTO_TEST_CASE(a_bad_input_line_fails_the_job_naming_file_and_line) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("colony-cluster-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "bad.libsvm").string();
  {
    std::ofstream out(path);
    for (int i = 0; i < 1000; ++i) out << (i % 2) << " " << (i % 17 + 1) << ":1\n";
    out << "1 5:oops\n";
  }
  ClusterJob j = job_on(nullptr);
  j.memory = nullptr;
  j.data = path;
  j.reader.use_cache = false;
  j.cluster.workers = 2;
  auto cluster = std::move(EmbeddedCluster::make(j).value());
  auto r = cluster->run(nullptr);
  BOOST_REQUIRE(!r.ok());
  BOOST_TEST(r.status().is_user_error());
  BOOST_TEST(r.status().message().find("bad.libsvm:1001:") != std::string::npos,
             r.status().message());
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(bad_cluster_options_are_refused) {
  ClusterJob j = job_on(small_data(100));
  j.cluster.shards = 0;
  BOOST_TEST(!EmbeddedCluster::make(j).ok());
  j.cluster.shards = 1;
  j.cluster.workers = 0;
  BOOST_TEST(!EmbeddedCluster::make(j).ok());
  j.cluster.workers = 1;
  j.cluster.max_inflight = 0;
  BOOST_TEST(!EmbeddedCluster::make(j).ok());
  BOOST_TEST(!parse_push_mode("tree").ok());
  // A deep model's dense layers are all-reduced by the aggregators: several workers need them.
  ClusterJob d = deep_job(ModelKind::deepfm, deep_data(100, 50));
  d.cluster.workers = 2;
  d.cluster.push = PushMode::flat;
  auto refused = EmbeddedCluster::make(d);
  BOOST_REQUIRE(!refused.ok());
  BOOST_TEST(refused.status().message().find("--push hierarchical") != std::string::npos,
             refused.status().message());
  d.cluster.push = PushMode::hierarchical;
  d.cluster.dense_sync_every = 0;
  BOOST_TEST(!EmbeddedCluster::make(d).ok());
  BOOST_TEST(*parse_dense_sync("every:1") == 1u);
  BOOST_TEST(*parse_dense_sync("every:25") == 25u);
  for (const char* bad : {"every:0", "every:", "every:2x", "2", "every:-1", "every:1000001"})
    BOOST_TEST(!parse_dense_sync(bad).ok(), bad);
}

// --on-nan: a worker whose step makes a NaN gradient (injected, as a diverging model makes one)
// stops the job naming the step (fail), or skips the step (skip): nothing of it reaches a shard,
// the other workers' steps go on, and every row stays finite.
BOOST_AUTO_TEST_CASE(a_nan_gradient_fails_the_job_or_is_skipped_and_never_reaches_a_row) {
  auto data = small_data(10000);
  std::vector<uint64_t> keys;
  for (const Batch& b : *data) keys.insert(keys.end(), b.keys.begin(), b.keys.end());
  for (PushMode push : {PushMode::flat, PushMode::hierarchical}) {
    for (bool skip : {false, true}) {
      BOOST_TEST_CONTEXT(to_string(push) << " push, " << (skip ? "skip" : "fail")) {
        ClusterJob j = job_on(data);
        j.cluster.shards = 2;
        j.cluster.workers = 2;
        j.cluster.push = push;
        j.cluster.poison_worker = 1;
        j.cluster.poison_step = 3;
        j.trainer.skip_not_finite = skip;
        auto cluster = std::move(EmbeddedCluster::make(j).value());
        uint64_t skipped_seen = 0;
        std::string last_skip;
        auto r = cluster->run([&](const ClusterProgress& p) {
          skipped_seen = p.steps_skipped;
          last_skip = p.last_skip;
        });
        if (!skip) {
          BOOST_REQUIRE(!r.ok());
          const std::string& m = r.status().message();
          BOOST_TEST(m.find("step 3 made a gradient of nan for key") != std::string::npos, m);
          BOOST_TEST(m.find("nothing of the step was pushed") != std::string::npos, m);
          continue;
        }
        BOOST_REQUIRE_MESSAGE(r.ok(), (r.ok() ? std::string() : r.status().message()));
        BOOST_TEST(r->counters.steps_skipped == 1u);
        BOOST_TEST(r->counters.samples == 10000u - 128u);  // the skipped step's batch is untrained
        BOOST_TEST(r->counters.steps == (10000u + 127u) / 128u);
        std::vector<float> row(j.trainer.model.width());
        size_t not_finite = 0;
        for (uint64_t key : keys) {
          cluster->row_value(key, row);
          for (float x : row) not_finite += !std::isfinite(x);
        }
        BOOST_TEST(not_finite == 0u);
        // The driver heard of it, with the step and the key (at the latest at the last poll).
        if (skipped_seen)
          BOOST_TEST(last_skip.find("step 3 made a gradient of nan") != std::string::npos,
                     last_skip);
      }
    }
  }
}

// A deep model under --on-nan skip: the replica that skips still takes part in the step's dense
// all-reduce (with nothing), so every replica stays bit-identical; a step every replica skips
// changes no dense parameter.
BOOST_AUTO_TEST_CASE(a_skipped_step_keeps_dense_replicas_identical_and_finite) {
  auto data = deep_data(4096, 64);
  for (uint32_t workers : {1u, 4u}) {
    BOOST_TEST_CONTEXT(workers << " workers") {
      ClusterJob j = deep_job(ModelKind::deepfm, data);
      j.cluster.shards = 2;
      j.cluster.workers = workers;
      j.cluster.replicas_per_node = 2;
      j.cluster.push = PushMode::hierarchical;
      j.cluster.poison_worker = workers - 1;
      j.cluster.poison_step = 2;
      j.trainer.skip_not_finite = true;
      auto cluster = std::move(EmbeddedCluster::make(j).value());
      const ClusterResult r = run(*cluster);
      BOOST_TEST(r.counters.steps_skipped == 1u);
      BOOST_TEST(r.counters.samples == 4096u - j.batch);  // the skipped step's batch
      BOOST_REQUIRE(r.dense_digests.size() == workers);
      for (uint64_t d : r.dense_digests) BOOST_TEST(d == r.dense_digests.front());
      size_t not_finite = 0;
      for (float x : r.dense) not_finite += !std::isfinite(x);
      BOOST_TEST(not_finite == 0u);
    }
  }
}

// The single-process trainer: a step whose gradient is not finite changes no row, and fails or
// is skipped. (FM with SGD at a step size of 1e38: no row overflows, an update that would is
// refused, but the factors' products soon are not finite.)
BOOST_AUTO_TEST_CASE(the_local_trainer_applies_nothing_of_a_step_with_a_gradient_not_finite) {
  auto data = small_data(5000);
  for (bool skip : {false, true}) {
    BOOST_TEST_CONTEXT((skip ? "skip" : "fail")) {
      TrainerConfig t;
      t.model = {ModelKind::fm, 2};
      t.optimizer = default_optimizer_config(OptimizerKind::sgd);
      t.optimizer.lr = 1e38f;
      t.skip_not_finite = skip;
      auto trainer = std::move(LocalTrainer::make(t).value());
      const size_t w = t.model.width();
      bool refused = false;
      for (const Batch& b : *data) {
        std::vector<float> before(b.keys.size() * w), after(b.keys.size() * w);
        for (size_t i = 0; i < b.keys.size(); ++i)
          trainer->row_value(b.keys[i], {&before[i * w], w});
        const uint64_t skipped = trainer->steps_skipped();
        auto loss = trainer->train_batch(b);
        if (loss.ok() && trainer->steps_skipped() == skipped) continue;  // trained
        refused = true;
        BOOST_TEST(loss.ok() == skip);
        const std::string why = loss.ok() ? trainer->last_skip() : loss.status().message();
        BOOST_TEST(why.find("a gradient of") != std::string::npos, why);
        for (size_t i = 0; i < b.keys.size(); ++i)
          trainer->row_value(b.keys[i], {&after[i * w], w});
        BOOST_TEST(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0);
        break;
      }
      BOOST_TEST(refused);
    }
  }
}
