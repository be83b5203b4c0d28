#define BOOST_TEST_MODULE zmq_transport_test
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/curve_keys.h"
#include "actors/zmq_transport.h"
#include "tests/temp_dir.h"

#include <zmq.hpp>

using namespace colony;
namespace fs = std::filesystem;

namespace {

// Liveness bounds only: how long a test waits for something that should happen at once.
constexpr int arrive_timeout_ms = 10'000;
constexpr int absent_timeout_ms = 500;

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

template <class T>
T ok_or_fail(Expected<T> r) {
  BOOST_REQUIRE_MESSAGE(r.ok(), (r.ok() ? std::string() : r.status().message()));
  return std::move(r).value();
}

void require_ok(const Status& s) {
  BOOST_REQUIRE_MESSAGE(s.ok(), s.message());
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

struct TempDir : colony::testing::TempDir {
  TempDir() : colony::testing::TempDir("zmq-test") {}
};

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  BOOST_REQUIRE(out.good());
}

// Client sends, server replies to the identity it saw, client receives the reply.
void round_trip(ZmqServer& server, ZmqClient& client) {
  require_ok(client.send(bytes("ping")));
  Received at_server = ok_or_fail(server.receive(arrive_timeout_ms));
  BOOST_REQUIRE(!at_server.timed_out);
  BOOST_REQUIRE_EQUAL(at_server.frames.size(), 1u);
  BOOST_TEST(at_server.frames[0].to_vector() == bytes("ping"));
  BOOST_TEST(!at_server.identity.empty());
  require_ok(server.send(at_server.identity, bytes("pong")));
  Received at_client = ok_or_fail(client.receive(arrive_timeout_ms));
  BOOST_REQUIRE(!at_client.timed_out);
  BOOST_REQUIRE_EQUAL(at_client.frames.size(), 1u);
  BOOST_TEST(at_client.frames[0].to_vector() == bytes("pong"));
  BOOST_TEST(at_client.identity.empty());
}

}  // namespace

BOOST_AUTO_TEST_CASE(plain_round_trip) {
  auto server = ok_or_fail(ZmqServer::open(ZmqServerOptions{}));
  BOOST_TEST(contains(server->last_endpoint(), "tcp://127.0.0.1:"));
  BOOST_TEST(!contains(server->last_endpoint(), "*"));
  ZmqClientOptions co;
  co.endpoint = server->last_endpoint();
  auto client = ok_or_fail(ZmqClient::open(co));
  round_trip(*server, *client);
  // Empty payloads are messages too.
  require_ok(client->send(std::span<const uint8_t>()));
  Received r = ok_or_fail(server->receive(arrive_timeout_ms));
  BOOST_TEST(!r.timed_out);
  BOOST_REQUIRE_EQUAL(r.frames.size(), 1u);
  BOOST_TEST(r.frames[0].empty());
}

BOOST_AUTO_TEST_CASE(receive_times_out_when_nothing_arrives) {
  auto server = ok_or_fail(ZmqServer::open(ZmqServerOptions{}));
  Received r = ok_or_fail(server->receive(0));
  BOOST_TEST(r.timed_out);
  BOOST_TEST(r.frames.empty());
}

BOOST_AUTO_TEST_CASE(curve_round_trip_with_an_authorized_key) {
  const CurveKeyPair server_keys = generate_curve_key_pair();
  const CurveKeyPair client_keys = generate_curve_key_pair();
  ZmqServerOptions so;
  so.curve = server_keys;
  so.authorized_keys = {generate_curve_key_pair().public_z85, client_keys.public_z85};
  auto server = ok_or_fail(ZmqServer::open(so));
  ZmqClientOptions co;
  co.endpoint = server->last_endpoint();
  co.curve = ZmqClientCurve{client_keys, server_keys.public_z85};
  auto client = ok_or_fail(ZmqClient::open(co));
  round_trip(*server, *client);
  BOOST_TEST(server->refused().count == 0u);
}

