// The ZeroMQ bridge on its own: delivery to local actors through proxies, control messages,
// bad messages counted and logged at most once a minute per peer, lost nodes dropped.
#define BOOST_TEST_MODULE bridge_test
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <mutex>
#include <thread>

#include "actors/bridge.h"
#include "actors/zmq_transport.h"

using namespace colony;
using namespace std::chrono_literals;

namespace {

// Liveness bound only.
constexpr auto arrive_bound = 10s;

template <class F>
bool eventually(F f) {
  const auto deadline = std::chrono::steady_clock::now() + arrive_bound;
  while (!f()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

struct Log {
  std::mutex mu;
  std::vector<std::string> lines;
  Bridge::Logger logger() {
    return [this](const std::string& l) {
      std::lock_guard lock(mu);
      lines.push_back(l);
    };
  }
  size_t count(const std::string& text) {
    std::lock_guard lock(mu);
    size_t n = 0;
    for (const auto& l : lines) n += l.find(text) != std::string::npos;
    return n;
  }
};

struct Fixture {
  SystemConfig config{1, false};
  caf::actor_system system{config};
  std::shared_ptr<JobShared> shared = std::make_shared<JobShared>();
  Log log;
  std::mutex mu;
  std::vector<ControlMessage> control;
  std::unique_ptr<Bridge> open_bridge() {
    BridgeOptions o;
    o.cluster_id = 7;
    auto b = Bridge::open(
        o, system, shared,
        [this](ControlMessage&& m) {
          std::lock_guard lock(mu);
          control.push_back(std::move(m));
        },
        log.logger());
    BOOST_REQUIRE(b.ok());
    return std::move(b.value());
  }
  ~Fixture() {
    for (auto& a : shared->nodes)
      if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(bridge, Fixture)

BOOST_AUTO_TEST_CASE(two_bridges_carry_ps_and_control_messages_through_proxies) {
  // Process A hosts node 0 (a scoped actor standing in for a core); process B hosts node 1.
  auto a = open_bridge();
  Fixture other;
  auto b = other.open_bridge();
  shared->nodes.resize(2);
  other.shared->nodes.resize(2);
  caf::scoped_actor at_a{system};
  shared->nodes[0] = caf::actor_cast<caf::actor>(at_a);
  BOOST_REQUIRE(b->add_remote_nodes(a->endpoint(), "", 0, 1).ok());
  a->set_routing_ready({0});
  b->set_routing_ready({1});
  // An actor in B sends to node 0 as if it were local.
  Outbox out{{0, PushAck{{1, 42, 1}}}};
  route(*other.shared, out);
  bool got = false;
  at_a->receive([&](PushAck& m) { got = m.header.request_id == 42; },
                caf::after(std::chrono::seconds(10)) >> [] {});
  BOOST_TEST(got);
  BOOST_REQUIRE(b->send_control(a->endpoint(), "", ControlMessage{3, Heartbeat{99}}).ok());
  BOOST_TEST(eventually([&] {
    std::lock_guard lock(mu);
    return control.size() == 1;
  }));
  BOOST_TEST(std::get<Heartbeat>(control[0].body).samples == 99u);
  // Node 0 declared lost: B drops what its actors send there, and counts it.
  b->mark_lost({0});
  Outbox again{{0, PushAck{{1, 43, 1}}}};
  route(*other.shared, again);
  BOOST_TEST(eventually([&] { return b->stats().dropped_to_lost == 1; }));
}

BOOST_AUTO_TEST_CASE(bad_messages_are_counted_dropped_and_logged_once_a_minute_per_peer) {
  auto bridge = open_bridge();
  shared->nodes.resize(2);
  caf::scoped_actor local{system};
  shared->nodes[0] = caf::actor_cast<caf::actor>(local);
  bridge->set_routing_ready({0});
  auto client = ZmqClient::open({bridge->endpoint(), std::nullopt}).value();
  const std::vector<uint8_t> garbage(24, 0xab);
  for (int i = 0; i < 3; ++i) BOOST_REQUIRE(client->send(garbage).ok());
  // Well-formed, but another cluster's; and ours, but for a node this process does not host.
  BOOST_REQUIRE(client->send(encode_ps_message(PushAck{{1, 1, 1}}, 8, 0).value()).ok());
  BOOST_REQUIRE(client->send(encode_ps_message(PushAck{{1, 2, 1}}, 7, 1).value()).ok());
  BOOST_TEST(eventually([&] { return bridge->stats().bad_messages == 5; }));
  BOOST_TEST(log.count("dropped a bad message from 127.0.0.1") == 1u);
  // A good one still arrives.
  BOOST_REQUIRE(client->send(encode_ps_message(PushAck{{1, 3, 1}}, 7, 0).value()).ok());
  bool got = false;
  local->receive([&](PushAck& m) { got = m.header.request_id == 3; },
                 caf::after(std::chrono::seconds(10)) >> [] {});
  BOOST_TEST(got);
}

BOOST_AUTO_TEST_SUITE_END()
