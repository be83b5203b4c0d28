// The blocking PS client (pull / push / wait) against shard actors in process.
#define BOOST_TEST_MODULE ps_service_test
#include <boost/test/unit_test.hpp>
#include <thread>

#include "actors/ps_service.h"
#include "common/hash.h"

using namespace colony;

namespace {
PsServiceOptions options(uint32_t clients, Consistency c) {
  PsServiceOptions o;
  o.shards = 3;
  o.width = 2;
  o.optimizer = default_optimizer_config(OptimizerKind::sgd);
  o.optimizer.lr = 0.5f;
  o.init = RowInit{7, 1, 0.1f};
  o.consistency = c;
  o.clients = clients;
  o.threads = 2;
  return o;
}
}  // namespace

BOOST_AUTO_TEST_CASE(pull_returns_initial_rows_and_push_applies_the_optimizer) {
  auto ps = std::move(PsService::make(options(1, {ConsistencyKind::bsp, 0})).value());
  auto kv = std::move(ps->client(0).value());
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 100; ++i) keys.push_back(make_key(3, mix64(i)));
  std::vector<float> before(keys.size() * 2), after(keys.size() * 2), grads(keys.size() * 2, 1.0f);
  BOOST_REQUIRE(kv->wait(kv->pull(keys, 0, before)).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<float> expect(2);
    init_row(keys[i], RowInit{7, 1, 0.1f}, expect);
    BOOST_TEST(before[2 * i] == expect[0]);
    BOOST_TEST(before[2 * i + 1] == expect[1]);
  }
  BOOST_REQUIRE(kv->wait(kv->push(keys, grads, 1)).ok());
  BOOST_REQUIRE(kv->wait(kv->pull(keys, 1, after)).ok());
  for (size_t i = 0; i < after.size(); ++i)
    BOOST_TEST(after[i] == before[i] - 0.5f);  // SGD: w - lr * g
  kv->finish();
}

BOOST_AUTO_TEST_CASE(bsp_pull_waits_for_the_other_client) {
  auto ps = std::move(PsService::make(options(2, {ConsistencyKind::bsp, 0})).value());
  auto a = std::move(ps->client(0).value());
  auto b = std::move(ps->client(1).value());
  const std::vector<uint64_t> keys{make_key(1, 1), make_key(1, 2)};
  std::vector<float> va(4), vb(4), grads(4, 1.0f);
  BOOST_REQUIRE(a->wait(a->pull(keys, 0, va)).ok());
  BOOST_REQUIRE(a->wait(a->push(keys, grads, 1)).ok());
  // a's pull for step 1 must see b's step 0 too: it is answered only after b pushes.
  const auto ticket = a->pull(keys, 1, va);
  std::thread other([&] {
    BOOST_CHECK(b->wait(b->pull(keys, 0, vb)).ok());
    BOOST_CHECK(b->wait(b->push(keys, grads, 1)).ok());
  });
  BOOST_REQUIRE(a->wait(ticket).ok());
  other.join();
  std::vector<float> init(2);
  init_row(keys[0], RowInit{7, 1, 0.1f}, init);
  BOOST_TEST(va[0] == init[0] - 0.5f - 0.5f);  // both steps applied
}

BOOST_AUTO_TEST_CASE(a_refused_push_makes_wait_fail) {
  auto ps = std::move(PsService::make(options(1, {ConsistencyKind::asp, 0})).value());
  auto kv = std::move(ps->client(0).value());
  const std::vector<uint64_t> keys{make_key(1, 1)};
  std::vector<float> grads(2, 1.0f);
  const Status s = kv->wait(kv->push(keys, grads, 5));  // skips clocks 1..4
  BOOST_TEST(!s.ok());
  BOOST_TEST(s.message().find("skips") != std::string::npos, s.message());
}

BOOST_AUTO_TEST_CASE(clients_are_made_once_and_within_range) {
  auto ps = std::move(PsService::make(options(1, {})).value());
  BOOST_TEST(ps->client(0).ok());
  BOOST_TEST(!ps->client(0).ok());
  BOOST_TEST(!ps->client(1).ok());
  auto o = options(0, {});
  BOOST_TEST(!PsService::make(o).ok());
}