BOOST_AUTO_TEST_CASE(a_client_with_an_unlisted_key_is_refused) {
  const CurveKeyPair server_keys = generate_curve_key_pair();
  const CurveKeyPair listed = generate_curve_key_pair();
  const CurveKeyPair unlisted = generate_curve_key_pair();
  ZmqServerOptions so;
  so.curve = server_keys;
  so.authorized_keys = {listed.public_z85};
  auto server = ok_or_fail(ZmqServer::open(so));

  ZmqClientOptions co;
  co.endpoint = server->last_endpoint();
  co.curve = ZmqClientCurve{unlisted, server_keys.public_z85};
  auto intruder = ok_or_fail(ZmqClient::open(co));
  require_ok(intruder->send(bytes("let me in")));

  // The handshake is refused in the background; wait (bounded) until the handler has seen it.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(arrive_timeout_ms);
  while (server->refused().count == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const RefusedPeers refused = server->refused();
  BOOST_REQUIRE(refused.count >= 1u);
  BOOST_REQUIRE(!refused.recent.empty());
  BOOST_TEST(refused.recent.back().address == "127.0.0.1");
  BOOST_TEST(refused.recent.back().public_key == unlisted.public_z85);

  Received r = ok_or_fail(server->receive(absent_timeout_ms));
  BOOST_TEST(r.timed_out);

  // The server still serves listed clients.
  co.curve = ZmqClientCurve{listed, server_keys.public_z85};
  auto member = ok_or_fail(ZmqClient::open(co));
  round_trip(*server, *member);
}

BOOST_AUTO_TEST_CASE(a_client_with_the_wrong_server_key_gets_nothing_through) {
  const CurveKeyPair server_keys = generate_curve_key_pair();
  const CurveKeyPair client_keys = generate_curve_key_pair();
  ZmqServerOptions so;
  so.curve = server_keys;
  so.authorized_keys = {client_keys.public_z85};
  auto server = ok_or_fail(ZmqServer::open(so));
  ZmqClientOptions co;
  co.endpoint = server->last_endpoint();
  co.curve = ZmqClientCurve{client_keys, generate_curve_key_pair().public_z85};
  auto client = ok_or_fail(ZmqClient::open(co));
  require_ok(client->send(bytes("hello")));
  Received r = ok_or_fail(server->receive(absent_timeout_ms));
  BOOST_TEST(r.timed_out);
}

BOOST_AUTO_TEST_CASE(sending_to_an_unknown_identity_is_an_error) {
  auto server = ok_or_fail(ZmqServer::open(ZmqServerOptions{}));
  const std::vector<uint8_t> nobody = {0, 1, 2, 3, 4};
  Status s = server->send(nobody, bytes("hello?"));
  BOOST_REQUIRE(!s.ok());
  BOOST_TEST((s.code() == Status::Code::not_found));
  BOOST_TEST(contains(s.message(), server->last_endpoint()));
  BOOST_TEST(contains(s.message(), "0001020304"));
  BOOST_TEST(!server->send({}, bytes("x")).ok());
}

BOOST_AUTO_TEST_CASE(bad_options_are_refused_naming_the_endpoint) {
  ZmqServerOptions so;
  so.endpoint = "nonsense://here";
  auto bad_endpoint = ZmqServer::open(so);
  BOOST_REQUIRE(!bad_endpoint.ok());
  BOOST_TEST(contains(bad_endpoint.status().message(), "nonsense://here"));

  so = ZmqServerOptions{};
  so.curve = generate_curve_key_pair();
  auto nobody_listed = ZmqServer::open(so);
  BOOST_REQUIRE(!nobody_listed.ok());
  so.authorized_keys = {"too short"};
  auto bad_key = ZmqServer::open(so);
  BOOST_REQUIRE(!bad_key.ok());
  BOOST_TEST(contains(bad_key.status().message(), "authorized key 0"));

  so = ZmqServerOptions{};
  so.authorized_keys = {generate_curve_key_pair().public_z85};
  BOOST_TEST(!ZmqServer::open(so).ok());  // keys without CURVE would be ignored
}

BOOST_AUTO_TEST_CASE(keys_written_by_write_cluster_keys_read_back) {
  TempDir tmp;
  const std::string dir = (tmp.path / "keys").string();
  require_ok(write_cluster_keys(dir, 3));

  struct stat st {};
  BOOST_REQUIRE(::stat(dir.c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0700u);
  BOOST_REQUIRE(::stat((tmp.path / "keys" / "node-2.key").c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0600u);

  const CurveKeyPair server_keys = ok_or_fail(read_key_pair(dir, "server"));
  std::vector<std::string> publics = {server_keys.public_z85};
  for (int i = 0; i < 3; ++i)
    publics.push_back(ok_or_fail(read_key_pair(dir, "node-" + std::to_string(i))).public_z85);
  BOOST_TEST(ok_or_fail(read_authorized_keys(dir)) == publics);
  BOOST_TEST(!read_key_pair(dir, "node-3").ok());

  // Keys are never overwritten.
  Status again = write_cluster_keys(dir, 3);
  BOOST_REQUIRE(!again.ok());
  BOOST_TEST((again.code() == Status::Code::invalid_input));
  BOOST_TEST(contains(again.message(), dir));

  // The written keys work end to end.
  ZmqServerOptions so;
  so.curve = server_keys;
  so.authorized_keys = ok_or_fail(read_authorized_keys(dir));
  auto server = ok_or_fail(ZmqServer::open(so));
  ZmqClientOptions co;
  co.endpoint = server->last_endpoint();
  co.curve = ZmqClientCurve{ok_or_fail(read_key_pair(dir, "node-1")), server_keys.public_z85};
  auto client = ok_or_fail(ZmqClient::open(co));
  round_trip(*server, *client);
}

BOOST_AUTO_TEST_CASE(key_file_errors_name_the_file_and_line) {
  TempDir tmp;
  fs::create_directories(tmp.path);
  const std::string dir = tmp.str();
  const std::string path = (tmp.path / "authorized_keys").string();

  auto missing = read_authorized_keys(dir);
  BOOST_REQUIRE(!missing.ok());
  BOOST_TEST((missing.status().code() == Status::Code::not_found));
  BOOST_TEST(contains(missing.status().message(), path));

  const std::string good = generate_curve_key_pair().public_z85;
  write_text(path, "# cluster keys\n" + good + "\n" + good.substr(0, 39) + "\n");
  auto short_key = read_authorized_keys(dir);
  BOOST_REQUIRE(!short_key.ok());
  BOOST_TEST((short_key.status().code() == Status::Code::invalid_input));
  BOOST_TEST(contains(short_key.status().message(), path + ":3:"));
  BOOST_TEST(contains(short_key.status().message(), "39 characters"));

  write_text(path, "\n" + std::string(40, '~') + "\n");  // '~' is not in the Z85 alphabet
  auto bad_chars = read_authorized_keys(dir);
  BOOST_REQUIRE(!bad_chars.ok());
  BOOST_TEST(contains(bad_chars.status().message(), path + ":2:"));

  write_text(path, "\n\n");
  BOOST_TEST(!read_authorized_keys(dir).ok());

  // '#' is a Z85 digit, yet never a key's first: a line starting with it is a comment.
  const std::string hash_line = "#" + good.substr(1);
  BOOST_TEST(!is_curve_key_z85(hash_line));
  write_text(path, "# node-0\n" + hash_line + "\n" + good + "\n");
  BOOST_TEST(ok_or_fail(read_authorized_keys(dir)) == std::vector<std::string>{good});

  write_text(path, "  " + good + "\r\n");
  BOOST_TEST(ok_or_fail(read_authorized_keys(dir)) == std::vector<std::string>{good});

  // A key pair whose halves do not belong together.
  const CurveKeyPair a = generate_curve_key_pair();
  write_text(tmp.path / "n.key", a.secret_z85 + "\n");
  write_text(tmp.path / "n.pub", generate_curve_key_pair().public_z85 + "\n");
  auto mismatch = read_key_pair(dir, "n");
  BOOST_REQUIRE(!mismatch.ok());
  BOOST_TEST(contains(mismatch.status().message(), "n.pub"));
  write_text(tmp.path / "n.pub", a.public_z85 + "\n" + a.public_z85 + "\n");
  auto two_keys = read_key_pair(dir, "n");
  BOOST_REQUIRE(!two_keys.ok());
  BOOST_TEST(contains(two_keys.status().message(), (tmp.path / "n.pub").string() + ":2:"));
  auto no_key = read_key_pair(dir, "absent");
  BOOST_REQUIRE(!no_key.ok());
  BOOST_TEST((no_key.status().code() == Status::Code::not_found));
  BOOST_TEST(contains(no_key.status().message(), "absent.key"));
}

// A client keeps its link across a restart of the server on the same endpoint: libzmq
// reconnects, and what the client sends afterwards reaches the new server.
BOOST_AUTO_TEST_CASE(client_reconnects_after_the_server_restarts) {
  auto server = ok_or_fail(ZmqServer::open({}));
  const std::string endpoint = server->last_endpoint();
  auto client = ok_or_fail(ZmqClient::open({endpoint, std::nullopt}));
  round_trip(*server, *client);
  server.reset();
  ZmqServerOptions again;
  again.endpoint = endpoint;
  server = ok_or_fail(ZmqServer::open(again));
  require_ok(client->send(bytes("after")));
  Received r = ok_or_fail(server->receive(arrive_timeout_ms));
  BOOST_REQUIRE(!r.timed_out);
  BOOST_REQUIRE_EQUAL(r.frames.size(), 1u);
  BOOST_TEST(r.frames[0].to_vector() == bytes("after"));
}

// Several frames go out without a copy, arrive whole and in order, both ways; the bytes' owner
// is let go once libzmq has sent them.
BOOST_AUTO_TEST_CASE(multi_frame_messages_arrive_whole_and_release_their_owner) {
  auto server = ok_or_fail(ZmqServer::open(ZmqServerOptions{}));
  auto client = ok_or_fail(ZmqClient::open({server->last_endpoint(), std::nullopt}));
  auto owner =
      std::make_shared<std::vector<std::vector<uint8_t>>>(std::vector<std::vector<uint8_t>>{
          bytes("first"), std::vector<uint8_t>(1 << 20, 7), bytes("last")});
  std::vector<std::span<const uint8_t>> frames;
  for (const auto& f : *owner) frames.emplace_back(f);
  std::weak_ptr<const void> watch = owner;
  require_ok(client->send(owner, frames));
  Received at_server = ok_or_fail(server->receive(arrive_timeout_ms));
  BOOST_REQUIRE(!at_server.timed_out);
  BOOST_REQUIRE_EQUAL(at_server.frames.size(), 3u);
  for (size_t i = 0; i < 3; ++i) BOOST_TEST(at_server.frames[i].to_vector() == (*owner)[i]);
  require_ok(server->send(at_server.identity, owner, frames));
  Received at_client = ok_or_fail(client->receive(arrive_timeout_ms));
  BOOST_REQUIRE_EQUAL(at_client.frames.size(), 3u);
  for (size_t i = 0; i < 3; ++i) BOOST_TEST(at_client.frames[i].to_vector() == (*owner)[i]);
  owner.reset();
  // Both messages are delivered, so libzmq has let go of every frame (its I/O threads free them
  // just after; this waits at most arrive_timeout_ms for that).
  for (int i = 0; i < arrive_timeout_ms / 10 && !watch.expired(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  BOOST_TEST(watch.expired());
}

BOOST_AUTO_TEST_CASE(frame_counts_out_of_range_are_refused) {
  auto server = ok_or_fail(ZmqServer::open(ZmqServerOptions{}));
  auto client = ok_or_fail(ZmqClient::open({server->last_endpoint(), std::nullopt}));
  auto owner = std::make_shared<std::vector<uint8_t>>(bytes("x"));
  std::vector<std::span<const uint8_t>> none;
  std::vector<std::span<const uint8_t>> too_many(zmq_payload_frames_max + 1,
                                                 std::span<const uint8_t>(*owner));
  for (const auto& frames : {none, too_many}) {
    Status s = client->send(owner, frames);
    BOOST_TEST((s.code() == Status::Code::invalid_input));
    BOOST_TEST(contains(s.message(), "payload frames"));
  }
  // A peer that sends more frames than a message may have (a raw DEALER here): the message is
  // refused whole, and the next one arrives.
  zmq::context_t context;
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.connect(server->last_endpoint());
  for (size_t i = 0; i <= zmq_payload_frames_max; ++i)
    raw.send(zmq::buffer(std::string_view("f")),
             i < zmq_payload_frames_max ? zmq::send_flags::sndmore : zmq::send_flags::none);
  raw.send(zmq::buffer(std::string_view("fine")), zmq::send_flags::none);
  auto r = server->receive(arrive_timeout_ms);
  BOOST_REQUIRE(!r.ok());
  BOOST_TEST((r.status().code() == Status::Code::invalid_input));
  BOOST_TEST(contains(r.status().message(), "frames"));
  Received next = ok_or_fail(server->receive(arrive_timeout_ms));
  BOOST_REQUIRE_EQUAL(next.frames.size(), 1u);
  BOOST_TEST(next.frames[0].to_vector() == bytes("fine"));
  raw.set(zmq::sockopt::linger, 0);
}
