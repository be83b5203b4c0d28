#include "storage/rocksdb_store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/hash.h"

namespace colony {

// ---------------------------------------------------------------------------------------------
// RocksRowStore

RocksRowStore::RocksRowStore(std::unique_ptr<RocksTable> table)
    : table_(std::move(table)), arena_(table_->row_floats()) {}

Status RocksRowStore::load(std::span<const uint64_t> keys) {
  keys_buf_.clear();
  for (uint64_t k : keys)
    if (index_.find(k) == index_.end()) keys_buf_.push_back(k);
  std::sort(keys_buf_.begin(), keys_buf_.end());
  keys_buf_.erase(std::unique(keys_buf_.begin(), keys_buf_.end()), keys_buf_.end());
  if (keys_buf_.empty()) return {};
  if (Status s = table_->multi_get(keys_buf_, rows_buf_, found_buf_); !s.ok()) {
    if (error_.ok()) error_ = s;
    return s;
  }
  const size_t rf = table_->row_floats();
  for (size_t i = 0; i < keys_buf_.size(); ++i) {
    const uint32_t id = uint32_t(staged_.size());
    const bool on_disk = found_buf_[i] != 0;
    staged_.push_back({keys_buf_[i], on_disk, false, on_disk});
    index_.emplace(keys_buf_[i], id);
    if (on_disk) {
      std::memcpy(arena_.row(id), &rows_buf_[i * rf], rf * sizeof(float));
      ++stats_.reads;
    }
  }
  return {};
}

RocksRowStore::Staged* RocksRowStore::stage(uint64_t key, uint32_t& id) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    const uint64_t one[1] = {key};
    if (Status s = load(one); !s.ok()) {
      // Hand out a scratch row; the next commit fails with the error.
      id = uint32_t(staged_.size());
      staged_.push_back({key, false, false, true});
      index_.emplace(key, id);
      std::memset(arena_.row(id), 0, table_->row_floats() * sizeof(float));
      return &staged_[id];
    }
    it = index_.find(key);
  }
  id = it->second;
  return &staged_[id];
}

float* RocksRowStore::find(uint64_t key) {
  uint32_t id = 0;
  Staged* s = stage(key, id);
  return s->exists ? arena_.row(id) : nullptr;
}

std::pair<float*, bool> RocksRowStore::find_or_insert(uint64_t key) {
  uint32_t id = 0;
  Staged* s = stage(key, id);
  s->dirty = true;
  float* row = arena_.row(id);
  if (s->exists) return {row, false};
  s->exists = true;
  ++created_;
  std::memset(row, 0, table_->row_floats() * sizeof(float));
  return {row, true};
}

Status RocksRowStore::commit() {
  Status result = error_;
  if (result.ok()) {
    const size_t rf = table_->row_floats();
    keys_buf_.clear();
    rows_buf_.clear();
    for (uint32_t id = 0; id < staged_.size(); ++id) {
      if (!staged_[id].dirty) continue;
      keys_buf_.push_back(staged_[id].key);
      const float* r = arena_.row(id);
      rows_buf_.insert(rows_buf_.end(), r, r + rf);
    }
    result = table_->write(keys_buf_, rows_buf_, created_, staged_clocks_);
    if (result.ok() && !keys_buf_.empty()) {
      stats_.writes += keys_buf_.size();
      ++stats_.write_batches;
    }
  }
  index_.clear();
  staged_.clear();
  staged_clocks_.clear();
  created_ = 0;
  error_ = Status();
  return result;
}

Status RocksRowStore::for_each(const std::function<void(uint64_t, const float*)>& f) const {
  return table_->for_each_in_range(0, UINT64_MAX, f);
  // The key UINT64_MAX itself: no reader makes it (its field, 255, is reserved).
}

namespace {
// Erases from `table` the rows of `known` plus those of `maybe` it holds (one MultiGet), each key
// once. `rows` and `found` are scratch buffers.
Status erase_held(RocksTable& table, std::vector<uint64_t>& known, std::span<const uint64_t> maybe,
                  std::vector<float>& rows, std::vector<uint8_t>& found) {
  if (!maybe.empty()) {
    if (Status s = table.multi_get(maybe, rows, found); !s.ok()) return s;
    for (size_t i = 0; i < maybe.size(); ++i)
      if (found[i]) known.push_back(maybe[i]);
  }
  std::sort(known.begin(), known.end());
  known.erase(std::unique(known.begin(), known.end()), known.end());
  return table.erase(known);
}
}  // namespace

