// The bridge between a process's CAF actors and the other processes of a cluster, over ZeroMQ.
// Internal to actors/ (CAF types in the interface).
//
// Each process binds one ROUTER socket (ZmqServer) and receives everything there: a poller
// thread decodes each message (actors/envelope.h) and delivers a parameter-server message to
// the local actor of its receiver node, a control message to the `on_control` callback. Sends
// go out through one DEALER (ZmqClient) per remote process, opened on first use; a remote
// node appears to local actors as a proxy actor in JobShared::nodes that encodes what it is
// sent and queues it on that process's link. So the core actors never know whether a peer is
// local or remote.
//
// Identity: every received message carries the CURVE key its connection proved (the ZAP user
// id). With control_keys set, control messages from any other key are dropped (a member takes
// them only from the coordinator); the coordinator passes the key on in
// ControlMessage::sender_key for its core to check. Once set_layout has named who owns which
// key, a ps message is delivered only when ClusterLayout::check_ps_message allows it from the
// member owning the key it came with. Links are kept only to peers named by the layout or
// joining (at most bridge_links_max); a one-off control message (a refusal) is sent on a link
// that is closed right after.
//
// Failures: a message that cannot be queued (the peer's queue stayed full for the send
// timeout, or it exceeds the size limit) fails the job (JobShared::fail), never vanishes. A
// message to a node declared lost (mark_lost) is dropped and counted. A proxy looks its node's
// route up for every message, so a failover re-points it (move_shards, serve_shard) while
// JobShared::nodes stays as built. A received message that
// does not decode, or names a node that is not local, is counted and dropped, and logged at
// most once per peer address per minute; one from a shard's server before a failover moved it
// is dropped and counted apart (BridgeStats::late_from_moved), and so is one for this member's
// last process: a restarted process takes the messages its peers had queued for the process
// before it (before it has its layout, or for a node it no longer hosts; BridgeStats::
// for_earlier_process). Connections the CURVE handshake refused are logged with the peer's
// address and key. ZeroMQ reconnects a link whose peer restarts.
//
// With a timeline (JobShared::timeline) the bridge records, as pid bridge_timeline_pid and
// role "bridge": "serialize" spans (encoding a message to node N on track N, decoding each one
// received on track 0) and "network" spans (queueing an encoded message on its link, which
// waits while the peer's queue is full).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/core_actors.h"
#include "actors/curve_keys.h"
#include "actors/envelope.h"
#include "common/status.h"
#include "ps/cluster_layout.h"

namespace colony {

// The process id the bridge's spans carry on a timeline (no node has it).
inline constexpr uint32_t bridge_timeline_pid = 0xFFFFFFFF;

// The most links (one per remote process) a bridge keeps open at once.
inline constexpr size_t bridge_links_max = control_members_max + 1;

// The most senders Bridge::bad_messages_by_peer names one by one.
inline constexpr size_t bridge_bad_peers_max = 1024;

struct BridgeOptions {
  std::string listen = "tcp://127.0.0.1:*";
  std::optional<CurveKeyPair> curve;         // nullopt: plain TCP (--insecure)
  std::vector<std::string> authorized_keys;  // with curve: the Z85 keys admitted
  uint64_t cluster_id = 1;
  int send_timeout_ms = 30'000;  // how long a send waits on a full queue before failing the job
  int send_hwm = 10'000;
  int linger_ms = 0;  // how long closing a link waits for its queued messages to go out
  // With CURVE: the only keys control messages are taken from (empty: any admitted key).
  std::vector<std::string> control_keys;
};

struct BridgeStats {
  uint64_t received = 0;
  uint64_t sent = 0;
  uint64_t bad_messages = 0;     // undecodable, another cluster's, for a node not here, or forged
  uint64_t dropped_to_lost = 0;  // sends to nodes declared lost
  uint64_t refused_peers = 0;    // CURVE handshakes refused
  // In the name of a shard, from the member that served it before a failover moved it
  // (ClusterLayout::served_before): sent before the move, dropped without counting as bad.
  uint64_t late_from_moved = 0;
  // For this member's last process (queued by a peer before it was lost, delivered to this one):
  // before this process had its layout, or for a node it hosted and no longer does. Dropped
  // without counting as bad; nothing in them is taken.
  uint64_t for_earlier_process = 0;
};

// The log line for BridgeStats::late_from_moved and for_earlier_process; empty when there were
// none.
std::string late_from_moved_line(const BridgeStats& stats);

class Bridge {
 public:
  using ControlHandler = std::function<void(ControlMessage&&)>;
  using Logger = std::function<void(const std::string&)>;

