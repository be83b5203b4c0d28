#include "ps/shard_core.h"

#include <algorithm>
#include <cstring>

#include "common/bf16.h"
#include "common/finite.h"
#include "common/fp16.h"
#include "common/hash.h"
#include "common/int8.h"

namespace colony {

Expected<std::unique_ptr<ShardCore>> ShardCore::make(const ShardConfig& config,
                                                     std::unique_ptr<RowStore> store) {
  if (config.senders.empty()) return Status::invalid_input("a shard needs at least one sender");
  if (config.width == 0) return Status::invalid_input("row width must be at least 1");
  auto map = ShardMap::make(config.map);
  if (!map) return map.status();
  if (config.shard_index >= map->shards())
    return Status::invalid_input(fmt::format("shard index {} is outside a map of {} shards",
                                             config.shard_index, map->shards()));
  if (config.admit_after > 1 &&
      (config.admit_sketch_width == 0 ||
       (config.admit_sketch_width & (config.admit_sketch_width - 1)) != 0))
    return Status::invalid_input(fmt::format("the admission sketch width {} is not a power of two",
                                             config.admit_sketch_width));
  if (config.admit_after > 255)
    return Status::invalid_input(fmt::format(
        "--admit-after {} is above the most the sketch counts (255)", config.admit_after));
  auto optimizer = make_optimizer(config.optimizer);
  if (!optimizer) return optimizer.status();
  const size_t row_floats =
      config.width + (*optimizer)->state_floats(config.width) + (config.evict_after ? 1 : 0);
  if (!store) store = std::make_unique<MemoryRowStore>(row_floats);
  if (store->row_floats() != row_floats)
    return Status::invalid_input(fmt::format(
        "the store keeps rows of {} floats; this shard needs {}", store->row_floats(), row_floats));
  return std::unique_ptr<ShardCore>(new ShardCore(config, std::move(optimizer.value()),
                                                  std::move(map.value()), std::move(store)));
}

Expected<size_t> ShardCore::row_floats(const ShardConfig& config) {
  auto optimizer = make_optimizer(config.optimizer);
  if (!optimizer) return optimizer.status();
  return config.width + (*optimizer)->state_floats(config.width) + (config.evict_after ? 1 : 0);
}

Expected<std::vector<RowPart>> ShardCore::row_parts(const ShardConfig& config, ValueFormat values,
                                                    ValueFormat state) {
  auto optimizer = make_optimizer(config.optimizer);
  if (!optimizer) return optimizer.status();
  if (Status s = check_state_format(config.optimizer.kind, state); !s.ok()) return s;
  std::vector<RowPart> parts{{config.width, values}};
  // The state is vectors of `width` (Adagrad's sums, FTRL's z, n and w0, Adam's m and v), each
  // with a scale of its own, then any scalars (Adam's step count), kept exact.
  const size_t n = (*optimizer)->state_floats(config.width);
  for (size_t i = 0; i + config.width <= n; i += config.width)
    parts.push_back(
        {config.width, state, state == ValueFormat::int8 || state == ValueFormat::fp16});
  if (n % config.width) parts.push_back({n % config.width, ValueFormat::fp32});
  if (config.evict_after) parts.push_back({1, ValueFormat::fp32});
  return parts;
}

ShardCore::ShardCore(const ShardConfig& config, std::unique_ptr<Optimizer> optimizer, ShardMap map,
                     std::unique_ptr<RowStore> store)
    : config_(config),
      optimizer_(std::move(optimizer)),
      map_(std::move(map)),
      width_(config.width),
      state_(optimizer_->state_floats(width_)),
      store_(std::move(store)) {
  for (NodeId s : config.senders) clocks_[s] = 0;
  stamp_ = config.evict_after ? 1 : 0;
  next_eviction_scan_ = config.evict_after;
  if (config.admit_after > 1)
    sketch_ =
        std::make_unique<CountMinSketch>(4, config.admit_sketch_width, config.init.seed ^ 0xad317);
}

void ShardCore::on_message(const PsMessage& message, Outbox& out) {
  // A shard whose store failed may have lost rows: it answers nothing more (the driver reads
  // error() and ends the job).
  if (!error_.ok()) return;
  if (auto* hint = std::get_if<PullHint>(&message)) return on_hint(*hint);
  if (resyncing_ && !admit_while_resyncing(message, out)) return;
  if (auto* pull = std::get_if<PullRequest>(&message)) return on_pull(*pull, out);
  if (auto* push = std::get_if<PushRequest>(&message)) return on_push(*push, out);
  if (auto* clock = std::get_if<ClockAdvance>(&message)) return on_clock(*clock, out);
  // Replies are for clients: one sent here is a peer's mistake (or a lie), not ours to act on.
  ++stats_.messages_refused;
}

Expected<ShardCore::RowsDigest> ShardCore::rows_digest() const {
  RowsDigest d;
  const size_t bytes = store_->row_floats() * sizeof(float);
  std::vector<float> initial(width_ + state_);
  Status s = store_->for_each([&](uint64_t key, const float* row) {
    init_row(key, config_.init, {initial.data(), width_});
    optimizer_->init_state({initial.data(), width_}, {initial.data() + width_, state_});
    if (std::equal(initial.begin(), initial.end(), row)) return;
    d.digest += fnv1a64(row, bytes, mix64(key));
    ++d.rows;
  });
  if (!s.ok()) return s;
  return d;
}

bool ShardCore::stale(const MessageHeader& h, Outbox& out) {
  if (h.map_version == map_.version()) return false;
  const ShardMapSpec& s = map_.spec();
  ++stats_.stale_map_replies;
  out.push_back({h.sender, ShardMapUpdate{{config_.id, h.request_id, s.version},
                                          s.version,
                                          s.shards,
                                          s.vnodes_per_shard,
                                          s.seed}});
  return true;
}

float* ShardCore::initialised(uint64_t key, std::pair<float*, bool> found) {
  auto [r, inserted] = found;
  if (inserted) {
    init_row(key, config_.init, {r, width_});
    optimizer_->init_state({r, width_}, {r + width_, state_});
    if (stamp_) r[width_ + state_] = float(min_clock_);  // a new row counts as fresh
  }
  return r;
}

float* ShardCore::admitted_row(uint64_t key) {
  if (float* r = store_->find(key)) return store_->stable_rows() ? r : row(key);
  if (sketch_->add(key) < config_.admit_after) {
    ++stats_.rows_not_admitted;
    return nullptr;
  }
  return row(key);
}

float* ShardCore::existing_row(uint64_t key) {
  float* r = store_->find(key);
  // A store without stable rows keeps only writes through find_or_insert.
  return r && !store_->stable_rows() ? row(key) : r;
}

const uint64_t* ShardCore::foreign_key(const std::vector<uint64_t>& keys) const {
  auto it = std::find_if(keys.begin(), keys.end(),
                         [&](uint64_t k) { return map_.shard_of(k) != config_.shard_index; });
  return it == keys.end() ? nullptr : &*it;
}

bool ShardCore::owns_all(const MessageHeader& h, const std::vector<uint64_t>& keys, Outbox& out) {
  const uint64_t* key = foreign_key(keys);
  if (!key) return true;
  out.push_back({h.sender, PsError{{config_.id, h.request_id, map_.version()},
                                   PsErrorCode::bad_request,
                                   fmt::format("key {:#x} does not belong to shard {}", *key,
                                               config_.shard_index)}});
  return false;
}

void ShardCore::on_pull(const PullRequest& r, Outbox& out) {
  if (stale(r.header, out)) return;
  if (!owns_all(r.header, r.keys, out)) return;
  // A client pulls in parts of at most part_bytes_max (ps/protocol.h): a larger pull is a lie
  // whose reply (or, under replication, the forward of the push naming it) no message could carry.
  if (const size_t most = part_keys(part_bytes_max, width_, config_.wire_format);
      r.keys.size() > most) {
    ++stats_.messages_refused;
    out.push_back({r.header.sender,
                   PsError{{config_.id, r.header.request_id, map_.version()},
                           PsErrorCode::bad_request,
                           fmt::format("a pull of {} keys: its reply would pass the {} bytes of "
                                       "a part ({} keys at most)",
                                       r.keys.size(), part_bytes_max, most)}});
    return;
  }
  if (may_answer(r)) {
    answer(r, out);
    return;
  }
  // A client keeps at most max-inflight steps of pulls open (each in at most a few parts): more
  // waiting from one sender is a peer's mistake or a lie, refused rather than held without bound.
  Held& held = held_[r.header.sender];
  if (held.pulls >= shard_waiting_pulls_per_sender_max ||
      held.keys + r.keys.size() > config_.waiting_pull_keys_max) {
    ++stats_.messages_refused;
    out.push_back(
        {r.header.sender,
         PsError{{config_.id, r.header.request_id, map_.version()},
                 PsErrorCode::bad_request,
                 fmt::format("node {} has {} pulls of {} keys waiting at shard {} already",
                             r.header.sender, held.pulls, held.keys, config_.shard_index)}});
    if (held.pulls == 0) held_.erase(r.header.sender);
    return;
  }
  ++held.pulls;
  held.keys += r.keys.size();
  ++stats_.pulls_deferred;
  // Its rows are read while it waits for the slowest sender (RowStore::read_ahead), so that the
  // answer finds them in memory.
  store_->read_ahead(r.keys);
  waiting_.push_back(r);
}

void ShardCore::on_hint(const PullHint& h) {
  // Advisory: one this shard cannot use is dropped unanswered. A restarted shard has no use for
  // one until every sender has resynced, nor does a shard whose job is over.
  const bool usable = (!resyncing_ || senders_resynced_) && min_clock_ != clock_done &&
                      h.header.map_version == map_.version() && !foreign_key(h.keys);
  if (!usable) {
    ++stats_.hints_dropped;
    return;
  }
  ++stats_.hints;
  store_->read_ahead(h.keys);
}

std::deque<PullRequest> ShardCore::take_waiting() {
  held_.clear();
  return std::exchange(waiting_, {});
}

void ShardCore::begin_resync() {
  if (config_.fault_skip_resync) return;
  resyncing_ = true;
  skip_cut_after_resync_ = true;
  senders_resynced_ = false;
  resynced_.clear();
  durable_clocks_ = store_->committed_clocks();
}

void ShardCore::begin_takeover() {
  resyncing_ = true;
  skip_cut_after_resync_ = true;
  senders_resynced_ = false;
  resynced_.clear();
  durable_clocks_.clear();
  for (const auto& [sender, clock] : clocks_) durable_clocks_[sender] = clock;
  parts_.clear();
  keys_dropped_.clear();
}

bool ShardCore::admit_while_resyncing(const PsMessage& message, Outbox& out) {
  const MessageHeader& h =
      std::visit([](const auto& m) -> const MessageHeader& { return m.header; }, message);
  const auto* clock = std::get_if<ClockAdvance>(&message);
  // A sender's first resync since the restart sets its clock. A later one (a client that got
  // ShardsRestarted twice, or a resync its process sent before it died and the coordinator
  // declared it done) is an ordinary clock advance: it never moves a clock back. A client that
  // only pulls (a replica under hierarchical push) has no clock: its resync is just taken.
  if (clock && clock->resync && (!resynced_.count(h.sender) || !clocks_.count(h.sender))) {
    if (stale(h, out)) return false;
    resynced_.insert(h.sender);
    auto it = clocks_.find(h.sender);
    if (it != clocks_.end()) {
      // The store holds this sender's pushes up to its committed clock: those it re-sends are
      // duplicates, acknowledged and not applied again (exactly once).
      auto d = durable_clocks_.find(h.sender);
      const uint32_t committed = d == durable_clocks_.end() ? 0 : d->second;
      // The sender's last acknowledged push is not in the store: it was lost, with at most every
      // step between (some may have been clock advances).
      if (clock->acked_push != clock_done && clock->acked_push > committed)
        stats_.pushes_lost += clock->acked_push - committed;
      it->second = std::max(clock->clock, committed);
    }
    release_waiting(out);
    return false;  // handled
  }
  if (min_clock_ == clock_done && std::holds_alternative<PullRequest>(message))
    return true;  // the job is over
  if (resynced_.count(h.sender)) return true;
  ++stats_.dropped_before_resync;
  return false;
}

bool ShardCore::may_answer(const PullRequest& r) const {
  if (resyncing_)
    for (const auto& [sender, clock] : clocks_)
      if (!resynced_.count(sender)) return false;
  if (!config_.fault_skip_consistency_gate && !config_.consistency.allows(r.clock, min_clock_))
    return false;
  // Read-my-writes, under every model (ASP included): a pull for step c also waits for the
  // puller's own writes of step c - 1 (BSP's bound implies it). A worker that pulls ahead of
  // its own push (pipelined pulls) would otherwise train on rows that miss its last step.
  auto it = clocks_.find(r.writer);
  return it == clocks_.end() || it->second >= r.clock;
}

ShardCore::AnsweredPull* ShardCore::remember(const PullRequest& r) {
  // Kept for the pushes of the last answered_steps_max steps (a pull in parts has an entry a
  // part), at most answered_pulls_max entries and answered_rows_max keys.
  const size_t n = r.keys.size();
  Answered& recent = answered_[r.writer];
  const bool keep = n <= config_.answered_rows_max;
  while (!recent.pulls.empty() && (recent.pulls.front().clock + answered_steps_max <= r.clock ||
                                   (keep && (recent.pulls.size() >= answered_pulls_max ||
                                             recent.rows + n > config_.answered_rows_max)))) {
    recent.rows -= recent.pulls.front().keys.size();
    recent.pulls.pop_front();
  }
  if (!keep) return nullptr;
  recent.rows += n;
  return &recent.pulls.emplace_back(
      AnsweredPull{r.clock, r.header.sender, r.header.request_id, r.keys, {}});
}

const ShardCore::AnsweredPull* ShardCore::pull_named_by(const PushRequest& r) const {
  auto it = answered_.find(r.header.sender);
  if (it == answered_.end()) return nullptr;
  for (const AnsweredPull& a : it->second.pulls)
    if (a.request_id == r.keys_of_pull && a.sender == r.header.sender && a.clock + 1 == r.clock)
      return &a;
  return nullptr;
}

const std::vector<uint64_t>* ShardCore::push_keys(const PushRequest& r) const {
  if (r.keys_of_pull == 0) return &r.keys;
  if (auto d = keys_dropped_.find(r.header.sender);
      d != keys_dropped_.end() && d->second == r.clock)
    return nullptr;
  const AnsweredPull* pull = pull_named_by(r);
  return pull ? &pull->keys : nullptr;
}

void ShardCore::answer(const PullRequest& r, Outbox& out) {
  PullReply reply{{config_.id, r.header.request_id, map_.version()}, min_clock_, {}};
  const size_t n = r.keys.size();
  std::vector<float>& values = reply.values.vec();
  values.reserve(n * width_);  // appended below: no zero-fill pass first
  if (min_clock_ == clock_done) {
    // Every sender is done: this is the evaluation of a test set after training. A pull then only
    // reads: a key without a row gets its initial value and no row, so the store keeps exactly
    // the rows training made.
    if (!store_->stable_rows() && !store_ok(store_->load(r.keys))) return;
    for (uint64_t key : r.keys) {
      if (const float* p = store_->find(key)) {
        values.insert(values.end(), p, p + width_);
      } else {
        values.resize(values.size() + width_);
        init_row(key, config_.init, {values.data() + values.size() - width_, width_});
      }
    }
    if (!store_->stable_rows() && !store_ok(store_->commit())) return;  // writes nothing
  } else if (!store_->stable_rows()) {
    remember(r);  // the keys only, for a push that leaves them out (keys_of_pull)
    // One batch against the store: read the rows in one go, write the new ones back.
    if (!store_ok(store_->load(r.keys))) return;
    for (uint64_t key : r.keys) {
      const float* p = store_->find(key);
      if (!p) p = sketch_ ? admitted_row(key) : row(key);
      if (p) {
        values.insert(values.end(), p, p + width_);
      } else {
        values.resize(values.size() + width_);
        init_row(key, config_.init, {values.data() + values.size() - width_, width_});
      }
    }
    if (!store_ok(store_->commit())) return;
  } else {
    AnsweredPull* kept = remember(r);
    std::vector<float*> unkept;
    std::vector<float*>& rows = kept ? kept->rows : unkept;
    rows.resize(n);
    // Look every row up first, prefetching index slots a few keys ahead, then copy: the
    // lookups are cache misses on a large table, and this lets several be in flight at once.
    constexpr size_t ahead = 8;
    for (size_t i = 0; i < std::min(n, ahead); ++i) store_->prefetch(r.keys[i]);
    if (!sketch_) {
      for (size_t i = 0; i < n; ++i) {
        if (i + ahead < n) store_->prefetch(r.keys[i + ahead]);
        rows[i] = row(r.keys[i]);
      }
      // The copy, fetching whole rows a few ahead (a large reply's rows do not stay cached
      // from the lookups above).
      const size_t row_bytes = width_ * sizeof(float);
      for (size_t i = 0; i < n; ++i) {
        if (i + ahead < n)
          for (size_t b = 0; b < row_bytes; b += 64)
            __builtin_prefetch(reinterpret_cast<const char*>(rows[i + ahead]) + b);
        values.insert(values.end(), rows[i], rows[i] + width_);
      }
    } else {
      // With admission, a key without a row yet gets its initial value (and no pointer).
      for (size_t i = 0; i < n; ++i) rows[i] = admitted_row(r.keys[i]);
      values.resize(n * width_);
      for (size_t i = 0; i < n; ++i) {
        std::span<float> o(values.data() + i * width_, width_);
        if (rows[i])
          std::copy(rows[i], rows[i] + width_, o.begin());
        else
          init_row(r.keys[i], config_.init, o);
      }
    }
  }
  // The rows stay fp32 here. A read after training (the test set's evaluation) gets them whole,
  // as the embedded cluster's evaluation, which reads the shards' rows directly, does.
  if (config_.wire_format == ValueFormat::bf16 && min_clock_ != clock_done) {
    for (float& v : values) v = round_bf16(v);
    reply.format = ValueFormat::bf16;
  } else if (config_.wire_format == ValueFormat::fp16 && min_clock_ != clock_done) {
    for (float& v : values) v = round_fp16(v);
    reply.format = ValueFormat::fp16;
  } else if (config_.wire_format == ValueFormat::int8 && min_clock_ != clock_done) {
    reply.scales.resize(n);
    for (size_t i = 0; i < n; ++i)
      reply.scales[i] = round_int8_row({values.data() + i * width_, width_});
    reply.format = ValueFormat::int8;
  }
  ++stats_.pulls_answered;
  stats_.rows_pulled += r.keys.size();
  out.push_back({r.header.sender, std::move(reply)});
}

bool ShardCore::advance(const MessageHeader& h, uint32_t clock, bool& duplicate, Outbox& out) {
  duplicate = false;
  auto it = clocks_.find(h.sender);
  auto refuse = [&](PsErrorCode code, std::string why) {
    out.push_back(
        {h.sender, PsError{{config_.id, h.request_id, map_.version()}, code, std::move(why)}});
    return false;
  };
  if (it == clocks_.end())
    return refuse(PsErrorCode::bad_request, fmt::format("node {} is not a sender of shard {}",
                                                        h.sender, config_.shard_index));
  uint32_t& current = it->second;
  if (clock <= current) {
    duplicate = true;
    return true;
  }
  if (clock != clock_done && clock != current + 1)
    return refuse(PsErrorCode::out_of_order,
                  fmt::format("clock {} from node {} skips steps (shard is at {})", clock, h.sender,
                              current));
  current = clock;
  return true;
}

void ShardCore::on_push(const PushRequest& r, Outbox& out) {
  take_push(r, nullptr, out);
}

void ShardCore::on_filled_push(const PushRequest& r, Outbox& out) {
  if (!error_.ok()) return;
  if (resyncing_ && !admit_while_resyncing(r, out)) return;
  take_push(r, &r.keys, out);
}

void ShardCore::take_push(const PushRequest& r, const std::vector<uint64_t>* filled, Outbox& out) {
  if (stale(r.header, out)) return;
  const NodeId sender = r.header.sender;
  if (applied_already(sender, r.clock)) {
    // Acknowledged as its first copy was (its keys, left out or not, are not needed), and
    // applied no more.
    ++(r.more ? stats_.push_parts_duplicate : stats_.pushes_duplicate);
    out.push_back({sender, PushAck{{config_.id, r.header.request_id, map_.version()}}});
    return;
  }
  if (r.keys_of_pull == 0) {
    keys_dropped_.erase(sender);  // the sender moved on, or sends the push again with its keys
    return apply_push(r, out);
  }
  if (auto d = keys_dropped_.find(sender); d != keys_dropped_.end()) {
    if (d->second == r.clock) {  // the rest of a push refused for its keys: it comes again
      ++stats_.push_parts_dropped;
      return;
    }
    keys_dropped_.erase(d);
  }
  const AnsweredPull* pull = filled ? nullptr : pull_named_by(r);
  if (!filled && !pull) {
    parts_.erase(sender);
    if (clocks_.count(sender)) keys_dropped_[sender] = r.clock;  // nothing kept for a stranger
    ++stats_.push_keys_unknown;
    out.push_back(
        {sender,
         PsError{{config_.id, r.header.request_id, map_.version()},
                 PsErrorCode::keys_unknown,
                 fmt::format("the push of step {} from node {} names the keys of pull {}, which "
                             "shard {} does not hold: send the push with its keys",
                             r.clock, sender, r.keys_of_pull, config_.shard_index)}});
    return;
  }
  ++stats_.push_parts_keys_left_out;
  // The same message with the pull's keys (the gradients are shared, not copied).
  apply_push(PushRequest{r.header, r.clock, filled ? *filled : pull->keys, r.grads, r.format,
                         r.more, r.scales, r.keys_of_pull},
             out);
}

void ShardCore::apply_push(const PushRequest& r, Outbox& out) {
  const NodeId sender = r.header.sender;
  auto refuse = [&](std::string why) {
    parts_.erase(sender);  // a push refused in any part is refused whole
    out.push_back({sender, PsError{{config_.id, r.header.request_id, map_.version()},
                                   PsErrorCode::bad_request,
                                   std::move(why)}});
  };
  if (r.grads.size() != r.keys.size() * width_)
    return refuse(fmt::format("push has {} keys but {} gradient floats (width {})", r.keys.size(),
                              r.grads.size(), width_));
  // A client pushes in parts of at most part_bytes_max, keys counted where it leaves them out
  // (KvClient): a larger part is a lie whose forward to the backups, which carries its keys, no
  // message could carry.
  if (const size_t most = part_keys(part_bytes_max, width_, r.format); r.keys.size() > most) {
    ++stats_.messages_refused;
    return refuse(
        fmt::format("a push part of {} keys from node {}: with its keys it would pass "
                    "the {} bytes of a part ({} keys at most)",
                    r.keys.size(), sender, part_bytes_max, most));
  }
  // A gradient that is not finite would make its row NaN for good: the push is refused whole,
  // before its clock counts, naming the key (the sender's client fails).
  if (const size_t bad = first_not_finite({r.grads.data(), r.grads.size()}); bad < r.grads.size()) {
    ++stats_.pushes_not_finite;
    return refuse(fmt::format(
        "the push of step {} from node {} holds a gradient of {} for key {}: nothing of it was "
        "applied",
        r.clock, sender, r.grads.data()[bad], r.keys[bad / width_]));
  }
  auto open = parts_.find(sender);
  if (open != parts_.end() && !open->second.parts.empty() &&
      r.header.request_id <= open->second.parts.back().header.request_id) {
    ++stats_.push_parts_duplicate;  // a copy of a part kept already (ids increase in a push)
    return;
  }
  if (open != parts_.end() && open->second.clock != r.clock)
    return refuse(
        fmt::format("a part of the push of step {} from node {} came while its push of "
                    "step {} in parts was not finished",
                    r.clock, sender, open->second.clock));
  if (r.keys_of_pull != 0 && open != parts_.end() && open->second.pulls_named.count(r.keys_of_pull))
    return refuse(fmt::format("the push of step {} from node {} names the keys of pull {} twice",
                              r.clock, sender, r.keys_of_pull));
  if (r.more) {
    // A part: checked now, kept (a received part is a view of its message: not copied), and
    // applied with the last one, so that a push is applied whole and once.
    auto clock = clocks_.find(sender);
    if (clock == clocks_.end())
      return refuse(
          fmt::format("node {} is not a sender of shard {}", sender, config_.shard_index));
    if (!owns_all(r.header, r.keys, out)) return (void)parts_.erase(sender);
    PushParts& parts = parts_[sender];
    parts.clock = r.clock;
    parts.bytes += r.keys.size() * sizeof(uint64_t) + r.grads.size() * sizeof(float) +
                   shard_push_part_overhead_bytes;
    if (parts.bytes > shard_push_parts_bytes_max)
      return refuse(fmt::format("the push of step {} from node {} in parts is over {} bytes",
                                r.clock, sender, shard_push_parts_bytes_max));
    parts.parts.push_back(r);
    if (r.keys_of_pull != 0) parts.pulls_named.insert(r.keys_of_pull);
    ++stats_.push_parts;
    out.push_back({sender, PushAck{{config_.id, r.header.request_id, map_.version()}}});
    return;
  }
  std::vector<PushRequest> earlier;  // the push's other parts, in order
  if (open != parts_.end()) {
    earlier = std::move(open->second.parts);
    parts_.erase(open);
  }
  // The rows of this sender's pull (or pull part) for the same step, when the keys are the same:
  // they were checked to be this shard's when that pull was answered, so they are not checked
  // again (the earlier parts were checked as they came).
  auto pulled_rows = [&](const PushRequest& p) -> std::vector<float*>* {
    auto it = store_->stable_rows() ? answered_.find(sender) : answered_.end();
    if (it == answered_.end()) return nullptr;
    for (AnsweredPull& a : it->second.pulls)
      if (a.clock + 1 == p.clock && a.rows.size() == p.keys.size() && a.keys == p.keys)
        return &a.rows;
    return nullptr;
  };
  std::vector<float*>* rows = pulled_rows(r);
  if (!rows && !owns_all(r.header, r.keys, out)) return;
  bool duplicate = false;
  if (!advance(r.header, r.clock, duplicate, out)) return;
  // take_push acknowledged a step applied already before anything else.
  COLONY_ASSERT(!duplicate, "the push of step {} from node {} was applied already", r.clock,
                sender);
  // Every part with the rows of its pull, or nullptr: those are looked up, in one batch
  // against the store.
  std::vector<std::pair<const PushRequest*, std::vector<float*>*>> all;
  for (const PushRequest& p : earlier) all.emplace_back(&p, pulled_rows(p));
  all.emplace_back(&r, rows);
  const bool batch = std::any_of(all.begin(), all.end(), [](auto& a) { return !a.second; });
  if (batch) {
    std::vector<uint64_t> joined;
    if (!earlier.empty())
      for (const auto& [p, pulled] : all)
        if (!pulled) joined.insert(joined.end(), p->keys.begin(), p->keys.end());
    const std::span<const uint64_t> keys = earlier.empty() ? r.keys : joined;
    // Without admission every key gets a row, handed out with the load (the tiered store then
    // looks each key up once). With it, a key with no row is not given one (existing_row, below).
    if (!store_ok(sketch_ ? store_->load(keys) : store_->load_for_write(keys, write_rows_))) return;
  }
  size_t written = 0;  // the next of write_rows_
  // The rows to update, fetched whole a few ahead for writing: a large push's rows do not stay
  // cached from its pull or its load, and the optimizer reads and writes all of each (and the
  // clock stamp after it, with eviction).
  const size_t row_bytes = (width_ + state_ + stamp_) * sizeof(float);
  auto fetch = [row_bytes](const float* row) {
    const char* first = reinterpret_cast<const char*>(row);
    for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(first + b, 1);
    __builtin_prefetch(first + row_bytes - 1, 1);  // the last line, for a row not aligned to one
  };
  for (const auto& [p, pulled] : all) {
    constexpr size_t ahead = 8;  // index slots prefetched ahead of the lookups, as answer()
    for (size_t i = 0; i < p->keys.size(); ++i) {
      float* row_of = nullptr;
      if (pulled) {
        // (A pull's row is null for a key not admitted yet: nothing to fetch.)
        if (i + ahead < pulled->size())
          if (const float* ahead_row = (*pulled)[i + ahead]) fetch(ahead_row);
        row_of = (*pulled)[i];
      } else if (!sketch_) {
        if (written + ahead < write_rows_.size()) fetch(write_rows_[written + ahead].first);
        row_of = initialised(p->keys[i], write_rows_[written++]);
      } else {
        if (i + ahead < p->keys.size()) store_->prefetch(p->keys[i + ahead]);
        row_of = existing_row(p->keys[i]);
      }
      if (!row_of) {
        ++stats_.updates_dropped;  // not admitted: the key has no row to update
        continue;
      }
      // An update that would overflow the row is not made: it keeps its last finite value.
      if (!optimizer_->apply_finite({row_of, width_}, {row_of + width_, state_},
                                    {&p->grads[i * width_], width_}, saved_row_)) {
        ++stats_.updates_not_finite;
        last_row_not_finite_ = {p->keys[i], sender, r.clock};
        continue;
      }
      if (stamp_) row_of[width_ + state_] = float(r.clock);
    }
    stats_.rows_pushed += p->keys.size();
  }
  COLONY_ASSERT(!batch || sketch_ || written == write_rows_.size(),
                "{} of the {} rows loaded for writing were used", written, write_rows_.size());
  if (batch) {
    store_->stage_clock(sender, r.clock);  // in the same atomic batch as the rows
    if (!store_ok(store_->commit())) return;
  } else {
    ++stats_.pushes_reusing_pull_rows;
  }
  ++stats_.pushes_applied;
  out.push_back({sender, PushAck{{config_.id, r.header.request_id, map_.version()}}});
  release_waiting(out);
}

bool ShardCore::resync_over_parts(const ClockAdvance& r) {
  auto kept = parts_.find(r.header.sender);
  if (kept == parts_.end()) return true;
  // (A backup sees the clock its primary set: clock_done only for a sender done, which keeps no
  // parts, so both decide alike.)
  if (r.clock != clock_done && !kept->second.parts.empty() &&
      r.header.request_id < kept->second.parts.front().header.request_id)
    return false;
  parts_.erase(kept);
  return true;
}

void ShardCore::follow_resync(const ClockAdvance& r, Outbox& out) {
  if (stale(r.header, out)) return;
  auto it = clocks_.find(r.header.sender);
  if (it == clocks_.end()) return;
  if (!resync_over_parts(r)) return;
  keys_dropped_.erase(r.header.sender);
  it->second = std::max(it->second, r.clock);
  release_waiting(out);
}

void ShardCore::on_clock(const ClockAdvance& r, Outbox& out) {
  if (stale(r.header, out)) return;
  // A late copy (a resync sets the clock anew: it goes on).
  if (!r.resync && applied_already(r.header.sender, r.clock)) return;
  if (r.resync && !resync_over_parts(r)) return;
  if (parts_.erase(r.header.sender)) {
    out.push_back({r.header.sender,
                   PsError{{config_.id, r.header.request_id, map_.version()},
                           PsErrorCode::bad_request,
                           fmt::format("a clock advance from node {} came while its push in parts "
                                       "was not finished: the push is dropped",
                                       r.header.sender)}});
    // A sender done (finished, or declared lost by the coordinator) is done all the same: the
    // slowest clock must not wait for it.
    if (r.clock != clock_done) return;
  }
  // A resync from a client that only pulls, to a shard that never restarted: nothing to set.
  if (r.resync && !clocks_.count(r.header.sender)) return;
  bool duplicate = false;
  if (!advance(r.header, r.clock, duplicate, out)) return;
  if (!duplicate) {
    // Committed like a push's clock, so that a restart knows the step was acknowledged.
    store_->stage_clock(r.header.sender, r.clock);
    if (!store_ok(store_->commit())) return;
  }
  release_waiting(out);
}

void ShardCore::release_waiting(Outbox& out) {
  uint32_t m = clock_done;
  bool every_sender_resynced = true;
  // A sender a restarted shard has not heard from since is at an unknown clock: count it as 0.
  for (const auto& [sender, clock] : clocks_) {
    const bool unknown = resyncing_ && !resynced_.count(sender);
    every_sender_resynced = every_sender_resynced && !unknown;
    m = std::min(m, unknown ? 0u : clock);
  }
  min_clock_ = m;
  senders_resynced_ = every_sender_resynced;
  // At the job's end (every sender done) there is no step boundary to name: no checkpoint.
  const uint32_t every = config_.checkpoint_every;
  const bool resync_done = skip_cut_after_resync_ && every_sender_resynced;
  if (every && m != clock_done && m / every * every > last_checkpoint_) {
    last_checkpoint_ = m / every * every;
    if (!resync_done) checkpoint_due_ = last_checkpoint_;
  }
  if (resync_done) skip_cut_after_resync_ = false;
  if (config_.evict_after && m != clock_done && m >= next_eviction_scan_) {
    evict_stale_rows();
    next_eviction_scan_ = m + std::max<uint32_t>(1, config_.evict_after / 2);
  }
  if (waiting_.empty()) return;
  // Answer, in arrival order, every waiting pull the clocks now allow.
  std::deque<PullRequest> still;
  for (PullRequest& r : waiting_) {
    if (!may_answer(r)) {
      still.push_back(std::move(r));
      continue;
    }
    answer(r, out);
    auto held = held_.find(r.header.sender);
    COLONY_ASSERT(held != held_.end() && held->second.pulls > 0, "a pull of node {} was not held",
                  r.header.sender);
    held->second.keys -= r.keys.size();
    if (--held->second.pulls == 0) held_.erase(held);
  }
  waiting_.swap(still);
}

bool ShardCore::store_ok(Status s) {
  if (s.ok()) return true;
  if (!error_.ok()) return false;
  std::string m = fmt::format("shard {}: {}", config_.shard_index, s.message());
  switch (s.code()) {
    case Status::Code::invalid_input:
      error_ = Status::invalid_input(std::move(m));
      break;
    case Status::Code::not_found:
      error_ = Status::not_found(std::move(m));
      break;
    case Status::Code::io_error:
      error_ = Status::io_error(std::move(m));
      break;
    default:
      error_ = Status::internal(std::move(m));
      break;
  }
  return false;
}

Status ShardCore::row_values(std::span<const uint64_t> keys, std::span<float> out) {
  COLONY_ASSERT(out.size() == keys.size() * width_, "out={} keys={} width={}", out.size(),
                keys.size(), width_);
  if (!error_.ok()) return error_;
  if (!store_ok(store_->load(keys))) return error_;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::span<float> o = out.subspan(i * width_, width_);
    if (const float* r = store_->find(keys[i]))
      std::copy(r, r + width_, o.begin());
    else
      init_row(keys[i], config_.init, o);
  }
  if (!store_ok(store_->commit())) return error_;
  return {};
}