Status RocksRowStore::erase(std::span<const uint64_t> keys) {
  COLONY_ASSERT(staged_.empty(), "erase inside a batch");
  keys_buf_.clear();
  return erase_held(*table_, keys_buf_, keys, rows_buf_, found_buf_);
}

StoreStats RocksRowStore::stats() const {
  StoreStats s = stats_;
  s.rows = size();
  s.memory_bytes = memory_bytes();
  return s;
}

// ---------------------------------------------------------------------------------------------
// TieredRowStore

Expected<EvictionPolicy> parse_eviction_policy(const std::string& text) {
  if (text == "lru") return EvictionPolicy::lru;
  if (text == "lfu") return EvictionPolicy::lfu;
  return Status::invalid_input("eviction policy \"" + text + "\" is not one of lru, lfu");
}

const char* to_string(EvictionPolicy policy) {
  return policy == EvictionPolicy::lru ? "lru" : "lfu";
}

namespace {
// Memory per cached row beyond its floats: the slot and the hash index entry.
constexpr size_t cached_row_overhead_bytes = 64;
// Cached rows looked at to choose each victim (Redis samples 5 by default).
constexpr int eviction_samples = 8;
}  // namespace

TieredRowStore::TieredRowStore(std::unique_ptr<RocksTable> table, const TieredOptions& options)
    : table_(std::move(table)),
      options_(options),
      capacity_(std::max<size_t>(1, options.cache_bytes / (table_->row_floats() * sizeof(float) +
                                                           cached_row_overhead_bytes))),
      arena_(table_->row_floats()),
      sketch_(options.policy == EvictionPolicy::lfu ? std::make_unique<FrequencySketch>(capacity_)
                                                    : nullptr),
      rng_(options.seed),
      clocks_(table_->sender_clocks()) {}

namespace {
// `keys` without repeats, in key order, into `out`.
void sorted_unique(std::span<const uint64_t> keys, std::vector<uint64_t>& out) {
  out.assign(keys.begin(), keys.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}
}  // namespace

// The read-ahead thread: takes lists of keys in order and reads each with one MultiGet
// (RocksTable::multi_get may run beside the owner's calls). Only this struct's fields are
// shared, under `mu`.
struct TieredRowStore::Reader {
  struct Read {
    std::vector<uint64_t> keys;
    std::vector<float> rows;
    std::vector<uint8_t> found;
    Status status;
  };
  explicit Reader(const RocksTable& table) : thread([this, &table] { run(table); }) {}
  ~Reader() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  void run(const RocksTable& table) {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (stop) return;
      Read r{std::move(queue.front()), {}, {}, {}};
      queue.pop_front();
      busy = true;
      lock.unlock();
      r.status = table.multi_get(r.keys, r.rows, r.found);
      lock.lock();
      done.push_back(std::move(r));
      busy = false;
      cv.notify_all();
    }
  }

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<uint64_t>> queue;  // handed out, not started
  std::vector<Read> done;                   // read, not installed
  bool busy = false;                        // a read is under way
  bool stop = false;
  std::thread thread;  // last: starts once the fields above exist
};

TieredRowStore::~TieredRowStore() {
  reader_.reset();
}

void TieredRowStore::read_ahead(std::span<const uint64_t> keys) {
  if (!options_.read_ahead) return;
  sorted_unique(keys, hint_buf_);
  if (awaited_.size() + hint_buf_.size() > capacity_ / 2) return;  // past the window's bound
  std::vector<uint64_t> missing;
  for (uint64_t k : hint_buf_) {
    awaited_[k] = batch_;
    if (!index_.contains(k) && !reading_.count(k) && !known_absent_.count(k)) {
      missing.push_back(k);
      reading_.insert(k);
    }
  }
  if (missing.empty()) return;
  if (!reader_) reader_ = std::make_unique<Reader>(*table_);
  {
    std::lock_guard lock(reader_->mu);
    reader_->queue.push_back(std::move(missing));
  }
  reader_->cv.notify_all();
}

