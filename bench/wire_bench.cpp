#include "bench/wire_bench.h"
#include <algorithm>
#include <unordered_map>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <unordered_set>

#include "actors/envelope.h"
#include "actors/zmq_transport.h"
#include "common/bf16.h"
#include "common/hash.h"
#include "data/zipf.h"
#include "ps/shard_core.h"
#include "worker/kv_client.h"

namespace colony {

namespace {

// Alternating rounds of ours and the baseline per figure (odd: the median is one round).
constexpr int wire_bench_rounds = 7;
constexpr double wire_bench_round_seconds_min = 0.25;
constexpr uint64_t bench_cluster_id = 0xbe0c;
constexpr NodeId first_worker = 1;  // the client's workers are first_worker, first_worker + 1, ...
constexpr int receive_timeout_ms = 10000;
// Queues as the daemons' bridges have them (actors/bridge.h): a request in many parts fills a
// queue for a while.
constexpr int bench_hwm = 10000;
constexpr int bench_send_timeout_ms = 30000;

// The child: serves a shard of `width` to `workers` workers (width 0: echoes every payload
// back) until killed.
[[noreturn]] void serve(size_t width, size_t workers, ValueFormat format, int report_fd) {
  ZmqServerOptions so;
  so.send_hwm = so.receive_hwm = bench_hwm;
  so.send_timeout_ms = bench_send_timeout_ms;
  auto server = ZmqServer::open(so);
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
      auto frames = encode_ps_frames(std::move(o.message), bench_cluster_id, o.to);
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
  ZmqClientOptions co;
  co.endpoint = endpoint;
  co.send_hwm = co.receive_hwm = bench_hwm;
  co.send_timeout_ms = bench_send_timeout_ms;
  auto client = ZmqClient::open(co);
  if (!client) return client.status();
  peer.client = std::move(client.value());
  return Status();
}

// A worker of the client process: its own KvClient (as a real worker's: requests in parts,
// replies copied into its rows), one round trip (its pull, then its push) in flight.
struct Lane {
  std::unique_ptr<KvClient> kv;
  std::vector<float> values;  // the pulled rows
  KvClient::Ticket ticket = 0;
  bool pushing = false;
  uint32_t clock = 0;
};

size_t frames_bytes(const std::vector<ReceivedBytes>& frames) {
  size_t n = 0;
  for (const ReceivedBytes& f : frames) n += f.size();
  return n;
}

// Sends what `out` holds to the shard, adding the encoded bytes to `bytes`.
Status send_all(ZmqClient& client, Outbox& out, uint64_t& bytes) {
  for (Outgoing& o : out) {
    auto frames = encode_ps_frames(std::move(o.message), bench_cluster_id, o.to);
    if (!frames) return frames.status();
    bytes += frames->bytes();
    if (Status s = client.send(frames->owner, frames->frames); !s.ok()) return s;
  }
  out.clear();
  return Status();
}

// Runs `trips` round trips on the lanes, each with one in flight, until `trips` are done between
// them; adds every byte sent and received to `bytes`.
Status run_trips(ZmqClient& client, std::vector<Lane>& lanes, const std::vector<uint64_t>& keys,
                 const std::vector<float>& grads, uint64_t trips, uint64_t& bytes) {
  uint64_t started = 0, completed = 0;
  Outbox out;
  auto begin = [&](size_t lane) {
    Lane& l = lanes[lane];
    l.pushing = false;
    l.ticket = l.kv->pull(keys, l.clock, first_worker + lane, l.values, out);
    ++started;
    return send_all(client, out, bytes);
  };
  for (size_t lane = 0; lane < lanes.size() && started < trips; ++lane)
    if (Status s = begin(lane); !s.ok()) return s;
  while (completed < trips) {
    auto r = client.receive(receive_timeout_ms);
    if (!r) return r.status();
    if (r->timed_out) return Status::io_error("no answer from the bench server within 10 s");
    bytes += frames_bytes(r->frames);
    auto m = decode_wire_message(r->frames, bench_cluster_id);
    if (!m) return m.status();
    if (m->is_control || m->receiver < first_worker || m->receiver - first_worker >= lanes.size())
      return Status::internal("the bench server answered no worker");
    const size_t lane = m->receiver - first_worker;
    Lane& l = lanes[lane];
    l.kv->on_message(m->ps, out);
    if (!l.kv->error().ok()) return l.kv->error();
    if (!l.kv->done(l.ticket)) continue;
    if (!l.pushing) {
      l.pushing = true;
      l.ticket = l.kv->push(keys, grads, ++l.clock, out);
      if (Status s = send_all(client, out, bytes); !s.ok()) return s;
      continue;
    }
    ++completed;
    if (started < trips)
      if (Status s = begin(lane); !s.ok()) return s;
  }
  return Status();
}

// The baseline: `trips` round trips of two stages each on `lanes` lanes, each with one round trip
// in flight; a stage sends `per_stage` copies of `payload` (without copying it) and waits for all
// of them to come back from the echo, which answers in order.
Status run_echo(ZmqClient& client, const std::shared_ptr<std::vector<uint8_t>>& payload,
                size_t per_stage, size_t lanes, uint64_t trips) {
  const std::span<const uint8_t> frame(*payload);
  std::deque<size_t> sent;                // the lane of each message not yet echoed, in order
  std::vector<size_t> waiting(lanes, 0);  // echoes a lane's stage still waits for
  std::vector<bool> second(lanes, false);
  uint64_t started = 0, completed = 0;
  auto stage = [&](size_t lane) -> Status {
    for (size_t i = 0; i < per_stage; ++i) {
      if (Status s = client.send(payload, std::span(&frame, 1)); !s.ok()) return s;
      sent.push_back(lane);
    }
    waiting[lane] = per_stage;
    return Status();
  };
  for (size_t lane = 0; lane < lanes && started < trips; ++lane, ++started)
    if (Status s = stage(lane); !s.ok()) return s;
  while (completed < trips) {
    auto r = client.receive(receive_timeout_ms);
    if (!r) return r.status();
    if (r->timed_out) return Status::io_error("no answer from the echo within 10 s");
    if (frames_bytes(r->frames) != payload->size() || sent.empty())
      return Status::internal("the echo changed the payload's size");
    const size_t lane = sent.front();
    sent.pop_front();
    if (--waiting[lane] > 0) continue;
    if (!second[lane]) {
      second[lane] = true;
    } else {
      second[lane] = false;
      ++completed;
      if (started >= trips) continue;
      ++started;
    }
    if (Status s = stage(lane); !s.ok()) return s;
  }
  return Status();
}

}  // namespace

Expected<std::vector<WireFigure>> run_wire_bench(const std::vector<size_t>& widths,
                                                 const std::vector<size_t>& keys_per_request,
                                                 uint64_t bytes_per_figure, size_t in_flight,
                                                 ValueFormat format, size_t part_bytes) {
  COLONY_ASSERT(in_flight >= 1 && in_flight <= wire_bench_in_flight_max, "in_flight {}", in_flight);
  COLONY_ASSERT(part_bytes >= part_bytes_min && part_bytes <= part_bytes_max, "part_bytes {}",
                part_bytes);
  using Clock = std::chrono::steady_clock;
  Peer echo;
  if (Status s = start(0, 0, format, echo); !s.ok()) return s;
  std::vector<WireFigure> figures;
  ZipfSampler zipf(10000000, 1.1);
  for (size_t width : widths) {
    Peer shard;
    if (Status s = start(width, in_flight, format, shard); !s.ok()) return s;
    std::vector<Lane> lanes(in_flight);
    for (size_t lane = 0; lane < in_flight; ++lane) {
      KvClient::Options o;
      o.id = first_worker + NodeId(lane);
      o.map = ShardMapSpec{1, 1, 16, 0};
      o.shard_nodes = {0};
      o.width = width;
      o.push_format = format;
      o.pull_format = format;
      o.part_bytes = part_bytes;
      auto kv = KvClient::make(o);
      if (!kv) return kv.status();
      lanes[lane].kv = std::move(kv.value());
    }
    for (size_t n : keys_per_request) {
      SplitMix64 rng(n * 31 + width);
      std::vector<uint64_t> keys;
      std::unordered_set<uint64_t> seen;
      while (keys.size() < n) {
        const uint64_t k = make_key(1, mix64(zipf(rng)));
        if (seen.insert(k).second) keys.push_back(k);
      }
      seen = {};
      // bf16-exact, so that either format carries them whole.
      const std::vector<float> grads(n * width, round_bf16(1e-3f));
      for (Lane& l : lanes) l.values.assign(n * width, 0.0f);
      // Warm-up: one round trip a lane creates the rows and measures a round trip's bytes.
      uint64_t bytes = 0;
      if (Status s = run_trips(*shard.client, lanes, keys, grads, in_flight, bytes); !s.ok())
        return s;
      bytes /= in_flight;
      // Ours and the baseline alternate in rounds, so that both see the same noise from other
      // work on the machine; the figure is the median round. A round is as many round trips as
      // move bytes_per_figure / rounds, and at least as many as take round_seconds_min (short
      // rounds measure the scheduler more than the code).
      uint64_t trips = std::max<uint64_t>(2, bytes_per_figure / bytes / wire_bench_rounds);
      {
        uint64_t done = 0, ignored = 0;
        const auto start_time = Clock::now();
        while (std::chrono::duration<double>(Clock::now() - start_time).count() <
               wire_bench_round_seconds_min) {
          if (Status s = run_trips(*shard.client, lanes, keys, grads, in_flight, ignored); !s.ok())
            return s;
          done += in_flight;
        }
        trips = std::max(trips, done);
      }
      // Baseline: the same bytes a round trip as raw payloads echoed back, sent without copies
      // both ways, in two stages of messages no larger than our parts.
      const size_t per_stage = std::max<size_t>(1, (bytes / 4 + part_bytes - 1) / part_bytes);
      auto payload = std::make_shared<std::vector<uint8_t>>(
          std::max<uint64_t>(8, bytes / 4 / per_stage), 0x5a);
      const double echo_bytes = double(4 * per_stage * payload->size());
      std::vector<double> ours, baseline, ratios;
      for (int round = 0; round < wire_bench_rounds; ++round) {
        uint64_t moved = 0;
        auto start_time = Clock::now();
        if (Status s = run_trips(*shard.client, lanes, keys, grads, trips, moved); !s.ok())
          return s;
        const double seconds = std::chrono::duration<double>(Clock::now() - start_time).count();
        start_time = Clock::now();
        if (Status s = run_echo(*echo.client, payload, per_stage, in_flight, trips); !s.ok())
          return s;
        const double baseline_seconds =
            std::chrono::duration<double>(Clock::now() - start_time).count();
        ours.push_back(double(moved) / seconds);
        baseline.push_back(echo_bytes * double(trips) / baseline_seconds);
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
      f.messages =
          2 *
          ((n + part_keys(part_bytes, width, format) - 1) / part_keys(part_bytes, width, format)) *
          2;
      figures.push_back(f);
    }
  }
  return figures;
}

}  // namespace colony