void ShardCore::evict_stale_rows() {
  // Clocks are exact in a float up to 2^24 steps; beyond, rows look a few steps older.
  const float oldest_kept = float(min_clock_) - float(config_.evict_after);
  evict_keys_.clear();
  if (!store_ok(store_->for_each([&](uint64_t key, const float* row) {
        if (row[width_ + state_] < oldest_kept) evict_keys_.push_back(key);
      })))
    return;
  if (evict_keys_.empty()) return;
  if (!store_ok(store_->erase(evict_keys_))) return;
  stats_.rows_evicted += evict_keys_.size();
  // Pulls answered earlier may hold pointers to evicted rows: their pushes look rows up again
  // (the pulls' keys stay, for pushes that leave them out).
  for (auto& [writer, recent] : answered_)
    for (AnsweredPull& a : recent.pulls) a.rows.clear();
}

Expected<std::unique_ptr<ShardCore>> ShardCore::replica(std::unique_ptr<RowStore> store) const {
  return from_replica_state(config_, std::move(store), replica_state());
}

ReplicaState ShardCore::replica_state() const {
  ReplicaState s;
  s.clocks = sender_clocks();
  std::vector<NodeId> pending;
  for (const auto& [sender, p] : parts_) pending.push_back(sender);
  std::sort(pending.begin(), pending.end());
  for (NodeId sender : pending)
    for (const PushRequest& p : parts_.at(sender).parts) s.parts.push_back(p);
  s.keys_dropped.assign(keys_dropped_.begin(), keys_dropped_.end());
  std::sort(s.keys_dropped.begin(), s.keys_dropped.end());
  s.last_checkpoint = last_checkpoint_;
  return s;
}