void TieredRowStore::take_read_ahead(bool all) {
  if (!reader_ || reading_.empty()) return;
  std::vector<Reader::Read> done;
  {
    std::unique_lock lock(reader_->mu);
    if (all) reader_->cv.wait(lock, [&] { return reader_->queue.empty() && !reader_->busy; });
    done.swap(reader_->done);
  }
  const size_t rf = table_->row_floats();
  for (Reader::Read& r : done) {
    for (size_t i = 0; i < r.keys.size(); ++i) {
      const uint64_t k = r.keys[i];
      reading_.erase(k);
      // A key being read is not cached (load() waits for its read), so the read is its row.
      COLONY_ASSERT(!index_.contains(k), "key {:#x} was cached while being read ahead", k);
      if (!r.status.ok()) continue;  // load() reads it again and reports the error
      if (r.found[i]) {
        ++stats_.read_ahead_rows;
        insert(k, &r.rows[i * rf], true);
      } else {
        known_absent_.insert(k);
      }
    }
  }
}

void TieredRowStore::expire_hints() {
  next_expiry_ = batch_ + awaited_expiry_batches;
  if (batch_ < awaited_expiry_batches) return;
  const uint64_t oldest = batch_ - awaited_expiry_batches;
  for (auto it = awaited_.begin(); it != awaited_.end();) {
    if (it->second < oldest) {
      known_absent_.erase(it->first);
      it = awaited_.erase(it);
    } else {
      ++it;
    }
  }
}

void RowArena::grow(uint32_t id) {
  while ((id >> chunk_log2) >= chunks_.size())
    chunks_.emplace_back(new float[(size_t{1} << chunk_log2) * row_floats_]);
}

Status TieredRowStore::attach_log(std::unique_ptr<PushLog> log, bool keep) {
  COLONY_ASSERT(!log_ && index_.empty(), "attach_log after the store was used");
  const size_t rf = table_->row_floats();
  PushLog::Replayed replayed;
  Status s = log->replay(
      [&](const PushLog::Record& r) -> Status {
        for (auto [sender, clock] : r.clocks) clocks_[sender] = clock;
        if (r.kind == PushLog::Kind::erase) return erase(r.keys);
        if (Status st = load(r.keys); !st.ok()) return st;
        for (size_t i = 0; i < r.keys.size(); ++i)
          std::memcpy(find_or_insert(r.keys[i]).first, &r.rows[i * rf], rf * sizeof(float));
        return commit();
      },
      replayed);
  stats_.log_records_replayed = replayed.records;
  stats_.log_bytes_dropped = replayed.dropped_bytes;
  if (s.ok()) s = write_back();
  if (!s.ok()) return s.with_context("replaying the push log " + log->path());
  if (!keep) {
    const std::string path = log->path();
    log.reset();
    if (::unlink(path.c_str()) != 0)
      return Status::io_error(
          fmt::format("{}: cannot remove it after replaying it: {}", path, std::strerror(errno)));
    return {};
  }
  if (Status st = log->truncate(); !st.ok()) return st;
  log_ = std::move(log);
  return {};
}

size_t TieredRowStore::memory_bytes() const {
  return index_.size() * (table_->row_floats() * sizeof(float) + cached_row_overhead_bytes) +
         (sketch_ ? sketch_->memory_bytes() : 0) + window_.size() * sizeof(window_.front()) +
         table_->buffer_bytes();
}

float* TieredRowStore::touch(uint32_t id, bool write) {
  Slot& s = slots_[id];
  const bool first_this_batch = s.last_used != batch_;
  s.last_used = batch_;
  if (write && !s.dirty) {
    s.dirty = true;
    ++dirty_;
  }
  if (options_.policy == EvictionPolicy::lfu && first_this_batch) {
    // The batches that used the key lately, counted while it was cached and before; when the
    // sketch halves its counts, the cached rows' copies are halved too.
    const FrequencySketch::Added a = sketch_->add(s.key);
    if (a.halved)
      for (Slot& x : slots_) x.freq >>= 1;
    s.freq = a.count;
  }
  return arena_.row(id);
}

