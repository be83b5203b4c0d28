// Modelled numerics: a stand-in per node, not the real cores, for thousand-node runs.
//
// One node-step is four events: the node's pull replies arrive (flat: one transfer per GPU and
// shard, sized by the real generator's unique keys per batch; hierarchical: one per shard with
// the node's unique keys, then the rows fanned out to the GPUs over the intra-host link), its
// GPUs compute, the hierarchical reduce crosses the intra-host link, its pushes arrive at
// every shard. A node
// starts step t once its own push of step t - 1 has arrived (read-my-writes) and the slowest
// node has pushed clock t - k (the SSP gate; BSP k = 0; ASP no bound), as the shard core's
// gate would allow. A deep model adds its dense all-reduce (worker/dense_tree.h): once a node has
// computed step t, its GPUs' dense gradients are summed over the intra-host link and sent to the
// root (node 0's host); once every node's are in, the root sends each node the sum, which is
// fanned out to its GPUs; a node computes step t + 1 only once it holds the sum of step t.
// Faults act on the same quantities: a crashed host's events wait for its
// restart (the step in progress is computed again), transfers across a partition or to a
// down shard wait for the heal, slow and clogged hosts stretch compute and transfers.
#include <algorithm>
#include <cmath>
#include <optional>

#include "common/hash.h"
#include "data/generator.h"
#include "sim/simulator.h"

namespace colony::sim::detail {

namespace {

constexpr uint64_t header_bytes = 64;

struct Node {
  uint32_t clock = 0;  // steps pushed
  bool down = false;
  VirtualNanos down_since = 0;
  VirtualNanos restart_at = 0;
  double slow = 1.0;
  uint8_t deferred = 0;  // the node's next phase (Phase), held while it is down; 0: none
  VirtualNanos wait_since = -1;
  VirtualNanos compute_ns = 0, wait_ns = 0;
  VirtualNanos last_step_end = 0;
  VirtualNanos push_start = 0;
  bool done = false;
  uint32_t dense_steps = 0;   // a deep model's dense sums received (of steps 0..dense_steps-1)
  bool awaits_dense = false;  // ready to compute, waiting for the previous step's dense sum
  VirtualNanos dense_wait_since = 0, dense_wait_ns = 0;
  uint32_t acks_pending = 0;  // with replicas: backups' acknowledgements of its push still due
};

struct Partition {
  std::vector<bool> a, b;
  VirtualNanos heal_at;
};

// Unique keys of one GPU's batch and of a node's batches together, from the real generator
// (Criteo-sized vocabularies) and BatchIndex. Counted exactly up to `rows_exact` rows; beyond,
// extrapolated by Heaps' law U(n) = U(m) (n / m)^b with b fitted on U(m / 2) and U(m). On the
// generator's default data the extrapolation is within 1% of the exact count at 8,192 and
// 65,536 rows (docs/simulation.md), and generating the rows would otherwise dominate the
// setup of a large run.
std::pair<uint64_t, uint64_t> unique_keys(uint64_t seed, uint32_t batch, uint32_t gpus) {
  constexpr uint64_t rows_exact = 4096;
  const uint64_t node_rows = uint64_t{batch} * gpus;
  // Keys only: no labels, so neither the intercept's calibration nor the planted model is needed.
  Generator gen(GeneratorConfig{seed, 1.0, false});
  Batch rows;
  RawRow row;
  BatchIndex index;
  std::vector<std::pair<uint64_t, double>> counted;  // (rows, unique keys)
  const uint64_t last = std::min(node_rows, rows_exact);
  for (uint64_t n = 1; n <= last; ++n) {
    gen.draw_features(Stream::train, n, row);
    gen.append_features(row, rows);
    if (n == batch || n == node_rows || n == rows_exact / 2 || n == rows_exact) {
      index.build(rows);
      counted.emplace_back(n, double(index.unique_keys().size()));
    }
  }
  auto at = [&](uint64_t n) {
    for (const auto& [r, u] : counted)
      if (r == n) return u;
    COLONY_ASSERT(false, "no count at {} rows", n);
    return 0.0;
  };
  auto estimate = [&](uint64_t n) -> uint64_t {
    if (n <= rows_exact) return static_cast<uint64_t>(at(n));
    const double m = at(rows_exact), half = at(rows_exact / 2);
    const double b = std::log(m / half) / std::log(2.0);
    return static_cast<uint64_t>(m * std::pow(double(n) / double(rows_exact), b));
  };
  return {estimate(batch), estimate(node_rows)};
}

class ModelledSim {
 public:
  explicit ModelledSim(const SimOptions& o)
      : o_(o),
        rng_(hash_combine(o.seed, 0x40de1)),
        net_(o.network, o.nodes + o.ps),
        nodes_(o.nodes),
        ps_crashes_(ps_crash_times(o.trace)) {}

