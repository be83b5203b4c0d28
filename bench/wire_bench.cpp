#include "bench/wire_bench.h"
#include <algorithm>
#include <unordered_map>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <unordered_set>

#include "actors/envelope.h"
#include "actors/zmq_transport.h"
#include "common/bf16.h"
#include "common/hash.h"
#include "data/zipf.h"
#include "ps/shard_core.h"

namespace colony {

namespace {

// Alternating rounds of ours and the baseline per figure (odd: the median is one round).
constexpr int wire_bench_rounds = 7;
constexpr double wire_bench_round_seconds_min = 0.25;
constexpr uint64_t bench_cluster_id = 0xbe0c;
constexpr NodeId first_worker = 1;  // the client's workers are first_worker, first_worker + 1, ...
constexpr int receive_timeout_ms = 10000;

// The child: serves a shard of `width` to `workers` workers (width 0: echoes every payload
// back) until killed.
[[noreturn]] void serve(size_t width, size_t workers, ValueFormat format, int report_fd) {
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
    for (NodeId w = 0; w < workers; ++w) sc.senders.push_back(first_worker + w);
    sc.map = ShardMapSpec{1, 1, 16, 0};
    sc.wire_format = format;
    auto made = ShardCore::make(sc);
    if (!made) ::_exit(1);
    shard = std::move(made.value());
  }
  Outbox out;
  while (true) {
    auto r = (*server)->receive(1000);
    if (!r || r->timed_out) continue;
    if (!shard) {  // the echo: sends back what it received, without a copy
      const ReceivedBytes& body = r->frames[0];
      const std::span<const uint8_t> frame(body.data(), body.size());
      (void)(*server)->send(r->identity, body.owner(), std::span(&frame, 1));
      continue;
    }
    auto msg = decode_wire_message(r->frames, bench_cluster_id);
    if (!msg || msg->is_control) continue;  // counted nowhere: the client times out and reports it
    shard->on_message(msg->ps, out);
    for (Outgoing& o : out) {
      auto frames = encode_ps_frames(std::move(o.message), bench_cluster_id);
      if (frames) (void)(*server)->send(r->identity, frames->owner, frames->frames);
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

Status start(size_t width, size_t workers, ValueFormat format, Peer& peer) {
  int fds[2];
  if (::pipe(fds) != 0) return Status::io_error(std::string("pipe: ") + std::strerror(errno));
  peer.pid = ::fork();
  if (peer.pid < 0) return Status::io_error(std::string("fork: ") + std::strerror(errno));
  if (peer.pid == 0) {
    ::close(fds[0]);
    serve(width, workers, format, fds[1]);
  }
  ::close(fds[1]);
  std::string endpoint;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') endpoint.push_back(c);
  ::close(fds[0]);
  if (endpoint.empty())
    return Status::io_error("the bench server process could not bind a loopback port");
  auto client = ZmqClient::open({endpoint, std::nullopt});
  if (!client) return client.status();
  peer.client = std::move(client.value());
  return Status();
}

size_t frames_bytes(const std::vector<ReceivedBytes>& frames) {
  size_t n = 0;
  for (const ReceivedBytes& f : frames) n += f.size();
  return n;
}

// Runs `trips` round trips of two request/reply exchanges each over `client`, on `lanes`
// lanes that each have one trip in flight, until `trips` are done between them. `send(stage,
// lane)` queues the lane's request of stage 0 or 1 and returns the request's id;
// `answered(frames)` checks a reply and returns the id of the request it answers.
template <class Send, class Answered>
Status pipelined(ZmqClient& client, uint64_t trips, size_t lanes, Send send, Answered answered) {
  std::unordered_map<uint64_t, std::pair<int, size_t>> in_flight;  // id -> (stage, lane)
  uint64_t started = 0, completed = 0;
  auto request = [&](int stage, size_t lane) -> Status {
    auto id = send(stage, lane);
    if (!id) return id.status();
    in_flight[*id] = {stage, lane};
    return Status();
  };
  for (size_t lane = 0; lane < lanes && started < trips; ++lane, ++started)
    if (Status s = request(0, lane); !s.ok()) return s;
  while (completed < trips) {
    auto r = client.receive(receive_timeout_ms);
    if (!r) return r.status();
    if (r->timed_out) return Status::io_error("no answer from the bench server within 10 s");
    auto id = answered(r->frames);
    if (!id) return id.status();
    auto it = in_flight.find(*id);
    if (it == in_flight.end())
      return Status::internal("the bench server answered an unknown request");
    const auto [stage, lane] = it->second;
    in_flight.erase(it);
    if (stage == 0) {
      if (Status s = request(1, lane); !s.ok()) return s;
    } else {
      ++completed;
      if (started < trips) {
        ++started;
        if (Status s = request(0, lane); !s.ok()) return s;
      }
    }
  }
  return Status();
}

}  // namespace

Expected<std::vector<WireFigure>> run_wire_bench(const std::vector<size_t>& widths,
                                                 const std::vector<size_t>& keys_per_request,
                                                 uint64_t bytes_per_figure, size_t in_flight,
                                                 ValueFormat format) {
  COLONY_ASSERT(in_flight >= 1 && in_flight <= wire_bench_in_flight_max, "in_flight {}", in_flight);
  // A message over the wire's limit is refused by its sender's codec: say which before starting.
  for (size_t width : widths)
    for (size_t n : keys_per_request)
      if (const uint64_t push = uint64_t{n} * (sizeof(uint64_t) + width * value_bytes(format));
          push > wire_message_bytes_max)
        return Status::invalid_input(fmt::format(
            "{} floats x {} keys: a push of {} bytes (a reply nearly as large) is over the {} byte "
            "limit of one message, and requests are not streamed in parts",
            width, n, push, wire_message_bytes_max));
  using Clock = std::chrono::steady_clock;
  Peer echo;
  if (Status s = start(0, 0, format, echo); !s.ok()) return s;
  std::vector<WireFigure> figures;
  ZipfSampler zipf(10000000, 1.1);
  for (size_t width : widths) {
    Peer shard;
    if (Status s = start(width, in_flight, format, shard); !s.ok()) return s;
    std::vector<uint32_t> clocks(in_flight, 0);  // each worker's
    uint64_t request = 1;
    for (size_t n : keys_per_request) {
      SplitMix64 rng(n * 31 + width);
      std::vector<uint64_t> keys;
      std::unordered_set<uint64_t> seen;
      while (keys.size() < n) {
        const uint64_t k = make_key(1, mix64(zipf(rng)));
        if (seen.insert(k).second) keys.push_back(k);
      }
      // The gradients are built once and every push refers to them (a FloatBuffer view), as a
      // worker's push carries the gradients it computed: the loop measures the wire, not copies
      // of the bench's own buffers. Keys are copied into each message, as a worker's are.
      // bf16-exact, so that either format carries them whole.
      auto grads = std::make_shared<std::vector<float>>(n * width, round_bf16(1e-3f));
      std::vector<PullRequest> pulls;
      std::vector<PushRequest> pushes;
      for (NodeId lane = 0; lane < in_flight; ++lane) {
        const NodeId worker = first_worker + lane;
        pulls.push_back({{worker, 0, 1}, 0, worker, keys});
        pushes.push_back({{worker, 0, 1},
                          0,
                          keys,
                          FloatBuffer::view(grads, grads->data(), grads->size()),
                          format});
      }
      // Worker `lane`'s next request of stage 0 (its pull) or 1 (its push), with id `id`.
      auto next_message = [&](int stage, size_t lane, uint64_t id) -> PsMessage {
        if (stage == 0) {
          pulls[lane].header.request_id = id;
          pulls[lane].clock = clocks[lane];
          return pulls[lane];
        }
        pushes[lane].header.request_id = id;
        pushes[lane].clock = ++clocks[lane];
        return pushes[lane];
      };
      // A round trip's bytes: pull, reply, push, ack, as encoded (the sum of their frames).
      uint64_t bytes = 0;
      auto exchange = [&](PsMessage&& m, auto is_reply) -> Status {
        auto frames = encode_ps_frames(std::move(m), bench_cluster_id);
        if (!frames) return frames.status();
        bytes += frames->bytes();
        if (Status s = shard.client->send(frames->owner, frames->frames); !s.ok()) return s;
        auto r = shard.client->receive(receive_timeout_ms);
        if (!r) return r.status();
        if (r->timed_out) return Status::io_error("no answer from the bench server within 10 s");
        bytes += frames_bytes(r->frames);
        auto reply = decode_wire_message(r->frames, bench_cluster_id);
        if (!reply) return reply.status();
        if (reply->is_control || !is_reply(reply->ps))
          return Status::internal("the bench shard refused a request");
        return Status();
      };
      auto round_trip = [&](size_t lane) -> Status {
        bytes = 0;
        if (Status s =
                exchange(next_message(0, lane, request++),
                         [](const PsMessage& m) { return std::holds_alternative<PullReply>(m); });
            !s.ok())
          return s;
        return exchange(next_message(1, lane, request++),
                        [](const PsMessage& m) { return std::holds_alternative<PushAck>(m); });
      };
      for (size_t lane = 0; lane < in_flight; ++lane)  // warm-up: creates the rows
        if (Status s = round_trip(lane); !s.ok()) return s;
      // Ours and the baseline alternate in rounds, so that both see the same noise from other
      // work on the machine; the figure is the median round. A round is as many round trips as
      // move bytes_per_figure / rounds, and at least as many as take round_seconds_min (short
      // rounds measure the scheduler more than the code).
      uint64_t trips = std::max<uint64_t>(2, bytes_per_figure / bytes / wire_bench_rounds);
      {
        uint64_t done = 0;
        const auto start_time = Clock::now();
        while (std::chrono::duration<double>(Clock::now() - start_time).count() <
               wire_bench_round_seconds_min) {
          if (Status s = round_trip(done % in_flight); !s.ok()) return s;
          ++done;
        }
        trips = std::max(trips, done);
      }
      // Baseline: the same bytes, in the same shape (two request/reply exchanges a round trip),
      // as raw payloads echoed back, sent without copies both ways, as ours are.
      auto quarter = std::make_shared<std::vector<uint8_t>>(std::max<uint64_t>(8, bytes / 4), 0x5a);
      const std::span<const uint8_t> quarter_frame(*quarter);
      // Timed: both with `in_flight` round trips in flight; ours from as many workers, each
      // with one in flight (a shard answers a worker's pull only once its previous push is in,
      // so one worker's round trips follow one another).
      auto send_ours = [&](int stage, size_t lane) -> Expected<uint64_t> {
        const uint64_t id = request++;
        auto frames = encode_ps_frames(next_message(stage, lane, id), bench_cluster_id);
        if (!frames) return frames.status();
        if (Status s = shard.client->send(frames->owner, frames->frames); !s.ok()) return s;
        return id;
      };
      auto answered_ours = [&](const std::vector<ReceivedBytes>& reply) -> Expected<uint64_t> {
        auto m = decode_wire_message(reply, bench_cluster_id);
        if (!m) return m.status();
        if (m->is_control ||
            (!std::holds_alternative<PullReply>(m->ps) && !std::holds_alternative<PushAck>(m->ps)))
          return Status::internal("the bench shard refused a request");
        return std::visit([](const auto& x) { return x.header.request_id; }, m->ps);
      };
      uint64_t echo_sent = 0, echo_answered = 0;  // the echo answers in order
      auto send_echo = [&](int, size_t) -> Expected<uint64_t> {
        if (Status s = echo.client->send(quarter, std::span(&quarter_frame, 1)); !s.ok()) return s;
        return echo_sent++;
      };
      auto answered_echo = [&](const std::vector<ReceivedBytes>& reply) -> Expected<uint64_t> {
        if (frames_bytes(reply) != quarter->size())
          return Status::internal("the echo changed the payload's size");
        return echo_answered++;
      };
      std::vector<double> ours, baseline, ratios;
      for (int round = 0; round < wire_bench_rounds; ++round) {
        auto start_time = Clock::now();
        if (Status s = pipelined(*shard.client, trips, in_flight, send_ours, answered_ours);
            !s.ok())
          return s;
        const double seconds = std::chrono::duration<double>(Clock::now() - start_time).count();
        start_time = Clock::now();
        if (Status s = pipelined(*echo.client, trips, in_flight, send_echo, answered_echo); !s.ok())
          return s;
        const double baseline_seconds =
            std::chrono::duration<double>(Clock::now() - start_time).count();
        ours.push_back(double(bytes * trips) / seconds);
        baseline.push_back(double(4 * quarter->size() * trips) / baseline_seconds);
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
      f.in_flight = in_flight;
      figures.push_back(f);
    }
  }
  return figures;
}

}  // namespace colony