uint32_t TieredRowStore::insert(uint64_t key, const float* row, bool on_disk) {
  uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = uint32_t(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[id];
  s = Slot{key, 0, 0, true, false, on_disk};
  const size_t rf = table_->row_floats();
  if (row)
    std::memcpy(arena_.row(id), row, rf * sizeof(float));
  else
    std::memset(arena_.row(id), 0, rf * sizeof(float));
  index_.insert(key, id);
  if (!on_disk) ++cache_only_;
  if (options_.policy == EvictionPolicy::lfu) {
    s.fresh = true;
    ++fresh_;
    window_.emplace_back(id, key);
    if (window_.size() > 2 * fresh_ + 64)  // mostly rows erased since: drop them
      std::erase_if(window_, [&](const std::pair<uint32_t, uint64_t>& e) {
        const Slot& x = slots_[e.first];
        return !x.used || !x.fresh || x.key != e.second;
      });
  }
  return id;
}

Status TieredRowStore::load(std::span<const uint64_t> keys) {
  return load_batch(keys, false);
}

Status TieredRowStore::load_for_write(std::span<const uint64_t> keys,
                                      std::vector<std::pair<float*, bool>>& rows) {
  if (Status s = load_batch(keys, true); !s.ok()) return s;
  rows.resize(keys.size());
  const uint64_t batch = batch_;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t id = ids_buf_[i];
    // A cached row was touched for writing by the load; the others, read from disk by it or
    // known to be absent, take find_or_insert's way (which then reads nothing).
    rows[i] = id != KeyIndex::missing ? std::pair{arena_.row(uint32_t(id)), false}
                                      : find_or_insert(keys[i]);
  }
  COLONY_ASSERT(batch_ == batch, "load_for_write loaded again while handing out rows");
  return {};
}

Status TieredRowStore::load_batch(std::span<const uint64_t> keys, bool write) {
  ++batch_;
  absent_.clear();
  keys_buf_.clear();
  if (!reading_.empty()) {
    take_read_ahead(false);
    bool waits = false;
    for (uint64_t k : keys) waits = waits || reading_.count(k);
    if (waits) take_read_ahead(true);
  }
  if (!awaited_.empty()) {
    for (uint64_t k : keys) awaited_.erase(k);
    if (batch_ >= next_expiry_) expire_hints();
  }
  // Each key's lookup is a few cache misses on a large cache: its index slot, then its slot's
  // bookkeeping and row, and under lfu its block of the sketch. One pass, pipelined: key i + 2A's
  // index slot is prefetched, key i + A looked up and what its touch (and the caller) will read
  // prefetched, and key i touched.
  constexpr size_t ahead = 8;
  const size_t n = keys.size();
  ids_buf_.resize(n);
  const auto look_up = [&](size_t j) {
    const uint64_t id = ids_buf_[j] = index_.get(keys[j]);
    if (id == KeyIndex::missing) return;
    __builtin_prefetch(&slots_[id]);
    __builtin_prefetch(arena_.row(uint32_t(id)));
    if (sketch_) sketch_->prefetch(keys[j]);
  };
  for (size_t i = 0; i < std::min(n, 2 * ahead); ++i) index_.prefetch(keys[i]);
  for (size_t i = 0; i < std::min(n, ahead); ++i) look_up(i);
  for (size_t i = 0; i < n; ++i) {
    if (i + 2 * ahead < n) index_.prefetch(keys[i + 2 * ahead]);
    if (i + ahead < n) look_up(i + ahead);
    const uint64_t k = keys[i];
    const uint64_t id = ids_buf_[i];
    if (id == KeyIndex::missing) {
      if (!known_absent_.empty() && known_absent_.erase(k)) {
        ++stats_.cache_misses;  // a new row: read ahead, found on disk by no one
        absent_.insert(k);
        continue;
      }
      keys_buf_.push_back(k);
    } else {
      // Count the batch's use now, so that eviction sees it even if the caller only reads.
      ++stats_.cache_hits;
      if (write)
        written(k, uint32_t(id));
      else
        touch(uint32_t(id), false);
    }
  }
  std::sort(keys_buf_.begin(), keys_buf_.end());
  keys_buf_.erase(std::unique(keys_buf_.begin(), keys_buf_.end()), keys_buf_.end());
  if (keys_buf_.empty()) return {};
  if (Status s = table_->multi_get(keys_buf_, rows_buf_, found_buf_); !s.ok()) {
    if (error_.ok()) error_ = s;
    return s;
  }
  const size_t rf = table_->row_floats();
  for (size_t i = 0; i < keys_buf_.size(); ++i) {
    ++stats_.cache_misses;
    if (found_buf_[i]) {
      ++stats_.reads;
      touch(insert(keys_buf_[i], &rows_buf_[i * rf], true), false);
    } else {
      absent_.insert(keys_buf_[i]);
    }
  }
  return {};
}

