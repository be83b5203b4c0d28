// The PS cores (shard, worker, aggregator) driven by hand: a test driver delivers messages
// one at a time, choosing at random (from a seed) which channel delivers next, keeping only
// the FIFO order of each sender-receiver pair, as the actor system does. Checkers watch every
// message: no pull answered beyond its staleness bound, no worker running ahead under BSP,
// no push lost or applied twice.
#define BOOST_TEST_MODULE ps_core_test
#include <array>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <set>

#include "common/bf16.h"
#include "common/finite.h"
#include "common/fp16.h"
#include "common/int8.h"
#include "data/generator.h"
#include "data/reader.h"
#include "gpu/reduce.h"
#include "ps/shard_core.h"
#include "tests/test_shard.h"
#include "worker/aggregator_core.h"
#include "worker/kv_client.h"
#include "worker/trainer.h"
#include "worker/worker_core.h"

using namespace colony;

namespace {

// A shard alone in its map (shard 0, node 0) for `senders`, rows of `width` floats updated by
// SGD at learning rate 1 (a push of g subtracts g), whose pull replies travel in `wire_format`.
std::unique_ptr<ShardCore> sgd_shard(std::vector<NodeId> senders, size_t width = 1,
                                     ValueFormat wire_format = ValueFormat::fp32) {
  OptimizerConfig sgd = default_optimizer_config(OptimizerKind::sgd);
  sgd.lr = 1.0f;
  ShardConfig sc{0, 0, width, sgd, RowInit{}, Consistency{}, senders, ShardMapSpec{1, 1, 16, 0}};
  sc.wire_format = wire_format;
  return std::move(ShardCore::make(sc).value());
}

struct Setup {
  uint32_t shards = 2;
  uint32_t workers = 2;
  Consistency consistency;
  bool hierarchical = false;
  size_t max_inflight = 2;
  size_t batch = 64;
  uint64_t rows = 2000;
  size_t part_bytes = part_bytes_default;  // the clients' (KvClient::Options::part_bytes)
  uint32_t read_ahead_batches = 0;         // the workers' (WorkerConfig::read_ahead_batches)
  TrainerConfig trainer;
  // Test-only fault: the shard checker is given a weaker bound than the shards enforce, or the
  // shards a weaker one than the checker, to prove the checker can fail.
  std::optional<Consistency> shard_consistency;
};

struct Violations {
  uint64_t stale_reads = 0;
  uint64_t ran_ahead = 0;
  std::vector<std::string> first;
  void note(const std::string& what) {
    if (first.size() < 5) first.push_back(what);
  }
};

class Driver {
 public:
  Driver(const Setup& s, uint64_t seed) : s_(s), rng_(seed) {
    data_ = std::make_shared<std::vector<Batch>>(
        generate_in_memory(GenOptions{s.rows, 10, 7, "", "libsvm", 0.001}).train);
    ShardMapSpec spec;
    spec.shards = s.shards;
    spec.vnodes_per_shard = 64;
    spec.seed = 3;
    const NodeId first_worker = s.shards, aggregator = s.shards + s.workers;
    std::vector<NodeId> shard_nodes, senders;
    for (uint32_t i = 0; i < s.shards; ++i) shard_nodes.push_back(i);
    if (s.hierarchical) senders.push_back(aggregator);
    for (uint32_t w = 0; !s.hierarchical && w < s.workers; ++w) senders.push_back(first_worker + w);
    for (uint32_t i = 0; i < s.shards; ++i) {
      ShardConfig c{i,
                    i,
                    s.trainer.model.width(),
                    s.trainer.optimizer,
                    RowInit{s.trainer.seed, 1, s.trainer.factor_init_std},
                    s.shard_consistency.value_or(s.consistency),
                    senders,
                    spec};
      shards_.push_back(std::move(ShardCore::make(c).value()));
    }
    for (uint32_t w = 0; w < s.workers; ++w) {
      WorkerConfig c{first_worker + w, s.trainer.model, spec,
                     shard_nodes,      std::nullopt,    s.max_inflight};
      if (s.hierarchical) c.aggregator = aggregator;
      c.part_bytes = s.part_bytes;
      c.read_ahead_batches = s.read_ahead_batches;
      workers_.push_back(std::move(WorkerCore::make(c).value()));
      readers_.push_back(make_memory_reader(data_, s.batch));
      batch_index_.push_back(0);
    }
    if (s.hierarchical) {
      AggregatorConfig c{aggregator, s.trainer.model.width(), spec, shard_nodes, {}};
      c.part_bytes = s.part_bytes;
      for (uint32_t w = 0; w < s.workers; ++w) c.replicas.push_back(first_worker + w);
      aggregator_ = std::move(AggregatorCore::make(c, make_cpu_reducer()).value());
    }
  }

  // Runs to the end; returns the violations seen.
  Violations run() {
    Outbox out;
    for (uint32_t w = 0; w < s_.workers; ++w) feed(w, out);
    enqueue(out);
    while (!channels_.empty()) {
      auto it = channels_.begin();
      std::advance(it, rng_.next() % channels_.size());
      auto& [key, queue] = *it;
      Outgoing msg = std::move(queue.front());
      queue.pop_front();
      const NodeId from = key.first;
      if (queue.empty()) channels_.erase(it);
      deliver(from, msg, out);
      enqueue(out);
    }
    return v_;
  }

  const std::vector<std::unique_ptr<ShardCore>>& shards() const { return shards_; }
  const std::vector<std::unique_ptr<WorkerCore>>& workers() const { return workers_; }
  uint64_t pushes_to_shards = 0;
  uint64_t push_parts_to_shards = 0;  // parts followed by more

 private:
  void feed(uint32_t w, Outbox& out) {
    WorkerCore& core = *workers_[w];
    while (core.wants_batch()) {
      // Worker w takes batches w, w+W, ... as the embedded cluster does.
      Batch b;
      bool got = false;
      while (true) {
        auto more = readers_[w]->next(b);
        BOOST_REQUIRE(more.ok());
        if (!*more) break;
        if (batch_index_[w]++ % s_.workers == w) {
          got = true;
          break;
        }
      }
      if (!got) {
        core.finish(out);
        return;
      }
      core.add_batch(std::move(b), out);
    }
  }

  void enqueue(Outbox& out) {
    for (Outgoing& o : out) {
      if (auto* pull = std::get_if<PullRequest>(&o.message))
        pull_clock_[{pull->header.sender, pull->header.request_id}] = pull->clock;
      if (auto* push = std::get_if<PushRequest>(&o.message); push && o.to < s_.shards) {
        pushes_to_shards += !push->more;  // a push in parts is applied once, at its last part
        push_parts_to_shards += push->more;
      }
      const NodeId from = std::visit([](auto& m) { return m.header.sender; }, o.message);
      channels_[{from, o.to}].push_back(std::move(o));
    }
    out.clear();
  }

  void deliver(NodeId from, const Outgoing& msg, Outbox& out) {
    (void)from;
    const NodeId to = msg.to;
    if (to < s_.shards) {
      shards_[to]->on_message(msg.message, out);
      return;
    }
    if (aggregator_ && to == s_.shards + s_.workers) {
      aggregator_->on_message(msg.message, out);
      BOOST_REQUIRE_MESSAGE(aggregator_->error().ok(), aggregator_->error().message());
      return;
    }
    const uint32_t w = to - s_.shards;
    if (auto* reply = std::get_if<PullReply>(&msg.message)) {
      const uint32_t clock = pull_clock_.at({to, reply->header.request_id});
      if (!s_.consistency.allows(clock, reply->min_clock)) {
        ++v_.stale_reads;
        v_.note("pull for step " + std::to_string(clock) + " answered at min clock " +
                std::to_string(reply->min_clock));
      }
    }
    WorkerCore& core = *workers_[w];
    core.on_message(msg.message, out);
    BOOST_REQUIRE_MESSAGE(core.error().ok(), core.error().message());
    feed(w, out);
    check_progress_bound(w);
  }

  // Under SSP(k) (BSP: k = 0) a worker that has pushed step t must not be more than k + 1
  // steps ahead of the slowest worker still training.
  void check_progress_bound(uint32_t w) {
    if (s_.consistency.kind == ConsistencyKind::asp) return;
    uint32_t slowest = clock_done;  // over workers that have not run out of batches
    for (const auto& other : workers_)
      if (!other->finished()) slowest = std::min(slowest, other->clock());
    if (slowest == clock_done) return;
    const uint32_t k = s_.consistency.kind == ConsistencyKind::bsp ? 0 : s_.consistency.staleness;
    if (workers_[w]->clock() > slowest + k + 1) {
      ++v_.ran_ahead;
      v_.note("worker " + std::to_string(w) + " at clock " + std::to_string(workers_[w]->clock()) +
              " while the slowest is at " + std::to_string(slowest));
    }
  }

  Setup s_;
  SplitMix64 rng_;
  std::shared_ptr<std::vector<Batch>> data_;
  std::vector<std::unique_ptr<ShardCore>> shards_;
  std::vector<std::unique_ptr<WorkerCore>> workers_;
  std::unique_ptr<AggregatorCore> aggregator_;
  std::vector<std::unique_ptr<BatchReader>> readers_;
  std::vector<uint64_t> batch_index_;
  std::map<std::pair<NodeId, NodeId>, std::deque<Outgoing>> channels_;
  std::map<std::pair<NodeId, uint64_t>, uint32_t> pull_clock_;
  Violations v_;
};

Setup base_setup() {
  Setup s;
  s.trainer.model = {ModelKind::fm, 4};
  s.trainer.optimizer = default_optimizer_config(OptimizerKind::ftrl);
  return s;
}

void check_no_push_lost_or_doubled(const Driver& d) {
  uint64_t applied = 0, duplicates = 0;
  for (const auto& shard : d.shards()) {
    applied += shard->stats().pushes_applied;
    duplicates += shard->stats().pushes_duplicate;
    BOOST_TEST(shard->min_clock() == clock_done);  // every sender finished, nothing skipped
  }
  BOOST_TEST(applied == d.pushes_to_shards);
  BOOST_TEST(duplicates == 0u);
  for (const auto& w : d.workers()) BOOST_TEST(w->done());
}

}  // namespace

// Also with every pull and push in parts (of at most 1 KiB: several a shard and step).
// And with the worker hinting 3 batches ahead of its pulls (PullHint), which changes nothing.
BOOST_AUTO_TEST_CASE(one_worker_bsp_matches_the_single_process_trainer_bit_for_bit) {
  for (size_t part_bytes : {part_bytes_default, part_bytes_min})
    for (bool hierarchical : {false, true}) {
      Setup s = base_setup();
      s.workers = 1;
      s.shards = 3;
      s.hierarchical = hierarchical;
      s.part_bytes = part_bytes;
      s.read_ahead_batches = part_bytes == part_bytes_min ? 3 : 0;
      Driver d(s, 11);
      const Violations v = d.run();
      BOOST_TEST(v.stale_reads == 0u);
      check_no_push_lost_or_doubled(d);
      uint64_t parts = 0;
      for (const auto& shard : d.shards()) parts += shard->stats().push_parts;
      BOOST_TEST(parts == d.push_parts_to_shards);
      BOOST_TEST((parts > 0) == (part_bytes == part_bytes_min));

      auto trainer = std::move(LocalTrainer::make(s.trainer).value());
      auto data = generate_in_memory(GenOptions{s.rows, 10, 7, "", "libsvm", 0.001}).train;
      auto reader = make_memory_reader(std::make_shared<std::vector<Batch>>(data), s.batch);
      Batch b;
      std::vector<uint64_t> keys;
      while (*reader->next(b)) {
        BOOST_REQUIRE(trainer->train_batch(b).ok());
        keys.insert(keys.end(), b.keys.begin(), b.keys.end());
      }
      keys.push_back(bias_key);
      const size_t width = s.trainer.model.width();
      std::vector<float> a(width), c(width);
      ShardMap map = ShardMap::make({1, s.shards, 64, 3}).value();
      size_t differ = 0;
      for (uint64_t key : keys) {
        trainer->row_value(key, a);
        d.shards()[map.shard_of(key)]->row_value(key, c);
        differ += std::memcmp(a.data(), c.data(), width * sizeof(float)) != 0;
      }
      BOOST_TEST(differ == 0u, "hierarchical=" << hierarchical << " part_bytes=" << part_bytes);
    }
}

