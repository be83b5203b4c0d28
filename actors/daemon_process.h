// What the daemons of actors/daemon.h share, internal to actors/: timing constants, the
// loop's inbox, key loading, and the process (CAF system, routing table, bridge).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/bridge.h"
#include "actors/core_actors.h"
#include "actors/curve_keys.h"
#include "actors/daemon.h"
#include "actors/endpoint.h"

namespace colony::daemon_internal {

constexpr uint64_t notice_ms = 5'000;      // how often a waiting daemon says so
constexpr uint64_t join_retry_ms = 1'000;  // how often a member re-sends its Join
constexpr int poll_ms = 100;               // the longest a daemon loop sleeps
constexpr int control_linger_ms = 2'000;   // how long exit waits for the last messages to go out

inline uint64_t now_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Control messages from the bridge's poller, and core reports from local actors, for the
// daemon's main loop.
class Inbox {
 public:
  void push(ControlMessage m) {
    {
      std::lock_guard lock(mu_);
      control_.push_back(std::move(m));
    }
    cv_.notify_one();
  }
  void push_done(NodeId id, Status error) {
    {
      std::lock_guard lock(mu_);
      done_.emplace_back(id, std::move(error));
    }
    cv_.notify_one();
  }
  // Waits up to timeout_ms for something; returns the control messages that came.
  std::deque<ControlMessage> wait(uint64_t timeout_ms) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
      return !control_.empty() || !done_.empty() || !checkpoints_.empty() ||
             !dense_checkpoints_.empty() || !backups_copied_.empty();
    });
    std::deque<ControlMessage> out;
    out.swap(control_);
    return out;
  }
  void push_checkpoint(uint32_t step, ShardCheckpoint c) {
    {
      std::lock_guard lock(mu_);
      checkpoints_.emplace_back(step, std::move(c));
    }
    cv_.notify_one();
  }
  std::vector<std::pair<uint32_t, ShardCheckpoint>> take_checkpoints() {
    std::lock_guard lock(mu_);
    std::vector<std::pair<uint32_t, ShardCheckpoint>> out;
    out.swap(checkpoints_);
    return out;
  }
  // A deep model's dense layers of a checkpoint step, from the first worker replica's actor.
  void push_dense_checkpoint(DenseState d) {
    {
      std::lock_guard lock(mu_);
      dense_checkpoints_.push_back(std::move(d));
    }
    cv_.notify_one();
  }
  std::vector<DenseState> take_dense_checkpoints() {
    std::lock_guard lock(mu_);
    std::vector<DenseState> out;
    out.swap(dense_checkpoints_);
    return out;
  }
  // A backup placed on this ps (a rejoined one) built from its copy, from the backup's actor.
  void push_backup_copied(NodeId node, std::shared_ptr<ShardBackup> backup) {
    {
      std::lock_guard lock(mu_);
      backups_copied_.emplace_back(node, std::move(backup));
    }
    cv_.notify_one();
  }
  std::vector<std::pair<NodeId, std::shared_ptr<ShardBackup>>> take_backups_copied() {
    std::lock_guard lock(mu_);
    std::vector<std::pair<NodeId, std::shared_ptr<ShardBackup>>> out;
    out.swap(backups_copied_);
    return out;
  }
  std::vector<std::pair<NodeId, Status>> take_done() {
    std::lock_guard lock(mu_);
    std::vector<std::pair<NodeId, Status>> out;
    out.swap(done_);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ControlMessage> control_;
  std::vector<std::pair<NodeId, Status>> done_;
  std::vector<std::pair<uint32_t, ShardCheckpoint>> checkpoints_;
  std::vector<DenseState> dense_checkpoints_;
  std::vector<std::pair<NodeId, std::shared_ptr<ShardBackup>>> backups_copied_;
};

struct Keys {
  std::optional<CurveKeyPair> own;
  std::vector<AuthorizedKey> authorized;
  std::string server_public;  // the coordinator's public key
  std::vector<std::string> authorized_keys() const {
    std::vector<std::string> out;
    for (const AuthorizedKey& k : authorized) out.push_back(k.public_z85);
    return out;
  }
};