void TieredRowStore::prefetch(uint64_t key) const {
  index_.prefetch(key);
}

float* TieredRowStore::find(uint64_t key) {
  uint64_t id = index_.get(key);
  if (id != KeyIndex::missing) return arena_.row(uint32_t(id));
  if (absent_.count(key)) return nullptr;
  const uint64_t one[1] = {key};
  if (Status s = load(one); !s.ok()) return nullptr;
  id = index_.get(key);
  return id == KeyIndex::missing ? nullptr : arena_.row(uint32_t(id));
}

float* TieredRowStore::written(uint64_t key, uint32_t id) {
  if (log_) written_.emplace_back(key, id);
  ++updated_;
  return touch(id, true);
}

std::pair<float*, bool> TieredRowStore::find_or_insert(uint64_t key) {
  uint64_t id = index_.get(key);
  if (id == KeyIndex::missing && !absent_.count(key)) {
    const uint64_t one[1] = {key};
    if (Status s = load(one); !s.ok()) {
      // A scratch row: not cached as clean data, the next commit fails.
      return {arena_.row(insert(key, nullptr, false)), true};
    }
    id = index_.get(key);
  }
  if (id != KeyIndex::missing) return {written(key, uint32_t(id)), false};
  absent_.erase(key);
  return {written(key, insert(key, nullptr, false)), true};
}

uint32_t TieredRowStore::pick_victim(bool scan) {
  // Sample used slots; keep the one the policy values least.
  uint32_t best = UINT32_MAX;
  for (int i = 0; i < eviction_samples * 4 && (i < eviction_samples || best == UINT32_MAX); ++i) {
    rng_ = mix64(rng_);
    const uint32_t id = uint32_t(rng_ % slots_.size());
    const Slot& s = slots_[id];
    if (!s.used || s.fresh || spared(s.key)) continue;
    if (best == UINT32_MAX) {
      best = id;
      continue;
    }
    const Slot& b = slots_[best];
    const bool better = options_.policy == EvictionPolicy::lru
                            ? s.last_used < b.last_used
                            : (s.freq < b.freq || (s.freq == b.freq && s.last_used < b.last_used));
    if (better) best = id;
  }
  if (best == UINT32_MAX && scan) {  // sampling kept landing on free, fresh or spared slots
    uint32_t any = UINT32_MAX;
    for (uint32_t id = 0; id < slots_.size(); ++id) {
      if (!slots_[id].used || slots_[id].fresh) continue;
      if (!spared(slots_[id].key)) return id;
      if (any == UINT32_MAX) any = id;
    }
    return any;  // every cached row is awaited
  }
  return best;
}

uint32_t TieredRowStore::weigh_oldest_fresh(bool weigh) {
  while (!window_.empty()) {
    const auto [c, key] = window_.front();
    window_.pop_front();
    Slot& cs = slots_[c];
    if (!cs.used || !cs.fresh || cs.key != key) continue;  // evicted or erased since
    cs.fresh = false;
    --fresh_;
    if (!weigh || spared(key)) return UINT32_MAX;  // room for it, or awaited: it stays
    const uint32_t v = pick_victim(false);
    return v == UINT32_MAX || cs.freq >= slots_[v].freq ? v : c;
  }
  COLONY_ASSERT(fresh_ == 0, "{} fresh rows are not in the window", fresh_);
  return UINT32_MAX;
}