Expected<std::unique_ptr<ShardCore>> ShardCore::from_replica_state(const ShardConfig& config,
                                                                   std::unique_ptr<RowStore> store,
                                                                   const ReplicaState& state) {
  auto refuse = [&](const std::string& why) {
    return Status::invalid_input(
        fmt::format("the copy of shard {} for a new backup: {}", config.shard_index, why));
  };
  if (config.admit_after > 1 || config.evict_after > 0)
    return refuse("a replicated shard has no feature admission and no stale-row eviction");
  auto made = make(config, std::move(store));
  if (!made) return made.status();
  ShardCore& c = **made;
  if (state.clocks.size() != c.clocks_.size())
    return refuse(fmt::format("it names {} senders' clocks; the shard has {} senders",
                              state.clocks.size(), c.clocks_.size()));
  std::unordered_set<NodeId> seen;
  for (const auto& [node, clock] : state.clocks) {
    auto it = c.clocks_.find(node);
    if (it == c.clocks_.end()) return refuse(fmt::format("node {} is not a sender", node));
    if (!seen.insert(node).second) return refuse(fmt::format("node {}'s clock comes twice", node));
    it->second = clock;
  }
  uint32_t m = clock_done;
  for (const auto& [sender, clock] : c.clocks_) m = std::min(m, clock);
  c.min_clock_ = m;
  // Each part is taken as the primary's core took it (the same checks), and must be kept.
  Outbox replies;
  for (size_t i = 0; i < state.parts.size(); ++i) {
    const PushRequest& p = state.parts[i];
    const NodeId sender = p.header.sender;
    auto clock = c.clocks_.find(sender);
    const std::string part = fmt::format("part {} (from node {}, step {})", i, sender, p.clock);
    if (!p.more) return refuse(part + " is the last of its push");
    if (clock == c.clocks_.end()) return refuse(part + " is not from a sender");
    if (p.header.map_version != c.map_.version())
      return refuse(fmt::format("{} was sent under shard map version {}; the shard's is {}", part,
                                p.header.map_version, c.map_.version()));
    if (p.clock <= clock->second)
      return refuse(
          fmt::format("{} is of a step its sender's clock ({}) has passed", part, clock->second));
    const size_t before = c.parts_.count(sender) ? c.parts_.at(sender).parts.size() : 0;
    replies.clear();
    c.take_push(p, &p.keys, replies);
    const size_t after = c.parts_.count(sender) ? c.parts_.at(sender).parts.size() : 0;
    if (after == before + 1) continue;
    for (const Outgoing& o : replies)
      if (const auto* e = std::get_if<PsError>(&o.message))
        return refuse(fmt::format("{}: {}", part, e->message));
    return refuse(part + " repeats one before it (its request id is not above theirs)");
  }
  c.stats_ = {};  // the parts were counted where they came
  for (const auto& [sender, clock] : state.keys_dropped) {
    if (!c.clocks_.count(sender))
      return refuse(fmt::format("node {}, refused for keys left out, is not a sender", sender));
    // The primary's core forgets a sender's kept parts when it refuses its push, and the refusal
    // when it keeps a part again.
    if (c.parts_.count(sender))
      return refuse(
          fmt::format("node {} is refused for keys left out and has parts kept as well", sender));
    if (!c.keys_dropped_.emplace(sender, clock).second)
      return refuse(fmt::format("node {} is refused for keys left out twice", sender));
  }
  const uint32_t every = config.checkpoint_every;
  if (state.last_checkpoint != 0 && (every == 0 || state.last_checkpoint % every != 0))
    return refuse(fmt::format("its last checkpoint, step {}, is not a checkpoint step",
                              state.last_checkpoint));
  c.last_checkpoint_ = state.last_checkpoint;
  return made;
}

std::vector<std::pair<NodeId, uint32_t>> ShardCore::sender_clocks() const {
  std::vector<std::pair<NodeId, uint32_t>> v(clocks_.begin(), clocks_.end());
  std::sort(v.begin(), v.end());
  return v;
}

Status ShardCore::resume_clocks(const std::vector<std::pair<NodeId, uint32_t>>& clocks) {
  for (const auto& [node, clock] : clocks) {
    auto it = clocks_.find(NodeId(node));
    if (it == clocks_.end())
      return Status::invalid_input(
          fmt::format("node {} is not a sender of shard {}", node, config_.shard_index));
    it->second = clock;
  }
  Outbox none;
  release_waiting(none);  // recomputes the minimum; nothing waits yet
  COLONY_ASSERT(none.empty());
  checkpoint_due_.reset();
  last_checkpoint_ = config_.checkpoint_every && min_clock_ != clock_done
                         ? min_clock_ / config_.checkpoint_every * config_.checkpoint_every
                         : 0;
  return {};
}

void ShardCore::row_value(uint64_t key, std::span<float> out) {
  const uint64_t keys[1] = {key};
  const Status s = row_values(keys, out);
  COLONY_ASSERT(s.ok(), "{}", s.message());
}

}  // namespace colony
