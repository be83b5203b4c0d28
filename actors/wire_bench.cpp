#include <algorithm>
#include <unordered_map>
#include "actors/wire_bench.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <unordered_set>

#include "actors/envelope.h"
#include "actors/zmq_transport.h"
#include "common/hash.h"
#include "ps/shard_core.h"
#include "worker/zipf.h"

namespace colony {

namespace {

// Alternating rounds of ours and the baseline per figure (odd: the median is one round).
constexpr int wire_bench_rounds = 7;
constexpr double wire_bench_round_seconds_min = 0.25;
// Round trips in flight at once, in ours and in the baseline alike.
constexpr size_t wire_bench_depth = 2;

constexpr uint64_t bench_cluster_id = 0xbe0c;
constexpr NodeId client_id = 1;
constexpr int receive_timeout_ms = 10000;

// The child: serves a shard of `width` (width 0: echo every payload back) until killed.
[[noreturn]] void serve(size_t width, int report_fd) {
  auto server = ZmqServer::open({});
  std::string endpoint = server ? (*server)->last_endpoint() : std::string();
  endpoint.push_back('\n');
  if (::write(report_fd, endpoint.data(), endpoint.size()) < 0 || !server) ::_exit(1);
  ::close(report_fd);
  std::unique_ptr<ShardCore> shard;
  if (width > 0) {
    ShardConfig sc;
    sc.width = width;
    sc.optimizer = default_optimizer_config(OptimizerKind::sgd);
    sc.consistency = {ConsistencyKind::asp, 0};
    sc.senders = {client_id};
    sc.map = ShardMapSpec{1, 1, 16, 0};
    auto made = ShardCore::make(sc);
    if (!made) ::_exit(1);
    shard = std::move(made.value());
  }
  Outbox out;
  while (true) {
    auto r = (*server)->receive(1000);
    if (!r || r->timed_out) continue;
    if (!shard) {
      (void)(*server)->send(r->identity, r->payload.to_vector());
      continue;
    }
    auto msg = decode_ps_message(r->payload, bench_cluster_id);
    if (!msg) continue;  // counted nowhere: the client times out and reports it
    shard->on_message(*msg, out);
    for (const Outgoing& o : out) {
      auto bytes = encode_ps_message(o.message, bench_cluster_id);
      if (bytes) (void)(*server)->send(r->identity, std::move(*bytes));
    }
    out.clear();
  }
}

// A forked server and a client connected to it; the child is killed on destruction.
struct Peer {
  pid_t pid = -1;
  std::unique_ptr<ZmqClient> client;
  ~Peer() {
    client.reset();
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

Status start(size_t width, Peer& peer) {
  int fds[2];
  if (::pipe(fds) != 0) return Status::io_error(std::string("pipe: ") + std::strerror(errno));
  peer.pid = ::fork();
  if (peer.pid < 0) return Status::io_error(std::string("fork: ") + std::strerror(errno));
  if (peer.pid == 0) {
    ::close(fds[0]);
    serve(width, fds[1]);
  }
  ::close(fds[1]);
  std::string endpoint;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') endpoint.push_back(c);
  ::close(fds[0]);
  if (endpoint.empty()) return Status::io_error("the bench server process could not bind a loopback port");
  auto client = ZmqClient::open({endpoint, std::nullopt});
  if (!client) return client.status();
  peer.client = std::move(client.value());
  return Status();
}

template <class Payload>
Expected<ReceivedBytes> call(ZmqClient& client, Payload&& payload) {
  if (Status s = client.send(std::forward<Payload>(payload)); !s.ok()) return s;
  auto r = client.receive(receive_timeout_ms);
  if (!r) return r.status();
  if (r->timed_out) return Status::io_error("no answer from the bench server within 10 s");
  return std::move(r->payload);
}

// Runs `trips` round trips of two request/reply exchanges each over `client`, with up to
// `depth` trips in flight (as a worker keeps the pulls of its next step in flight while it
// finishes the last). `send(stage, trip)` queues trip's request of stage 0 or 1 and returns
// the request's id; `answered(reply)` checks a reply and returns the id of the request it
// answers (a shard may answer out of order: it holds a pull until the puller's last push).
template <class Send, class Answered>
Status pipelined(ZmqClient& client, uint64_t trips, size_t depth, Send send, Answered answered) {
  std::unordered_map<uint64_t, std::pair<int, uint64_t>> in_flight;  // id -> (stage, trip)
  uint64_t started = 0, completed = 0;
  auto request = [&](int stage, uint64_t trip) -> Status {
    auto id = send(stage, trip);
    if (!id) return id.status();
    in_flight[*id] = {stage, trip};
    return Status();
  };
  while (started < trips && in_flight.size() < depth)
    if (Status s = request(0, started++); !s.ok()) return s;
  while (completed < trips) {
    auto r = client.receive(receive_timeout_ms);
    if (!r) return r.status();
    if (r->timed_out) return Status::io_error("no answer from the bench server within 10 s");
    auto id = answered(r->payload);
    if (!id) return id.status();
    auto it = in_flight.find(*id);
    if (it == in_flight.end()) return Status::internal("the bench server answered an unknown request");
    const auto [stage, trip] = it->second;
    in_flight.erase(it);
    if (stage == 0) {
      if (Status s = request(1, trip); !s.ok()) return s;
    } else {
      ++completed;
      if (started < trips)
        if (Status s = request(0, started++); !s.ok()) return s;
    }
  }
  return Status();
}

}  // namespace

Expected<std::vector<WireFigure>> run_wire_bench(const std::vector<size_t>& widths,
                                                 const std::vector<size_t>& keys_per_request,
                                                 uint64_t bytes_per_figure) {
  using Clock = std::chrono::steady_clock;
  Peer echo;
  if (Status s = start(0, echo); !s.ok()) return s;
  std::vector<WireFigure> figures;
  ZipfSampler zipf(10000000, 1.1);
  for (size_t width : widths) {
    Peer shard;
    if (Status s = start(width, shard); !s.ok()) return s;
    uint32_t clock = 0;
    uint64_t request = 1;
    for (size_t n : keys_per_request) {
      SplitMix64 rng(n * 31 + width);
      std::vector<uint64_t> keys;
      std::unordered_set<uint64_t> seen;
      while (keys.size() < n) {
        const uint64_t k = make_key(1, mix64(zipf(rng)));
        if (seen.insert(k).second) keys.push_back(k);
      }
      // Built once, as a worker builds each message once: the loop measures the wire, not
      // copies of the bench's own buffers.
      PullRequest pull_message{{client_id, 0, 1}, 0, client_id, keys};
      PushRequest push_message{{client_id, 0, 1}, 0, keys, std::vector<float>(n * width, 1e-3f)};
      uint64_t bytes = 0;
      auto round_trip = [&]() -> Status {
        pull_message.header.request_id = request++;
        pull_message.clock = clock;
        auto pull = encode_ps_message(pull_message, bench_cluster_id);
        if (!pull) return pull.status();
        const size_t pull_bytes = pull->size();
        auto reply = call(*shard.client, std::move(*pull));
        if (!reply) return reply.status();
        auto values = decode_ps_message(*reply, bench_cluster_id);
        if (!values) return values.status();
        if (!std::holds_alternative<PullReply>(*values)) return Status::internal("the bench shard refused a pull");
        push_message.header.request_id = request++;
        push_message.clock = ++clock;
        auto push = encode_ps_message(push_message, bench_cluster_id);
        if (!push) return push.status();
        const size_t push_bytes = push->size();
        auto ack = call(*shard.client, std::move(*push));
        if (!ack) return ack.status();
        auto acked = decode_ps_message(*ack, bench_cluster_id);
        if (!acked) return acked.status();
        if (!std::holds_alternative<PushAck>(*acked)) return Status::internal("the bench shard refused a push");
        bytes = pull_bytes + reply->size() + push_bytes + ack->size();
        return Status();
      };
      if (Status s = round_trip(); !s.ok()) return s;  // warm-up: creates the rows
      // Ours and the baseline alternate in rounds, so that both see the same noise from other
      // work on the machine; the figure is the median round. A round is as many round trips as
      // move bytes_per_figure / rounds, and at least as many as take round_seconds_min (short
      // rounds measure the scheduler more than the code).
      uint64_t trips = std::max<uint64_t>(2, bytes_per_figure / bytes / wire_bench_rounds);
      {
        uint64_t done = 0;
        const auto start_time = Clock::now();
        while (std::chrono::duration<double>(Clock::now() - start_time).count() < wire_bench_round_seconds_min) {
          if (Status s = round_trip(); !s.ok()) return s;
          ++done;
        }
        trips = std::max(trips, done);
      }
      // Baseline: the same bytes, in the same shape (two request/reply exchanges a round trip),
      // as raw payloads echoed back.
      std::vector<uint8_t> quarter(std::max<uint64_t>(8, bytes / 4), 0x5a);
      // Timed: both with wire_bench_depth trips in flight. Trip k pulls for step `base + k` and
      // pushes step base + k + 1, so the shard holds a pull until the puller's previous push
      // is in (read-my-writes), as it does for a pipelined worker.
      auto send_ours = [&](int stage, uint64_t trip) -> Expected<uint64_t> {
        const uint64_t id = request++;
        pull_message.header.request_id = push_message.header.request_id = id;
        pull_message.clock = clock + static_cast<uint32_t>(trip);
        push_message.clock = clock + static_cast<uint32_t>(trip) + 1;
        auto bytes = stage == 0 ? encode_ps_message(pull_message, bench_cluster_id)
                                : encode_ps_message(push_message, bench_cluster_id);
        if (!bytes) return bytes.status();
        if (Status s = shard.client->send(std::move(*bytes)); !s.ok()) return s;
        return id;
      };
      auto answered_ours = [&](const ReceivedBytes& reply) -> Expected<uint64_t> {
        auto m = decode_ps_message(reply, bench_cluster_id);
        if (!m) return m.status();
        if (!std::holds_alternative<PullReply>(*m) && !std::holds_alternative<PushAck>(*m))
          return Status::internal("the bench shard refused a request");
        return std::visit([](const auto& x) { return x.header.request_id; }, *m);
      };
      uint64_t echo_sent = 0, echo_answered = 0;  // the echo answers in order
      auto send_echo = [&](int, uint64_t) -> Expected<uint64_t> {
        if (Status s = echo.client->send(std::span<const uint8_t>(quarter)); !s.ok()) return s;
        return echo_sent++;
      };
      auto answered_echo = [&](const ReceivedBytes& reply) -> Expected<uint64_t> {
        if (reply.size() != quarter.size()) return Status::internal("the echo changed the payload's size");
        return echo_answered++;
      };
      std::vector<double> ours, baseline, ratios;
      for (int round = 0; round < wire_bench_rounds; ++round) {
        auto start_time = Clock::now();
        if (Status s = pipelined(*shard.client, trips, wire_bench_depth, send_ours, answered_ours); !s.ok()) return s;
        clock += static_cast<uint32_t>(trips);
        const double seconds = std::chrono::duration<double>(Clock::now() - start_time).count();
        start_time = Clock::now();
        if (Status s = pipelined(*echo.client, trips, wire_bench_depth, send_echo, answered_echo); !s.ok()) return s;
        const double baseline_seconds = std::chrono::duration<double>(Clock::now() - start_time).count();
        ours.push_back(double(bytes * trips) / seconds);
        baseline.push_back(double(4 * quarter.size() * trips) / baseline_seconds);
        ratios.push_back(ours.back() / baseline.back());
      }
      auto median = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
      };
      WireFigure f;
      f.width = width;
      f.keys = n;
      f.bytes_per_sec = median(ours);
      f.rows_per_sec = f.bytes_per_sec / double(bytes) * double(2 * n);
      f.baseline_bytes_per_sec = median(baseline);
      f.ratio = median(ratios);
      figures.push_back(f);
    }
  }
  return figures;
}

}  // namespace colony