BOOST_AUTO_TEST_CASE(consistency_bounds_hold_under_random_message_orderings) {
  struct Mode {
    Consistency c;
    bool hierarchical;
  };
  const Mode modes[] = {{{ConsistencyKind::bsp, 0}, false}, {{ConsistencyKind::ssp, 1}, false},
                        {{ConsistencyKind::ssp, 3}, false}, {{ConsistencyKind::bsp, 0}, true},
                        {{ConsistencyKind::ssp, 2}, true},  {{ConsistencyKind::asp, 0}, false}};
  for (const Mode& m : modes) {
    for (uint64_t seed = 1; seed <= 25; ++seed) {
      Setup s = base_setup();
      s.workers = 3;
      s.shards = 2;
      s.consistency = m.c;
      s.hierarchical = m.hierarchical;
      s.max_inflight = 1 + seed % 3;
      if (seed % 5 == 0) {  // at times more steps in flight than 8, over batches enough to hint
        s.max_inflight = 12;
        s.rows = 8000;
      }
      s.part_bytes = seed % 2 ? part_bytes_min : part_bytes_default;  // half of them in parts
      s.read_ahead_batches = uint32_t(seed / 2 % 3);  // hints 0, 1 or 2 batches ahead of pulls
      Driver d(s, seed);
      const Violations v = d.run();
      BOOST_TEST_CONTEXT(to_string(m.c)
                         << (m.hierarchical ? " hierarchical" : " flat") << " seed " << seed) {
        BOOST_TEST(v.stale_reads == 0u, (v.first.empty() ? "" : v.first.front()));
        BOOST_TEST(v.ran_ahead == 0u, (v.first.empty() ? "" : v.first.front()));
        check_no_push_lost_or_doubled(d);
        uint64_t hints = 0, dropped = 0, left_out = 0, unknown = 0;
        for (const auto& shard : d.shards()) {
          hints += shard->stats().hints;
          dropped += shard->stats().hints_dropped;
          left_out += shard->stats().push_parts_keys_left_out;
          unknown += shard->stats().push_keys_unknown;
        }
        BOOST_TEST((hints > 0) == (s.read_ahead_batches > 0));
        BOOST_TEST(dropped == 0u);
        // Pushes leave their pulls' keys out, and no shard (none restarts here) lacks them.
        BOOST_TEST(left_out > 0u);
        BOOST_TEST(unknown == 0u);
      }
    }
  }
}

// Read-ahead: with one step pulling at a time and two batches hinted beyond it, a worker sends
// the pulls of its first batch and PullHints naming exactly the unique keys of the next two, each
// to the shard that owns them; a batch's pulls go out once the step before it is pushed.
BOOST_AUTO_TEST_CASE(a_worker_hints_the_keys_of_the_batches_beyond_its_pulls) {
  Setup s = base_setup();
  ShardMapSpec spec{1, 2, 64, 3};
  const ShardMap map = ShardMap::make(spec).value();
  WorkerConfig c{2, s.trainer.model, spec, {0, 1}, std::nullopt, 1};
  c.read_ahead_batches = 2;
  c.part_bytes = part_bytes_min;  // hints in parts too
  auto w = std::move(WorkerCore::make(c).value());
  auto data = generate_in_memory(GenOptions{400, 10, 7, "", "libsvm", 0.001}).train;
  auto reader = make_memory_reader(std::make_shared<std::vector<Batch>>(data), 64);
  std::vector<Batch> batches;
  Outbox out;
  while (w->wants_batch()) {
    Batch b;
    BOOST_REQUIRE(*reader->next(b));
    batches.push_back(b);
    w->add_batch(std::move(b), out);
  }
  BOOST_TEST(batches.size() == 3u);
  BOOST_TEST(w->in_flight() == 3u);
  std::set<uint64_t> pulled, hinted;
  size_t hinted_keys = 0;
  std::vector<Outgoing> pulls;
  for (const Outgoing& o : out) {
    if (auto* p = std::get_if<PullRequest>(&o.message)) {
      BOOST_TEST(p->clock == 0u);
      pulled.insert(p->keys.begin(), p->keys.end());
      pulls.push_back(o);
    } else {
      const auto& h = std::get<PullHint>(o.message);
      BOOST_TEST(h.keys.size() * sizeof(uint64_t) <= part_bytes_min);
      for (uint64_t k : h.keys) BOOST_TEST(map.shard_of(k) == o.to);
      hinted.insert(h.keys.begin(), h.keys.end());
      hinted_keys += h.keys.size();
    }
  }
  auto unique_keys = [&](std::initializer_list<size_t> of) {
    std::set<uint64_t> keys{bias_key};
    for (size_t i : of) keys.insert(batches[i].keys.begin(), batches[i].keys.end());
    return keys;
  };
  BOOST_TEST((pulled == unique_keys({0})));
  // Batches 1 and 2 were hinted one after the other: their keys, each once per batch.
  BOOST_TEST((hinted == unique_keys({1, 2})));
  BOOST_TEST(hinted_keys == unique_keys({1}).size() + unique_keys({2}).size());
  BOOST_TEST(w->stats().hint_messages == out.size() - pulls.size());
  // Answer batch 0's pulls: step 0 is pushed and batch 1's pulls go out, for step 1.
  out.clear();
  for (const Outgoing& o : pulls) {
    const auto& p = std::get<PullRequest>(o.message);
    w->on_message(PullReply{{o.to, p.header.request_id, 1},
                            0,
                            std::vector<float>(p.keys.size() * s.trainer.model.width(), 0.0f)},
                  out);
  }
  BOOST_REQUIRE(w->error().ok());
  std::set<uint64_t> next;
  bool pushed = false;
  for (const Outgoing& o : out) {
    if (auto* p = std::get_if<PullRequest>(&o.message)) {
      BOOST_TEST(p->clock == 1u);
      next.insert(p->keys.begin(), p->keys.end());
    }
    pushed |= std::holds_alternative<PushRequest>(o.message);
    BOOST_TEST(!std::holds_alternative<PullHint>(o.message));
  }
  BOOST_TEST(pushed);
  BOOST_TEST((next == unique_keys({1})));
  BOOST_TEST(w->wants_batch());  // room for one more batch, hinted in its turn
}

// The checker can fail: shards that enforce ASP while the job asked for BSP are caught.
BOOST_AUTO_TEST_CASE(a_shard_that_skips_the_gate_is_caught) {
  uint64_t caught = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Setup s = base_setup();
    s.workers = 3;
    s.consistency = {ConsistencyKind::bsp, 0};
    s.shard_consistency = Consistency{ConsistencyKind::asp, 0};
    Driver d(s, seed);
    const Violations v = d.run();
    caught += v.stale_reads > 0;
  }
  BOOST_TEST(caught >= 8u);
}

BOOST_AUTO_TEST_CASE(shard_answers_a_stale_map_with_the_new_one_and_the_worker_retries) {
  Setup s = base_setup();
  ShardMapSpec old_spec{1, 2, 64, 3}, new_spec{2, 2, 64, 3};
  ShardConfig sc{0,
                 0,
                 s.trainer.model.width(),
                 s.trainer.optimizer,
                 RowInit{1, 1, 0.01f},
                 Consistency{ConsistencyKind::asp, 0},
                 {5},
                 new_spec};
  auto shard = std::move(ShardCore::make(sc).value());
  WorkerConfig wc{5, s.trainer.model, old_spec, {0, 1}, std::nullopt, 1};
  auto worker = std::move(WorkerCore::make(wc).value());
  Batch b;
  b.add_feature(make_key(1, 42), 1.0f);
  b.finish_row(1.0f);
  Outbox out;
  worker->add_batch(b, out);
  // Deliver the pull for shard 0 (version 1) to a shard at version 2.
  Outbox replies;
  for (auto& o : out)
    if (o.to == 0) shard->on_message(o.message, replies);
  BOOST_REQUIRE_EQUAL(replies.size(), 1u);
  BOOST_TEST(std::holds_alternative<ShardMapUpdate>(replies[0].message));
  Outbox retry;
  worker->on_message(replies[0].message, retry);
  BOOST_TEST(worker->stats().pull_retries == 1u);
  bool resent = false;
  for (auto& o : retry)
    if (auto* p = std::get_if<PullRequest>(&o.message)) resent |= p->header.map_version == 2;
  BOOST_TEST(resent);
}

