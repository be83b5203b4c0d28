// libFuzzer target over the sans-I/O cores: sequences of decoded messages, well-formed as the
// wire decoder (actors/envelope.cpp) hands them out but otherwise arbitrary, from arbitrary
// senders and keys, must never crash a core, trip an assertion or read out of bounds (run
// under ASan and UBSan). The decoder stops bytes that do not parse; this stops messages that
// parse but lie (a forged sender, a reply sent to a shard, a push of the wrong width).
//
// The input's first byte picks a target, the rest drives it through Input (a small
// FuzzedDataProvider: integers and flags from the front, zeros once it runs out, which ends
// the run):
//   coordinator  CoordinatorCore under a few keys, endpoints and incarnations, with time moving
//                forward: joins collide, restart and are refused. Every Welcome it sends must
//                make a layout members accept, and every ps message it sends must pass that
//                layout's check as the coordinator's.
//   shard        ShardCore of a layout made by assign_nodes, over the memory store or one
//                that keeps the batch protocol strictly (and fails reads on demand). Messages,
//                arbitrary or the next step of a sender, go through
//                ClusterLayout::check_ps_message as in the daemons and reach the shard only
//                when it passes; some skip the check, to show the core survives alone (a reply
//                sent to a shard is dropped and counted). While every input passed the check,
//                every reply must go to a node of the layout; once its store failed, the shard
//                answers nothing.
//   client       KvClient: pulls and pushes, then replies of every kind (matching a request
//                it sent or not) and resync notices.
//   layout       ClusterLayout::make over arbitrary Welcomes (and mutated valid ones): when it
//                accepts, every node it names is below nodes(), and checks never crash.
//   member       MemberCore as one member of a valid layout: its Welcome (mutated or not),
//                arbitrary control messages and local events in any order. An ended core
//                sends nothing; every node its effects name is in the layout it took.
//   replication  ShardPrimary and ShardBackup (ps/replication.h): the primary takes messages,
//                arbitrary or the next step of a sender, and its backup applies its forwards;
//                forged forwards (any seq, committed or keys) and acknowledgements (any backup,
//                any seq) come in between. Until a forged forward is taken, the backup takes
//                every forward its primary made; its applied() moves by at most one a forward
//                and never back; its log stays within replica_log_max forwards and
//                replica_log_bytes_max bytes; an acknowledgement past
//                the primary's last forward is refused. A new backup built from a copy of the
//                primary (send_copy, BackupCopy) holds the primary's rows, unless a forged part
//                came in between.
//
// Every size is bounded by the constants below, so no input allocates without bound.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ps/cluster_layout.h"
#include "ps/coordinator_core.h"
#include "ps/member_core.h"
#include "ps/replication.h"
#include "ps/shard_core.h"
#include "worker/kv_client.h"