Status TieredRowStore::evict_to(size_t rows) {
  if (index_.size() <= rows) return {};
  const size_t rf = table_->row_floats();
  keys_buf_.clear();
  rows_buf_.clear();
  uint64_t added = 0;
  std::vector<uint32_t> victims;
  while (index_.size() - victims.size() > rows) {
    // lfu (W-TinyLFU): rows filled lately wait in a window of a tenth of the cache, so that a
    // row pulled is still there for its push. Past it, the oldest is weighed against the victim
    // the sampling finds among the other rows, and stays if its key was used at least as often.
    const size_t window = rows / 10;
    uint32_t id = UINT32_MAX;
    if (fresh_ > window) {
      const size_t cached = index_.size() - victims.size();
      id = weigh_oldest_fresh(cached - fresh_ >= rows - window);
      if (id == UINT32_MAX) continue;  // it stays
    } else {
      id = pick_victim(true);
    }
    COLONY_ASSERT(id != UINT32_MAX, "no row to evict: {} cached, {} fresh, {} to keep",
                  index_.size() - victims.size(), fresh_, rows);
    Slot& s = slots_[id];
    s.used = false;  // so it is not picked twice
    victims.push_back(id);
    if (s.dirty) {
      keys_buf_.push_back(s.key);
      const float* r = arena_.row(id);
      rows_buf_.insert(rows_buf_.end(), r, r + rf);
      if (!s.on_disk) ++added;
    }
  }
  Status st = table_->write(keys_buf_, rows_buf_, added);
  if (!st.ok()) {
    for (uint32_t id : victims)
      slots_[id].used = true;  // the write failed: every victim stays cached
    return st;
  }
  if (!keys_buf_.empty()) ++stats_.write_batches;
  stats_.writes += keys_buf_.size();
  stats_.evicted_dirty += keys_buf_.size();
  stats_.evictions += victims.size();
  dirty_ -= keys_buf_.size();
  for (uint32_t id : victims) {
    if (!slots_[id].on_disk) --cache_only_;
    index_.erase(slots_[id].key);
    free_.push_back(id);
  }
  return {};
}

Status TieredRowStore::commit() {
  absent_.clear();
  if (!error_.ok()) {
    Status e = error_;
    error_ = Status();
    written_.clear();
    staged_clocks_.clear();
    return refuse_write_backs(e);
  }
  if (log_) {
    // The rows as this batch left them, each once, in key order; they are all still cached in
    // the slots they were handed out from (eviction follows).
    std::sort(written_.begin(), written_.end());
    written_.erase(std::unique(written_.begin(), written_.end()), written_.end());
    const size_t rf = table_->row_floats();
    keys_buf_.resize(written_.size());
    rows_buf_.resize(written_.size() * rf);
    for (size_t i = 0; i < written_.size(); ++i) {
      const Slot& slot = slots_[written_[i].second];
      COLONY_ASSERT(slot.used && slot.key == written_[i].first,
                    "the row of key {:#x} left its slot within a batch", written_[i].first);
      keys_buf_[i] = written_[i].first;
      std::memcpy(&rows_buf_[i * rf], arena_.row(written_[i].second), rf * sizeof(float));
    }
    Status s = log_->append({PushLog::Kind::rows, staged_clocks_, keys_buf_, rows_buf_});
    written_.clear();
    if (!s.ok()) {
      staged_clocks_.clear();
      return refuse_write_backs(s);
    }
  }
  for (auto [sender, clock] : staged_clocks_) clocks_[sender] = clock;
  staged_clocks_.clear();
  const uint64_t logged =
      log_ ? log_->bytes() : updated_ * (table_->row_floats() * sizeof(float) + sizeof(uint64_t));
  if (logged > options_.log_bytes_max && updated_ >= uint64_t(options_.write_back_ratio) * dirty_)
    if (Status s = write_back(); !s.ok()) return s;
  return evict_to(capacity_);
}

Status TieredRowStore::flush() {
  if (Status st = write_back(); !st.ok()) return st;
  return table_->flush();
}