BOOST_AUTO_TEST_CASE(shard_refuses_out_of_order_and_ignores_duplicate_pushes) {
  Setup s = base_setup();
  s.trainer.model = {ModelKind::lr, 0};
  ShardMapSpec spec{1, 1, 16, 0};
  ShardConfig sc{
      0, 0, 1, default_optimizer_config(OptimizerKind::sgd), RowInit{}, Consistency{}, {7}, spec};
  auto shard = std::move(ShardCore::make(sc).value());
  Outbox out;
  PushRequest p{{7, 1, 1}, 1, {make_key(1, 1)}, {1.0f}};
  shard->on_message(p, out);
  shard->on_message(p, out);  // a retry of the same step
  BOOST_TEST(shard->stats().pushes_applied == 1u);
  BOOST_TEST(shard->stats().pushes_duplicate == 1u);
  PushRequest skip{{7, 2, 1}, 3, {make_key(1, 1)}, {1.0f}};
  out.clear();
  shard->on_message(skip, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST((std::get<PsError>(out[0].message).code == PsErrorCode::out_of_order));
  PushRequest bad{{7, 3, 1}, 2, {make_key(1, 1)}, {1.0f, 2.0f}};
  out.clear();
  shard->on_message(bad, out);
  BOOST_TEST((std::get<PsError>(out[0].message).code == PsErrorCode::bad_request));
  PushRequest stranger{{9, 1, 1}, 1, {make_key(1, 1)}, {1.0f}};
  out.clear();
  shard->on_message(stranger, out);
  BOOST_TEST((std::get<PsError>(out[0].message).code == PsErrorCode::bad_request));
}

// A push in parts (PushRequest::more): each part is acknowledged and kept; nothing of it reaches
// a row or a clock before its last part, and then all of it does, once (the whole push again is
// a duplicate). A part out of protocol drops the parts kept and is refused: one of another step,
// a clock advance in the middle, a part not finite, a part from a node that is not a sender.
BOOST_AUTO_TEST_CASE(a_push_in_parts_is_applied_whole_at_its_last_part_and_once) {
  auto shard = sgd_shard({7});
  const uint64_t k1 = make_key(1, 1), k2 = make_key(1, 2), k3 = make_key(1, 3);
  auto value = [&](uint64_t key) {
    float v = 0;
    shard->row_value(key, {&v, 1});
    return v;
  };
  const float v1 = value(k1), v2 = value(k2), v3 = value(k3);
  auto part = [](uint64_t request, uint32_t clock, uint64_t key, float g, bool more) {
    return PushRequest{{7, request, 1}, clock, {key}, {g}, ValueFormat::fp32, more};
  };
  auto refused = [](const Outbox& out, const std::string& says) {
    if (out.empty()) return false;
    auto* e = std::get_if<PsError>(&out.back().message);
    return e && e->code == PsErrorCode::bad_request && e->message.find(says) != std::string::npos;
  };
  Outbox out;
  shard->on_message(part(1, 1, k1, 1.0f, true), out);
  shard->on_message(part(2, 1, k2, 2.0f, true), out);
  BOOST_REQUIRE_EQUAL(out.size(), 2u);
  for (const Outgoing& o : out) BOOST_TEST(std::holds_alternative<PushAck>(o.message));
  BOOST_TEST(shard->stats().push_parts == 2u);
  BOOST_TEST(shard->stats().pushes_applied == 0u);
  BOOST_TEST(shard->min_clock() == 0u);
  BOOST_TEST(value(k1) == v1);
  shard->on_message(part(3, 1, k3, 4.0f, false), out);
  BOOST_TEST(shard->stats().pushes_applied == 1u);
  BOOST_TEST(shard->stats().rows_pushed == 3u);
  BOOST_TEST(shard->min_clock() == 1u);
  BOOST_TEST(value(k1) == v1 - 1.0f);
  BOOST_TEST(value(k2) == v2 - 2.0f);
  BOOST_TEST(value(k3) == v3 - 4.0f);
  // The whole push again (a retry): acknowledged part by part, applied no more; its parts
  // before the last are not even kept (their step is past).
  out.clear();
  shard->on_message(part(4, 1, k1, 1.0f, true), out);
  shard->on_message(part(5, 1, k2, 2.0f, true), out);
  shard->on_message(part(6, 1, k3, 4.0f, false), out);
  BOOST_TEST(out.size() == 3u);
  BOOST_TEST(shard->stats().pushes_duplicate == 1u);
  BOOST_TEST(shard->stats().push_parts_duplicate == 2u);
  BOOST_TEST(value(k1) == v1 - 1.0f);
  // A part of step 3 while the push of step 2 is in parts: refused, and step 2's part dropped.
  out.clear();
  shard->on_message(part(7, 2, k1, 8.0f, true), out);
  shard->on_message(part(8, 3, k2, 8.0f, false), out);
  BOOST_TEST(refused(out, "was not finished"));
  shard->on_message(part(9, 2, k3, 8.0f, false), out);  // step 2 is then its last part only
  BOOST_TEST(shard->min_clock() == 2u);
  BOOST_TEST(value(k1) == v1 - 1.0f);
  BOOST_TEST(value(k3) == v3 - 12.0f);
  // A clock advance in the middle of a push in parts: refused, the parts dropped, no clock.
  shard->on_message(part(10, 3, k1, 16.0f, true), out);
  shard->on_message(ClockAdvance{{7, 11, 1}, 3}, out);
  BOOST_TEST(refused(out, "was not finished"));
  BOOST_TEST(shard->min_clock() == 2u);
  // A part that is not finite refuses the whole push, the parts before it too.
  shard->on_message(part(12, 3, k1, 16.0f, true), out);
  shard->on_message(part(13, 3, k2, std::numeric_limits<float>::quiet_NaN(), true), out);
  BOOST_TEST(refused(out, "nothing of it was applied"));
  shard->on_message(part(14, 3, k3, 16.0f, false), out);
  BOOST_TEST(value(k1) == v1 - 1.0f);
  BOOST_TEST(value(k3) == v3 - 28.0f);
  // Parts from a node that is not a sender are not kept.
  PushRequest stranger = part(1, 1, k1, 1.0f, true);
  stranger.header.sender = 9;
  shard->on_message(stranger, out);
  BOOST_TEST(refused(out, "is not a sender"));
  BOOST_TEST(shard->stats().push_parts == 5u);
  BOOST_TEST(shard->stats().pushes_applied == 3u);
  // A sender declared done (the coordinator's word for a lost worker: clock_done, resync, request
  // id 0, below its parts') in the middle of a push in parts: the parts are dropped, and its clock
  // is done all the same, or the slowest clock would stay behind for good and pulls under BSP
  // wait for ever. Nobody is told: the sender is gone.
  out.clear();
  shard->on_message(part(15, 4, k1, 32.0f, true), out);
  BOOST_TEST(shard->stats().push_parts == 6u);
  shard->on_message(ClockAdvance{{7, 0, 1}, clock_done, true}, out);
  BOOST_TEST(!refused(out, "was not finished"));
  BOOST_TEST(shard->min_clock() == clock_done);
  BOOST_TEST(value(k1) == v1 - 1.0f);
}

// A late copy of a step applied already (a part, a last part, a part naming a pull the shard no
// longer holds, a clock advance) that comes while the sender's next push is in parts is a
// duplicate: acknowledged (a push's) or ignored, never refused; the open push stays whole and is
// applied with its last part, and the sender's client hears no refusal.
BOOST_AUTO_TEST_CASE(late_copies_of_an_applied_step_leave_a_push_in_parts_whole) {
  auto shard = sgd_shard({7});
  const uint64_t k1 = make_key(1, 1), k2 = make_key(1, 2);
  auto value = [&](uint64_t key) {
    float v = 0;
    shard->row_value(key, {&v, 1});
    return v;
  };
  const float v1 = value(k1), v2 = value(k2);
  auto part = [](uint64_t request, uint32_t clock, uint64_t key, float g, bool more) {
    return PushRequest{{7, request, 1}, clock, {key}, {g}, ValueFormat::fp32, more};
  };
  Outbox out;
  shard->on_message(part(1, 1, k1, 1.0f, true), out);
  shard->on_message(part(2, 1, k2, 1.0f, false), out);
  shard->on_message(ClockAdvance{{7, 3, 1}, 2}, out);
  BOOST_REQUIRE_EQUAL(shard->min_clock(), 2u);
  // Step 3 in parts; late copies of steps 1 and 2 come in the middle.
  shard->on_message(part(4, 3, k1, 2.0f, true), out);
  PushRequest named = part(1, 1, 0, 1.0f, true);
  named.keys.clear();
  named.keys_of_pull = 99;  // a pull the shard does not hold
  out.clear();
  for (const PsMessage& copy :
       {PsMessage{part(1, 1, k1, 1.0f, true)}, PsMessage{part(2, 1, k2, 1.0f, false)},
        PsMessage{named}, PsMessage{ClockAdvance{{7, 3, 1}, 2}}})
    shard->on_message(copy, out);
  BOOST_TEST(out.size() == 3u);  // the pushes' acknowledgements; nothing answers a clock
  for (const Outgoing& o : out) BOOST_TEST(std::holds_alternative<PushAck>(o.message));
  BOOST_TEST(shard->stats().push_parts_duplicate == 2u);
  BOOST_TEST(shard->stats().pushes_duplicate == 1u);
  BOOST_TEST(shard->stats().push_keys_unknown == 0u);
  shard->on_message(part(5, 3, k2, 4.0f, false), out);
  BOOST_TEST(shard->min_clock() == 3u);
  BOOST_TEST(shard->stats().pushes_applied == 2u);
  BOOST_TEST(value(k1) == v1 - 3.0f);
  BOOST_TEST(value(k2) == v2 - 5.0f);
}

// A NaN or infinite gradient never reaches a row: the push is refused whole (its finite rows
// too), naming the key, and its clock does not count, so the same step pushed again with finite
// gradients is applied; the rows end as a shard's that never saw the bad pushes.
BOOST_AUTO_TEST_CASE(a_push_with_a_gradient_that_is_not_finite_is_refused_whole) {
  ShardMapSpec spec{1, 1, 16, 0};
  ShardConfig sc{
      0, 0, 2, default_optimizer_config(OptimizerKind::sgd), RowInit{}, Consistency{}, {7}, spec};
  auto lied_to = std::move(ShardCore::make(sc).value());
  auto plain = std::move(ShardCore::make(sc).value());
  const std::vector<uint64_t> keys = {make_key(1, 1), make_key(1, 2)};
  Outbox out;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  lied_to->on_message(PushRequest{{7, 1, 1}, 1, keys, {1.0f, 2.0f, 3.0f, nan}}, out);
  lied_to->on_message(PushRequest{{7, 2, 1}, 1, keys, {-inf, 2.0f, 3.0f, 4.0f}}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 2u);
  const PsError& first = std::get<PsError>(out[0].message);
  BOOST_TEST((first.code == PsErrorCode::bad_request));
  BOOST_TEST(first.message.find("push of step 1 from node 7 holds a gradient of nan for key " +
                                std::to_string(keys[1])) != std::string::npos,
             first.message);
  BOOST_TEST(
      std::get<PsError>(out[1].message).message.find("-inf for key " + std::to_string(keys[0])) !=
          std::string::npos,
      std::get<PsError>(out[1].message).message);
  BOOST_TEST(lied_to->stats().pushes_not_finite == 2u);
  BOOST_TEST(lied_to->stats().pushes_applied == 0u);
  const PushRequest good{{7, 3, 1}, 1, keys, {1.0f, 2.0f, 3.0f, 4.0f}};
  for (auto* shard : {lied_to.get(), plain.get()}) {
    out.clear();
    shard->on_message(good, out);
    BOOST_REQUIRE_EQUAL(out.size(), 1u);
    BOOST_TEST(std::holds_alternative<PushAck>(out[0].message));
    BOOST_TEST(shard->stats().pushes_applied == 1u);
  }
  auto rows = [&](ShardCore& shard) {
    Outbox o;
    shard.on_message(PullRequest{{7, 4, 1}, 1, 7, keys}, o);
    BOOST_REQUIRE_EQUAL(o.size(), 1u);
    const FloatBuffer& v = std::get<PullReply>(o[0].message).values;
    return std::vector<float>(v.begin(), v.end());
  };
  BOOST_TEST(rows(*lied_to) == rows(*plain), boost::test_tools::per_element());
}

// A finite gradient that would overflow a row (a step size far too large) is not applied to
// that row, which keeps its last finite value; the push's other rows are updated, the push is
// acknowledged, and the refused update is counted and named.
BOOST_AUTO_TEST_CASE(an_update_that_would_overflow_a_row_leaves_it_as_it_was) {
  ShardMapSpec spec{1, 1, 16, 0};
  OptimizerConfig huge = default_optimizer_config(OptimizerKind::sgd);
  huge.lr = 1e37f;
  ShardConfig sc{0, 0, 2, huge, RowInit{}, Consistency{}, {7}, spec};
  auto shard = std::move(ShardCore::make(sc).value());
  const std::vector<uint64_t> keys = {make_key(1, 1), make_key(1, 2)};
  auto rows = [&] {
    Outbox o;
    shard->on_message(PullRequest{{7, 9, 1}, 0, 7, keys}, o);
    BOOST_REQUIRE_EQUAL(o.size(), 1u);
    const FloatBuffer& v = std::get<PullReply>(o[0].message).values;
    return std::vector<float>(v.begin(), v.end());
  };
  const std::vector<float> before = rows();
  Outbox out;
  // Key 1: 1e37 x 100 overflows; key 2: 1e37 x 1e-37 is a step of 1.
  shard->on_message(PushRequest{{7, 1, 1}, 1, keys, {100.0f, 0.0f, 1e-37f, 0.0f}}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST(std::holds_alternative<PushAck>(out[0].message));
  BOOST_TEST(shard->stats().updates_not_finite == 1u);
  BOOST_TEST(shard->last_row_not_finite().key == keys[0]);
  BOOST_TEST(shard->last_row_not_finite().sender == 7u);
  BOOST_TEST(shard->last_row_not_finite().clock == 1u);
  const std::vector<float> after = rows();
  BOOST_TEST(after[0] == before[0]);  // kept
  BOOST_TEST(after[1] == before[1]);
  BOOST_TEST(after[2] == before[2] - 1.0f, boost::test_tools::tolerance(1e-6f));  // applied
  BOOST_TEST(first_not_finite(after) == after.size());
}

// What a listed key could send a shard over the wire: replies (only clients take them) are
// dropped and counted; pulls waiting for the gate are bounded per sender, the rest refused.
BOOST_AUTO_TEST_CASE(a_shard_drops_replies_and_bounds_waiting_pulls) {
  ShardMapSpec spec;
  spec.shards = 1;
  ShardConfig sc{
      0,      0,   1, default_optimizer_config(OptimizerKind::sgd), RowInit{}, Consistency{},
      {7, 8}, spec};
  sc.waiting_pull_keys_max = shard_waiting_pulls_per_sender_max + 10;
  auto shard = std::move(ShardCore::make(sc).value());
  Outbox out;
  shard->on_message(PullReply{{7, 1, spec.version}, 0, {1.0f}}, out);
  shard->on_message(PushAck{{7, 2, spec.version}}, out);
  BOOST_TEST(out.empty());
  BOOST_TEST(shard->stats().messages_refused == 2u);
  // Sender 8 never advances: under BSP, pulls of node 7 for step 5 wait.
  for (uint64_t i = 0; i < shard_waiting_pulls_per_sender_max; ++i)
    shard->on_message(PullRequest{{7, 10 + i, spec.version}, 5, 7, {make_key(1, 1)}}, out);
  BOOST_TEST(out.empty());
  BOOST_TEST(shard->stats().pulls_deferred == shard_waiting_pulls_per_sender_max);
  shard->on_message(PullRequest{{7, 999, spec.version}, 5, 7, {make_key(1, 1)}}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST((std::get<PsError>(out[0].message).code == PsErrorCode::bad_request));
  BOOST_TEST(shard->stats().messages_refused == 3u);
  // Another sender's pulls still wait, up to the keys bound.
  out.clear();
  shard->on_message(PullRequest{{8, 1, spec.version}, 5, 8, {make_key(1, 1)}}, out);
  BOOST_TEST(out.empty());
  const std::vector<uint64_t> many(shard_waiting_pulls_per_sender_max + 10, make_key(1, 2));
  shard->on_message(PullRequest{{8, 2, spec.version}, 5, 8, many}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST(std::get<PsError>(out[0].message).message.find("1 pulls of 1 keys waiting") !=
             std::string::npos);
  shard->on_message(PullRequest{{8, 3, spec.version}, 5, 8, {many.begin(), many.end() - 1}}, out);
  BOOST_TEST(out.size() == 1u);  // waits: exactly at the bound
  // Once the gate opens, every waiting pull is answered and the bounds count from nothing.
  out.clear();
  for (uint32_t c = 1; c <= 5; ++c)
    for (NodeId sender : {7, 8})
      shard->on_message(ClockAdvance{{sender, 10000 + c, spec.version}, c}, out);
  BOOST_TEST(out.size() == shard_waiting_pulls_per_sender_max + 2);
  out.clear();
  shard->on_message(PullRequest{{8, 4, spec.version}, 9, 8, many}, out);
  BOOST_TEST(out.empty());
}

BOOST_AUTO_TEST_CASE(consistency_flag_parses) {
  BOOST_TEST((parse_consistency("bsp").value().kind == ConsistencyKind::bsp));
  BOOST_TEST((parse_consistency("asp").value().kind == ConsistencyKind::asp));
  BOOST_TEST(parse_consistency("ssp:4").value().staleness == 4u);
  for (const char* bad : {"", "ssp", "ssp:", "ssp:-1", "ssp:x", "SSP:1", "ssp:1a"})
    BOOST_TEST(!parse_consistency(bad).ok(), bad);
}

// A store that does not promise stable row pointers (as a tiered store cannot) gets the same
// results: the shard then looks rows up again for every push.
BOOST_AUTO_TEST_CASE(shard_gives_the_same_rows_over_a_store_without_stable_pointers) {
  using Unstable = colony::testing::UnstableStore;
  const ShardConfig sc = colony::testing::small_adagrad_shard();
  const size_t state = make_optimizer(sc.optimizer).value()->state_floats(3);
  auto stable = std::move(ShardCore::make(sc).value());
  auto unstable = std::move(ShardCore::make(sc, std::make_unique<Unstable>(3 + state)).value());
  BOOST_TEST(!ShardCore::make(sc, std::make_unique<Unstable>(2)).ok());  // wrong row size
  std::vector<uint64_t> keys{make_key(1, 1), make_key(1, 2), make_key(2, 9)};
  std::vector<float> grads{1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (uint32_t step = 0; step < 3; ++step) {
    Outbox a, b;
    PullRequest pull{{7, 2 * step + 1, 1}, step, 7, keys};
    PushRequest push{{7, 2 * step + 2, 1}, step + 1, keys, grads};
    for (ShardCore* s : {stable.get(), unstable.get()}) {
      Outbox& o = s == stable.get() ? a : b;
      s->on_message(pull, o);
      s->on_message(push, o);
    }
    BOOST_REQUIRE_EQUAL(a.size(), b.size());
    BOOST_TEST(std::get<PullReply>(a[0].message).values ==
               std::get<PullReply>(b[0].message).values);
  }
  BOOST_TEST(stable->stats().pushes_reusing_pull_rows == 3u);
  BOOST_TEST(unstable->stats().pushes_reusing_pull_rows == 0u);
  std::vector<float> x(3), y(3);
  for (uint64_t k : keys) {
    stable->row_value(k, x);
    unstable->row_value(k, y);
    BOOST_TEST(x == y);
  }
}

// Over a compact store of fp32 parts (storage/compact_store.h), a shard computes exactly what it
// does over the memory store; with int8 rows and optimizer state, rows stay close to them, and
// take 4 bytes plus one a value instead of 4 a value (in each part).
BOOST_AUTO_TEST_CASE(shard_over_a_compact_store_gives_the_memory_stores_rows) {
  const ShardConfig sc = colony::testing::small_adagrad_shard();
  auto memory = std::move(ShardCore::make(sc).value());
  auto compact = [&](ValueFormat f) {
    auto parts = ShardCore::row_parts(sc, f, f).value();
    return std::move(ShardCore::make(sc, std::move(CompactRowStore::make(parts).value())).value());
  };
  auto fp32 = compact(ValueFormat::fp32), int8 = compact(ValueFormat::int8);
  // Adam's state is refused in int8 (check_state_format), taken in fp16.
  ShardConfig adam = sc;
  adam.optimizer = default_optimizer_config(OptimizerKind::adam);
  BOOST_TEST(!ShardCore::row_parts(adam, ValueFormat::int8, ValueFormat::int8).ok());
  BOOST_TEST(ShardCore::row_parts(adam, ValueFormat::int8, ValueFormat::fp16).value().size() == 4u);
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 50; ++i) keys.push_back(make_key(1 + i % 3, i));
  std::vector<float> grads(keys.size() * 3);
  for (uint32_t step = 0; step < 20; ++step) {
    for (size_t i = 0; i < grads.size(); ++i)
      grads[i] = float(int(mix64(step * 1000 + i) % 21) - 10) / 10;
    for (ShardCore* s : {memory.get(), fp32.get(), int8.get()}) {
      Outbox out;
      s->on_message(PullRequest{{7, 2 * step + 1, 1}, step, 7, keys}, out);
      s->on_message(PushRequest{{7, 2 * step + 2, 1}, step + 1, keys, grads}, out);
      BOOST_REQUIRE_EQUAL(out.size(), 2u);
    }
  }
  BOOST_TEST(memory->table_bytes() == 50u * 6 * 4);
  BOOST_TEST(fp32->table_bytes() == 50u * 6 * 4);
  BOOST_TEST(int8->table_bytes() == 50u * 16);  // two parts of 3 codes and a scale: 14, padded
  std::vector<float> x(3), y(3), z(3);
  double largest = 0;
  for (uint64_t k : keys) {
    memory->row_value(k, x);
    fp32->row_value(k, y);
    int8->row_value(k, z);
    BOOST_TEST(x == y);
    for (size_t j = 0; j < 3; ++j) largest = std::max(largest, double(std::fabs(x[j] - z[j])));
  }
  BOOST_TEST(largest < 0.05);
  BOOST_TEST(largest > 0.0);
}

// The rows a shard keeps from a writer's pulls for their pushes are bounded in number
// (ShardConfig::answered_rows_max): past it the oldest pulls are forgotten, a pull larger than
// the bound is not kept at all, and their pushes look their rows up. Results do not change.
BOOST_AUTO_TEST_CASE(shard_keeps_a_bounded_number_of_pulled_rows_per_writer) {
  ShardConfig sc = colony::testing::small_adagrad_shard();
  sc.answered_rows_max = 250;
  auto bounded = std::move(ShardCore::make(sc).value());
  auto whole = std::move(ShardCore::make(colony::testing::small_adagrad_shard()).value());
  // Pulls of 100 keys (parts 0-2) and one of 300 keys (3), over the bound. Step 0 pulls parts
  // 0-2 (the first is forgotten at the third), step 1 part 3, step 2 parts 0-1 (all kept); then
  // each step pushes them back, as parts of one push.
  std::vector<std::vector<uint64_t>> parts(4);
  for (uint64_t p = 0; p < 3; ++p)
    for (uint64_t i = 0; i < 100; ++i) parts[p].push_back(make_key(1, p * 100 + i));
  for (uint64_t i = 0; i < 300; ++i) parts[3].push_back(make_key(2, i));
  const std::vector<std::vector<size_t>> steps = {{0, 1, 2}, {3}, {0, 1}};
  for (ShardCore* s : {bounded.get(), whole.get()}) {
    uint64_t id = 1;
    Outbox out;
    for (uint32_t step = 0; step < steps.size(); ++step) {
      for (size_t p : steps[step]) s->on_message(PullRequest{{7, id++, 1}, step, 7, parts[p]}, out);
      for (size_t p : steps[step]) {
        PushRequest push{
            {7, id++, 1}, step + 1, parts[p], std::vector<float>(parts[p].size() * 3, 0.25f)};
        push.more = p != steps[step].back();
        s->on_message(push, out);
      }
    }
    for (const auto& m : out) BOOST_TEST(!std::holds_alternative<PsError>(m.message));
  }
  // Pushes that found all their parts' rows kept: the last step's only, and every step's.
  BOOST_TEST(bounded->stats().pushes_reusing_pull_rows == 1u);
  BOOST_TEST(whole->stats().pushes_reusing_pull_rows == 3u);
  std::vector<float> x(3), y(3);
  for (const auto& keys : parts)
    for (uint64_t k : keys) {
      bounded->row_value(k, x);
      whole->row_value(k, y);
      BOOST_TEST(x == y);
    }
}

// Replies that answer no open request, or a request of the other kind, come from a peer over
// the wire: the client drops and counts them, and the requests they name stay open until their
// own replies come.
BOOST_AUTO_TEST_CASE(a_client_drops_replies_that_answer_nothing_it_asked) {
  auto client = std::move(KvClient::make({5, ShardMapSpec{1, 1, 16, 0}, {0}, 2, false}).value());
  Outbox out;
  const std::vector<uint64_t> keys = {1, 2};
  std::vector<float> values(4, -1.0f);
  const auto pull = client->pull(keys, 0, 5, values, out);
  const auto push = client->push(keys, std::vector<float>(4, 0.5f), 1, out);
  BOOST_REQUIRE_EQUAL(out.size(), 2u);
  const uint64_t pull_id = std::get<PullRequest>(out[0].message).header.request_id;
  const uint64_t push_id = std::get<PushRequest>(out[1].message).header.request_id;
  Outbox ignored;
  client->on_message(PushAck{{0, 999, 1}}, ignored);                         // no such request
  client->on_message(PushAck{{0, pull_id, 1}}, ignored);                     // a pull's id
  client->on_message(PullReply{{0, push_id, 1}, 0, {1, 2, 3, 4}}, ignored);  // a push's id
  // From another node than the shard asked: a lie in the name of this pull, its push, and
  // a refusal of a request it did not get; then a refusal of nothing open.
  client->on_message(PullReply{{7, pull_id, 1}, 0, {9, 9, 9, 9}}, ignored);
  client->on_message(PushAck{{7, push_id, 1}}, ignored);
  client->on_message(PsError{{7, pull_id, 1}, PsErrorCode::bad_request, "lie"}, ignored);
  client->on_message(PsError{{0, 12345, 1}, PsErrorCode::bad_request, "nothing"}, ignored);
  client->on_message(PullRequest{{0, 1, 1}, 0, 0, {1}}, ignored);  // a request, to a client
  BOOST_TEST(client->replies_dropped() == 8u);
  BOOST_TEST(!client->done(pull));
  BOOST_TEST(!client->done(push));
  BOOST_TEST(client->error().ok());
  client->on_message(PullReply{{0, pull_id, 1}, 0, {1, 2, 3, 4}}, ignored);
  client->on_message(PushAck{{0, push_id, 1}}, ignored);
  BOOST_TEST(client->done(pull));
  BOOST_TEST(client->done(push));
  BOOST_TEST((values == std::vector<float>{1, 2, 3, 4}));
  client->on_message(PushAck{{0, push_id, 1}}, ignored);  // a duplicate
  BOOST_TEST(client->replies_dropped() == 9u);
  BOOST_TEST(client->error().ok());
  BOOST_TEST(ignored.empty());
}

// Nothing answers a ClockAdvance but a refusal. A shard that refuses one (here: it skips a step)
// leaves the sender's clock behind for good, so the client fails, naming the refusal, instead of
// dropping it as a reply to nothing; a refusal of a ClockAdvance from another node than its
// shard, or read after a later reply from that shard (which took the ClockAdvance before it), is
// dropped as any reply to nothing.
BOOST_AUTO_TEST_CASE(a_client_fails_when_a_shard_refuses_its_clock_advance) {
  auto shard = sgd_shard({5});
  auto client = std::move(KvClient::make({5, ShardMapSpec{1, 1, 16, 0}, {0}, 1, false}).value());
  Outbox out, replies;
  client->push({}, {}, 1, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  const uint64_t first = std::get<ClockAdvance>(out[0].message).header.request_id;
  shard->on_message(out[0].message, replies);
  BOOST_TEST(replies.empty());  // taken: nothing answers it
  // A pull answered after it: the first ClockAdvance was taken; a refusal of it now is a lie.
  out.clear();
  std::vector<float> values(1);
  const uint64_t k = make_key(1, 1);
  client->pull(std::span(&k, 1), 1, 5, values, out);
  shard->on_message(out[0].message, replies);
  BOOST_REQUIRE_EQUAL(replies.size(), 1u);
  Outbox ignored;
  client->on_message(replies[0].message, ignored);
  const uint64_t before = client->replies_dropped();
  client->on_message(PsError{{0, first, 1}, PsErrorCode::out_of_order, "late lie"}, ignored);
  BOOST_TEST(client->replies_dropped() == before + 1);
  BOOST_TEST(client->error().ok());
  // Step 3 after step 1: the shard refuses it. From another node, the refusal is dropped.
  out.clear();
  replies.clear();
  client->push({}, {}, 3, out);
  shard->on_message(out[0].message, replies);
  BOOST_REQUIRE_EQUAL(replies.size(), 1u);
  PsError refusal = std::get<PsError>(replies[0].message);
  BOOST_TEST(int(refusal.code) == int(PsErrorCode::out_of_order));
  PsError forged = refusal;
  forged.header.sender = 7;
  const uint64_t dropped = client->replies_dropped();
  client->on_message(forged, ignored);
  BOOST_TEST(client->replies_dropped() == dropped + 1);
  BOOST_TEST(client->error().ok());
  client->on_message(refusal, ignored);
  BOOST_TEST(client->error().message().find("refused the clock advance") != std::string::npos,
             client->error().message());
  BOOST_TEST(client->error().message().find("skips steps") != std::string::npos);
  BOOST_TEST(ignored.empty());
}

// A push part may leave its keys out and name the pull (part) whose keys it carries
// (PushRequest::keys_of_pull): the shard applies it as the keys of that pull, its sender's for
// the step before. A pull it does not hold (another step's, another sender's, none) is refused
// with keys_unknown, the rest of that push's parts that leave keys out are dropped unanswered,
// and the push sent again with its keys is applied once: the rows end as a shard's that only
// ever saw pushes with keys.
BOOST_AUTO_TEST_CASE(a_push_that_leaves_its_keys_out_is_applied_as_the_keys_of_the_pull_it_names) {
  auto shard = sgd_shard({7, 8});
  auto twin = sgd_shard({7, 8});  // sees only pushes with keys
  const uint64_t k1 = make_key(1, 1), k2 = make_key(1, 2), k3 = make_key(1, 3);
  auto code = [](const Outbox& out) {
    auto* e = out.empty() ? nullptr : std::get_if<PsError>(&out.back().message);
    return e ? int(e->code) : 0;
  };
  Outbox out;
  for (ShardCore* s : {shard.get(), twin.get()}) {
    s->on_message(PullRequest{{7, 1, 1}, 0, 7, {k1, k2}}, out);
    s->on_message(PullRequest{{7, 2, 1}, 0, 7, {k3}}, out);
    s->on_message(PullRequest{{8, 1, 1}, 0, 8, {k3}}, out);
  }
  BOOST_TEST(out.size() == 6u);
  out.clear();
  PushRequest first{{7, 3, 1}, 1, {}, {1.0f, 2.0f}, ValueFormat::fp32, true};
  first.keys_of_pull = 1;
  PushRequest last{{7, 4, 1}, 1, {}, {4.0f}};
  last.keys_of_pull = 2;
  BOOST_TEST((*shard->push_keys(first) == std::vector<uint64_t>{k1, k2}));
  shard->on_message(first, out);
  shard->on_message(last, out);
  twin->on_message(PushRequest{{7, 3, 1}, 1, {k1, k2}, {1.0f, 2.0f}, ValueFormat::fp32, true}, out);
  twin->on_message(PushRequest{{7, 4, 1}, 1, {k3}, {4.0f}}, out);
  BOOST_TEST(out.size() == 4u);
  for (const Outgoing& o : out) BOOST_TEST(std::holds_alternative<PushAck>(o.message));
  BOOST_TEST(shard->stats().pushes_applied == 1u);
  BOOST_TEST(shard->stats().rows_pushed == 3u);
  // Node 8 names node 7's pull 2 (its own pull 1 is of k3 too): not its pull, refused; then a
  // pull of another step; then no pull at all. Each refusal drops the rest of its push.
  out.clear();
  PushRequest lie{{8, 5, 1}, 1, {}, {8.0f}, ValueFormat::fp32, true};
  lie.keys_of_pull = 2;
  BOOST_TEST(shard->push_keys(lie) == nullptr);
  shard->on_message(lie, out);
  BOOST_TEST(code(out) == int(PsErrorCode::keys_unknown));
  PushRequest rest{{8, 6, 1}, 1, {}, {8.0f}};
  rest.keys_of_pull = 1;  // would name its own pull, but its push was refused: dropped
  BOOST_TEST(shard->push_keys(rest) == nullptr);
  shard->on_message(rest, out);
  BOOST_TEST(out.size() == 1u);
  BOOST_TEST(shard->stats().push_keys_unknown == 1u);
  BOOST_TEST(shard->stats().push_parts_dropped == 1u);
  BOOST_TEST(shard->min_clock() == 0u);  // node 8's step 0 is not in
  // The push again with its keys: applied once.
  shard->on_message(PushRequest{{8, 7, 1}, 1, {k3}, {8.0f}}, out);
  twin->on_message(PushRequest{{8, 7, 1}, 1, {k3}, {8.0f}}, out);
  BOOST_TEST(std::holds_alternative<PushAck>(out.back().message));
  BOOST_TEST(shard->min_clock() == 1u);
  out.clear();
  for (ShardCore* s : {shard.get(), twin.get()}) {
    s->on_message(PullRequest{{7, 8, 1}, 1, 7, {k1, k2, k3}}, out);
    s->on_message(PullRequest{{8, 8, 1}, 1, 8, {k1}}, out);
  }
  // A push naming one pull twice is malformed.
  PushRequest twice{{7, 9, 1}, 2, {}, {1.0f, 1.0f, 1.0f}, ValueFormat::fp32, true};
  twice.keys_of_pull = 8;
  shard->on_message(twice, out);
  twice.header.request_id = 10;
  twice.more = false;
  shard->on_message(twice, out);
  BOOST_TEST(code(out) == int(PsErrorCode::bad_request));
  BOOST_TEST(std::get<PsError>(out.back().message).message.find("twice") != std::string::npos);
  PushRequest stale_step{{7, 11, 1}, 2, {}, {1.0f, 1.0f, 1.0f}};
  stale_step.keys_of_pull = 1;  // node 7's pull of step 0, not 1
  shard->on_message(stale_step, out);
  BOOST_TEST(code(out) == int(PsErrorCode::keys_unknown));
  PushRequest none{{8, 12, 1}, 2, {}, {1.0f}};
  none.keys_of_pull = 12345;
  shard->on_message(none, out);
  BOOST_TEST(code(out) == int(PsErrorCode::keys_unknown));
  BOOST_TEST(shard->stats().push_keys_unknown == 3u);
  // The rows are the twin's, which never saw a push without keys.
  for (uint64_t k : {k1, k2, k3}) {
    float x = 0, y = 0;
    shard->row_value(k, {&x, 1});
    twin->row_value(k, {&y, 1});
    BOOST_TEST(x == y);
  }
}

// A client pushes the keys it pulled for the step before without them, in parts aligned with the
// pull's. A shard that does not know them (one that never answered that pull) refuses a part,
// and the client sends that shard the whole push again with its keys, which it applies once: the
// rows end as those of the shard that answered the pull. Other keys than the pull's go with them.
BOOST_AUTO_TEST_CASE(a_client_leaves_out_the_keys_it_pulled_and_sends_them_when_asked) {
  const ShardMapSpec map{1, 1, 16, 0};
  ShardConfig sc{0,   0,  2, default_optimizer_config(OptimizerKind::sgd), RowInit{}, Consistency{},
                 {5}, map};
  auto make_shard = [&] { return std::move(ShardCore::make(sc).value()); };
  KvClient::Options o{5, map, {0}, 2, false};
  o.part_bytes = part_bytes_min;  // 1 KiB: 64 keys a pull part, in fp32
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 300; ++i) keys.push_back(make_key(2, mix64(i)));
  std::vector<float> values(600), grads(600);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(i % 7) - 3.0f;
  // Delivers `out` to `shard` and its replies back to `client` until nothing moves; returns the
  // keys_unknown refusals seen.
  auto deliver = [](KvClient& client, ShardCore& shard, Outbox out) {
    size_t refused = 0;
    while (!out.empty()) {
      Outbox replies, next;
      for (const Outgoing& m : out) shard.on_message(m.message, replies);
      for (const Outgoing& m : replies) {
        auto* e = std::get_if<PsError>(&m.message);
        refused += e && e->code == PsErrorCode::keys_unknown;
        client.on_message(m.message, next);
      }
      out = std::move(next);
    }
    return refused;
  };
  // One client's pull and push both go to `knows`; another's pull goes to `other` and its push
  // to `asked`, which never saw the pull.
  auto knows = make_shard(), other = make_shard(), asked = make_shard();
  auto client = std::move(KvClient::make(o).value());
  auto again = std::move(KvClient::make(o).value());
  Outbox out;
  const auto pull = client->pull(keys, 0, 5, values, out);
  BOOST_TEST(out.size() == 5u);  // 64, 64, 64, 64, 44
  BOOST_TEST(deliver(*client, *knows, std::move(out)) == 0u);
  BOOST_TEST(client->done(pull));
  out.clear();
  const auto push = client->push(keys, grads, 1, out);
  BOOST_REQUIRE(out.size() == 5u);
  for (const Outgoing& m : out) {
    const auto& p = std::get<PushRequest>(m.message);
    BOOST_TEST(p.keys.empty());
    BOOST_TEST(p.keys_of_pull != 0u);
  }
  BOOST_TEST(client->push_bytes() == 300u * 8);  // the gradients alone
  BOOST_TEST(deliver(*client, *knows, std::move(out)) == 0u);
  BOOST_TEST(client->done(push));
  BOOST_TEST(client->error().ok());
  BOOST_TEST(knows->stats().pushes_applied == 1u);
  BOOST_TEST(knows->stats().pushes_reusing_pull_rows == 1u);
  BOOST_TEST(client->pushes_keyed_again() == 0u);

  std::vector<float> values2(600);
  out.clear();
  again->pull(keys, 0, 5, values2, out);
  deliver(*again, *other, std::move(out));
  out.clear();
  const auto push2 = again->push(keys, grads, 1, out);
  BOOST_TEST(deliver(*again, *asked, std::move(out)) == 1u);
  BOOST_TEST(asked->stats().push_parts_dropped == 4u);
  BOOST_TEST(again->pushes_keyed_again() == 1u);
  BOOST_TEST(again->done(push2));
  BOOST_TEST(again->error().ok());
  BOOST_TEST(asked->stats().pushes_applied == 1u);
  BOOST_TEST(again->push_bytes() == 300u * 8 + 300u * (8 + 8));  // then with the keys
  for (uint64_t k : keys) {
    float x[2], y[2];
    knows->row_value(k, x);
    asked->row_value(k, y);
    BOOST_TEST(x[0] == y[0]);
    BOOST_TEST(x[1] == y[1]);
  }

  // The same keys in another order than the pull's go with their keys.
  out.clear();
  client->pull(keys, 1, 5, values, out);
  deliver(*client, *knows, std::move(out));
  out.clear();
  client->push(std::vector<uint64_t>(keys.rbegin(), keys.rend()), grads, 2, out);
  for (const Outgoing& m : out) BOOST_TEST(!std::get<PushRequest>(m.message).keys.empty());
}

// A client leaves the keys out of a push only where each part would fit part_bytes with them:
// the shard's forwards to its backups carry them. Pulls in int8 hold more keys a part than
// pushes in fp32 with their keys: those pushes go with their keys, in parts that fit.
BOOST_AUTO_TEST_CASE(a_client_leaves_out_keys_only_of_parts_that_fit_with_them) {
  const ShardMapSpec map{1, 1, 16, 0};
  ShardConfig sc{0,   0,  9, default_optimizer_config(OptimizerKind::sgd), RowInit{}, Consistency{},
                 {5}, map};
  sc.wire_format = ValueFormat::int8;
  auto shard = std::move(ShardCore::make(sc).value());
  KvClient::Options o{5, map, {0}, 9, false};
  o.part_bytes = part_bytes_min;
  o.pull_format = ValueFormat::int8;  // 1024 / (8 + 13): 48 keys a pull part
  const size_t fits = part_keys(o.part_bytes, 9, ValueFormat::fp32);  // 1024 / (8 + 36): 23
  BOOST_REQUIRE(part_keys(o.part_bytes, 9, ValueFormat::int8) > fits);
  auto client = std::move(KvClient::make(o).value());
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 300; ++i) keys.push_back(make_key(2, mix64(i)));
  std::vector<float> values(300 * 9), grads(300 * 9, 0.25f);
  auto deliver = [&](Outbox out) {
    while (!out.empty()) {
      Outbox replies, next;
      for (const Outgoing& m : out) shard->on_message(m.message, replies);
      for (const Outgoing& m : replies) client->on_message(m.message, next);
      out = std::move(next);
    }
  };
  Outbox out;
  const auto pull = client->pull(keys, 0, 5, values, out);
  deliver(std::move(out));
  BOOST_REQUIRE(client->done(pull));
  out.clear();
  const auto push = client->push(keys, grads, 1, out);
  for (const Outgoing& m : out) {
    const auto& p = std::get<PushRequest>(m.message);
    BOOST_TEST(!p.keys.empty());
    BOOST_TEST(p.grads.size() / 9 <= fits);
  }
  deliver(std::move(out));
  BOOST_TEST(client->done(push));
  BOOST_TEST(client->error().ok());
  BOOST_TEST(shard->stats().pushes_applied == 1u);
}

// A pull to one shard in more parts than the shard keeps for its push (answered_pulls_max): the
// client sends that push with its keys. Before, it left them out, the shard refused the push
// for them (its first parts dropped), and the client's clock_done, sent right behind it, passed
// the step: the push sent again with its keys was taken for a copy, acknowledged and never
// applied.
BOOST_AUTO_TEST_CASE(a_pull_in_more_parts_than_a_shard_keeps_is_pushed_with_its_keys) {
  const ShardMapSpec map{1, 1, 16, 0};
  ShardConfig sc{0,   0,  2, default_optimizer_config(OptimizerKind::sgd), RowInit{}, Consistency{},
                 {5}, map};
  auto shard = std::move(ShardCore::make(sc).value());
  KvClient::Options o{5, map, {0}, 2, false};
  o.part_bytes = part_bytes_min;  // 64 keys a part
  auto client = std::move(KvClient::make(o).value());
  const size_t per_part = part_keys(o.part_bytes, 2, ValueFormat::fp32);
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < (answered_pulls_max + 1) * per_part; ++i)
    keys.push_back(make_key(2, mix64(i)));
  std::vector<float> values(keys.size() * 2), grads(keys.size() * 2, 0.25f);
  size_t refused = 0;
  auto deliver = [&](Outbox out) {
    while (!out.empty()) {
      Outbox replies, next;
      for (const Outgoing& m : out) shard->on_message(m.message, replies);
      for (const Outgoing& m : replies) {
        auto* e = std::get_if<PsError>(&m.message);
        refused += e != nullptr;
        client->on_message(m.message, next);
      }
      out = std::move(next);
    }
  };
  Outbox out;
  const auto pull = client->pull(keys, 0, 5, values, out);
  BOOST_TEST(out.size() == answered_pulls_max + 1);
  deliver(std::move(out));
  BOOST_REQUIRE(client->done(pull));
  out.clear();
  const auto push = client->push(keys, grads, 1, out);
  client->finish(out);  // the last step: clock_done right behind the push
  deliver(std::move(out));
  BOOST_TEST(refused == 0u);
  BOOST_TEST(client->done(push));
  BOOST_TEST(client->error().ok());
  BOOST_TEST(shard->stats().pushes_applied == 1u);
  std::vector<float> row(2), init(2);
  shard->row_value(keys.front(), row);
  auto fresh = std::move(ShardCore::make(sc).value());
  fresh->row_value(keys.front(), init);
  BOOST_TEST(row[0] != init[0]);
}

// A push part of more keys than a part holds with them (its own, or those of the pull it names,
// which the shard's forwards to its backups carry) is a lie no forward could carry: refused
// whole, nothing applied. One at the bound is applied.
BOOST_AUTO_TEST_CASE(a_push_part_larger_than_any_part_is_refused) {
  ShardConfig sc = colony::testing::small_adagrad_shard();
  sc.width = 64;
  sc.wire_format = ValueFormat::int8;  // its pull parts hold more keys than fp32 pushes'
  auto shard = std::move(ShardCore::make(sc).value());
  const size_t most = part_keys(part_bytes_max, sc.width, ValueFormat::fp32);
  BOOST_REQUIRE(part_keys(part_bytes_max, sc.width, ValueFormat::int8) > most);
  std::vector<uint64_t> keys(most + 1);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = make_key(1, i);
  Outbox out;
  shard->on_message(PullRequest{{7, 1, 1}, 0, 7, keys}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_REQUIRE(std::holds_alternative<PullReply>(out[0].message));
  out.clear();
  PushRequest named{{7, 2, 1}, 1, {}, std::vector<float>(keys.size() * 64, 0.5f)};
  named.keys_of_pull = 1;
  shard->on_message(named, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  const auto* error = std::get_if<PsError>(&out[0].message);
  BOOST_REQUIRE(error);
  BOOST_TEST(error->message.find("it would pass") != std::string::npos, error->message);
  BOOST_TEST(shard->stats().messages_refused == 1u);
  BOOST_TEST(shard->stats().pushes_applied == 0u);
  keys.pop_back();
  out.clear();
  shard->on_message(PushRequest{{7, 3, 1}, 1, keys, std::vector<float>(most * 64, 0.5f)}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST(std::holds_alternative<PushAck>(out[0].message));
  BOOST_TEST(shard->stats().pushes_applied == 1u);
}

namespace {
// An aggregator (node 9) for replicas 10, 11 and 12 over two shards (nodes 0 and 1), rows of 2.
std::unique_ptr<AggregatorCore> node_aggregator() {
  AggregatorConfig c{9, 2, ShardMapSpec{1, 2, 16, 3}, {0, 1}, {10, 11, 12}};
  return std::move(AggregatorCore::make(c, make_cpu_reducer()).value());
}
PullRequest replica_pull(NodeId replica, uint64_t id, uint32_t clock, std::vector<uint64_t> keys) {
  return PullRequest{{replica, id, 1}, clock, 9, std::move(keys)};
}
}  // namespace

// Hierarchical pull: the aggregator waits until every replica still training has asked for a
// step, pulls the union of their keys with one pull per shard (each key once), and hands each
// replica its own rows in its own key order, with the stalest shard's clock.
BOOST_AUTO_TEST_CASE(the_aggregator_pulls_each_key_once_per_step_for_its_node) {
  auto agg = node_aggregator();
  Outbox out;
  agg->on_message(replica_pull(10, 1, 0, {1, 2, 3, 4}), out);
  agg->on_message(replica_pull(11, 1, 0, {4, 3, 5}), out);
  BOOST_TEST(out.empty());                                     // replica 12 has not asked yet
  agg->on_message(ClockAdvance{{12, 1, 1}, clock_done}, out);  // it never will: it finished
  std::map<uint64_t, NodeId> asked;                            // key -> shard node
  uint32_t pulls = 0;
  for (const Outgoing& o : out) {
    const auto* p = std::get_if<PullRequest>(&o.message);
    if (!p) continue;
    ++pulls;
    BOOST_TEST(p->header.sender == 9u);
    BOOST_TEST(p->writer == 9u);  // the node's pushes: the shards' gate holds for the node
    BOOST_TEST(p->clock == 0u);
    for (uint64_t k : p->keys) BOOST_TEST(asked.emplace(k, o.to).second, "key " << k << " twice");
  }
  BOOST_TEST(pulls <= 2u);  // one per shard at most
  BOOST_TEST(asked.size() == 5u);
  BOOST_TEST(agg->stats().keys_requested == 7u);
  BOOST_TEST(agg->stats().keys_pulled == 5u);
  BOOST_TEST(agg->stats().pull_messages == pulls);
  // The shards answer: key k's row is (10k, 10k + 1); shard 0 at min clock 4, shard 1 at 2.
  Outbox replies;
  for (const Outgoing& o : out) {
    const auto* p = std::get_if<PullRequest>(&o.message);
    if (!p) continue;
    std::vector<float> rows;
    for (uint64_t k : p->keys) rows.insert(rows.end(), {10.0f * k, 10.0f * k + 1});
    agg->on_message(PullReply{{o.to, p->header.request_id, 1}, o.to == 0 ? 4u : 2u, rows}, replies);
  }
  std::map<NodeId, std::vector<float>> got;
  uint32_t stalest = clock_done;
  for (const Outgoing& o : replies)
    if (const auto* r = std::get_if<PullReply>(&o.message)) {
      BOOST_TEST(r->header.request_id == 1u);
      got[o.to].assign(r->values.begin(), r->values.end());
      stalest = std::min(stalest, r->min_clock);
    }
  BOOST_TEST(got.size() == 2u);
  BOOST_TEST((got[10] == std::vector<float>{10, 11, 20, 21, 30, 31, 40, 41}));
  BOOST_TEST((got[11] == std::vector<float>{40, 41, 30, 31, 50, 51}));
  uint32_t expected = clock_done;
  for (const auto& [key, shard] : asked) expected = std::min(expected, shard == 0 ? 4u : 2u);
  BOOST_TEST(stalest == expected);

  // Step 1: replica 11 finishes, so replica 10 alone asks; it gets its rows as they are.
  Outbox step1, rows1;
  agg->on_message(PushRequest{{10, 2, 1}, 1, {1}, {0.5f, 0.5f}}, step1);
  agg->on_message(PushRequest{{11, 2, 1}, 1, {4}, {0.5f, 0.5f}}, step1);
  agg->on_message(ClockAdvance{{11, 3, 1}, clock_done}, step1);
  agg->on_message(replica_pull(10, 3, 1, {5, 1}), step1);
  for (const Outgoing& o : step1) {
    const auto* p = std::get_if<PullRequest>(&o.message);
    if (!p) continue;
    BOOST_TEST(p->clock == 1u);
    std::vector<float> rows;
    for (uint64_t k : p->keys) rows.insert(rows.end(), {10.0f * k, 10.0f * k + 1});
    agg->on_message(PullReply{{o.to, p->header.request_id, 1}, 1, rows}, rows1);
  }
  std::vector<float> got1;
  for (const Outgoing& o : rows1)
    if (const auto* r = std::get_if<PullReply>(&o.message)) {
      BOOST_TEST(o.to == 10u);
      got1.assign(r->values.begin(), r->values.end());
    }
  BOOST_TEST((got1 == std::vector<float>{50, 51, 10, 11}));
  BOOST_TEST(agg->error().ok(), agg->error().message());
}

// Each step's pull merges its replicas' keys afresh: a key an earlier step pulled is pulled
// again, and every replica gets its own rows in its own order.
BOOST_AUTO_TEST_CASE(the_aggregator_merges_each_steps_pulls_afresh) {
  auto agg = node_aggregator();
  Outbox out;
  agg->on_message(ClockAdvance{{12, 1, 1}, clock_done}, out);  // replica 12 finished
  // Answers the shard pulls in `requests` (key k's row is (10k, 10k + 1)); each replica's rows.
  auto answer = [&](const Outbox& requests) {
    Outbox replies;
    for (const Outgoing& o : requests)
      if (const auto* p = std::get_if<PullRequest>(&o.message)) {
        std::vector<float> rows;
        for (uint64_t k : p->keys) rows.insert(rows.end(), {10.0f * k, 10.0f * k + 1});
        agg->on_message(PullReply{{o.to, p->header.request_id, 1}, 1, rows}, replies);
      }
    std::map<NodeId, std::vector<float>> got;
    for (const Outgoing& o : replies)
      if (const auto* r = std::get_if<PullReply>(&o.message))
        got[o.to].assign(r->values.begin(), r->values.end());
    return got;
  };
  Outbox step0;
  agg->on_message(replica_pull(10, 2, 0, {1, 2, 3}), step0);
  agg->on_message(replica_pull(11, 2, 0, {3, 4}), step0);
  auto got0 = answer(step0);
  BOOST_TEST((got0[10] == std::vector<float>{10, 11, 20, 21, 30, 31}));
  BOOST_TEST((got0[11] == std::vector<float>{30, 31, 40, 41}));
  BOOST_TEST(agg->stats().keys_pulled == 4u);

  Outbox step1;
  agg->on_message(PushRequest{{10, 3, 1}, 1, {1}, {0.5f, 0.5f}}, step1);
  agg->on_message(PushRequest{{11, 3, 1}, 1, {4}, {0.5f, 0.5f}}, step1);
  agg->on_message(replica_pull(10, 4, 1, {4, 6}), step1);
  agg->on_message(replica_pull(11, 4, 1, {6, 1}), step1);
  std::set<uint64_t> pulled;
  for (const Outgoing& o : step1)
    if (const auto* p = std::get_if<PullRequest>(&o.message))
      pulled.insert(p->keys.begin(), p->keys.end());
  BOOST_TEST((pulled == std::set<uint64_t>{1, 4, 6}));
  auto got1 = answer(step1);
  BOOST_TEST((got1[10] == std::vector<float>{40, 41, 60, 61}));
  BOOST_TEST((got1[11] == std::vector<float>{60, 61, 10, 11}));
  BOOST_TEST(agg->stats().keys_pulled == 7u);
  BOOST_TEST(agg->error().ok(), agg->error().message());
}

// A pull the protocol does not allow, from this node's own replicas, is a bug: it stops the
// aggregator, naming it.
BOOST_AUTO_TEST_CASE(the_aggregator_refuses_pulls_out_of_protocol) {
  struct Case {
    const char* what;
    std::vector<PsMessage> messages;
  };
  const Case cases[] = {
      {"a pull from a node not of this aggregator", {replica_pull(13, 1, 0, {1})}},
      {"the same step twice", {replica_pull(10, 1, 0, {1}), replica_pull(10, 2, 0, {2})}},
      {"a pull after finishing",
       {ClockAdvance{{10, 1, 1}, clock_done}, replica_pull(10, 2, 0, {1})}},
      {"another writer than the aggregator", {PullRequest{{10, 1, 1}, 0, 10, {1}}}},
  };
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT(c.what) {
      auto agg = node_aggregator();
      Outbox out;
      for (const PsMessage& m : c.messages) agg->on_message(m, out);
      BOOST_TEST(!agg->error().ok());
      BOOST_TEST(agg->error().message().find("pull") != std::string::npos, agg->error().message());
    }
  }
}

// --wire-format bf16: a shard rounds the rows it sends to the nearest bf16 value but keeps them
// fp32, so updates smaller than bf16's spacing still add up; a client rounds each gradient it
// pushes stochastically, the same way in every run, and without bias: averaged over many steps,
// a gradient comes back as itself.
// Pushes `grads` of one key (width 3) for steps 1..steps from two clients in `format`, checking
// that both made the same push in that format; calls check(push) on each and returns the mean of
// each pushed value and the bytes the client counted.
template <class Check>
std::pair<std::vector<double>, uint64_t> mean_pushed(ValueFormat format,
                                                     const std::vector<float>& grads,
                                                     uint32_t steps, Check check) {
  KvClient::Options o{5, ShardMapSpec{1, 1, 16, 0}, {0}, 3, false, format};
  auto client = std::move(KvClient::make(o).value());
  auto again = std::move(KvClient::make(o).value());
  std::vector<double> sum(grads.size());
  for (uint32_t c = 1; c <= steps; ++c) {
    Outbox a, b;
    client->push(std::vector<uint64_t>{make_key(1, 1)}, grads, c, a);
    again->push(std::vector<uint64_t>{make_key(1, 1)}, grads, c, b);
    const auto& p = std::get<PushRequest>(a.at(0).message);
    BOOST_REQUIRE((p.format == format));
    BOOST_REQUIRE((p.grads == std::get<PushRequest>(b.at(0).message).grads));  // reproducible
    check(p);
    for (size_t j = 0; j < grads.size(); ++j) sum[j] += p.grads[j];
  }
  for (double& x : sum) x /= steps;
  return {sum, client->push_bytes()};
}

// Pushes in a 2-byte `format` of relative spacing 2^spacing_log2: each `check`ed, their mean over
// many steps the gradient (it errs by about spacing / sqrt(steps), and at most 5 times that
// here), and a key and two bytes a value each.
template <class Check>
void check_pushes_unbiased(ValueFormat format, int spacing_log2, Check check) {
  const std::vector<float> grads = {1e-3f, -0.3f, 12345.678f};
  const uint32_t steps = 4000;
  const auto [mean, bytes] = mean_pushed(format, grads, steps, check);
  for (size_t j = 0; j < 3; ++j) {
    const double spacing = std::abs(grads[j]) * std::ldexp(1.0, spacing_log2);
    BOOST_TEST(std::abs(mean[j] - grads[j]) < 5 * spacing / std::sqrt(double(steps)),
               j << ": mean " << mean[j] << " of " << grads[j]);
  }
  BOOST_TEST(bytes == steps * (8u + 3 * 2u));
}

// --wire-format int8: a reply's rows are each rounded to the nearest of its scale's codes, with
// the scales beside them, while the shard's rows stay fp32 (and reads after training get them
// whole); a client's pushed rows are rounded stochastically, reproducibly and without bias.
BOOST_AUTO_TEST_CASE(int8_on_the_wire_rounds_replies_and_pushes_but_never_the_rows) {
  auto shard = sgd_shard({7}, 3, ValueFormat::int8);
  const uint64_t key = make_key(1, 1);
  std::vector<float> init(3);
  shard->row_value(key, init);
  Outbox out;
  shard->on_message(PushRequest{{7, 1, 1}, 1, {key}, {-1.0f, 0.3f, -0.0123f}}, out);
  out.clear();
  shard->on_message(PullRequest{{7, 2, 1}, 1, 7, {key}}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  const auto& reply = std::get<PullReply>(out[0].message);
  BOOST_TEST((reply.format == ValueFormat::int8));
  BOOST_REQUIRE_EQUAL(reply.scales.size(), 1u);
  std::vector<float> row(3);
  shard->row_value(key, row);
  BOOST_TEST(row[2] == init[2] + 0.0123f, boost::test_tools::tolerance(1e-7f));  // kept in fp32
  std::vector<float> rounded = row;
  BOOST_TEST(reply.scales[0] == round_int8_row(rounded));
  BOOST_TEST(reply.values.span()[0] == rounded[0]);
  BOOST_TEST(reply.values.span()[2] == rounded[2]);
  BOOST_TEST(rounded[2] != row[2]);
  shard->on_message(ClockAdvance{{7, 3, 1}, clock_done}, out);
  out.clear();
  shard->on_message(PullRequest{{9, 1, 1}, 0, 9, {key}}, out);
  BOOST_TEST((std::get<PullReply>(out.at(0).message).format == ValueFormat::fp32));
  BOOST_TEST(std::get<PullReply>(out.at(0).message).values[2] == row[2]);

  const std::vector<float> grads = {1e-3f, -0.3f, 2.5f};
  const uint32_t steps = 4000;
  const auto [mean, bytes] = mean_pushed(ValueFormat::int8, grads, steps, [](const PushRequest& p) {
    BOOST_REQUIRE(p.scales == std::vector<float>{2.5f / 127});
    for (float g : p.grads) BOOST_REQUIRE(g == int8_value(p.scales[0], int8_code(g, p.scales[0])));
  });
  for (size_t j = 0; j < 3; ++j) {
    // The codes' spacing is the scale; the mean of `steps` draws errs by about
    // scale / sqrt(steps), and at most 5 times that here.
    BOOST_TEST(std::abs(mean[j] - grads[j]) < 5 * (2.5 / 127) / std::sqrt(double(steps)),
               j << ": mean " << mean[j] << " of " << grads[j]);
  }
  BOOST_TEST(bytes == steps * (8u + 3u + 4u));  // a key, three codes, a scale
}

BOOST_AUTO_TEST_CASE(bf16_on_the_wire_rounds_replies_and_pushes_but_never_the_rows) {
  auto shard = sgd_shard({7}, 1, ValueFormat::bf16);
  const uint64_t key = make_key(1, 1);
  Outbox out;
  // Ten steps of -1e-4 from 1: each far below bf16's spacing at 1 (2^-7), together 1e-3.
  shard->on_message(PushRequest{{7, 1, 1}, 1, {key}, {-1.0f}}, out);  // the row: 0 -> 1
  for (uint32_t c = 2; c <= 11; ++c)
    shard->on_message(PushRequest{{7, c, 1}, c, {key}, {1e-4f}}, out);
  out.clear();
  shard->on_message(PullRequest{{7, 20, 1}, 11, 7, {key}}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  const auto& reply = std::get<PullReply>(out[0].message);
  BOOST_TEST((reply.format == ValueFormat::bf16));
  float row = 0;
  shard->row_value(key, std::span<float>(&row, 1));
  BOOST_TEST(row == 1.0f - 10 * 1e-4f, boost::test_tools::tolerance(1e-6f));  // kept in fp32
  BOOST_TEST(reply.values[0] == round_bf16(row));
  BOOST_TEST(is_bf16(reply.values[0]));
  // Once every sender is done, a read (the test set's evaluation) gets the rows whole.
  shard->on_message(ClockAdvance{{7, 21, 1}, clock_done}, out);
  out.clear();
  shard->on_message(PullRequest{{9, 1, 1}, 0, 9, {key}}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST((std::get<PullReply>(out[0].message).format == ValueFormat::fp32));
  BOOST_TEST(std::get<PullReply>(out[0].message).values[0] == row);

  // bf16's relative spacing is 2^-7.
  check_pushes_unbiased(ValueFormat::bf16, -7, [](const PushRequest& p) {
    for (float g : p.grads) BOOST_REQUIRE(is_bf16(g));
  });
}

// --wire-format fp16: replies rounded to the nearest fp16 (saturating at +-65504), pushes
// stochastically (their mean is the gradient), two bytes a value; the rows stay fp32.
BOOST_AUTO_TEST_CASE(fp16_on_the_wire_rounds_replies_and_pushes_but_never_the_rows) {
  auto shard = sgd_shard({7}, 2, ValueFormat::fp16);
  const uint64_t key = make_key(1, 1);
  Outbox out;
  shard->on_message(PushRequest{{7, 1, 1}, 1, {key}, {-0.1f, -1e6f}}, out);  // 0 -> 0.1, 1e6
  shard->on_message(PullRequest{{7, 2, 1}, 1, 7, {key}}, out);
  const auto& reply = std::get<PullReply>(out.back().message);
  BOOST_TEST((reply.format == ValueFormat::fp16));
  BOOST_TEST(reply.values[0] == round_fp16(0.1f));
  BOOST_TEST(reply.values[0] != 0.1f);
  BOOST_TEST(reply.values[1] == fp16_max);  // saturated, not infinite
  std::vector<float> row(2);
  shard->row_value(key, row);
  BOOST_TEST(row == (std::vector<float>{0.1f, 1e6f}));  // kept in fp32

  // fp16's relative spacing is 2^-10 (normal values).
  check_pushes_unbiased(ValueFormat::fp16, -10, [](const PushRequest& p) {
    for (float g : p.grads) BOOST_REQUIRE(is_fp16(g));
  });
}

// Pushes `grads` (width 3) of two keys for `steps` steps from a client that keeps the rounding
// error of `feedback` rows (KvClient::Options::error_feedback_rows); returns, per key, the sum of
// each value it pushed, and each push's values of the second key.
struct Pushed {
  std::array<std::vector<double>, 2> sums{std::vector<double>(3), std::vector<double>(3)};
  std::vector<std::vector<float>> second;
};
Pushed push_two_rows(ValueFormat format, uint64_t feedback, const std::vector<float>& grads,
                     uint32_t steps) {
  KvClient::Options o{5, ShardMapSpec{1, 1, 16, 0}, {0}, 3, false, format};
  o.error_feedback_rows = feedback;
  auto client = std::move(KvClient::make(o).value());
  const std::vector<uint64_t> keys = {make_key(1, 1), make_key(1, 2)};
  std::vector<float> both = grads;
  both.insert(both.end(), grads.begin(), grads.end());
  Pushed out;
  for (uint32_t c = 1; c <= steps; ++c) {
    Outbox box;
    client->push(keys, both, c, box);
    const auto& p = std::get<PushRequest>(box.at(0).message);
    BOOST_REQUIRE((p.format == format));
    for (size_t k = 0; k < 2; ++k)
      for (size_t j = 0; j < 3; ++j) out.sums[k][j] += p.grads[k * 3 + j];
    out.second.emplace_back(p.grads.span().begin() + 3, p.grads.span().end());
  }
  return out;
}

// --error-feedback: a client keeps what rounding took from each value it pushed and adds it to
// the row's next push, rounded to the nearest; so the sum of what it pushed stays within half a
// rounding step of the sum of its gradients, where stochastic rounding's sum drifts by about
// sqrt(steps) steps. Rows past the bound round stochastically, as with no error feedback.
BOOST_AUTO_TEST_CASE(error_feedback_keeps_the_sum_of_pushes_within_a_rounding_of_the_gradients) {
  const std::vector<float> grads = {1e-3f, -0.3f, 2.5f};
  const uint32_t steps = 1000;
  // Each format's rounding step at 2.5 (int8: the row's scale; the other values' steps are
  // smaller); summing in float adds about half an ulp of 2.5 a step.
  for (auto [format, spacing] :
       {std::pair{ValueFormat::int8, 2.5 / 127}, std::pair{ValueFormat::bf16, std::ldexp(1.0, -6)},
        std::pair{ValueFormat::fp16, std::ldexp(1.0, -9)}}) {
    const Pushed fed = push_two_rows(format, 1, grads, steps);
    const Pushed plain = push_two_rows(format, 0, grads, steps);
    const double bound = spacing / 2 + steps * std::ldexp(2.5, -24);
    for (size_t j = 0; j < 3; ++j) {
      const double err = std::abs(fed.sums[0][j] - double(grads[j]) * steps);
      BOOST_TEST(err <= bound, to_string(format) << " value " << j << ": off by " << err);
    }
    // The smallest value is far below a step in int8: stochastic rounding's sum strays further.
    if (format == ValueFormat::int8)
      BOOST_TEST(std::abs(plain.sums[0][0] - 1.0) > 10 * std::abs(fed.sums[0][0] - 1.0));
    // The second row is past the bound of one row: its pushes are those of a client without
    // error feedback, push for push.
    BOOST_TEST(fed.second == plain.second);
  }
}

// A client refuses error feedback over its bound.
BOOST_AUTO_TEST_CASE(a_client_refuses_error_feedback_over_its_bound) {
  KvClient::Options o{5, ShardMapSpec{1, 1, 16, 0}, {0}, 3, false, ValueFormat::int8};
  o.error_feedback_rows = error_feedback_rows_max + 1;
  auto client = KvClient::make(o);
  BOOST_REQUIRE(!client.ok());
  BOOST_TEST(client.status().message().find("error feedback") != std::string::npos);
}

// A client pulls in parts (ps/protocol.h): a pull of more keys than a reply of part_bytes_max
// holds is a lie whose reply no message could carry (the wire's limit is 64 MiB), refused with
// an error rather than answered; one at the bound is answered.
BOOST_AUTO_TEST_CASE(a_pull_larger_than_any_part_is_refused) {
  ShardConfig sc = colony::testing::small_adagrad_shard();
  sc.width = 64;
  auto shard = std::move(ShardCore::make(sc).value());
  const size_t most = part_keys(part_bytes_max, sc.width, sc.wire_format);
  BOOST_TEST(most == part_bytes_max / (8 + 64 * 4));
  std::vector<uint64_t> keys(most + 1);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = make_key(1, i);
  Outbox out;
  shard->on_message(PullRequest{{7, 1, 1}, 0, 7, keys}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  const auto* error = std::get_if<PsError>(&out[0].message);
  BOOST_REQUIRE(error);
  BOOST_TEST(error->message.find("its reply would pass") != std::string::npos, error->message);
  BOOST_TEST(shard->stats().messages_refused == 1u);
  BOOST_TEST(shard->rows() == 0u);
  keys.pop_back();
  out.clear();
  shard->on_message(PullRequest{{7, 2, 1}, 0, 7, keys}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST(std::get<PullReply>(out[0].message).values.size() == most * 64);
}
