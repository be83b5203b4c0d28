// Checkpoints, restore and recovery of the shards' stores, and the errors of bad storage.
#define BOOST_TEST_MODULE recovery_test
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "actors/embedded_cluster.h"
#include "data/generator.h"
#include "ps/shard_core.h"
#include "storage/checkpoint.h"
#include "storage/store_spec.h"
#include "tests/temp_dir.h"
#include "tests/test_shard.h"

using namespace colony;
namespace fs = std::filesystem;

namespace {

struct TempDir : colony::testing::TempDir {
  TempDir() : colony::testing::TempDir("recovery-test") {}
};

using Rows = std::map<uint64_t, std::vector<float>>;

Rows all_rows(const RowStore& store) {
  Rows rows;
  const Status s = store.for_each_in_range(0, UINT64_MAX, [&](uint64_t k, const float* r) {
    rows[k] = std::vector<float>(r, r + store.row_floats());
  });
  BOOST_REQUIRE(s.ok());
  return rows;
}

InMemoryData data_of(uint64_t rows) {
  GenOptions g;
  g.rows = rows;
  g.test_rows = 4000;
  g.seed = 5;
  g.vocab_scale = 0.01;
  return generate_in_memory(g);
}

ClusterJob job_on(const InMemoryData& d) {
  ClusterJob j;
  j.trainer.model = {ModelKind::fm, 4};
  j.trainer.optimizer = default_optimizer_config(OptimizerKind::adagrad);
  j.batch = 128;
  j.memory = std::make_shared<std::vector<Batch>>(d.train);
  j.cluster.shards = 2;
  j.cluster.workers = 2;
  j.cluster.consistency = {ConsistencyKind::ssp, 2};
  j.cluster.threads = 2;
  return j;
}

double test_logloss(EmbeddedCluster& c, const InMemoryData& d) {
  double sum = 0;
  uint64_t n = 0;
  std::vector<float> logits;
  for (const Batch& b : d.test) {
    BOOST_REQUIRE(c.predict(b, logits).ok());
    for (size_t i = 0; i < b.rows(); ++i) {
      const double p = 1.0 / (1.0 + std::exp(-double(logits[i])));
      const double y = b.labels[i];
      sum -= y * std::log(std::max(p, 1e-12)) + (1 - y) * std::log(std::max(1 - p, 1e-12));
      ++n;
    }
  }
  return sum / double(n);
}

}  // namespace

// The DeepRec bug: rows restored without their optimizer slots. Here a row is its values and
// its optimizer state in one record: a checkpoint restores both, for exactly the same keys.
BOOST_AUTO_TEST_CASE(a_restored_checkpoint_holds_values_and_optimizer_state_for_the_same_keys) {
  for (StoreKind kind : {StoreKind::memory, StoreKind::rocksdb, StoreKind::tiered}) {
    TempDir dir;
    StoreSpec spec;
    spec.kind = kind;
    spec.dir = dir.sub("store");
    spec.cache_bytes = kind == StoreKind::tiered ? 20 * (6 * sizeof(float) + 64) : 0;
    const StoreIdentity id{"job", 0, 1, 6};
    const ShardConfig sc = colony::testing::small_adagrad_shard();
    auto shard =
        std::move(ShardCore::make(sc, std::move(open_shard_store(spec, id).value())).value());
    auto step = [&](uint32_t t) {
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < 10; ++k) keys.push_back(make_key(1, t * 7 + k));
      Outbox out;
      shard->on_message(PullRequest{{7, 2 * t + 1, 1}, t, 7, keys}, out);
      shard->on_message(PushRequest{{7, 2 * t + 2, 1}, t + 1, keys, std::vector<float>(30, 0.5f)},
                        out);
      BOOST_REQUIRE_EQUAL(out.size(), 2u);
    };
    for (uint32_t t = 0; t < 20; ++t) step(t);
    const Rows at_checkpoint = all_rows(shard->store());
    BOOST_REQUIRE(!at_checkpoint.empty());
    for (const auto& [k, r] : at_checkpoint)
      BOOST_REQUIRE(r[3] > 0.0f);  // Adagrad's accumulator is saved
    const std::string ckpt = dir.sub("ckpt");
    BOOST_REQUIRE(shard->store().checkpoint(ckpt, id).ok());
    for (uint32_t t = 20; t < 30; ++t) step(t);  // lost by the restore
    shard.reset();                               // the crash: the store is closed
    auto restored = restore_shard_store(spec, id, ckpt);
    BOOST_REQUIRE_MESSAGE(restored.ok(),
                          (restored.ok() ? std::string() : restored.status().message()));
    const Rows back = all_rows(**restored);
    BOOST_TEST(back.size() == at_checkpoint.size());
    BOOST_TEST((back == at_checkpoint));  // same keys, same values and state, bit for bit
  }
}

