#include "actors/bridge.h"

#include <fmt/ranges.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "actors/zmq_transport.h"

namespace colony {

namespace {

// One DEALER to a remote process, shared by every proxy and control sender aimed at it.
struct Link {
  std::mutex mu;
  std::unique_ptr<ZmqClient> client;  // guarded by mu
};

constexpr int poll_ms = 100;
constexpr auto bad_log_interval = std::chrono::minutes(1);

}  // namespace

struct Bridge::Impl {
  BridgeOptions options;
  caf::actor_system* system = nullptr;
  std::shared_ptr<JobShared> shared;
  ControlHandler on_control;
  Logger log;
  std::unique_ptr<ZmqServer> server;
  std::thread poller;
  std::atomic<bool> stop{false};
  std::atomic<bool> routing_ready{false};
  // Written before routing_ready; after it, changed by a failover under layout_mu.
  mutable std::shared_mutex layout_mu;
  std::vector<bool> local;   // by node id
  std::vector<bool> former;  // by node id: hosted by this member's last process, not this one
  std::optional<ClusterLayout> layout;
  std::string coordinator_key;
  std::set<std::string> control_keys;                        // fixed at open
  std::shared_ptr<ZmqContext> context = ZmqContext::make();  // every link's

  std::mutex links_mu;
  std::map<std::string, std::shared_ptr<Link>> links;  // by endpoint; guarded by links_mu

  // Where each remote node's proxy sends: a link, or (a shard this process took over) a local
  // actor; and the nodes declared lost.
  struct Route {
    std::shared_ptr<Link> link;
    caf::actor local;
  };
  mutable std::mutex lost_mu;
  std::unordered_set<NodeId> lost;           // guarded by lost_mu
  std::unordered_map<NodeId, Route> routes;  // guarded by lost_mu

  std::atomic<uint64_t> received{0}, sent{0}, bad{0}, dropped{0}, refused{0}, late{0}, earlier{0},
      before_layout{0};
  std::map<std::string, std::chrono::steady_clock::time_point> bad_logged;  // poller thread only
  mutable std::mutex bad_mu;
  std::map<std::string, uint64_t> bad_by_peer;  // guarded by bad_mu; see bad_messages_by_peer

  Expected<std::unique_ptr<ZmqClient>> open_client(const std::string& endpoint,
                                                   const std::string& public_key) {
    ZmqClientOptions o;
    o.endpoint = endpoint;
    o.send_hwm = options.send_hwm;
    o.receive_hwm = options.send_hwm;
    o.send_timeout_ms = options.send_timeout_ms;
    o.linger_ms = options.linger_ms;
    o.context = context;
    if (options.curve) {
      if (public_key.empty())
        return Status::invalid_input(fmt::format(
            "{} has no CURVE public key, and this cluster is not --insecure", endpoint));
      o.curve = ZmqClientCurve{*options.curve, public_key};
    }
    return ZmqClient::open(o);
  }

  Expected<std::shared_ptr<Link>> link(const std::string& endpoint, const std::string& public_key) {
    std::lock_guard lock(links_mu);
    auto it = links.find(endpoint);
    if (it != links.end()) return it->second;
    if (links.size() >= bridge_links_max)
      return Status::internal(
          fmt::format("cannot open a link to {}: {} links are open, the most a process keeps",
                      endpoint, links.size()));
    auto client = open_client(endpoint, public_key);
    if (!client) return client.status();
    auto l = std::make_shared<Link>();
    l->client = std::move(client.value());
    links.emplace(endpoint, l);
    return l;
  }

  // Failover: shard node `shard` is `member`'s from now on (the layout's owner), reached by
  // `route` (served here when it names a local actor). Fails, changing nothing, as
  // ClusterLayout::move_shard does.
  Status reroute(NodeId shard, uint32_t member, Route route) {
    {
      std::unique_lock layout_lock(layout_mu);
      if (shard >= local.size())
        return Status::invalid_input(fmt::format("node {} outside {} nodes", shard, local.size()));
      if (layout)
        if (Status s = layout->move_shard(shard, member); !s.ok()) return s;
      if (route.local) local[shard] = true;
    }
    std::lock_guard lock(lost_mu);
    routes[shard] = std::move(route);
    return Status();
  }