namespace {

using namespace colony;

constexpr size_t ops_max = 512;  // steps one input drives
constexpr size_t keys_max = 64;  // keys in one request
constexpr size_t welcome_members_max = 16;
constexpr uint32_t member_count_max = 4096;  // nodes a member hosts (the decoder's bound)
constexpr size_t node_list_max = 8;          // NodesLost and ShardsRestarted lists
constexpr uint32_t width_max = 4;            // floats per row
constexpr uint32_t vnodes_max = 16;          // small maps: building one is cheap
constexpr uint32_t map_shards_max = 4;
constexpr uint32_t clock_max = 8;  // clocks drawn near the senders', so steps line up
constexpr uint64_t time_step_max_ms = 4096;
constexpr size_t key_pool = 6;  // CURVE keys the coordinator sees (0: none)
constexpr uint32_t endpoint_pool = 4;
constexpr uint32_t incarnation_pool = 3;
constexpr size_t owned_keys = 8;            // keys of the fuzzed shard, so pushes and pulls land
constexpr size_t client_requests_max = 64;  // requests a fuzzed reply may answer

// Bytes as integers and flags, from the front; zeros once they run out (then empty() ends the run).
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  bool flag() { return byte() & 1; }
  uint32_t u32() { return static_cast<uint32_t>(bytes(4)); }
  uint64_t u64() { return bytes(8); }
  // A value in [0, n), n > 0.
  uint32_t below(uint32_t n) { return n <= 256 ? byte() % n : u32() % n; }
  // One of a few values that break arithmetic, or any bit pattern.
  float real() {
    static constexpr float special[] = {0.0f,
                                        1.0f,
                                        -1.0f,
                                        1e-30f,
                                        1e30f,
                                        -1e30f,
                                        std::numeric_limits<float>::max(),
                                        std::numeric_limits<float>::denorm_min(),
                                        std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(),
                                        std::numeric_limits<float>::quiet_NaN()};
    const uint32_t pick = below(16);
    if (pick < std::size(special)) return special[pick];
    const uint32_t bits = u32();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  std::string text() { return std::string(below(4), static_cast<char>('a' + below(26))); }

 private:
  uint64_t bytes(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = v << 8 | byte();
    return v;
  }
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

void require(bool cond, const char* what) {
  if (cond) return;
  std::fprintf(stderr, "core_fuzz: %s\n", what);
  std::abort();
}

// Key i of the pool, 40 characters as the decoder requires; key 0 is none (--insecure).
std::string pool_key(size_t i) {
  return i == 0 ? std::string() : std::string(40, static_cast<char>('A' + i));
}

uint32_t clock_of(Input& in) {
  switch (in.below(8)) {
    case 0:
      return clock_done;
    case 1:
      return in.u32();
    default:
      return in.below(clock_max);
  }
}

NodeId node_of(Input& in, uint32_t nodes) {
  return in.below(8) == 0 ? in.u32() : in.below(nodes + 1);
}

// ---- coordinator ----

MemberInfo member_of(Input& in) {
  MemberInfo m;
  m.role = in.flag() ? MemberRole::worker : MemberRole::ps;
  m.endpoint = "tcp://10.0.0.1:" + std::to_string(7100 + in.below(endpoint_pool));
  m.public_key = pool_key(in.below(key_pool));
  m.count = in.below(16) == 0 ? 1 + in.below(member_count_max) : 1 + in.below(3);
  m.data = in.flag() ? "a.txt" : "b.txt";
  m.durable = in.flag();
  m.incarnation = in.below(incarnation_pool);
  m.first_node = in.below(4) == 0 ? in.u32() : in.below(16);
  m.has_aggregator = in.flag();
  m.aggregator = in.below(16);
  return m;
}

std::vector<NodeId> nodes_of(Input& in) {
  std::vector<NodeId> v(in.below(node_list_max + 1));
  for (NodeId& n : v) n = in.below(4) == 0 ? in.u32() : in.below(16);
  return v;
}

std::vector<ShardCheckpoint> checkpoints_of(Input& in) {
  std::vector<ShardCheckpoint> v(in.below(node_list_max + 1));
  for (ShardCheckpoint& c : v) {
    c.shard = in.below(4) == 0 ? in.u32() : in.below(16);
    c.dir = in.text();
    c.rows = in.u64();
    for (uint32_t i = in.below(4); i > 0; --i) c.sender_clocks.emplace_back(in.below(16), in.u32());
  }
  return v;
}

// A member's load, mostly small and often a ps's that fits (shards in order, as many counters).
MemberLoad load_of(Input& in) {
  auto counts = [&](uint32_t n) {
    std::vector<uint64_t> v(n);
    for (uint64_t& x : v) x = in.below(4) == 0 ? in.u64() : in.below(1000);
    return v;
  };
  MemberLoad l;
  l.rss_bytes = in.u64();
  if (in.flag()) {  // a worker's
    l.busy_ns = counts(in.below(4));
    l.steps = counts(in.below(4));
    return l;
  }
  for (NodeId n = 0, k = in.below(4); k > 0; --k) l.shards.push_back(n += in.below(3));
  const auto size = [&] { return in.below(4) == 0 ? in.below(4) : uint32_t(l.shards.size()); };
  l.rows_served = counts(size());
  l.rows_pulled = counts(in.flag() ? 0 : size());
  for (uint32_t k = in.below(3); k > 0; --k)
    l.hot_keys.push_back({in.below(4), in.below(64), in.below(100)});
  return l;
}

ControlBody body_of(Input& in) {
  switch (in.below(20)) {
    case 18: {
      ShardsMoved m{nodes_of(in), in.below(6), in.below(8)};
      if (in.flag()) m.backups = nodes_of(in);
      return m;
    }
    case 19:
      switch (in.below(5)) {
        case 0:
          return Promoted{nodes_of(in)};
        case 1:
          return ReportApplied{nodes_of(in)};
        case 2:
          return BackupsCopied{nodes_of(in)};
        case 3: {
          BackupsPlaced b{{}, in.below(8)};
          for (NodeId n : nodes_of(in)) b.placed.push_back({n, in.below(6)});
          return b;
        }
        default: {
          Applied a{nodes_of(in), {}};
          for (size_t j = 0; j < a.backups.size(); ++j) a.applied.push_back(in.below(64));
          return a;
        }
      }
    case 16:
      return ShardsCheckpointed{in.below(64), checkpoints_of(in)};
    case 17:
      return CheckpointComplete{in.below(64), checkpoints_of(in)};
    case 0:
    case 14:
    case 15:  // joins most: they move the coordinator along
      return Join{member_of(in)};
    case 1: {
      Welcome w;
      w.members.resize(1 + in.below(3));
      for (MemberInfo& m : w.members) m = member_of(in);
      w.you = in.below(static_cast<uint32_t>(w.members.size()));
      w.resume = in.flag();
      w.backups_only = in.flag();
      for (NodeId n : nodes_of(in)) w.placed.push_back({n, in.below(6)});
      return w;
    }
    case 2:
      return Ready{};
    case 3:
      return Start{};
    case 4:
      return in.flag() ? Heartbeat{in.u64(), load_of(in)} : Heartbeat{in.u64()};
    case 5: {
      MemberDone d;
      d.error = in.flag() ? in.text() : std::string();
      d.drained = in.flag();
      d.counters.samples = in.below(1000);
      d.counters.loss_sum = in.real();
      d.counters.steps = in.u32();
      d.counters.bad_messages = in.below(4);
      return d;
    }
    case 6:
      return NodesLost{nodes_of(in), in.text(), in.below(8)};
    case 7:
      return Leave{in.text(), in.flag()};
    case 8:
      return Shutdown{in.text()};
    case 9:
      return Refuse{in.text()};
    case 10:
      return Joined{in.text()};
    case 11:
      return ShardsRestarted{nodes_of(in), in.below(8)};
    case 12:
      return ShardSummaryRequest{};
    default: {  // 13
      ShardSummary s;
      s.table_rows = in.u64();
      s.table_bytes = in.u64();
      s.bad_messages = in.below(4);
      return s;
    }
  }
}

// What the coordinator says must hold up at the members: a Welcome they accept, ps messages
// their shards take from the coordinator's key.
void check_coordinator_effects(const CoordinatorCore& core, const CoordinatorConfig& config,
                               const CoordinatorEffects& out) {
  for (const ControlOut& c : out.control) {
    if (const auto* w = std::get_if<Welcome>(&c.message.body)) {
      auto l = ClusterLayout::make(*w);
      require(l.ok(), "the coordinator sent a Welcome that members refuse");
      require(w->members[w->you].endpoint == c.endpoint,
              "a Welcome went to another member's endpoint");
    }
    // A failover moves a shard only to a member that holds its backup (members check it).
    if (const auto* moved = std::get_if<ShardsMoved>(&c.message.body)) {
      auto layout = ClusterLayout::make(core.layout());
      require(layout.ok(), "the coordinator's layout is refused");
      for (NodeId s : moved->shards)
        require(layout->check_move(s, moved->member).ok(),
                "the coordinator moved a shard to a member without its backup");
    }
  }
  if (out.ps.empty()) return;
  auto layout = ClusterLayout::make(core.layout());
  require(layout.ok(), "the coordinator's layout is refused");
  for (const Outgoing& o : out.ps) {
    require(o.to < config.shards,
            "the coordinator sent a ps message to a node that is not a shard");
    require(layout->check_ps_message(o.message, o.to, MessageOrigin::of_coordinator()).ok(),
            "a shard would refuse the coordinator's ps message");
  }
}

void fuzz_coordinator(Input& in) {
  CoordinatorConfig config;
  config.shards = 1 + in.below(3);
  config.workers = 1 + in.below(3);
  config.job.hierarchical = in.flag();
  config.job.replicas = 1 + in.below(2);  // replicated:2 fails a lost ps over
  config.require_all_workers = in.flag();
  config.heartbeat_ms = 1 + in.below(64);
  config.heartbeat_timeout_ms = config.heartbeat_ms + 1 + in.below(256);
  config.join_timeout_ms = in.below(4096);
  config.notice_ms = 1 + in.below(512);
  config.map.vnodes_per_shard = 1 + in.below(vnodes_max);
  if (in.flag()) {
    // Keys: some not listed, some bound to a role, some free to take either.
    for (size_t i = 1; i < key_pool; ++i) {
      switch (in.below(4)) {
        case 0:
          break;
        case 1:
          config.key_roles[pool_key(i)] = MemberRole::ps;
          break;
        case 2:
          config.key_roles[pool_key(i)] = MemberRole::worker;
          break;
        default:
          config.key_roles[pool_key(i)] = std::nullopt;
          break;
      }
    }
  }
  uint64_t now_ms = in.u32();
  auto made = CoordinatorCore::make(config, now_ms);
  require(made.ok(), "a valid coordinator configuration was refused");
  CoordinatorCore& core = made.value();
  bool trained = false, failed = false;
  for (size_t op = 0; op < ops_max && !in.empty(); ++op) {
    CoordinatorEffects out;
    const uint32_t members = static_cast<uint32_t>(core.members().size());
    switch (in.below(32)) {
      case 0:
      case 1:
      case 2:
      case 3: {
        // Mostly less than a heartbeat timeout, so members stay alive.
        now_ms += in.below(4) == 0 ? in.below(time_step_max_ms) : in.below(config.heartbeat_ms + 1);
        core.on_timer(now_ms, out);
        break;
      }
      case 4: {
        now_ms = std::max(now_ms, core.next_deadline());
        core.on_timer(now_ms, out);
        break;
      }
      case 5: {
        core.finish(in.flag() ? std::string() : in.text(), out);
        break;
      }
      case 6:
      case 7:
      case 8:
      case 9:
      case 10:
      case 11:
      case 12:
      case 13:
      case 14: {
        // What a member says while the job runs, in its own name and with its own key; or the
        // member restarted, joining again (a durable ps resumes).
        if (members == 0) break;
        ControlMessage m;
        m.from = in.below(members);
        m.sender_key = core.members()[m.from].public_key;
        // In its current incarnation's name, unstated, or another's (a process before a restart).
        m.incarnation = in.flag() ? core.members()[m.from].incarnation : in.below(incarnation_pool);
        switch (in.below(10)) {
          case 9: {  // a ps member's shards checkpointed a step
            const MemberInfo& self = core.members()[m.from];
            ShardsCheckpointed c{in.below(64), {}};
            for (NodeId s = self.first_node; s < self.first_node + self.count; ++s)
              if (in.flag())
                c.shards.push_back(
                    ShardCheckpoint{s, fmt::format("shard-{}", s), in.below(100), {}});
            m.body = std::move(c);
            break;
          }
          case 8: {
            Join j{core.members()[m.from]};
            j.member.incarnation = in.below(incarnation_pool);
            j.member.durable = in.flag();
            m.from = control_from_unknown;
            m.body = std::move(j);
            break;
          }
          case 0:
          case 1:
          case 2:
            m.body = Ready{};
            break;
          case 3:
          case 4:
            m.body = Heartbeat{in.below(1000)};
            break;
          case 5:
            m.body = MemberDone{in.below(8) == 0 ? in.text() : std::string(), in.below(8) == 0,
                                WorkerCounters{in.below(1000)}};
            break;
          case 6:
            m.body = ShardSummary{in.below(1000), in.below(1000)};
            break;
          default:
            m.body = Leave{in.text(), in.flag()};
            break;
        }
        core.on_message(m, now_ms, out);
        break;
      }
      default: {
        ControlMessage m;
        switch (in.below(6)) {
          case 0:
            m.from = control_from_unknown;
            break;
          case 1:
            m.from = control_from_coordinator;
            break;
          case 2:
            m.from = in.u32();
            break;
          default:
            m.from = in.below(members + 1);
            break;
        }
        m.body = body_of(in);
        // Mostly the key of whom the message claims to be, so it gets past the identity checks.
        if (in.below(4) == 0) {
          m.sender_key = pool_key(in.below(key_pool));
        } else if (const auto* j = std::get_if<Join>(&m.body)) {
          m.sender_key = j->member.public_key;
        } else if (m.from < members) {
          m.sender_key = core.members()[m.from].public_key;
        }
        core.on_message(m, now_ms, out);
        break;
      }
    }
    check_coordinator_effects(core, config, out);
    require(!(out.training_done && trained), "training_done was set twice");
    require(!(!out.failed.ok() && failed), "the job failed twice");
    trained = trained || out.training_done;
    failed = failed || !out.failed.ok();
    if (!out.failed.ok())
      require(core.phase() == CoordinatorPhase::ended, "a failed job has not ended");
    (void)core.next_deadline();
    (void)core.summaries_pending();
    (void)core.samples_reported();
  }
}

// ---- shard ----

// A cluster as the coordinator numbers it: 1-2 ps members, 1-2 worker members, 1-2 nodes
// each, flat or hierarchical push, each member with its own key (or none).
Welcome cluster_of(Input& in) {
  Welcome w;
  const uint32_t ps = 1 + in.below(2), workers = 1 + in.below(2);
  const bool keys = in.flag();
  uint32_t shards = 0, replicas = 0;
  for (uint32_t i = 0; i < ps + workers; ++i) {
    MemberInfo m;
    m.role = i < ps ? MemberRole::ps : MemberRole::worker;
    m.count = 1 + in.below(2);
    m.endpoint = "tcp://10.0.0.1:" + std::to_string(7100 + i);
    m.public_key = keys ? pool_key(1 + i) : std::string();
    (m.role == MemberRole::ps ? shards : replicas) += m.count;
    w.members.push_back(m);
  }
  // Members join in any order: rotate the roles.
  std::rotate(w.members.begin(),
              w.members.begin() + in.below(static_cast<uint32_t>(w.members.size())),
              w.members.end());
  w.job.hierarchical = in.flag();
  w.job.replicas = 1 + in.below(ps);  // backups on the other ps member
  w.coordinator_node = assign_nodes(w.members, w.job.hierarchical);
  w.map.version = 1 + in.below(3);
  w.map.shards = shards;
  w.map.vnodes_per_shard = 1 + in.below(vnodes_max);
  w.map.seed = in.byte();
  w.workers_total = replicas;
  w.you = in.below(static_cast<uint32_t>(w.members.size()));
  return w;
}

MessageHeader header_of(Input& in, uint32_t nodes, uint64_t map_version) {
  MessageHeader h;
  h.sender = node_of(in, nodes);
  h.request_id = in.below(4) == 0 ? in.u64() : in.below(16);
  h.map_version = in.below(8) == 0 ? in.u64() % 4 : map_version;
  return h;
}

// Keys the decoder may hand out: repeated or not, the receiver's or not.
std::vector<uint64_t> keys_of(Input& in, const std::vector<uint64_t>& owned) {
  std::vector<uint64_t> keys(in.below(8) == 0 ? in.below(keys_max + 1) : in.below(5));
  for (uint64_t& k : keys) {
    switch (in.below(4)) {
      case 0:
        k = in.u64();
        break;
      case 1:
        k = in.below(64);
        break;
      default:
        k = owned.empty() ? in.below(64) : owned[in.below(static_cast<uint32_t>(owned.size()))];
        break;
    }
  }
  return keys;
}

FloatBuffer floats_of(Input& in, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = in.real();
  return FloatBuffer(std::move(v));
}

// Any ps message, as decoded: a push's gradients are a whole number of rows of its keys (of
// any width), no push has gradients without keys.
PsMessage ps_message_of(Input& in, uint32_t nodes, uint64_t map_version, size_t width,
                        const std::vector<uint64_t>& owned,
                        const std::vector<uint64_t>& last_pull) {
  const MessageHeader h = header_of(in, nodes, map_version);
  switch (in.below(13)) {
    case 11: {  // a primary's forward: a push (its keys filled in or not) or a clock advance
      ReplicaForward f{h,
                       in.below(4) == 0 ? in.u64() : in.below(32),
                       in.below(4) == 0 ? in.u64() : in.below(32),
                       false,
                       {}};
      if (in.flag()) {
        f.message = ClockAdvance{header_of(in, nodes, map_version), clock_of(in), in.flag()};
        return f;
      }
      auto m = ps_message_of(in, nodes, map_version, width, owned, last_pull);
      auto* push = std::get_if<PushRequest>(&m);
      if (!push) return m;
      if (push->keys_of_pull && in.flag()) {  // filled in: any gradients (the core checks them)
        push->keys = keys_of(in, owned);      // none, if the named pull had none
        f.keys_filled = true;
      }
      f.message = std::move(*push);
      return f;
    }
    case 12:
      return ReplicaAck{h, in.below(4) == 0 ? in.u64() : in.below(32)};
    case 0:
      return PullRequest{h, clock_of(in), node_of(in, nodes), keys_of(in, owned)};
    case 10:
      return PullHint{h, keys_of(in, owned)};
    case 1:
    case 2: {
      // A worker pushes the keys it pulled, in the same order: the shard reuses the pull's rows.
      std::vector<uint64_t> keys = in.flag() ? last_pull : keys_of(in, owned);
      const size_t row = in.below(4) == 0 ? in.below(2 * width_max + 1) : width;
      const uint32_t clock = clock_of(in);
      FloatBuffer grads = floats_of(in, keys.size() * row);
      PushRequest p{h, clock, std::move(keys), std::move(grads)};
      if (in.below(4) == 0) {  // keys left out, naming a pull (PushRequest::keys_of_pull)
        p.keys.clear();
        p.keys_of_pull = in.below(16);
        p.more = in.flag();
      }
      return p;
    }
    case 3:
      return PullReply{h, clock_of(in), floats_of(in, in.below(keys_max))};
    case 4:
      return PushAck{h};
    case 5:
      return ClockAdvance{h, clock_of(in), in.flag()};
    case 6:
      return ShardMapUpdate{h, in.below(4), in.below(map_shards_max + 1), in.below(vnodes_max + 1),
                            in.byte()};
    case 7:
      return PsError{h, in.flag() ? PsErrorCode::bad_request : PsErrorCode::out_of_order,
                     in.text()};
    case 8:
      return DenseReduce{h, clock_of(in), in.u64(), floats_of(in, in.below(keys_max))};
    default:
      return DenseBroadcast{h, clock_of(in), in.u64(), floats_of(in, in.below(keys_max))};
  }
}

MessageOrigin origin_of(Input& in, const ClusterLayout& layout) {
  switch (in.below(3)) {
    case 0:
      return MessageOrigin{};
    case 1:
      return MessageOrigin::of_coordinator();
    default:
      return MessageOrigin::of_member(in.below(static_cast<uint32_t>(layout.members().size())));
  }
}

bool is_reply(const PsMessage& m) {
  return !std::holds_alternative<PullRequest>(m) && !std::holds_alternative<PushRequest>(m) &&
         !std::holds_alternative<ClockAdvance>(m) && !std::holds_alternative<PullHint>(m);
}

// A store that keeps the batch protocol of storage/row_store.h as the RocksDB store does: every
// row handed out is its own allocation, freed at commit() (ASan catches a core that keeps one),
// writes through find() are lost, and reads fail while fail_reads is set (the next commit
// fails with the error).
class BatchRowStore final : public RowStore {
 public:
  explicit BatchRowStore(size_t row_floats) : row_floats_(row_floats) {}
  bool fail_reads = false;

  float* find(uint64_t key) override {
    Staged& s = stage(key);
    return s.exists ? s.row.get() : nullptr;
  }
  std::pair<float*, bool> find_or_insert(uint64_t key) override {
    Staged& s = stage(key);
    s.dirty = true;
    if (s.exists) return {s.row.get(), false};
    s.exists = true;
    return {s.row.get(), true};
  }
  void prefetch(uint64_t) const override {}
  bool stable_rows() const override { return false; }
  size_t size() const override { return rows_.size(); }
  size_t row_floats() const override { return row_floats_; }
  size_t memory_bytes() const override { return rows_.size() * row_floats_ * sizeof(float); }
  Status for_each(const std::function<void(uint64_t, const float*)>& f) const override {
    for (const auto& [key, row] : rows_) f(key, row.data());
    return {};
  }
  Status erase(std::span<const uint64_t> keys) override {
    require(staged_.empty(), "erase inside a batch");
    for (uint64_t k : keys) rows_.erase(k);
    return {};
  }
  Status load(std::span<const uint64_t> keys) override {
    for (uint64_t k : keys) stage(k);
    return error_;
  }
  Status commit() override {
    Status result = std::exchange(error_, Status());
    if (result.ok())
      for (const auto& [key, s] : staged_)
        if (s.dirty) rows_[key].assign(s.row.get(), s.row.get() + row_floats_);
    staged_.clear();
    return result;
  }

 private:
  struct Staged {
    bool exists = false;
    bool dirty = false;
    std::unique_ptr<float[]> row;
  };
  Staged& stage(uint64_t key) {
    auto [it, fresh] = staged_.try_emplace(key);
    Staged& s = it->second;
    if (!fresh) return s;
    s.row = std::make_unique<float[]>(row_floats_);
    if (fail_reads) {
      if (error_.ok()) error_ = Status::io_error("reads fail (fuzzed)");
      return s;  // a scratch row
    }
    if (auto r = rows_.find(key); r != rows_.end()) {
      std::copy(r->second.begin(), r->second.end(), s.row.get());
      s.exists = true;
    }
    return s;
  }
  size_t row_floats_;
  std::unordered_map<uint64_t, std::vector<float>> rows_;  // committed
  std::unordered_map<uint64_t, Staged> staged_;            // handed out since the last commit
  Status error_;
};

// A message a well-behaved peer of the shard sends next (so clocks move and rows age): a pull
// from a replica for its writer's clock, a push or clock advance one step on from a sender's
// clock, or the push of the keys it last pulled. Whether it passes the layout's check is left
// to the check.
PsMessage next_step_of(Input& in, const ClusterLayout& layout, const ShardCore& core,
                       uint64_t map_version, const std::vector<uint64_t>& owned,
                       const PullRequest& last_pull, bool resyncing) {
  const auto clocks = core.sender_clocks();
  const auto [sender, clock] = clocks[in.below(static_cast<uint32_t>(clocks.size()))];
  const uint32_t next = clock == clock_done ? clock : clock + 1;
  const MessageHeader h{sender, in.below(16), map_version};
  switch (in.below(4)) {
    case 0: {
      // A pull by one of the sender's member's replicas, for the sender's clock.
      const MemberInfo& m = layout.members()[*layout.owner(sender)];
      const NodeId replica = m.first_node + in.below(m.count);
      return PullRequest{{replica, h.request_id, map_version}, clock, sender, keys_of(in, owned)};
    }
    case 1: {
      if (last_pull.writer != sender || last_pull.clock == clock_done) break;
      std::vector<float> grads(last_pull.keys.size() * core.config().width);
      for (float& g : grads) g = in.real();
      PushRequest p{h, last_pull.clock + 1, last_pull.keys, FloatBuffer(std::move(grads))};
      if (in.flag()) {  // the keys left out, naming the pull (or, at times, another request)
        p.keys.clear();
        p.keys_of_pull = in.below(4) != 0 ? last_pull.header.request_id : in.below(16);
      }
      return p;
    }
    case 2: {
      std::vector<uint64_t> keys = keys_of(in, owned);
      std::vector<float> grads(keys.size() * core.config().width);
      for (float& g : grads) g = in.real();
      return PushRequest{h, next, std::move(keys), FloatBuffer(std::move(grads))};
    }
    default:
      break;
  }
  const bool resync = resyncing && in.flag();
  return ClockAdvance{h, resync ? clock : in.below(8) == 0 ? clock_done : next, resync};
}

// Shard `self` of `layout`: any width, optimizer, initial rows and consistency.
ShardConfig shard_config_of(Input& in, const ClusterLayout& layout, const ShardMapSpec& map,
                            NodeId self) {
  ShardConfig config;
  config.id = self;
  config.shard_index = self;
  config.width = 1 + in.below(width_max);
  config.optimizer = default_optimizer_config(static_cast<OptimizerKind>(in.below(4)));
  config.init = RowInit{in.byte(), in.below(static_cast<uint32_t>(config.width) + 1), 0.01f};
  config.consistency = Consistency{static_cast<ConsistencyKind>(in.below(3)), in.below(3)};
  config.senders = layout.shard_senders();
  config.map = map;
  return config;
}

void fuzz_shard(Input& in) {
  const Welcome w = cluster_of(in);
  auto made_layout = ClusterLayout::make(w);
  require(made_layout.ok(), "the layout assign_nodes made was refused");
  const ClusterLayout& layout = made_layout.value();
  const NodeId self = in.below(layout.shards());

  ShardConfig config = shard_config_of(in, layout, w.map, self);
  config.admit_after = in.below(4);
  config.admit_sketch_width = 64;  // small: the sketch is allocated per input
  config.checkpoint_every = in.below(4);
  config.evict_after = in.below(4);
  config.fault_skip_consistency_gate = in.below(8) == 0;
  auto row_floats = ShardCore::row_floats(config);
  require(row_floats.ok(), "a default optimizer was refused");
  // The memory store, or one that keeps the batch protocol (the RocksDB and tiered stores' path).
  BatchRowStore* batch = nullptr;
  std::unique_ptr<RowStore> store;
  if (in.flag()) {
    auto b = std::make_unique<BatchRowStore>(row_floats.value());
    batch = b.get();
    store = std::move(b);
  }
  auto made = ShardCore::make(config, std::move(store));
  require(made.ok(), "a valid shard configuration was refused");
  ShardCore& core = *made.value();
  // Before the first message, as a restarted process does.
  const bool resyncing = in.flag();
  if (resyncing) core.begin_resync();
  if (in.below(4) == 0) {
    std::vector<std::pair<NodeId, uint32_t>> clocks(in.below(4));
    for (auto& [node, clock] : clocks) {
      node = node_of(in, layout.nodes());
      clock = clock_of(in);
    }
    (void)core.resume_clocks(clocks);
  }

  auto map = ShardMap::make(w.map);
  require(map.ok(), "the layout's map was refused");
  std::vector<uint64_t> owned;
  for (uint64_t k = 0; owned.size() < owned_keys && k < 64 * owned_keys; ++k)
    if (map->shard_of(k) == self) owned.push_back(k);

  PullRequest last_pull;
  bool all_checked = true;  // every message delivered so far passed the layout's check
  for (size_t op = 0; op < ops_max && !in.empty(); ++op) {
    Outbox out;
    const bool failed_before = !core.error().ok();
    switch (in.below(16)) {
      case 0: {
        (void)core.checkpoint_due();
        (void)core.sender_clocks();
        break;
      }
      case 1: {
        const std::vector<uint64_t> keys = keys_of(in, owned);
        std::vector<float> values(keys.size() * config.width);
        const Status s = core.row_values(keys, values);
        require(s.ok() || batch, "a memory store failed a read");
        break;
      }
      case 2: {
        if (batch) batch->fail_reads = in.below(4) == 0;
        break;
      }
      default: {
        const bool step = in.flag();
        const PsMessage m =
            step ? next_step_of(in, layout, core, w.map.version, owned, last_pull, resyncing)
                 : ps_message_of(in, layout.nodes(), w.map.version, config.width, owned,
                                 last_pull.keys);
        const NodeId receiver = step || in.below(4) != 0 ? self : node_of(in, layout.nodes());
        MessageOrigin origin = origin_of(in, layout);
        const MessageHeader& h =
            std::visit([](const auto& x) -> const MessageHeader& { return x.header; }, m);
        if (step && h.sender < layout.nodes() && layout.owner(h.sender) && in.flag())
          origin = MessageOrigin::of_member(*layout.owner(h.sender));
        const bool checked = layout.check_ps_message(m, receiver, origin).ok();
        // Straight to the core, as a careless driver would.
        const bool unchecked = in.below(8) == 0;
        if (!unchecked && !(checked && receiver == self)) break;
        all_checked = all_checked && !unchecked;
        if (const auto* pull = std::get_if<PullRequest>(&m)) last_pull = *pull;
        const ShardStats before = core.stats();
        core.on_message(m, out);
        if (is_reply(m) && !failed_before) {
          const ShardStats& after = core.stats();
          require(out.empty(), "a shard answered a reply");
          require(after.messages_refused + after.dropped_before_resync ==
                      before.messages_refused + before.dropped_before_resync + 1,
                  "a reply sent to a shard was not counted");
        }
        if (std::holds_alternative<PullHint>(m) && !failed_before) {
          const ShardStats& after = core.stats();
          require(out.empty(), "a shard answered a pull hint");
          require(after.hints + after.hints_dropped == before.hints + before.hints_dropped + 1,
                  "a pull hint was neither taken nor counted as dropped");
        }
        break;
      }
    }
    // After its store failed a shard answers nothing (its rows may be incomplete).
    if (failed_before) require(out.empty(), "a shard whose store failed answered");
    if (all_checked)
      for (const Outgoing& o : out)
        require(o.to < layout.nodes(), "a shard answered a node outside the layout");
    require(core.error().ok() || batch, "a memory store failed");
  }
  (void)core.table_bytes();
  (void)core.for_each_row([](uint64_t, std::span<const float>) {});
}

// ---- client ----

struct SentRequest {
  NodeId to = 0;
  uint64_t request_id = 0;
  size_t keys = 0;
};

// Unique keys (the client's contract), any shard's.
std::vector<uint64_t> unique_keys_of(Input& in) {
  std::vector<uint64_t> keys(in.below(keys_max + 1));
  for (uint64_t& k : keys) k = in.below(4) == 0 ? in.u64() : in.below(128);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

void fuzz_client(Input& in) {
  KvClient::Options options;
  options.map.version = 1 + in.below(2);
  options.map.shards = 1 + in.below(map_shards_max);
  options.map.vnodes_per_shard = 1 + in.below(vnodes_max);
  options.map.seed = in.byte();
  for (NodeId s = 0; s < options.map.shards; ++s) options.shard_nodes.push_back(s);
  options.id = options.map.shards + in.below(4);
  options.width = 1 + in.below(width_max);
  options.keep_for_resync = in.flag();
  auto made = KvClient::make(options);
  require(made.ok(), "a valid client configuration was refused");
  KvClient& client = *made.value();
  const uint32_t nodes = options.map.shards + 4;

  // Pulls' buffers: the client writes into them until their tickets are done, so they live
  // until the run ends.
  std::deque<std::vector<float>> pull_buffers;
  std::deque<SentRequest> sent;
  std::vector<uint64_t> last_pulled;
  uint32_t clock = 0;
  bool finished = false;
  for (size_t op = 0; op < ops_max && !in.empty(); ++op) {
    Outbox out;
    switch (in.below(16)) {
      case 0:
      case 1: {
        const std::vector<uint64_t> keys = unique_keys_of(in);
        auto& values = pull_buffers.emplace_back(keys.size() * options.width);
        (void)client.pull(keys, in.flag() ? clock : clock_of(in), options.id, values, out);
        last_pulled = keys;
        break;
      }
      case 2:
      case 3: {
        if (finished) break;
        // At times the keys last pulled: a push that may leave them out (keys_of_pull).
        const std::vector<uint64_t> keys = in.flag() ? last_pulled : unique_keys_of(in);
        const FloatBuffer grads = floats_of(in, keys.size() * options.width);
        (void)client.push(keys, grads.span(), ++clock, out);
        break;
      }
      case 4: {
        if (finished) break;
        finished = true;
        client.finish(out);
        break;
      }
      case 5: {
        (void)client.resync(in.below(options.map.shards + 1), out);
        break;
      }
      default: {
        // A reply to a request it sent, or to none; of the size that request wants, or not.
        SentRequest to;
        if (!sent.empty() && in.below(4) != 0)
          to = sent[in.below(static_cast<uint32_t>(sent.size()))];
        else
          to = {node_of(in, nodes), in.below(4) == 0 ? in.u64() : in.below(16), in.below(keys_max)};
        MessageHeader h{to.to, to.request_id, client.map().version()};
        PsMessage m;
        switch (in.below(6)) {
          case 0:
          case 1: {
            const size_t n =
                in.below(4) == 0 ? in.below(keys_max * width_max) : to.keys * options.width;
            m = PullReply{h, clock_of(in), floats_of(in, n)};
            break;
          }
          case 2:
            m = PushAck{h};
            break;
          case 3: {
            const uint32_t shards =
                in.below(4) == 0 ? in.below(map_shards_max + 1) : options.map.shards;
            m = ShardMapUpdate{h, client.map().version() - 1 + in.below(3), shards,
                               1 + in.below(vnodes_max), in.byte()};
            break;
          }
          case 4:
            m = PsError{h, in.flag() ? PsErrorCode::bad_request : PsErrorCode::keys_unknown,
                        in.text()};
            break;
          default:
            m = ps_message_of(in, nodes, client.map().version(), options.width, {}, {});
            break;
        }
        client.on_message(m, out);
        break;
      }
    }
    for (const Outgoing& o : out) {
      require(o.to < options.map.shards, "the client sent a message to a node that is not a shard");
      const auto& h =
          std::visit([](const auto& x) -> const MessageHeader& { return x.header; }, o.message);
      const auto* pull = std::get_if<PullRequest>(&o.message);
      const auto* push = std::get_if<PushRequest>(&o.message);
      if (!pull && !push) continue;
      if (sent.size() == client_requests_max) sent.pop_front();
      sent.push_back({o.to, h.request_id, pull ? pull->keys.size() : push->keys.size()});
    }
  }
}

// ---- layout ----

void check_layout(Input& in, const ClusterLayout& l) {
  const uint32_t n = l.nodes();
  require(l.coordinator_node() < n, "the coordinator's node is outside the layout");
  require(l.shards() < n, "the shards are not all nodes of the layout");
  for (uint32_t i = 0; i < l.members().size(); ++i) {
    const MemberInfo& m = l.members()[i];
    require(uint64_t{m.first_node} + m.count <= n, "a member's nodes run past the layout");
    for (NodeId node = m.first_node; node < m.first_node + m.count; ++node)
      require(l.owner(node) == i, "a member's node belongs to another");
    if (m.has_aggregator)
      require(m.aggregator < n && l.owner(m.aggregator) == i, "an aggregator is misplaced");
    for (NodeId node : l.nodes_of(i))
      require(node < l.shards(), "a ps member hosts a node that is not a shard");
    if (!m.public_key.empty())
      require(l.member_of_key(m.public_key) == i, "a key names another member");
  }
  for (NodeId s : l.shard_senders())
    require(s < n && l.role(s) != NodeRole::shard, "a shard sender is misplaced");
  for (int k = 0; k < 8 && !in.empty(); ++k) {
    const PsMessage m = ps_message_of(in, n, 1, 1 + in.below(width_max), {}, {});
    const NodeId receiver = node_of(in, n);
    MessageOrigin origin = origin_of(in, l);
    if (in.below(8) == 0) origin = MessageOrigin::of_member(in.u32());
    (void)l.check_ps_message(m, receiver, origin);
  }
}

void fuzz_layout(Input& in) {
  Welcome w;
  if (in.flag()) {
    // A valid layout with a few fields changed: close to what make accepts.
    w = cluster_of(in);
    for (uint32_t k = in.below(4); k > 0; --k) {
      MemberInfo& m = w.members[in.below(static_cast<uint32_t>(w.members.size()))];
      switch (in.below(10)) {
        case 0:
          w.you = in.below(8);
          break;
        case 1:
          m.count = in.below(member_count_max + 2);
          break;
        case 2:
          m.first_node = in.below(4) == 0 ? in.u32() : in.below(16);
          break;
        case 3:
          m.has_aggregator = !m.has_aggregator;
          break;
        case 4:
          m.aggregator = in.below(4) == 0 ? in.u32() : in.below(16);
          break;
        case 5:
          m.role = m.role == MemberRole::ps ? MemberRole::worker : MemberRole::ps;
          break;
        case 6:
          m.public_key = pool_key(in.below(key_pool));
          break;
        case 7:
          w.map.shards = in.below(16);
          break;
        case 8:
          w.workers_total = in.below(16);
          break;
        default:
          w.coordinator_node = in.below(4) == 0 ? in.u32() : in.below(16);
          break;
      }
    }
  } else {
    w.members.resize(in.below(welcome_members_max + 1));
    for (MemberInfo& m : w.members) m = member_of(in);
    w.you = in.below(static_cast<uint32_t>(w.members.size()) + 1);
    w.job.hierarchical = in.flag();
    w.map.shards = in.below(32);
    w.workers_total = in.below(32);
    w.coordinator_node = in.below(4) == 0 ? in.u32() : in.below(32);
    w.heartbeat_ms = in.below(3);
    w.heartbeat_timeout_ms = in.below(5);
  }
  auto l = ClusterLayout::make(w);
  if (l.ok()) check_layout(in, l.value());
}

// ---- member ----

// A MemberCore joining the layout of cluster_of (as one of its members, so its Welcome is
// taken), fed arbitrary control messages, that Welcome (mutated or not) and local events in any
// order, with time moving forward. It must never crash; once ended it sends nothing more; every
// node it names in effects is a node of the layout it took.
void fuzz_member(Input& in) {
  Welcome w = cluster_of(in);
  w.heartbeat_ms = 1 + in.below(64);
  w.heartbeat_timeout_ms = w.heartbeat_ms + 1 + in.below(256);
  w.resume = in.flag();
  MemberConfig config;
  config.me = w.members[w.you];
  config.me.durable = in.flag();
  w.members[w.you].durable = config.me.durable;
  config.join_timeout_ms = 1 + in.below(4096);
  config.join_retry_ms = 1 + in.below(512);
  config.notice_ms = 1 + in.below(512);
  config.takes_checkpoints = in.flag();
  uint64_t now_ms = in.u32();
  auto made = MemberCore::make(config, now_ms);
  require(made.ok(), "a valid member configuration was refused");
  MemberCore& core = made.value();
  bool ended = false;
  auto check = [&](const MemberEffects& fx) {
    require(!ended || (fx.control.empty() && !fx.build && !fx.exit),
            "an ended member core still had effects");
    if (fx.build)
      require(ClusterLayout::make(*fx.build).ok() && core.layout().has_value(),
              "the member core built from a layout that does not add up");
    for (const std::vector<NodeId>* nodes : {&fx.lost, &fx.restarted})
      for (NodeId n : *nodes)
        require(core.layout() && n < core.layout()->nodes(),
                "the member core named a node outside its layout");
    ended = ended || fx.exit.has_value();
  };
  MemberEffects fx;
  core.start(now_ms, fx);
  check(fx);
  for (size_t op = 0; op < ops_max && !in.empty(); ++op) {
    fx = {};
    switch (in.below(16)) {
      case 0:
      case 1:
        now_ms += in.below(time_step_max_ms);
        core.on_timer(now_ms, fx);
        break;
      case 2:
      case 3: {
        Welcome v = w;
        if (in.flag()) v.you = in.below(8);
        if (in.flag())
          v.members[in.below(static_cast<uint32_t>(v.members.size()))].first_node = in.u32();
        v.resume = in.flag();
        core.on_message({control_from_coordinator, v}, now_ms, fx);
        break;
      }
      case 4:
        core.built(in.flag() ? Status() : Status::io_error(in.text()), now_ms, fx);
        break;
      case 5:
        core.node_done(in.u32(), in.flag() ? Status() : Status::internal(in.text()), fx);
        break;
      case 6: {
        std::vector<std::pair<uint32_t, ShardCheckpoint>> copies;
        for (ShardCheckpoint& c : checkpoints_of(in)) copies.emplace_back(in.below(64), c);
        core.checkpointed(std::move(copies), fx);
        break;
      }
      case 7:
        core.stop(fx);
        break;
      case 8:
        core.drained(fx);
        break;
      case 9:
        if (in.below(8) == 0) core.fail(Status::io_error(in.text()), fx);
        break;
      default:
        core.on_message({in.flag() ? control_from_coordinator : in.u32(), body_of(in)}, now_ms, fx);
        break;
    }
    check(fx);
    require(core.phase() != MemberPhase::ended || core.next_deadline() == UINT64_MAX,
            "an ended member core has a deadline");
  }
}

// ---- replication ----

void fuzz_replication(Input& in) {
  const Welcome w = cluster_of(in);
  const ClusterLayout layout = ClusterLayout::make(w).value();
  ShardConfig config = shard_config_of(in, layout, w.map, in.below(layout.shards()));
  config.checkpoint_every = in.below(4);
  auto core = ShardCore::make(config).value();
  const uint32_t backups = 1 + in.below(2);
  auto primary = ShardPrimary::make(*core, backups).value();
  auto backup = ShardBackup::make(ShardCore::make(config).value()).value();
  const auto map = ShardMap::make(w.map).value();
  std::vector<uint64_t> owned;
  for (uint64_t k = 0; owned.size() < owned_keys && k < 64 * owned_keys; ++k)
    if (map.shard_of(k) == config.id) owned.push_back(k);
  PullRequest last_pull;
  bool forged = false;
  Outbox out;
  std::vector<ReplicaForward> forwards;
  auto take = [&](const ReplicaForward& f, bool made) {
    const uint64_t before = backup->applied();
    auto ack = backup->on_forward(f);
    require(!made || forged || ack.ok(), "a backup refused a forward its primary made");
    require(backup->applied() == before || backup->applied() == before + 1,
            "a backup's applied() moved by more than one forward");
    require(!ack.ok() || ack->seq == backup->applied(), "a backup acknowledged another seq");
    require(backup->kept() <= replica_log_max, "a backup kept more than replica_log_max");
    require(backup->kept_bytes() <= replica_log_bytes_max,
            "a backup kept more than replica_log_bytes_max");
    if (!made && ack.ok() && backup->applied() > before) forged = true;
  };
  // A new backup from a copy of the primary as it is now (send_copy, BackupCopy), forged parts
  // coming in between: without a forged one, every part is taken and the backup holds the
  // primary's rows.
  auto copy_to_new_backup = [&] {
    auto copy =
        BackupCopy::make(config, std::make_unique<MemoryRowStore>(core->store().row_floats()))
            .value();
    std::vector<ReplicaCopy> parts;
    require(send_copy(*core, primary->add_backup(), 1 + in.below(8),
                      [&](ReplicaCopy&& part) { parts.push_back(std::move(part)); })
                .ok(),
            "a copy of a memory store failed");
    bool lied = false;
    for (const ReplicaCopy& part : parts) {
      if (in.below(6) == 0) {
        ReplicaCopy lie = part;
        switch (in.below(4)) {
          case 0:
            lie.header.request_id = in.below(4);
            break;
          case 1:
            lie.keys.push_back(in.flag() ? in.u64() : in.below(64));
            break;
          case 2:
            if (!lie.rows.empty()) lie.rows[in.below(uint32_t(lie.rows.size()))] = in.real();
            break;
          default:
            lie.last = !lie.last;
            break;
        }
        lied = true;
        (void)copy->on_part(lie);
      }
      const Status s = copy->on_part(part);
      require(lied || s.ok(), "a new backup refused a copy its primary made");
    }
    std::unique_ptr<ShardBackup> made = copy->take();
    if (lied) return;
    require(made != nullptr, "a whole copy built no backup");
    require(made->core().rows_digest().value().digest == core->rows_digest().value().digest,
            "a backup built from a copy holds other rows than its primary");
  };
  for (int i = 0; i < 64 && !in.empty(); ++i) {
    out.clear();
    switch (in.below(5)) {
      case 4:
        copy_to_new_backup();
        break;
      case 0:
      case 1: {
        const PsMessage m =
            in.flag() ? next_step_of(in, layout, *core, w.map.version, owned, last_pull, false)
                      : ps_message_of(in, layout.nodes(), w.map.version, config.width, owned,
                                      last_pull.keys);
        if (const auto* pull = std::get_if<PullRequest>(&m)) last_pull = *pull;
        forwards.clear();
        primary->on_message(m, out, forwards);
        for (const ReplicaForward& f : forwards) {
          require(f.seq <= primary->last_seq(), "a forward past the primary's last");
          take(f, true);
        }
        break;
      }
      case 2: {
        const PsMessage m =
            ps_message_of(in, layout.nodes(), w.map.version, config.width, owned, last_pull.keys);
        if (const auto* f = std::get_if<ReplicaForward>(&m)) take(*f, false);
        break;
      }
      default: {
        const ReplicaAck ack{{}, in.below(4) == 0 ? in.u64() : in.below(64)};
        const Status s = primary->on_ack(in.below(backups + 1), ack, out);
        if (ack.seq > primary->last_seq()) require(!s.ok(), "an ack past the last forward");
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  switch (in.byte() % 6) {
    case 0:
      fuzz_coordinator(in);
      break;
    case 1:
      fuzz_shard(in);
      break;
    case 2:
      fuzz_client(in);
      break;
    case 3:
      fuzz_layout(in);
      break;
    case 4:
      fuzz_replication(in);
      break;
    default:
      fuzz_member(in);
      break;
  }
  return 0;
}