  // Binds the socket and starts the poller thread. `shared` is the process's JobShared: its
  // `nodes` must be sized for every node id before any ps message can arrive, and must not
  // change afterwards (see set_routing_ready). `on_control` and `log` are called from the
  // poller thread. Fails as ZmqServer::open does (bad keys, address in use, ...).
  static Expected<std::unique_ptr<Bridge>> open(const BridgeOptions& options,
                                                caf::actor_system& system,
                                                std::shared_ptr<JobShared> shared,
                                                ControlHandler on_control, Logger log);
  // Stops the poller and closes every socket without lingering; proxies still alive drop what
  // they are sent.
  ~Bridge();

  // The bound endpoint (with the port chosen for "*").
  const std::string& endpoint() const;

  // Sends a control message to the process listening at `endpoint` (server key `public_key`,
  // empty when insecure). Any thread. Fails with the link's error (bad key, queue full); with
  // !wait, fails at once rather than waiting for room (or for a connection).
  // A one_off message goes out on a link of its own, closed (lingering in the background)
  // right after: nothing is kept for a peer that is not a member.
  Status send_control(const std::string& endpoint, const std::string& public_key,
                      const ControlMessage& m, bool wait = true, bool one_off = false);

  // Makes nodes first..first+count-1 reachable at `endpoint`: a proxy actor each, stored in
  // shared->nodes. Call before set_routing_ready.
  Status add_remote_nodes(const std::string& endpoint, const std::string& public_key, NodeId first,
                          uint32_t count);
  // Who owns which key: from now on a ps message is delivered only when the layout allows it
  // from the member owning its key (or from `coordinator_key`, the coordinator). Call before
  // set_routing_ready; on an --insecure cluster only the layout's structural checks apply.
  void set_layout(ClusterLayout layout, const std::string& coordinator_key);
  // Counts a message dropped above the bridge (a control message its receiver refused).
  void count_bad_message();
  // Marks which node ids are this process's own (received ps messages for others are bad, but
  // those for `former_nodes`, which this member hosted before and no longer does: late), then
  // lets the poller deliver ps messages. Those received before are dropped, and counted as late
  // (for_earlier_process) for a `restarted` member's process, else as bad.
  void set_routing_ready(const std::vector<NodeId>& local_nodes,
                         const std::vector<NodeId>& former_nodes = {}, bool restarted = false);
  // From now on, messages to these nodes are dropped (counted), not sent. Any thread.
  void mark_lost(const std::vector<NodeId>& nodes);
  // These nodes are back (a restarted ps): messages to them are sent again. Any thread.
  void unmark_lost(const std::vector<NodeId>& nodes);
  // Failover (ShardsMoved): shard nodes `shards` are served by member `member` from now on, at
  // `endpoint` (server key `public_key`): their proxies send there, and the layout takes their
  // messages from that member's key. After set_routing_ready; any thread. Fails as
  // ClusterLayout::move_shard does (the shards before the refused one moved) or when no link can
  // be opened (none moved).
  Status move_shards(const std::vector<NodeId>& shards, uint32_t member,
                     const std::string& endpoint, const std::string& public_key);
  // Failover under replication: the primary of these shard nodes was lost. Messages in their
  // name are taken from no member's key until move_shards or serve_shard names their next
  // (ClusterLayout::detach_shard); what the lost primary sent is dropped as late. On return,
  // every message taken before is queued for its local actor. Any thread.
  void detach_shards(const std::vector<NodeId>& shards);
  // Failover on the member that took the shard over (`member`, this process): shard node
  // `shard` is served here by `actor` from now on (its proxy hands what it is sent to the actor,
  // and received messages for it are delivered). Fails, changing nothing, as
  // ClusterLayout::move_shard does.
  Status serve_shard(NodeId shard, uint32_t member, caf::actor actor);

  // Re-replication (BackupsPlaced): backup node `backup` is hosted by member `member` from now
  // on, at `endpoint` (server key `public_key`): the layout takes its messages from that member's
  // key, messages to it are sent again (it may have been declared lost), and its proxy sends
  // there. Returns a proxy of its own for the node, for a primary here whose shard it backs
  // (JobShared::nodes may name a spent local backup actor for it). Any thread after
  // set_routing_ready. Fails, changing nothing, as ClusterLayout::place_backup does, or when no
  // link can be opened.
  Expected<caf::actor> place_backup(NodeId backup, uint32_t member, const std::string& endpoint,
                                    const std::string& public_key);
  // The same for the layout alone, in a process that sends nothing to backups (a worker, the
  // coordinator): a later move of a shard to that member is checked against it. Any thread.
  Status take_placement(NodeId backup, uint32_t member);

  BridgeStats stats() const;
  // stats().bad_messages by sender: its CURVE key where the transport knew it, else its address
  // ("unknown" when neither). At most bridge_bad_peers_max senders; later ones count as
  // "other". Any thread.
  std::vector<std::pair<std::string, uint64_t>> bad_messages_by_peer() const;

  struct Impl;  // shared with the proxy actors

 private:
  explicit Bridge(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace colony