  // Node n's route; nullopt when it is declared lost.
  std::optional<Route> route(NodeId n) const {
    std::lock_guard lock(lost_mu);
    if (lost.count(n) != 0) return std::nullopt;
    auto it = routes.find(n);
    return it == routes.end() ? Route{} : it->second;
  }

  Status send_bytes(Link& l, std::vector<uint8_t>&& bytes, bool wait = true) {
    std::lock_guard lock(l.mu);
    Status s = l.client->send(std::move(bytes), wait);
    if (s.ok()) ++sent;
    return s;
  }

  Status send_frames(Link& l, const EncodedFrames& m) {
    std::lock_guard lock(l.mu);
    Status s = l.client->send(m.owner, m.frames);
    if (s.ok()) ++sent;
    return s;
  }

  // `key`: the sender's CURVE key when the transport knows it.
  void bad_message(const std::string& peer, const std::string& why, const std::string& key = {}) {
    ++bad;
    {
      std::lock_guard lock(bad_mu);
      std::string by = !key.empty() ? key : !peer.empty() ? peer : "unknown";
      if (!bad_by_peer.count(by) && bad_by_peer.size() >= bridge_bad_peers_max) by = "other";
      ++bad_by_peer[by];
    }
    const auto now = std::chrono::steady_clock::now();
    const std::string who = peer.empty() ? std::string("an unknown peer") : peer;
    auto it = bad_logged.find(who);
    if (it != bad_logged.end() && now - it->second < bad_log_interval) return;
    bad_logged[who] = now;
    if (bad_logged.size() > 4096) bad_logged.clear();  // bounded: forget old peers wholesale
    log(fmt::format(
        "dropped a bad message from {}: {} ({} bad messages so far; logged at most once a "
        "minute per peer)",
        who, why, bad.load()));
  }

  void check_refused(uint64_t& seen) {
    const RefusedPeers r = server->refused();
    if (r.count == seen) return;
    const uint64_t fresh = r.count - seen;
    const size_t show = std::min<uint64_t>(fresh, r.recent.size());
    for (size_t i = r.recent.size() - show; i < r.recent.size(); ++i)
      log(fmt::format("refused a connection from {}: its key {} is not in authorized_keys",
                      r.recent[i].address,
                      r.recent[i].public_key.empty() ? std::string("(none: not CURVE)")
                                                     : r.recent[i].public_key));
    refused = r.count;
    seen = r.count;
  }

  void deliver(WireMessage& m, const std::string& peer, const std::string& key) {
    // Nothing is taken before the layout; what it was is known once the layout comes
    // (set_routing_ready): queued by a peer for this member's last process, or bad.
    if (!routing_ready.load(std::memory_order_acquire)) {
      ++before_layout;
      return;
    }
    std::shared_lock layout_lock(layout_mu);
    if (m.receiver >= local.size() || !local[m.receiver]) {
      if (m.receiver < former.size() && former[m.receiver]) {
        ++earlier;
        return;
      }
      return bad_message(
          peer, fmt::format("a message for node {}, which is not in this process", m.receiver));
    }
    if (layout) {
      MessageOrigin origin;
      if (!key.empty()) {
        if (key == coordinator_key) {
          origin = MessageOrigin::of_coordinator();
        } else if (auto member = layout->member_of_key(key)) {
          origin = MessageOrigin::of_member(*member);
        } else {
          return bad_message(peer,
                             fmt::format("a message for node {} from key {}, which is no member's",
                                         m.receiver, key),
                             key);
        }
      }
      if (Status s = layout->check_ps_message(m.ps, m.receiver, origin); !s.ok()) {
        // Sent by a shard's last server before a failover moved the shard, and still on the
        // way then: dropped, but no lie.
        if (layout->served_before(m.ps, m.receiver, origin)) {
          ++late;
          return;
        }
        return bad_message(peer, s.message(), key);
      }
    }
    // Queued under the layout's lock: once detach_shards or a reroute returns, nothing the
    // layout took before it is still to be queued (a backup asked how far it applied after its
    // shard was detached has every forward it will ever take from the lost primary).
    caf::actor& target = shared->nodes[m.receiver];
    std::visit([&](auto& msg) { caf::anon_send(target, std::move(msg)); }, m.ps);
  }