Status TieredRowStore::refuse_write_backs(const Status& failed) {
  if (uncommitted_.ok())
    uncommitted_ = Status::io_error(
        fmt::format("{}: the rows cached in memory are not written back: a batch failed to commit "
                    "({}), and its rows there are not the store's",
                    table_->path(), failed.message()));
  return failed;
}

Status TieredRowStore::write_back() {
  if (!uncommitted_.ok()) return uncommitted_;
  const size_t rf = table_->row_floats();
  keys_buf_.clear();
  rows_buf_.clear();
  uint64_t added = 0;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    const Slot& s = slots_[id];
    if (!s.used || !s.dirty) continue;
    keys_buf_.push_back(s.key);
    const float* r = arena_.row(id);
    rows_buf_.insert(rows_buf_.end(), r, r + rf);
    if (!s.on_disk) ++added;
  }
  std::vector<std::pair<uint64_t, uint32_t>> clocks;
  for (auto [sender, clock] : clocks_) {
    auto it = table_->sender_clocks().find(sender);
    if (it == table_->sender_clocks().end() || it->second != clock)
      clocks.emplace_back(sender, clock);
  }
  if (Status st = table_->write(keys_buf_, rows_buf_, added, clocks, RocksTable::Mode::bulk);
      !st.ok())
    return st;
  if (!keys_buf_.empty()) ++stats_.write_batches;
  stats_.writes += keys_buf_.size();
  for (Slot& s : slots_) {
    if (!s.used) continue;
    s.dirty = false;
    s.on_disk = true;
  }
  cache_only_ = 0;
  dirty_ = 0;
  updated_ = 0;
  return log_ ? log_->truncate() : Status();
}

Status TieredRowStore::clear_clocks() {
  if (Status s = write_back(); !s.ok()) return s;
  clocks_.clear();
  return table_->clear_clocks();
}

Status TieredRowStore::for_each_in_range(
    uint64_t begin, uint64_t end, const std::function<void(uint64_t, const float*)>& f) const {
  // The table's rows in order, with cached values in place of stale ones, merged with the
  // rows that exist only in memory.
  std::vector<std::pair<uint64_t, uint32_t>> only;
  index_.for_each([&](uint64_t key, uint64_t id) {
    if (!slots_[id].on_disk && key >= begin && key < end) only.emplace_back(key, uint32_t(id));
  });
  std::sort(only.begin(), only.end());
  auto& arena = const_cast<RowArena&>(arena_);
  size_t j = 0;
  Status s = table_->for_each_in_range(begin, end, [&](uint64_t key, const float* row) {
    for (; j < only.size() && only[j].first < key; ++j) f(only[j].first, arena.row(only[j].second));
    const uint64_t id = index_.get(key);
    f(key, id == KeyIndex::missing ? row : arena.row(uint32_t(id)));
  });
  if (!s.ok()) return s;
  for (; j < only.size(); ++j) f(only[j].first, arena.row(only[j].second));
  return {};
}

Status TieredRowStore::for_each(const std::function<void(uint64_t, const float*)>& f) const {
  return for_each_in_range(0, UINT64_MAX, f);
}

Status TieredRowStore::erase(std::span<const uint64_t> keys) {
  // A row being read ahead is installed first, so that erasing it below leaves no old image.
  take_read_ahead(true);
  // Logged first: a replay must not bring back older images of these rows.
  if (log_)
    if (Status s = log_->append({PushLog::Kind::erase, {}, keys, {}}); !s.ok()) return s;
  std::vector<uint64_t> on_disk;
  std::vector<uint64_t> unknown;
  for (uint64_t k : keys) {
    const uint64_t id = index_.erase(k);
    if (id == KeyIndex::missing) {
      unknown.push_back(k);
      continue;
    }
    Slot& s = slots_[id];
    if (s.on_disk)
      on_disk.push_back(k);
    else
      --cache_only_;
    if (s.dirty) --dirty_;
    if (s.fresh) --fresh_;
    s.used = false;
    s.fresh = false;
    free_.push_back(uint32_t(id));
  }
  return erase_held(*table_, on_disk, unknown, rows_buf_, found_buf_);
}

StoreStats TieredRowStore::stats() const {
  StoreStats s = stats_;
  s.rows = size();
  s.memory_bytes = memory_bytes();
  return s;
}

}  // namespace colony