  Expected<SimResult> run(const std::function<void(double)>& progress);

 private:
  VirtualNanos now() const { return q_.now(); }
  uint32_t shard_host(uint32_t s) const { return o_.nodes + s; }
  void mix(uint64_t a, uint64_t b) {
    hash_ = hash_combine(hash_, hash_combine(uint64_t(now()), hash_combine(a, b)));
  }
  // A node's next event: small enough for the event's function to hold without allocating.
  enum Phase : uint8_t { phase_compute = 1, phase_push, phase_push_shards, phase_pushed };
  // Runs phase `p` of node n at `at`, or after its restart if it is down then.
  void at_node(uint32_t n, VirtualNanos at, Phase p) {
    q_.schedule(at, [this, n, p] { run_phase(n, p); });
  }
  void run_phase(uint32_t n, Phase p) {
    Node& node = nodes_[n];
    if (node.down) {
      node.deferred = p;
      return;
    }
    mix(n, p);
    switch (p) {
      case phase_compute:
        return compute(n);
      case phase_push:
        return push(n);
      case phase_push_shards:
        return push_shards(n);
      case phase_pushed:
        return pushed(n);
    }
  }
  VirtualNanos transfer(uint32_t from, uint32_t to, uint64_t bytes, VirtualNanos t) {
    for (const Partition& p : partitions_)
      if (p.heal_at > t && ((p.a[from] && p.b[to]) || (p.b[from] && p.a[to]))) t = p.heal_at;
    t = std::max({t, host_down_until_[from], host_down_until_[to]});
    if (drop_ > 0) {
      for (int i = 0; i < 16 && rng_.uniform() < drop_; ++i)
        t += static_cast<VirtualNanos>(o_.rto_s * 1e9);
    }
    bytes_ += bytes;
    return net_.transfer(from, to, bytes, t);
  }
  void try_start(uint32_t n);
  // Shard s reads or updates one node's rows of a step (flat: its GPUs' own, each GPU's keys
  // once; hierarchical: the node's, each key once), starting at `from` or when its CPU is free;
  // returns when it is done.
  VirtualNanos shard_work(uint32_t s, VirtualNanos from) {
    return shard_apply(serving_[s], std::max(from, serves_from_[s]), shard_rows());
  }
  // The host serving shard s (its own, or after a failover one of its backups').
  uint32_t server_host(uint32_t s) const { return shard_host(serving_[s]); }
  // Replication's failover (replicas > 1), as the coordinator runs it (docs/storage.md): ps host
  // p went down at now() and is declared lost at `lost_at` (the heartbeat timeout after a crash;
  // at once for a stop, whose Leave is the loss). Each shard it served moves, once the promotion's
  // messages have gone round (promotion_ns), to the first of its replicas on a ps host still in
  // the job; with none left the job fails. p serves nothing again (a restarted ps holding
  // backups again, as the daemons' does, is not modelled), and from `lost_at` the primaries no
  // longer wait for the backups it held.
  void fail_over(uint32_t p, VirtualNanos lost_at);
  VirtualNanos promotion_ns(uint32_t live_backups) const {
    // ShardsMoved to the promoting member, its Promoted, ShardsMoved to every member, the
    // clients' resync and its answer; with more than one live backup first a ReportApplied to
    // each and their Applied.
    return (live_backups > 1 ? 7 : 5) * hop_ns();
  }
  // One message between hosts of different racks, as the promotion's are counted.
  VirtualNanos hop_ns() const {
    return static_cast<VirtualNanos>((o_.network.latency_us + o_.network.spine_latency_us) * 1e3);
  }
  bool out_of_job(uint32_t p) const { return out_since_[p] >= 0 && out_since_[p] <= now(); }
  // The rows of one node's step at one shard.
  uint64_t shard_rows() const {
    return (o_.push == PushKind::hierarchical ? u_node_ : uint64_t{o_.gpus_per_node} * u_gpu_) /
           o_.ps;
  }
  // With replicas (ps/replication.h): node n's push is applied at every shard by `applied` (by
  // shard); each shard then forwards it, with its keys, to its backups on the next ps hosts, each
  // applies it on its host's CPU and acknowledges, and the push completes (phase_pushed) once every
  // acknowledgement is back. Each hop is an event at its time, so the network sees transfers in
  // time order.
  // After a failover the shard's primary is the backup that serves it, and its backups the rest of
  // its replicas; a replica on a host out of the job acknowledges nothing: its primary stops
  // waiting for it when the host is declared lost.
  void replicate(uint32_t n, const std::vector<VirtualNanos>& applied, uint64_t per_shard) {
    nodes_[n].acks_pending = o_.ps * (o_.replicas - 1);
    for (uint32_t s = 0; s < o_.ps; ++s)
      q_.schedule(applied[s],
                  [this, n, s, per_shard, p = serving_[s]] { forward(n, s, p, per_shard); });
  }
  void acked(uint32_t n) {
    if (--nodes_[n].acks_pending == 0) at_node(n, now(), phase_pushed);
  }
  // Shard s's primary on ps host p applied node n's push (of `per_shard` bytes): its forwards.
  void forward(uint32_t n, uint32_t s, uint32_t p, uint64_t per_shard) {
    if (p != serving_[s]) {
      // p went down before it applied the push: the client sends it again once the shard is
      // served anew, and the new primary applies and forwards it.
      const VirtualNanos again =
          shard_work(s, transfer(n, server_host(s), per_shard, std::max(now(), serves_from_[s])));
      q_.schedule(again,
                  [this, n, s, per_shard, to = serving_[s]] { forward(n, s, to, per_shard); });
      return;
    }
    const uint64_t rows = shard_rows();
    const uint64_t bytes = rows * (8 + row_bytes(o_.push_format, o_.model.width())) + header_bytes;
    for (uint32_t r = 0; r < o_.replicas; ++r) {
      const uint32_t b = (s + r) % o_.ps;
      if (b == p) continue;
      if (out_of_job(b)) {
        ack_when_lost(n, b);
        continue;
      }
      messages_ += 2;
      // A backup that goes down meanwhile acknowledges nothing more (its primary stops waiting
      // for it when it is declared lost); a primary that does is replaced, and its backup's
      // acknowledgement, if it comes, is for the new one.
      q_.schedule(transfer(shard_host(p), shard_host(b), bytes, now()), [this, n, s, p, b, rows] {
        if (out_of_job(b)) return ack_when_lost(n, b);
        q_.schedule(shard_apply(b, now(), rows), [this, n, s, p, b] {
          if (out_of_job(b)) return ack_when_lost(n, b);
          // The client sends its push again once the shard is served anew; the new primary
          // acknowledges it as one it has.
          if (out_of_job(p)) return ack_when_served(n, s);
          q_.schedule(transfer(shard_host(b), shard_host(p), header_bytes, now()), [this, n, s, p] {
            if (out_of_job(p)) return ack_when_served(n, s);
            acked(n);
          });
        });
      });
    }
  }
  void ack_when_lost(uint32_t n, uint32_t b) {
    q_.schedule(std::max(now(), lost_at_[b]), [this, n] { acked(n); });
  }
  void ack_when_served(uint32_t n, uint32_t s) {
    q_.schedule(std::max(now(), serves_from_[s]), [this, n] { acked(n); });
  }
  // Shard s's CPU applies `rows` rows from `from` or when it is free; returns when it is done.
  VirtualNanos shard_apply(uint32_t s, VirtualNanos from, uint64_t rows) {
    shard_free_[s] = std::max(shard_free_[s], from) +
                     static_cast<VirtualNanos>(double(rows) * o_.compute.shard_ns_per_row);
    return shard_free_[s];
  }
  void pull(uint32_t n);
  void compute(uint32_t n);
  void push(uint32_t n);
  // A deep model's dense all-reduce: node n's gradients of its step up to the root, and, from
  // the last node's, the sum down to every node (dense_sum).
  void dense_reduce(uint32_t n);
  void dense_sum(uint32_t n, uint32_t step);
  void push_shards(uint32_t n);
  // Node n's push of `per_shard` bytes to every shard: applied there, replicated, then pushed.
  void push_to_shards(uint32_t n, uint64_t per_shard);
  void pushed(uint32_t n);
  void inject(const FaultEvent& e);
  // Every node pauses for the checkpoint's cost before its next compute.
  void checkpoint();
  VirtualNanos compute_ns(uint32_t n) {
    double f = nodes_[n].slow;
    if (o_.compute.jitter > 0) {
      // The node waits for its slowest GPU.
      const double s = std::sqrt(std::log(1 + o_.compute.jitter * o_.compute.jitter));
      double worst = 0;
      for (uint32_t g = 0; g < o_.gpus_per_node; ++g) {
        const double u1 = std::max(rng_.uniform(), 1e-12), u2 = rng_.uniform();
        const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
        worst = std::max(worst, std::exp(s * z - s * s / 2));
      }
      f *= worst;
    }
    return static_cast<VirtualNanos>(double(step_ns_) * f);
  }
  // The keys of the node's next pulls to one shard (flat: every GPU's own; hierarchical: the
  // node's, each key once): sent while the step computes, so they ride with the push on the
  // same links.
  uint64_t pull_request_bytes() const {
    if (o_.push == PushKind::hierarchical) return u_node_ * 8 / o_.ps + header_bytes;
    return o_.gpus_per_node * (u_gpu_ * 8 / o_.ps + header_bytes);
  }
  uint32_t required_min(uint32_t t) const {
    if (o_.consistency.kind == ConsistencyKind::asp) return 0;
    const uint32_t k = o_.consistency.kind == ConsistencyKind::bsp ? 0 : o_.consistency.staleness;
    return t > k ? t - k : 0;
  }
  void timeline(const char* name, const char* cat, uint32_t host, VirtualNanos start,
                VirtualNanos duration) {
    constexpr size_t timeline_events_max = 500'000;
    if (!o_.record_timeline) return;
    if (result_.timeline.size() >= timeline_events_max) {
      result_.timeline_truncated = true;
      return;
    }
    result_.timeline.push_back(
        {name, cat, host < o_.nodes ? "worker" : "ps", host, 0, start, duration});
  }
  void violation(std::string v) {
    if (result_.invariant_violations.size() < 100)
      result_.invariant_violations.push_back(std::move(v));
  }