  void run() {
    uint64_t refused_seen = 0;
    while (!stop.load()) {
      if (options.curve) check_refused(refused_seen);
      auto r = server->receive(poll_ms);
      if (!r) {
        if (r.status().code() == Status::Code::invalid_input) {
          bad_message("", r.status().message());
          continue;
        }
        log("the receiving socket failed: " + r.status().message());
        shared->fail(r.status());
        return;
      }
      if (r->timed_out) continue;
      ++received;
      const auto t0 = std::chrono::steady_clock::now();
      auto m = decode_wire_message(r->frames, options.cluster_id);
      if (shared->timeline)
        shared->timeline->span("from " + r->peer_address, "serialize", "bridge",
                               bridge_timeline_pid, 0, t0, std::chrono::steady_clock::now());
      if (!m) {
        bad_message(r->peer_address, m.status().message(), r->peer_key);
        continue;
      }
      if (m->is_control) {
        if (!control_keys.empty() && control_keys.count(r->peer_key) == 0) {
          bad_message(r->peer_address,
                      fmt::format("a control message from key {}, which may not send them",
                                  r->peer_key.empty() ? std::string("(none)") : r->peer_key),
                      r->peer_key);
          continue;
        }
        m->control.sender_key = r->peer_key;
        on_control(std::move(m->control));
      } else {
        deliver(*m, r->peer_address, r->peer_key);
      }
    }
  }
};

namespace {

static_assert(wire_frames_max == zmq_payload_frames_max,
              "a message's frames must fit the transport");

caf::behavior proxy_fun(caf::event_based_actor* self, NodeId to,
                        std::shared_ptr<Bridge::Impl> bridge) {
  (void)self;
  auto forward = [to, bridge](PsMessage&& m) {
    auto route = bridge->route(to);
    if (!route || (!route->link && !route->local)) {
      ++bridge->dropped;
      return;
    }
    if (route->local) {  // a shard this process took over
      std::visit([&](auto& msg) { caf::anon_send(route->local, std::move(msg)); }, m);
      return;
    }
    Link* link = route->link.get();
    monitor::TimelineRecorder* timeline = bridge->shared->timeline.get();
    const auto t0 = std::chrono::steady_clock::now();
    auto frames = encode_ps_frames(std::move(m), bridge->options.cluster_id, to);
    const auto t1 = std::chrono::steady_clock::now();
    Status s = frames ? bridge->send_frames(*link, *frames) : frames.status();
    if (timeline) {
      const std::string name = fmt::format("to node {}", to);
      timeline->span(name, "serialize", "bridge", bridge_timeline_pid, to, t0, t1);
      timeline->span(name, "network", "bridge", bridge_timeline_pid, to, t1,
                     std::chrono::steady_clock::now());
    }
    if (!s.ok()) {
      const Status failed =
          Status::internal(fmt::format("could not send to node {}: {}", to, s.message()));
      bridge->log(failed.message());
      bridge->shared->fail(failed);
    }
  };
  return {
      [forward](PullRequest& m) { forward(PsMessage(std::move(m))); },
      [forward](PullReply& m) { forward(PsMessage(std::move(m))); },
      [forward](PushRequest& m) { forward(PsMessage(std::move(m))); },
      [forward](PushAck& m) { forward(PsMessage(std::move(m))); },
      [forward](ClockAdvance& m) { forward(PsMessage(std::move(m))); },
      [forward](ShardMapUpdate& m) { forward(PsMessage(std::move(m))); },
      [forward](PsError& m) { forward(PsMessage(std::move(m))); },
      [forward](DenseReduce& m) { forward(PsMessage(std::move(m))); },
      [forward](DenseBroadcast& m) { forward(PsMessage(std::move(m))); },
      [forward](PullHint& m) { forward(PsMessage(std::move(m))); },
      [forward](ReplicaForward& m) { forward(PsMessage(std::move(m))); },
      [forward](ReplicaAck& m) { forward(PsMessage(std::move(m))); },
      [forward](ReplicaCopy& m) { forward(PsMessage(std::move(m))); },
  };
  static_assert(std::variant_size_v<PsMessage> == 13, "a ps message kind the proxy cannot carry");
}

}  // namespace

Bridge::Bridge(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Bridge::~Bridge() {
  impl_->stop = true;
  if (impl_->poller.joinable()) impl_->poller.join();
}

Expected<std::unique_ptr<Bridge>> Bridge::open(const BridgeOptions& options,
                                               caf::actor_system& system,
                                               std::shared_ptr<JobShared> shared,
                                               ControlHandler on_control, Logger log) {
  auto impl = std::make_shared<Impl>();
  impl->system = &system;
  impl->options = options;
  impl->shared = std::move(shared);
  impl->on_control = std::move(on_control);
  impl->log = std::move(log);
  impl->control_keys.insert(options.control_keys.begin(), options.control_keys.end());
  ZmqServerOptions so;
  so.endpoint = options.listen;
  so.curve = options.curve;
  if (options.curve) so.authorized_keys = options.authorized_keys;
  so.send_hwm = options.send_hwm;
  so.receive_hwm = options.send_hwm;
  so.send_timeout_ms = options.send_timeout_ms;
  auto server = ZmqServer::open(so);
  if (!server) return server.status();
  impl->server = std::move(server.value());
  impl->poller = std::thread([raw = impl.get()] { raw->run(); });
  return std::unique_ptr<Bridge>(new Bridge(std::move(impl)));
}

const std::string& Bridge::endpoint() const {
  return impl_->server->last_endpoint();
}

Status Bridge::send_control(const std::string& endpoint, const std::string& public_key,
                            const ControlMessage& m, bool wait, bool one_off) {
  auto bytes = encode_control_message(m, impl_->options.cluster_id);
  if (!bytes) return bytes.status();
  if (one_off) {
    auto client = impl_->open_client(endpoint, public_key);
    if (!client) return client.status();
    Status s = (*client)->send(std::move(*bytes), wait);
    if (s.ok()) ++impl_->sent;
    return s;  // closing hands the message to the shared context's thread to deliver
  }
  auto l = impl_->link(endpoint, public_key);
  if (!l) return l.status();
  return impl_->send_bytes(**l, std::move(*bytes), wait);
}

void Bridge::set_layout(ClusterLayout layout, const std::string& coordinator_key) {
  std::unique_lock layout_lock(impl_->layout_mu);
  impl_->layout.emplace(std::move(layout));
  impl_->coordinator_key = coordinator_key;
}

void Bridge::count_bad_message() {
  ++impl_->bad;
}

Status Bridge::add_remote_nodes(const std::string& endpoint, const std::string& public_key,
                                NodeId first, uint32_t count) {
  auto l = impl_->link(endpoint, public_key);
  if (!l) return l.status();
  for (NodeId n = first; n < first + count; ++n) {
    COLONY_ASSERT(n < impl_->shared->nodes.size(), "remote node {} outside {} nodes", n,
                  impl_->shared->nodes.size());
    {
      std::lock_guard lock(impl_->lost_mu);
      impl_->routes[n] = Impl::Route{*l, {}};
    }
    impl_->shared->nodes[n] = impl_->system->spawn(proxy_fun, n, impl_);
  }
  return Status();
}

Status Bridge::move_shards(const std::vector<NodeId>& shards, uint32_t member,
                           const std::string& endpoint, const std::string& public_key) {
  auto l = impl_->link(endpoint, public_key);
  if (!l) return l.status();
  for (NodeId shard : shards)
    if (Status s = impl_->reroute(shard, member, Impl::Route{*l, {}}); !s.ok()) return s;
  return Status();
}

void Bridge::detach_shards(const std::vector<NodeId>& shards) {
  std::unique_lock layout_lock(impl_->layout_mu);
  if (impl_->layout)
    for (NodeId s : shards) impl_->layout->detach_shard(s);
}

Expected<caf::actor> Bridge::place_backup(NodeId backup, uint32_t member,
                                          const std::string& endpoint,
                                          const std::string& public_key) {
  auto l = impl_->link(endpoint, public_key);
  if (!l) return l.status();
  {
    std::unique_lock layout_lock(impl_->layout_mu);
    if (backup >= impl_->local.size())
      return Status::invalid_input(
          fmt::format("node {} outside {} nodes", backup, impl_->local.size()));
    if (impl_->layout)
      if (Status s = impl_->layout->place_backup(backup, member); !s.ok()) return s;
    impl_->local[backup] = false;
  }
  {
    std::lock_guard lock(impl_->lost_mu);
    impl_->routes[backup] = Impl::Route{*l, {}};
    impl_->lost.erase(backup);
  }
  return caf::actor(impl_->system->spawn(proxy_fun, backup, impl_));
}

Status Bridge::take_placement(NodeId backup, uint32_t member) {
  std::unique_lock layout_lock(impl_->layout_mu);
  return impl_->layout ? impl_->layout->place_backup(backup, member) : Status();
}

Status Bridge::serve_shard(NodeId shard, uint32_t member, caf::actor actor) {
  return impl_->reroute(shard, member, Impl::Route{{}, std::move(actor)});
}

void Bridge::set_routing_ready(const std::vector<NodeId>& local_nodes,
                               const std::vector<NodeId>& former_nodes, bool restarted) {
  std::unique_lock layout_lock(impl_->layout_mu);
  (restarted ? impl_->earlier : impl_->bad) += impl_->before_layout.exchange(0);
  impl_->local.assign(impl_->shared->nodes.size(), false);
  impl_->former.assign(impl_->shared->nodes.size(), false);
  for (NodeId n : former_nodes)
    if (n < impl_->former.size()) impl_->former[n] = true;
  for (NodeId n : local_nodes) {
    COLONY_ASSERT(n < impl_->local.size(), "local node {} outside {} nodes", n,
                  impl_->local.size());
    impl_->local[n] = true;
  }
  impl_->routing_ready.store(true, std::memory_order_release);
}

void Bridge::mark_lost(const std::vector<NodeId>& nodes) {
  std::lock_guard lock(impl_->lost_mu);
  impl_->lost.insert(nodes.begin(), nodes.end());
}

void Bridge::unmark_lost(const std::vector<NodeId>& nodes) {
  std::lock_guard lock(impl_->lost_mu);
  for (NodeId n : nodes) impl_->lost.erase(n);
}

std::vector<std::pair<std::string, uint64_t>> Bridge::bad_messages_by_peer() const {
  std::lock_guard lock(impl_->bad_mu);
  return {impl_->bad_by_peer.begin(), impl_->bad_by_peer.end()};
}

std::string late_from_moved_line(const BridgeStats& stats) {
  std::vector<std::string> late;
  if (const uint64_t n = stats.late_from_moved)
    late.push_back(
        fmt::format("{} message{} that a failed-over shard's last server sent before the failover",
                    n, n == 1 ? "" : "s"));
  if (const uint64_t n = stats.for_earlier_process)
    late.push_back(fmt::format("{} message{} peers had queued for this member's last process", n,
                               n == 1 ? "" : "s"));
  if (late.empty()) return {};
  return fmt::format("dropped {} (late, not counted as bad)", fmt::join(late, " and "));
}

BridgeStats Bridge::stats() const {
  return BridgeStats{impl_->received.load(), impl_->sent.load(),    impl_->bad.load(),
                     impl_->dropped.load(),  impl_->refused.load(), impl_->late.load(),
                     impl_->earlier.load()};
}

}  // namespace colony