BOOST_AUTO_TEST_CASE(
    a_shard_restarted_mid_job_resumes_from_the_last_checkpoint_and_the_job_finishes) {
  const InMemoryData d = data_of(30000);
  TempDir dir;
  double reference = 0;
  {
    ClusterJob j = job_on(d);
    auto c = std::move(EmbeddedCluster::make(j).value());
    BOOST_REQUIRE(c->run(nullptr).ok());
    reference = test_logloss(*c, d);
  }
  ClusterJob j = job_on(d);
  j.cluster.store = parse_store_spec("rocksdb:" + dir.sub("store"), 0).value();
  j.cluster.checkpoint_every = 5;
  j.cluster.restart_shard = 1;
  j.cluster.restart_after_pushes = 151;  // about two thirds through the job's ~118 steps per worker
  j.cluster.deterministic_seed = 11;     // one interleaving, replayable
  auto c = std::move(EmbeddedCluster::make(j).value());
  auto r = c->run(nullptr);
  BOOST_REQUIRE_MESSAGE(r.ok(), (r.ok() ? std::string() : r.status().message()));
  BOOST_TEST(r->counters.samples == 30000u);
  BOOST_TEST(r->shard_restarts == 1u);
  BOOST_TEST(r->checkpoints >= 4u);
  BOOST_TEST(r->updates_lost > 0u);
  BOOST_TEST_MESSAGE("updates lost: " << r->updates_lost << " rows");
  const double loss = test_logloss(*c, d);
  BOOST_TEST_MESSAGE("test logloss restarted " << loss << ", uninterrupted " << reference);
  BOOST_TEST(std::abs(loss / reference - 1.0) < 0.01,
             "restarted " << loss << " uninterrupted " << reference);
  // Every complete checkpoint verifies.
  auto all = list_checkpoints(dir.sub("store/checkpoints")).value();
  size_t complete = 0;
  for (const CheckpointListing& l : all) {
    if (!l.complete) continue;
    ++complete;
    auto v = verify_checkpoint(l.dir);
    BOOST_TEST(v.ok(), (v.ok() ? std::string() : v.status().message()));
  }
  BOOST_TEST(complete == r->checkpoints);
}

BOOST_AUTO_TEST_CASE(a_store_written_by_another_job_is_refused_naming_the_path) {
  const InMemoryData d = data_of(2000);
  TempDir dir;
  ClusterJob j = job_on(d);
  j.cluster.store = parse_store_spec("rocksdb:" + dir.sub("store"), 0).value();
  {
    auto c = std::move(EmbeddedCluster::make(j).value());
    BOOST_REQUIRE(c->run(nullptr).ok());
  }
  j.trainer.seed = 99;  // another job
  auto again = EmbeddedCluster::make(j);
  BOOST_REQUIRE(!again.ok());
  BOOST_TEST(again.status().message().find(dir.sub("store/shard-0")) != std::string::npos,
             again.status().message());
  j.trainer.seed = 0;
  j.cluster.shards = 3;  // another shard count: the keys would land elsewhere
  BOOST_TEST(!EmbeddedCluster::make(j).ok());
}

BOOST_AUTO_TEST_CASE(
    corrupt_or_missing_checkpoints_are_errors_naming_the_path_never_a_fresh_start) {
  const InMemoryData d = data_of(6000);
  TempDir dir;
  ClusterJob j = job_on(d);
  j.cluster.store = parse_store_spec("rocksdb:" + dir.sub("store"), 0).value();
  j.cluster.checkpoint_every = 5;
  {
    auto c = std::move(EmbeddedCluster::make(j).value());
    BOOST_REQUIRE(c->run(nullptr).ok());
  }
  const std::string root = dir.sub("store/checkpoints");
  auto latest = latest_checkpoint(root);
  BOOST_REQUIRE(latest.ok());
  const std::string step = *latest;
  BOOST_REQUIRE(verify_checkpoint(step).ok());
  auto names = [](const Status& s, const std::string& path) {
    return s.message().find(path) != std::string::npos;
  };

  // A shard's copy missing.
  fs::rename(fs::path(step) / "shard-1", fs::path(step) / "moved");
  auto v = verify_checkpoint(step);
  BOOST_REQUIRE(!v.ok());
  BOOST_TEST(names(v.status(), step + "/shard-1"), v.status().message());
  Status restored = restore_checkpoint(step, dir.sub("elsewhere"));
  BOOST_TEST(!restored.ok());
  BOOST_TEST(!fs::exists(dir.sub("elsewhere/shard-0")));  // nothing half-restored
  fs::rename(fs::path(step) / "moved", fs::path(step) / "shard-1");

  // A manifest that is not JSON, then one whose row count disagrees with the shard's copy.
  const fs::path manifest = fs::path(step) / "MANIFEST.json";
  std::string text;
  {
    std::ifstream in(manifest);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  { std::ofstream(manifest, std::ios::trunc) << "{\"format\": 1, \"step\":"; }
  v = verify_checkpoint(step);
  BOOST_REQUIRE(!v.ok());
  BOOST_TEST((v.status().code() == Status::Code::invalid_input));
  BOOST_TEST(names(v.status(), manifest.string()), v.status().message());
  // An incomplete checkpoint is listed as such, and `latest` skips it.
  auto listed = list_checkpoints(root).value();
  BOOST_TEST(!listed.back().complete);
  BOOST_TEST(latest_checkpoint(root).value() != step);
  // A row count that disagrees with the shard's copy.
  std::string wrong = text;
  const size_t at = wrong.find("\"rows\": ");
  BOOST_REQUIRE(at != std::string::npos);
  wrong.insert(at + 8, "1");  // "rows": 1<n>
  { std::ofstream(manifest, std::ios::trunc) << wrong; }
  v = verify_checkpoint(step);
  BOOST_REQUIRE(!v.ok());
  BOOST_TEST(names(v.status(), step + "/shard-0"), v.status().message());
  { std::ofstream(manifest, std::ios::trunc) << text; }
  BOOST_TEST(verify_checkpoint(step).ok());

  // No checkpoint to go back to: the restart fails the job instead of starting from scratch.
  ClusterJob k = job_on(d);
  k.cluster.store = parse_store_spec("rocksdb:" + dir.sub("other"), 0).value();
  k.cluster.checkpoint_every = 1000;
  k.cluster.restart_after_pushes = 3;
  auto c = std::move(EmbeddedCluster::make(k).value());
  auto r = c->run(nullptr);
  BOOST_REQUIRE(!r.ok());
  BOOST_TEST(names(r.status(), dir.sub("other/checkpoints")), r.status().message());
}