inline Expected<Keys> load_keys(const DaemonSecurity& s) {
  Keys k;
  if (s.insecure) {
    if (!s.keys_dir.empty())
      return Status::invalid_input("--insecure and --keys exclude each other");
    return k;
  }
  if (s.keys_dir.empty())
    return Status::invalid_input(
        "--keys DIR is required (from `colony keygen`); plain TCP needs --insecure");
  if (s.key_name.empty())
    return Status::invalid_input("--key NAME is required with --keys: which key pair in " +
                                 s.keys_dir + " is this process's (e.g. node-0)");
  auto own = read_key_pair(s.keys_dir, s.key_name);
  if (!own) return own.status();
  k.own = std::move(own.value());
  auto authorized = read_authorized_key_roles(s.keys_dir);
  if (!authorized) return authorized.status();
  k.authorized = std::move(authorized.value());
  auto server = read_public_key(s.keys_dir, "server");
  if (!server) return server.status();
  k.server_public = std::move(server.value());
  return k;
}

// The CAF system, the shared routing table and the bridge of one daemon, torn down in the
// right order: the bridge first (no more deliveries), then every actor, then the system.
struct Process {
  explicit Process(size_t threads) : config(threads, false), system(config) {}
  ~Process() {
    if (metrics && bridge) {  // the bridge goes; its totals stay
      const BridgeTotals last = snapshot(*bridge);
      export_bridge([last] { return last; });
    }
    bridge.reset();
    for (auto& a : shared->nodes)
      if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& a : extra) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  SystemConfig config;
  caf::actor_system system;
  std::shared_ptr<JobShared> shared = std::make_shared<JobShared>();
  std::unique_ptr<Bridge> bridge;
  std::vector<caf::actor> extra;  // local actors not in shared->nodes
  Inbox inbox;
  std::shared_ptr<monitor::Registry> metrics;  // null: none

 private:
  struct BridgeTotals {
    BridgeStats stats;
    std::vector<std::pair<std::string, uint64_t>> bad_by_peer;
  };
  static BridgeTotals snapshot(const Bridge& b) { return {b.stats(), b.bad_messages_by_peer()}; }
  // Lists the bridge's totals as `read` returns them at each scrape.
  void export_bridge(std::function<BridgeTotals()> read) {
    auto shared_read = std::make_shared<std::function<BridgeTotals()>>(std::move(read));
    metrics->family_reader(
        "colony_bad_messages_total",
        "Messages this process dropped as undecodable, misaddressed or forged, by sender (its "
        "CURVE key, else its address).",
        true, [shared_read] {
          monitor::Registry::Listing out;
          for (const auto& [peer, n] : (*shared_read)().bad_by_peer)
            out.push_back({{{"peer", peer}}, double(n)});
          return out;
        });
    metrics->family_reader(
        "colony_bridge_messages_total",
        "Messages this process's bridge received and sent, by direction.", true, [shared_read] {
          const BridgeStats s = (*shared_read)().stats;
          return monitor::Registry::Listing{{{{"direction", "received"}}, double(s.received)},
                                            {{{"direction", "sent"}}, double(s.sent)}};
        });
    metrics->family_reader(
        "colony_refused_peers_total",
        "Connections refused because their key is not in authorized_keys.", true, [shared_read] {
          return monitor::Registry::Listing{{{}, double((*shared_read)().stats.refused_peers)}};
        });
  }

 public:
  // A member takes control messages only from the coordinator's key (`control_from_server`).
  Status open_bridge(const std::string& listen, const Keys& keys, uint64_t cluster_id,
                     const DaemonLog& log, bool control_from_server) {
    BridgeOptions o;
    o.listen = listen;
    o.curve = keys.own;
    o.authorized_keys = keys.authorized_keys();
    if (keys.own && control_from_server) o.control_keys = {keys.server_public};
    o.cluster_id = cluster_id;
    o.linger_ms = control_linger_ms;
    auto b = Bridge::open(
        o, system, shared, [this](ControlMessage&& m) { inbox.push(std::move(m)); }, log);
    if (!b) return b.status();
    bridge = std::move(b.value());
    return Status();
  }
  // Live metrics: the process's actors record into `registry` (JobShared::metrics), and the
  // bridge's totals are listed at each scrape. Call after open_bridge.
  void add_metrics(std::shared_ptr<monitor::Registry> registry) {
    if (!registry) return;
    metrics = registry;
    shared->metrics = registry;
    export_bridge([this] { return snapshot(*bridge); });
  }
  Status first_error() {
    std::lock_guard lock(shared->mutex);
    return shared->first_error;
  }
};

inline const char* security_text(const Keys& k) {
  return k.own ? "CURVE" : "INSECURE plain TCP";
}

}  // namespace colony::daemon_internal