  const SimOptions& o_;
  SplitMix64 rng_;
  EventQueue q_;
  Network net_;
  std::vector<Node> nodes_;
  std::vector<VirtualNanos> host_down_until_;
  std::vector<uint32_t> at_clock_;  // nodes whose pushed clock is c
  uint32_t min_pushed_ = 0;
  std::vector<std::vector<uint32_t>> waiters_;  // by the minimum clock they wait for
  std::vector<Partition> partitions_;
  double drop_ = 0.0;
  uint64_t u_gpu_ = 0, u_node_ = 0;
  // When each ps host's CPU is free: its shards read or update their rows one after another
  // (ComputeSpec::shard_ns_per_row), in the order the requests were modelled.
  std::vector<VirtualNanos> shard_free_;
  // Failover (fail_over): by shard, the ps host serving it and from when; by ps host, when it
  // went down for good and when it was declared lost (-1: never).
  std::vector<uint32_t> serving_;
  std::vector<VirtualNanos> serves_from_;
  std::vector<VirtualNanos> out_since_, lost_at_;
  bool job_failed_ = false;
  uint64_t dense_bytes_ = 0;  // a deep model's dense parameters, 4 bytes each; 0 for LR and FM
  std::vector<uint32_t> dense_in_;        // by step: nodes whose dense gradients reached the root
  std::vector<VirtualNanos> dense_last_;  // by step: when the last of them arrived
  VirtualNanos step_ns_ = 0;
  // Every node-step's end, for the time back after the trace's ps crashes (none without one: a
  // run of 1,000 nodes x 1,000 steps would keep 8 MB for nothing).
  std::vector<VirtualNanos> ps_crashes_;
  std::vector<VirtualNanos> step_ends_;
  VirtualNanos paused_until_ = 0;  // checkpoint in progress
  VirtualNanos last_heal_ = 0, lost_ns_ = 0;
  uint32_t finished_ = 0;
  uint64_t bytes_ = 0, messages_ = 0;
  bool skip_gate_ = false;
  uint64_t hash_ = 0;
  SimResult result_;
};

void ModelledSim::try_start(uint32_t n) {
  Node& node = nodes_[n];
  const uint32_t need = required_min(node.clock);
  if (!skip_gate_ && min_pushed_ < need) {
    node.wait_since = now();
    waiters_[need].push_back(n);
    return;
  }
  pull(n);
}

void ModelledSim::pull(uint32_t n) {
  Node& node = nodes_[n];
  if (node.wait_since >= 0) {
    node.wait_ns += now() - node.wait_since;
    node.wait_since = -1;
  }
  // The invariant, checked against the pushed clocks themselves rather than the gate.
  if (!o_.consistency.allows(node.clock, min_pushed_))
    violation(fmt::format(
        "ssp bound exceeded: node {} started step {} at t={:.6f}s while the slowest node had "
        "pushed clock {} ({})",
        n, node.clock, double(now()) / 1e9, min_pushed_, to_string(o_.consistency)));
  // A row of the shards' replies, in the wire format; the aggregator hands its replicas their
  // rows decoded, in fp32 (worker/aggregator_core.h).
  const uint64_t width_bytes = row_bytes(o_.wire_format, o_.model.width());
  const uint64_t fanned_bytes = row_bytes(ValueFormat::fp32, o_.model.width());
  const bool hier = o_.push == PushKind::hierarchical;
  // Hierarchical: the aggregator pulls the node's unique keys once per shard, then hands each
  // GPU its rows over the intra-host link.
  const uint64_t per_shard = hier
                                 ? u_node_ * width_bytes / o_.ps + header_bytes
                                 : o_.gpus_per_node * (u_gpu_ * width_bytes / o_.ps + header_bytes);
  VirtualNanos arrival = now();
  for (uint32_t s = 0; s < o_.ps; ++s)
    arrival = std::max(arrival, transfer(server_host(s), n, per_shard, shard_work(s, now())));
  messages_ += 2ull * (hier ? 1 : o_.gpus_per_node) * o_.ps;
  if (hier && o_.gpus_per_node > 1) {
    arrival = transfer(n, n, uint64_t{o_.gpus_per_node - 1} * u_gpu_ * fanned_bytes, arrival);
    messages_ += o_.gpus_per_node;
  }
  at_node(n, std::max(arrival, paused_until_), phase_compute);
}

void ModelledSim::compute(uint32_t n) {
  Node& node = nodes_[n];
  if (dense_bytes_ > 0 && node.dense_steps < node.clock) {
    node.awaits_dense = true;  // dense_sum() resumes it
    node.dense_wait_since = now();
    return;
  }
  const VirtualNanos d = compute_ns(n);
  nodes_[n].compute_ns += d;
  timeline("step", "compute", n, now(), d);
  nodes_[n].push_start = now() + d;
  at_node(n, now() + d, phase_push);
}

void ModelledSim::dense_reduce(uint32_t n) {
  const uint32_t step = nodes_[n].clock;
  const uint64_t local = uint64_t{o_.gpus_per_node - 1} * dense_bytes_;
  VirtualNanos arrival = o_.gpus_per_node > 1 ? transfer(n, n, local, now()) : now();
  if (n != 0) arrival = transfer(n, 0, dense_bytes_ + header_bytes, arrival);
  messages_ += o_.gpus_per_node + (n != 0);
  dense_last_[step] = std::max(dense_last_[step], arrival);
  if (++dense_in_[step] < o_.nodes) return;
  // The root has every node's gradients of `step`: the sum goes back to each node.
  for (uint32_t m = 0; m < o_.nodes; ++m) {
    VirtualNanos back = dense_last_[step];
    if (m != 0) back = transfer(0, m, dense_bytes_ + header_bytes, back);
    if (o_.gpus_per_node > 1) back = transfer(m, m, local, back);
    messages_ += o_.gpus_per_node + (m != 0);
    q_.schedule(back, [this, m, step] { dense_sum(m, step); });
  }
}

void ModelledSim::dense_sum(uint32_t n, uint32_t step) {
  Node& node = nodes_[n];
  mix(0xde45e, n);
  node.dense_steps = std::max(node.dense_steps, step + 1);
  if (node.awaits_dense && node.dense_steps >= node.clock) {
    node.awaits_dense = false;
    node.dense_wait_ns += now() - node.dense_wait_since;
    at_node(n, now(), phase_compute);
  }
}

void ModelledSim::push(uint32_t n) {
  if (dense_bytes_ > 0) dense_reduce(n);
  // A push to a shard carries its rows' gradients alone: the keys are those its pull sent
  // (PushRequest::keys_of_pull); a replica's gradients reach its aggregator with their keys.
  const uint64_t grad_bytes = row_bytes(o_.push_format, o_.model.width());
  const uint64_t keyed_bytes = 8 + grad_bytes;
  if (o_.push == PushKind::flat) {
    const uint64_t per_shard =
        o_.gpus_per_node * (u_gpu_ * grad_bytes / o_.ps + header_bytes) + pull_request_bytes();
    messages_ += uint64_t{o_.gpus_per_node} * o_.ps;
    return push_to_shards(n, per_shard);
  }
  // Hierarchical: the replicas' gradients reach the aggregator over the intra-host link, then
  // one push per shard carries the node's summed rows.
  const uint64_t local = uint64_t{o_.gpus_per_node - 1} * u_gpu_ * keyed_bytes;
  VirtualNanos reduced = o_.gpus_per_node > 1 ? transfer(n, n, local, now()) : now();
  // The aggregator sums every GPU's rows (ComputeSpec::aggregator_ns_per_row).
  reduced += static_cast<VirtualNanos>(double(uint64_t{o_.gpus_per_node} * u_gpu_) *
                                       o_.compute.aggregator_ns_per_row);
  messages_ += o_.gpus_per_node;
  at_node(n, reduced, phase_push_shards);
}

void ModelledSim::push_shards(uint32_t n) {
  const uint64_t per_shard = u_node_ * row_bytes(o_.push_format, o_.model.width()) / o_.ps +
                             header_bytes + pull_request_bytes();
  messages_ += o_.ps;
  push_to_shards(n, per_shard);
}

void ModelledSim::push_to_shards(uint32_t n, uint64_t per_shard) {
  std::vector<VirtualNanos> applied(o_.ps);
  for (uint32_t s = 0; s < o_.ps; ++s)
    applied[s] =
        shard_work(s, transfer(n, server_host(s), per_shard, std::max(now(), serves_from_[s])));
  if (o_.replicas > 1) return replicate(n, applied, per_shard);
  at_node(n, *std::max_element(applied.begin(), applied.end()), phase_pushed);
}

void ModelledSim::pushed(uint32_t n) {
  Node& node = nodes_[n];
  const VirtualNanos bound =
      o_.progress_bound_s > 0
          ? static_cast<VirtualNanos>(o_.progress_bound_s * 1e9)
          : 50 * step_ns_ + static_cast<VirtualNanos>(8 * o_.rto_s * 1e9) + 50'000'000;
  const VirtualNanos since = std::max(node.last_step_end, last_heal_);
  if (now() > last_heal_ && now() - since > bound)
    violation(fmt::format(
        "slow progress: node {} went {:.3f}s without a step after the last fault healed at "
        "{:.3f}s (bound {:.3f}s)",
        n, double(now() - since) / 1e9, double(last_heal_) / 1e9, double(bound) / 1e9));
  node.last_step_end = now();
  if (!ps_crashes_.empty()) step_ends_.push_back(now());
  timeline("push", "network", n, node.push_start, now() - node.push_start);
  --at_clock_[node.clock];
  ++node.clock;
  ++at_clock_[node.clock];
  while (min_pushed_ < o_.steps && at_clock_[min_pushed_] == 0) {
    ++min_pushed_;
    auto ready = std::move(waiters_[min_pushed_]);
    waiters_[min_pushed_].clear();
    for (uint32_t w : ready) pull(w);
  }
  if (node.clock < o_.steps) {
    try_start(n);
  } else {
    node.done = true;
    ++finished_;
    result_.simulated_seconds = std::max(result_.simulated_seconds, double(now()) / 1e9);
  }
}

void ModelledSim::inject(const FaultEvent& e) {
  ++result_.failures_injected;
  mix(0xfa, static_cast<uint64_t>(e.kind));
  const VirtualNanos end = now() + static_cast<VirtualNanos>(e.duration_s * 1e9);
  last_heal_ = std::max(last_heal_, end);
  auto host_of = [&](const HostRef& h) { return h.shard ? o_.nodes + h.index : h.index; };
  const uint32_t host = e.hosts.empty() ? 0 : host_of(e.hosts[0]);
  switch (e.kind) {
    case FaultKind::crash:
      host_down_until_[host] = std::max(host_down_until_[host], end);
      // Lost after the heartbeat timeout, or sooner when the restarted process joins again (the
      // coordinator then knows the old one is gone, and refuses the new one).
      if (e.hosts[0].shard && o_.replicas > 1)
        fail_over(e.hosts[0].index,
                  std::min(now() + static_cast<VirtualNanos>(o_.heartbeat_timeout_ms) * 1'000'000,
                           end + hop_ns()));
      if (!e.hosts[0].shard && !nodes_[host].down) {
        Node& node = nodes_[host];
        node.down = true;
        timeline("crash", "fault", host, now(), -1);
        node.down_since = now();
        q_.schedule(end, [this, host] {
          Node& nd = nodes_[host];
          nd.down = false;
          timeline("restart", "fault", host, now(), -1);
          VirtualNanos redo = 0;
          if (nd.deferred == phase_push) redo = std::min(step_ns_, now() - nd.down_since);
          lost_ns_ += (now() - nd.down_since + redo) * o_.gpus_per_node;
          if (nd.deferred != 0) {
            at_node(host, now() + redo, static_cast<Phase>(nd.deferred));
            nd.deferred = 0;
          }
        });
      }
      break;
    case FaultKind::partition: {
      Partition p{std::vector<bool>(o_.nodes + o_.ps), std::vector<bool>(o_.nodes + o_.ps), end};
      // The stand-in has no coordinator (docs/simulation.md): a side naming it loses that host.
      for (const HostRef& h : e.hosts)
        if (!h.coordinator) p.a[host_of(h)] = true;
      for (const HostRef& h : e.side_b)
        if (!h.coordinator) p.b[host_of(h)] = true;
      partitions_.push_back(std::move(p));
      timeline("partition", "fault", host, now(), end - now());
      q_.schedule(end, [this, end] {
        std::erase_if(partitions_, [&](const Partition& p) { return p.heal_at <= end; });
      });
      break;
    }
    case FaultKind::clog:
      net_.set_clog(host, e.factor);
      q_.schedule(end, [this, host] { net_.set_clog(host, 1.0); });
      break;
    case FaultKind::slow:
      if (!e.hosts[0].shard) {
        nodes_[host].slow = e.factor;
        q_.schedule(end, [this, host] { nodes_[host].slow = 1.0; });
      }
      break;
    case FaultKind::lossy: {
      const double before = drop_;
      drop_ = std::max(drop_, e.drop);
      q_.schedule(end, [this, before] { drop_ = before; });
      break;
    }
    case FaultKind::stop:
      // Replicated, a ps that leaves while training runs is failed over at once.
      if (o_.replicas > 1) {
        host_down_until_[host] = std::max(host_down_until_[host], end);
        fail_over(e.hosts[0].index, now());
        break;
      }
      [[fallthrough]];
    case FaultKind::disk_full:
      // Pushes to the shard wait (a full disk; a ps that drains, leaves and is started again):
      // modelled as the shard taking no transfers until it clears.
      host_down_until_[host] = std::max(host_down_until_[host], end);
      break;
  }
}

void ModelledSim::fail_over(uint32_t p, VirtualNanos lost_at) {
  if (out_since_[p] >= 0) return;  // out of the job already: it serves and backs up nothing
  out_since_[p] = now();
  lost_at_[p] = lost_at;
  for (uint32_t s = 0; s < o_.ps; ++s) {
    if (serving_[s] != p) continue;
    std::optional<uint32_t> next;
    uint32_t live = 0;
    for (uint32_t r = 0; r < o_.replicas; ++r)
      if (const uint32_t b = (s + r) % o_.ps; out_since_[b] < 0) {
        if (!next) next = b;
        ++live;
      }
    if (!next) {
      // The job fails once the coordinator declares the last replica's host lost.
      q_.schedule(lost_at, [this, why = fmt::format("shard {} lost every one of its {} replicas "
                                                    "(ps host {} went down at {:.6f} s)",
                                                    s, o_.replicas, p, double(now()) / 1e9)] {
        result_.job_error = why;
        job_failed_ = true;
      });
      return;
    }
    serving_[s] = *next;
    serves_from_[s] = lost_at + promotion_ns(live);
    last_heal_ = std::max(last_heal_, serves_from_[s]);  // the fault lasts until the shard moved
    ++result_.ps_failovers;
    mix(0xfa11, (uint64_t{s} << 32) | *next);
    timeline("failover", "fault", shard_host(*next), serves_from_[s], 0);
  }
}

Expected<SimResult> ModelledSim::run(const std::function<void(double)>& progress) {
  result_.numerics = "modelled";
  result_.sites_enabled = enabled_sites(o_);
  for (const std::string& s : result_.sites_enabled) skip_gate_ |= s == "skip_ssp_gate";
  std::tie(u_gpu_, u_node_) = unique_keys(o_.seed, o_.batch, o_.gpus_per_node);
  step_ns_ = static_cast<VirtualNanos>(
      std::llround(step_compute_seconds(o_.compute, o_.model, o_.batch) * 1e9));
  result_.step_seconds = double(step_ns_) / 1e9;
  if (o_.model.deep()) {
    auto model = Model::make(o_.model);
    if (!model) return model.status();
    dense_bytes_ = 4 * uint64_t{(*model)->dense_params()};
    dense_in_.assign(o_.steps + 1, 0);
    dense_last_.assign(o_.steps + 1, 0);
  }
  host_down_until_.assign(o_.nodes + o_.ps, 0);
  shard_free_.assign(o_.ps, 0);
  serving_.resize(o_.ps);
  for (uint32_t s = 0; s < o_.ps; ++s) serving_[s] = s;
  serves_from_.assign(o_.ps, 0);
  out_since_.assign(o_.ps, -1);
  lost_at_.assign(o_.ps, -1);
  at_clock_.assign(o_.steps + 2, 0);
  at_clock_[0] = o_.nodes;
  waiters_.resize(o_.steps + 2);
  for (const FaultEvent& e : o_.trace.events)
    q_.schedule(static_cast<VirtualNanos>(e.at_s * 1e9), [this, &e] { inject(e); });
  if (o_.checkpoint.interval_s > 0)
    q_.schedule(static_cast<VirtualNanos>(o_.checkpoint.interval_s * 1e9),
                [this] { checkpoint(); });
  for (uint32_t n = 0; n < o_.nodes; ++n) q_.schedule(0, [this, n] { try_start(n); });
  uint64_t next_progress = 0;
  while (finished_ < o_.nodes && !job_failed_ && q_.executed() < o_.events_max && q_.run_next()) {
    if (progress && q_.executed() >= next_progress) {
      next_progress = q_.executed() + 1'000'000;
      progress(double(min_pushed_) / double(o_.steps));
    }
  }
  if (job_failed_) {
    result_.simulated_seconds = double(now()) / 1e9;
  } else if (finished_ < o_.nodes) {
    if (q_.executed() >= o_.events_max)
      violation(
          fmt::format("run stopped after {} events (the events bound) before every node finished",
                      o_.events_max));
    for (uint32_t n = 0; n < o_.nodes; ++n)
      if (!nodes_[n].done)
        violation(fmt::format("no progress: node {} did not finish (clock {}) by t={:.6f}s", n,
                              nodes_[n].clock, double(now()) / 1e9));
    result_.simulated_seconds = double(now()) / 1e9;
  }
  const double end = result_.simulated_seconds;
  VirtualNanos compute = 0, wait = 0, dense_wait = 0;
  for (const Node& n : nodes_) {
    compute += n.compute_ns;
    wait += n.wait_ns;
    dense_wait += n.dense_wait_ns;
  }
  uint64_t steps = 0;
  for (const Node& n : nodes_) steps += n.clock;
  result_.steps = steps * o_.gpus_per_node;
  result_.samples = result_.steps * o_.batch;
  result_.events = q_.executed();
  result_.messages = messages_;
  result_.bytes = bytes_;
  if (end > 0) {
    const double node_time = double(o_.nodes) * end * 1e9;
    result_.samples_per_sec_simulated = double(result_.samples) / end;
    result_.comm_overhead_fraction = std::clamp(1.0 - double(compute) / node_time, 0.0, 1.0);
    result_.gate_wait_fraction = std::clamp(double(wait) / node_time, 0.0, 1.0);
    result_.dense_wait_fraction = std::clamp(double(dense_wait) / node_time, 0.0, 1.0);
    result_.effective_training_time_ratio =
        std::clamp(1.0 - double(lost_ns_) / (node_time * o_.gpus_per_node), 0.0, 1.0);
  }
  result_.ps_crash_recovery = throughput_recovery(std::move(step_ends_), ps_crashes_,
                                                  std::max<uint64_t>(2, 20ull * o_.nodes));
  result_.event_trace_hash = hash_combine(hash_, result_.events);
  return std::move(result_);
}

void ModelledSim::checkpoint() {
  if (finished_ == o_.nodes) return;
  const VirtualNanos cost = static_cast<VirtualNanos>(o_.checkpoint.cost_s * 1e9);
  paused_until_ = now() + cost;
  lost_ns_ += cost * o_.nodes * o_.gpus_per_node;
  ++result_.checkpoints;
  mix(0xc4ec, result_.checkpoints);
  q_.schedule(now() + static_cast<VirtualNanos>(o_.checkpoint.interval_s * 1e9),
              [this] { checkpoint(); });
}

}  // namespace

Expected<SimResult> simulate_modelled(const SimOptions& options,
                                      const std::function<void(double)>& progress) {
  ModelledSim sim(options);
  return sim.run(progress);
}

}  // namespace colony::sim::detail
