#define BOOST_TEST_MODULE store_test
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include <rocksdb/utilities/options_util.h>

#include "common/hash.h"
#include "ps/shard_core.h"
#include "storage/checkpoint.h"
#include "storage/frequency_sketch.h"
#include "storage/push_log.h"
#include "storage/rocks_table.h"
#include "storage/rocksdb_store.h"
#include "storage/store_spec.h"
#include "tests/temp_dir.h"
#include "tests/test_shard.h"

using namespace colony;
namespace fs = std::filesystem;

namespace {

struct TempDir : colony::testing::TempDir {
  TempDir() : colony::testing::TempDir("store-test") {}
};

constexpr size_t rf = 4;
const StoreIdentity ident{"test-cluster", 0, 1, rf};

std::unique_ptr<RocksTable> open_table(const std::string& path, const StoreIdentity& id = ident) {
  RocksTableOptions o;
  o.path = path;
  o.block_cache_bytes = size_t{1} << 20;
  auto t = RocksTable::open(o, id);
  BOOST_REQUIRE_MESSAGE(t.ok(), (t.ok() ? std::string() : t.status().message()));
  return std::move(t.value());
}

// How many of `expect`'s rows `t` does not hold as expected (missing or other values).
size_t rows_unlike(RocksTable& t, const std::map<uint64_t, std::vector<float>>& expect) {
  std::vector<uint64_t> ks;
  for (const auto& [k, row] : expect) ks.push_back(k);
  std::vector<float> got;
  std::vector<uint8_t> found;
  BOOST_REQUIRE(t.multi_get(ks, got, found).ok());
  size_t wrong = 0;
  for (size_t i = 0; i < ks.size(); ++i) {
    const std::vector<float>& want = expect.at(ks[i]);
    if (!found[i] || !std::equal(want.begin(), want.end(), &got[i * rf])) ++wrong;
  }
  return wrong;
}

// Applies `steps` batches of random reads and writes to `store` and to a map of what it
// should hold; each batch follows the load / find_or_insert / commit protocol, every third one
// as load_for_write / commit, writing every row (keys repeat within a batch). With `ahead`,
// each batch first hands the keys of the batch `ahead` steps later to store.read_ahead.
void exercise(RowStore& store, std::map<uint64_t, std::vector<float>>& expect, uint64_t seed,
              int steps, uint64_t key_space, int ahead = 0) {
  SplitMix64 rng(seed);
  auto batches = std::vector<std::vector<uint64_t>>(size_t(steps));
  for (auto& keys : batches)
    for (int i = 0; i < 16; ++i) keys.push_back(rng.next() % key_space);
  for (int step = 0; step < steps; ++step) {
    const std::vector<uint64_t>& keys = batches[size_t(step)];
    if (ahead > 0) {
      if (step == 0)
        for (int i = 0; i < std::min(ahead, steps); ++i) store.read_ahead(batches[size_t(i)]);
      if (step + ahead < steps) store.read_ahead(batches[size_t(step + ahead)]);
    }
    auto update = [&](uint64_t k, std::pair<float*, bool> row) {
      auto [r, inserted] = row;
      BOOST_REQUIRE_EQUAL(inserted, expect.find(k) == expect.end());
      auto& e = expect[k];
      e.resize(rf);
      for (size_t j = 0; j < rf; ++j) r[j] = e[j] = r[j] + float(step + j);
    };
    if (step % 3 == 2) {
      std::vector<std::pair<float*, bool>> rows;
      BOOST_REQUIRE(store.load_for_write(keys, rows).ok());
      BOOST_REQUIRE_EQUAL(rows.size(), keys.size());
      for (size_t i = 0; i < keys.size(); ++i) update(keys[i], rows[i]);
      BOOST_REQUIRE(store.commit().ok());
      BOOST_REQUIRE_EQUAL(store.size(), expect.size());
      continue;
    }
    BOOST_REQUIRE(store.load(keys).ok());
    for (uint64_t k : keys) {
      if (rng.next() % 2) {
        const float* r = store.find(k);
        auto it = expect.find(k);
        BOOST_REQUIRE_EQUAL(r != nullptr, it != expect.end());
        if (r) BOOST_REQUIRE(std::vector<float>(r, r + rf) == it->second);
      } else {
        update(k, store.find_or_insert(k));
      }
    }
    BOOST_REQUIRE(store.commit().ok());
    BOOST_REQUIRE_EQUAL(store.size(), expect.size());
  }
}

void check_contents(const RowStore& store, const std::map<uint64_t, std::vector<float>>& expect) {
  std::vector<std::pair<uint64_t, std::vector<float>>> got;
  BOOST_REQUIRE(store
                    .for_each_in_range(0, UINT64_MAX,
                                       [&](uint64_t k, const float* r) {
                                         got.emplace_back(k, std::vector<float>(r, r + rf));
                                       })
                    .ok());
  BOOST_REQUIRE_EQUAL(got.size(), expect.size());
  size_t i = 0;
  for (const auto& [k, v] : expect) {  // std::map: key order, as for_each_in_range promises
    BOOST_TEST(got[i].first == k);
    BOOST_TEST((got[i].second == v));
    ++i;
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(keys_encode_big_endian_so_ranges_iterate_in_order) {
  BOOST_TEST(encode_key(0x0102030405060708ULL) ==
             std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  for (uint64_t k : {uint64_t{0}, uint64_t{1}, uint64_t{255}, uint64_t{1} << 63, UINT64_MAX})
    BOOST_TEST(decode_key(encode_key(k).data()) == k);
  BOOST_TEST(encode_key(255) < encode_key(256));
}

BOOST_AUTO_TEST_CASE(rocksdb_store_keeps_committed_rows_across_reopen) {
  TempDir dir;
  std::map<uint64_t, std::vector<float>> expect;
  {
    RocksRowStore store(open_table(dir.sub("db")));
    exercise(store, expect, 1, 200, 300);
    check_contents(store, expect);
    BOOST_TEST(store.stats().write_batches > 0u);
  }
  RocksRowStore again(open_table(dir.sub("db")));
  BOOST_TEST(again.size() == expect.size());
  check_contents(again, expect);
  exercise(again, expect, 2, 50, 300);
  check_contents(again, expect);
}

BOOST_AUTO_TEST_CASE(uncommitted_rows_are_not_written) {
  TempDir dir;
  {
    RocksRowStore store(open_table(dir.sub("db")));
    const uint64_t keys[] = {5, 6};
    BOOST_REQUIRE(store.load(keys).ok());
    store.find_or_insert(5).first[0] = 1.0f;
    BOOST_REQUIRE(store.commit().ok());
    BOOST_REQUIRE(store.load(keys).ok());
    store.find_or_insert(6).first[0] = 2.0f;  // never committed
  }
  RocksRowStore again(open_table(dir.sub("db")));
  BOOST_TEST(again.size() == 1u);
  BOOST_REQUIRE(again.find(5) != nullptr);
  BOOST_TEST(again.find(5)[0] == 1.0f);
  BOOST_TEST(again.find(6) == nullptr);
}

// Exactly-once pushes rest on this: a sender's clock is committed with the rows of its push, in
// one batch, kept across a reopen; a clock staged with rows that are never committed is not;
// the tiered store commits none (its rows may stay dirty in memory past a commit).
BOOST_AUTO_TEST_CASE(a_senders_clock_is_committed_with_its_rows_and_kept_across_reopen) {
  TempDir dir;
  const uint64_t keys[] = {5, 6};
  {
    RocksRowStore store(open_table(dir.sub("db")));
    BOOST_REQUIRE(store.load(keys).ok());
    store.find_or_insert(5).first[0] = 1.0f;
    store.stage_clock(10, 3);
    store.stage_clock(11, 7);
    BOOST_REQUIRE(store.commit().ok());
    BOOST_REQUIRE(store.load(keys).ok());
    store.stage_clock(10, 4);
    BOOST_REQUIRE(store.commit().ok());  // a push of no rows still moves its sender's clock
    BOOST_REQUIRE(store.load(keys).ok());
    store.find_or_insert(6).first[0] = 2.0f;
    store.stage_clock(10, 5);  // never committed: the process dies first
  }
  RocksRowStore again(open_table(dir.sub("db")));
  const std::map<uint64_t, uint32_t> want{{10, 4}, {11, 7}};
  BOOST_TEST((again.committed_clocks() == want));
  BOOST_TEST(again.find(6) == nullptr);
  // A tiered store without a push log holds its rows dirty in memory: its clocks are committed
  // with its write-backs only.
  TieredOptions to;
  to.cache_bytes = 1 << 20;
  TieredRowStore tiered(open_table(dir.sub("tiered")), to);
  BOOST_REQUIRE(tiered.load(keys).ok());
  tiered.find_or_insert(5).first[0] = 1.0f;
  tiered.stage_clock(10, 3);
  BOOST_REQUIRE(tiered.commit().ok());
  BOOST_TEST(tiered.committed_clocks().empty());
  BOOST_REQUIRE(tiered.write_back().ok());
  BOOST_TEST((tiered.committed_clocks() == std::map<uint64_t, uint32_t>{{10, 3}}));
}

// Flips one bit of the byte at `offset` of the file at `path` (damage to a log).
void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x40);
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
}

// Issue 14: the push log gives back whole records in the order they were appended, and cuts off
// the torn tail a crash leaves; a damaged record ends the replay there.
BOOST_AUTO_TEST_CASE(a_push_log_replays_whole_records_in_order_and_cuts_a_torn_tail) {
  TempDir dir;
  const std::string path = dir.sub("log");
  const std::vector<std::pair<uint64_t, uint32_t>> c1{{7, 1}}, c3{{7, 2}, {8, 1}};
  const std::vector<uint64_t> k1{3, 4}, k2{4}, k3{5};
  const std::vector<float> r1{1, 2, 3, 4, 5, 6, 7, 8}, r3{9, 10, 11, 12};
  uint64_t whole = 0;
  {
    auto log = std::move(PushLog::open(path, rf, false).value());
    BOOST_REQUIRE(log->append({PushLog::Kind::rows, c1, k1, r1}).ok());
    BOOST_REQUIRE(log->append({PushLog::Kind::erase, {}, k2, {}}).ok());
    BOOST_REQUIRE(log->append({PushLog::Kind::rows, c3, k3, r3}).ok());
    whole = log->bytes();
    BOOST_REQUIRE(log->append({PushLog::Kind::rows, c1, k1, r1}).ok());
  }
  fs::resize_file(path, fs::file_size(path) - 5);  // the crash tore the last record
  struct Got {
    PushLog::Kind kind;
    std::vector<std::pair<uint64_t, uint32_t>> clocks;
    std::vector<uint64_t> keys;
    std::vector<float> rows;
  };
  auto replay = [&](std::vector<Got>& got) {
    auto log = PushLog::open(path, rf, false);
    BOOST_REQUIRE(log.ok());
    PushLog::Replayed r;
    BOOST_REQUIRE((*log)
                      ->replay(
                          [&](const PushLog::Record& rec) {
                            got.push_back({rec.kind,
                                           {rec.clocks.begin(), rec.clocks.end()},
                                           {rec.keys.begin(), rec.keys.end()},
                                           {rec.rows.begin(), rec.rows.end()}});
                            return Status();
                          },
                          r)
                      .ok());
    return r;
  };
  std::vector<Got> got;
  const PushLog::Replayed r = replay(got);
  BOOST_REQUIRE_EQUAL(got.size(), 3u);
  BOOST_TEST(r.records == 3u);
  BOOST_TEST(r.rows == 3u);
  BOOST_TEST(r.dropped_bytes > 0u);
  BOOST_TEST(fs::file_size(path) == whole);  // cut back to the last whole record
  // Read a record at a time, never the whole log (which may be several times a large cache).
  BOOST_TEST(r.largest_record ==
             std::max<uint64_t>(24 + 16 + 16 + 2 * 8 + 2 * rf * 4, 24 + 16 + 32 + 8 + rf * 4));
  BOOST_TEST((got[0].kind == PushLog::Kind::rows && got[0].clocks == c1 && got[0].keys == k1 &&
              got[0].rows == r1));
  BOOST_TEST((got[1].kind == PushLog::Kind::erase && got[1].keys == k2 && got[1].rows.empty()));
  BOOST_TEST((got[2].clocks == c3 && got[2].keys == k3 && got[2].rows == r3));
  // A flipped byte inside the second record: the first is all that is given back.
  // The file's header, the first record (24 + 16 + one clock + two keys + two rows), the
  // second's header, then into its key.
  flip_byte(path, 16 + (24 + 16 + 16 + 2 * 8 + 2 * rf * 4) + 24 + 20);
  got.clear();
  BOOST_TEST(replay(got).records == 1u);
  // Not a push log, or one of another row width: refused, naming the file.
  auto other = PushLog::open(path, rf + 1, false);
  BOOST_REQUIRE(!other.ok());
  BOOST_TEST(other.status().message().find(path) != std::string::npos);
  { std::ofstream(dir.sub("text")) << "not a log at all"; }
  BOOST_TEST(!PushLog::open(dir.sub("text"), rf, false).ok());
  // Shorter than a header: a crash while the log was created; it starts again, empty.
  { std::ofstream(dir.sub("short")) << "COLO"; }
  auto fresh = PushLog::open(dir.sub("short"), rf, false);
  BOOST_REQUIRE(fresh.ok());
  BOOST_TEST((*fresh)->bytes() == 16u);
}

// A push log of version 1 (FNV-1a checksums), as an earlier Colony left it at a crash: its
// records replay, an append checks out on the next replay, and truncate() starts it again as
// version 2, whose records replay too.
BOOST_AUTO_TEST_CASE(a_push_log_of_version_1_replays_and_is_started_again_as_version_2) {
  TempDir dir;
  const std::string path = dir.sub("log");
  auto put = [](std::string& out, auto v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  };
  {
    std::string file("COLONYL1");
    put(file, uint32_t(rf));
    put(file, uint32_t(0));
    std::string payload;
    put(payload, uint64_t(1));  // one clock
    put(payload, uint64_t(1));  // one key
    put(payload, uint64_t(7));  // sender 7 ...
    put(payload, uint64_t(3));  // ... at clock 3
    put(payload, uint64_t(42));
    for (float x : {1.f, 2.f, 3.f, 4.f}) put(payload, x);
    put(file, uint32_t(1));
    put(file, uint32_t(0));
    put(file, uint64_t(payload.size()));
    put(file, fnv1a64(payload.data(), payload.size()));
    std::ofstream(path, std::ios::binary) << file + payload;
  }
  auto keys_replayed = [&] {
    auto log = PushLog::open(path, rf, false);
    BOOST_REQUIRE(log.ok());
    std::vector<uint64_t> keys;
    PushLog::Replayed r;
    BOOST_REQUIRE((*log)
                      ->replay(
                          [&](const PushLog::Record& rec) {
                            keys.insert(keys.end(), rec.keys.begin(), rec.keys.end());
                            return Status();
                          },
                          r)
                      .ok());
    BOOST_TEST(r.dropped_bytes == 0u);
    return keys;
  };
  BOOST_TEST(keys_replayed() == std::vector<uint64_t>{42});
  const std::vector<uint64_t> k{43};
  const std::vector<float> row{5, 6, 7, 8};
  {
    auto log = std::move(PushLog::open(path, rf, false).value());
    BOOST_REQUIRE(log->append({PushLog::Kind::rows, {}, k, row}).ok());
  }
  BOOST_TEST((keys_replayed() == std::vector<uint64_t>{42, 43}));
  {
    auto log = std::move(PushLog::open(path, rf, false).value());
    BOOST_REQUIRE(log->truncate().ok());
    BOOST_TEST(log->bytes() == 16u);
    BOOST_REQUIRE(log->append({PushLog::Kind::rows, {}, k, row}).ok());
  }
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  BOOST_TEST(std::string(magic, 8) == "COLONYL2");
  BOOST_TEST(keys_replayed() == std::vector<uint64_t>{43});
}

// One push (key 3 by sender 7 at clock 1) for the push log tests, and a replay that counts
// records: its status, the records given back, and what replay() said.
struct OnePush {
  std::vector<std::pair<uint64_t, uint32_t>> clocks{{7, 1}};
  std::vector<uint64_t> keys{3};
  std::vector<float> rows = std::vector<float>(rf, 1.0f);
  PushLog::Record record() const { return {PushLog::Kind::rows, clocks, keys, rows}; }
};
struct Counted {
  Status status;
  uint64_t records = 0;
  PushLog::Replayed replayed;
};
Counted replay_counting(const std::string& path, bool sync) {
  Counted c;
  auto log = PushLog::open(path, rf, sync);
  if (!log) {
    c.status = log.status();
    return c;
  }
  c.status = (*log)->replay(
      [&](const PushLog::Record&) {
        ++c.records;
        return Status();
      },
      c.replayed);
  return c;
}

// An append that fails after writing part of its record (a full disk) cuts off what it wrote: a
// record appended next replays after the one before it. Before, replay stopped at the failed
// append's bytes and cut off every record after them, acknowledged ones included.
BOOST_AUTO_TEST_CASE(a_failed_append_leaves_nothing_in_the_log) {
  TempDir dir;
  const std::string path = dir.sub("log");
  const OnePush push;
  {
    auto log = std::move(PushLog::open(path, rf, false).value());
    BOOST_REQUIRE(log->append(push.record()).ok());
    const uint64_t before = log->bytes();
    log->inject_append_failure(Status::io_error("No space left on device (injected)"), 20);
    BOOST_TEST(!log->append(push.record()).ok());
    BOOST_TEST(fs::file_size(path) == before);
    BOOST_REQUIRE(log->append(push.record()).ok());
  }
  const Counted c = replay_counting(path, false);
  BOOST_REQUIRE(c.status.ok());
  BOOST_TEST(c.records == 2u);
  BOOST_TEST(c.replayed.dropped_bytes == 0u);
}

// Under --durability fsync every record is synced before the next is written: a damaged record
// followed by a whole one is damage, not the torn tail of a crash. Replay refuses it, naming the
// byte, and keeps the log (cutting there would lose what was acknowledged after it). Without
// sync a crash of the machine may lose any unsynced page: the damage is cut off as a tail.
BOOST_AUTO_TEST_CASE(a_synced_push_log_damaged_before_its_end_is_refused_not_cut) {
  TempDir dir;
  const std::string path = dir.sub("log");
  const OnePush push;
  uint64_t second = 0;
  {
    auto log = std::move(PushLog::open(path, rf, true).value());
    for (int i = 0; i < 3; ++i) {
      if (i == 1) second = log->bytes();
      BOOST_REQUIRE(log->append(push.record()).ok());
    }
  }
  const uint64_t size = fs::file_size(path);
  flip_byte(path, second + 24 + 16 + 16);  // into the second record's key
  for (bool sync : {true, false}) {
    const Counted c = replay_counting(path, sync);
    const Status& s = c.status;
    BOOST_TEST(c.records == 1u);
    if (sync) {
      BOOST_REQUIRE(!s.ok());
      BOOST_TEST(s.message().find(fmt::format("{}: the record at byte {}", path, second)) !=
                     std::string::npos,
                 s.message());
      BOOST_TEST(fs::file_size(path) == size);  // kept
    } else {
      BOOST_TEST(s.ok());
      BOOST_TEST(fs::file_size(path) == second);  // cut off as a torn tail
    }
  }
}

// Issue 14: a tiered store under --durability log or fsync appends every committed batch to its
// push log, so the death of its process (the store dropped without a flush) loses no committed
// row, erasure or clock; under none the same death loses the rows that were dirty in memory.
BOOST_AUTO_TEST_CASE(a_tiered_store_with_a_push_log_loses_nothing_committed_when_its_process_dies) {
  for (Durability d : {Durability::log, Durability::fsync, Durability::none}) {
    TempDir dir;
    auto spec = parse_store_spec("rocksdb:" + dir.sub("s"), 40 * (rf * sizeof(float) + 64));
    BOOST_REQUIRE(spec.ok());
    BOOST_REQUIRE(set_durability(*spec, d).ok());
    std::map<uint64_t, std::vector<float>> expect;
    {
      auto store = std::move(open_shard_store(*spec, ident).value());
      exercise(*store, expect, 5, 150, 300);    // a cache of 40 rows: many evicted
      BOOST_REQUIRE(store->write_back().ok());  // the log starts again here
      exercise(*store, expect, 6, 50, 300);
      const uint64_t gone[] = {expect.begin()->first, std::prev(expect.end())->first};
      BOOST_REQUIRE(store->erase(gone).ok());
      for (uint64_t k : gone) expect.erase(k);
      const uint64_t keys[] = {1000};
      BOOST_REQUIRE(store->load(keys).ok());
      std::fill_n(store->find_or_insert(1000).first, rf, 0.5f);
      expect[1000] = std::vector<float>(rf, 0.5f);
      store->stage_clock(9, 42);
      BOOST_REQUIRE(store->commit().ok());
    }  // the process dies: dirty cached rows are not written back
    if (d != Durability::none) {
      // Until a job opens the store again, export (the table alone) would miss the log's rows.
      auto refused = export_rows(dir.sub("s"), rf, dir.sub("rows.bin"));
      BOOST_REQUIRE(!refused.ok());
      BOOST_TEST(refused.status().message().find(push_log_file_name) != std::string::npos,
                 refused.status().message());
    }
    auto again = open_shard_store(*spec, ident);
    BOOST_REQUIRE(again.ok());
    std::map<uint64_t, std::vector<float>> got;
    BOOST_REQUIRE(
        (*again)
            ->for_each([&](uint64_t k, const float* r) { got[k] = std::vector<float>(r, r + rf); })
            .ok());
    if (d == Durability::none) {
      BOOST_TEST((got != expect));  // what a store without a log loses
      BOOST_TEST((*again)->stats().log_records_replayed == 0u);
      continue;
    }
    BOOST_TEST((got == expect), to_string(d));
    BOOST_TEST(((*again)->committed_clocks() == std::map<uint64_t, uint32_t>{{9, 42}}));
    BOOST_TEST((*again)->stats().log_records_replayed == 52u);  // 50 batches, 1 erasure, 1 more
    BOOST_TEST(fs::exists(fs::path(dir.sub("s")) / "shard-0" / push_log_file_name));
    again->reset();  // the replay wrote everything back: export sees every row now
    auto exported = export_rows(dir.sub("s"), rf, dir.sub("rows.bin"));
    BOOST_REQUIRE_MESSAGE(exported.ok(),
                          (exported.ok() ? std::string() : exported.status().message()));
    BOOST_TEST(*exported == expect.size());
  }
  // The log is emptied once it passes log_bytes_max: its rows are written back on their own.
  {
    TempDir dir;
    TieredOptions t;
    t.cache_bytes = 1 << 20;
    t.log_bytes_max = 4096;
    t.write_back_ratio = 1;  // the log's size alone decides
    TieredRowStore store(open_table(dir.sub("db")), t);
    auto log = PushLog::open(dir.sub("log"), rf, false);
    BOOST_REQUIRE(log.ok());
    PushLog* raw = log->get();
    BOOST_REQUIRE(store.attach_log(std::move(log.value()), true).ok());
    std::map<uint64_t, std::vector<float>> expect;
    exercise(store, expect, 8, 100, 1000);
    BOOST_TEST(raw->bytes() <= 4096u);
    BOOST_TEST(store.table().rows() > 0u);  // written back without a flush
    BOOST_TEST(store.stats().write_batches > 0u);
  }
  // A store opened without a log replays the one its folder holds, then removes it.
  TempDir dir;
  auto spec = parse_store_spec("rocksdb:" + dir.sub("s"), 1 << 20);
  std::map<uint64_t, std::vector<float>> expect;
  {
    auto store = std::move(open_shard_store(*spec, ident).value());
    exercise(*store, expect, 7, 20, 100);
  }
  BOOST_REQUIRE(set_durability(*spec, Durability::none).ok());
  auto plain = open_shard_store(*spec, ident);
  BOOST_REQUIRE(plain.ok());
  check_contents(**plain, expect);
  BOOST_TEST(!fs::exists(fs::path(dir.sub("s")) / "shard-0" / push_log_file_name));
}

BOOST_AUTO_TEST_CASE(tiered_store_matches_the_model_with_a_cache_far_smaller_than_the_rows) {
  for (EvictionPolicy policy : {EvictionPolicy::lru, EvictionPolicy::lfu}) {
    TempDir dir;
    std::map<uint64_t, std::vector<float>> expect;
    TieredOptions o;
    o.cache_bytes = 40 * (rf * sizeof(float) + 64);  // 40 rows of ~300
    o.policy = policy;
    {
      TieredRowStore store(open_table(dir.sub("db")), o);
      BOOST_TEST(store.capacity_rows() == 40u);
      exercise(store, expect, 3, 300, 300);
      BOOST_TEST(store.cached_rows() <= 40u);
      BOOST_TEST(store.stats().evictions > 0u);
      BOOST_TEST(store.stats().evicted_dirty > 0u);
      check_contents(store, expect);  // cached and on-disk rows merged in key order
      BOOST_REQUIRE(store.flush().ok());
    }
    // After flush, the table alone holds everything.
    RocksRowStore plain(open_table(dir.sub("db")));
    BOOST_TEST(plain.size() == expect.size());
    check_contents(plain, expect);
  }
}

// The sketch never counts a key below its uses (saturating at 255, halved with its counts), halves
// exactly every `window` adds, and with few keys in a wide sketch counts exactly.
BOOST_AUTO_TEST_CASE(a_frequency_sketch_never_undercounts_and_halves_every_window) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const size_t capacity = 16 + seed * 7;
    FrequencySketch sketch(capacity);
    const uint64_t window = 16 * capacity;
    std::map<uint64_t, uint32_t> uses;  // saturating at 255, halved with the sketch
    SplitMix64 rng(seed);
    uint64_t adds = 0;
    for (int i = 0; i < 20000; ++i) {
      // Skewed keys: a few hot, many cold, several times more keys than the sketch's width.
      const uint64_t r = rng.next();
      const uint64_t key = r % 4 == 0 ? r % 8 : r % (40 * capacity);
      const FrequencySketch::Added a = sketch.add(key);
      uses[key] = std::min<uint32_t>(uses[key] + 1, 255);
      BOOST_REQUIRE_EQUAL(a.halved, ++adds % window == 0);
      if (a.halved)
        for (auto& [k, n] : uses) n >>= 1;
      BOOST_REQUIRE(a.count == sketch.estimate(key));
      BOOST_REQUIRE_GE(a.count, uses[key]);
    }
    for (const auto& [k, n] : uses)
      BOOST_REQUIRE_GE(sketch.estimate(k), std::min<uint32_t>(n, 255));
  }
  FrequencySketch wide(1000);
  for (int i = 0; i < 7; ++i) wide.add(1);
  for (int i = 0; i < 3; ++i) wide.add(2);
  BOOST_TEST(wide.estimate(1) == 7u);
  BOOST_TEST(wide.estimate(2) == 3u);
  BOOST_TEST(wide.estimate(3) == 0u);
}

// `lfu` admits by frequency: a stream of keys used once each does not push hot rows out of the
// cache, whichever cached rows the victim sampling lands on. The sketch overcounts a key whose
// counters all collide with hot keys' (about one in a thousand here), so one hot row may go.
BOOST_AUTO_TEST_CASE(keys_used_once_do_not_push_hot_rows_out_of_an_lfu_cache) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    TempDir dir;
    TieredOptions o;
    o.cache_bytes = 40 * (rf * sizeof(float) + 64);
    o.policy = EvictionPolicy::lfu;
    o.seed = seed;
    TieredRowStore store(open_table(dir.sub("db")), o);
    auto use = [&](const std::vector<uint64_t>& keys) {
      BOOST_REQUIRE(store.load(keys).ok());
      for (uint64_t k : keys) store.find_or_insert(k).first[0] += 1;
      BOOST_REQUIRE(store.commit().ok());
    };
    std::vector<uint64_t> hot;  // 30 rows: the cache keeps a tenth of itself for new rows
    for (uint64_t k = 0; k < 30; ++k) hot.push_back(k);
    for (int i = 0; i < 5; ++i) use(hot);
    const uint64_t cold_keys = 1000 * seed;
    for (uint64_t first = cold_keys; first < cold_keys + 400; first += 10) {  // 400, once each
      std::vector<uint64_t> cold;
      for (uint64_t k = first; k < first + 10; ++k) cold.push_back(k);
      use(cold);
    }
    const StoreStats before = store.stats();
    use(hot);
    BOOST_TEST(store.stats().cache_misses - before.cache_misses <= 1u);
    BOOST_TEST(store.find(7)[0] == 6.f);
    BOOST_REQUIRE(store.commit().ok());
  }
}

BOOST_AUTO_TEST_CASE(
    a_tiered_store_reading_ahead_matches_the_model_through_evictions_and_erasures) {
  // Rows read ahead on the store's thread while the owner writes others back, evicts and erases:
  // every batch must still see exactly the rows the model holds.
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    for (int ahead : {1, 3, 8}) {
      TempDir dir;
      std::map<uint64_t, std::vector<float>> expect;
      TieredOptions o;
      o.cache_bytes = 60 * (rf * sizeof(float) + 64);
      o.policy = seed % 2 ? EvictionPolicy::lru : EvictionPolicy::lfu;
      o.read_ahead = true;
      TieredRowStore store(open_table(dir.sub("db")), o);
      SplitMix64 rng(seed);
      for (int round = 0; round < 6; ++round) {
        exercise(store, expect, seed * 100 + uint64_t(round), 30, 400, ahead);
        std::vector<uint64_t> gone;
        for (int i = 0; i < 20; ++i) gone.push_back(rng.next() % 420);  // some never stored
        store.read_ahead(gone);  // erased while (maybe) being read
        BOOST_REQUIRE(store.erase(gone).ok());
        for (uint64_t k : gone) expect.erase(k);
        BOOST_REQUIRE_EQUAL(store.size(), expect.size());
      }
      BOOST_TEST(store.stats().read_ahead_rows > 0u);
      BOOST_TEST(store.cached_rows() <= 60u + 30u);  // the cache and at most half of it ahead
      check_contents(store, expect);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_load_after_a_read_ahead_reads_nothing_itself_and_eviction_spares_its_rows) {
  TempDir dir;
  TieredOptions o;
  o.cache_bytes = 40 * (rf * sizeof(float) + 64);
  o.read_ahead = true;
  TieredRowStore store(open_table(dir.sub("db")), o);
  auto batch = [](uint64_t first, uint64_t n) {
    std::vector<uint64_t> keys;
    for (uint64_t k = first; k < first + n; ++k) keys.push_back(k);
    return keys;
  };
  auto write = [&](const std::vector<uint64_t>& keys) {
    BOOST_REQUIRE(store.load(keys).ok());
    for (uint64_t k : keys) store.find_or_insert(k).first[0] = float(k);
    BOOST_REQUIRE(store.commit().ok());
  };
  for (uint64_t first = 0; first < 400; first += 40) write(batch(first, 40));
  BOOST_REQUIRE(store.flush().ok());
  // Rows 0..19 were evicted long ago: read ahead, the load finds them all in memory.
  const auto ahead = batch(0, 20);
  store.read_ahead(ahead);
  StoreStats before = store.stats();
  BOOST_REQUIRE(store.load(ahead).ok());
  for (uint64_t k : ahead) BOOST_TEST(store.find(k)[0] == float(k));
  BOOST_REQUIRE(store.commit().ok());
  StoreStats after = store.stats();
  BOOST_TEST(after.read_ahead_rows - before.read_ahead_rows == 20u);
  BOOST_TEST(after.reads == before.reads);  // no read of its own
  BOOST_TEST(after.cache_hits - before.cache_hits == 20u);
  // Hinted again, the same rows outlive a batch of 40 others that overflows the cache: eviction
  // spares what the window still awaits.
  store.read_ahead(ahead);
  write(batch(1000, 40));
  before = store.stats();
  BOOST_REQUIRE(store.load(ahead).ok());
  BOOST_REQUIRE(store.commit().ok());
  after = store.stats();
  BOOST_TEST(after.cache_hits - before.cache_hits == 20u);
  BOOST_TEST(after.cache_misses == before.cache_misses);
  // A hint past half the cache is ignored: nothing is read ahead.
  before = store.stats();
  store.read_ahead(batch(2000, 21));
  BOOST_REQUIRE(store.load(batch(2000, 21)).ok());
  BOOST_REQUIRE(store.commit().ok());
  BOOST_TEST(store.stats().read_ahead_rows == before.read_ahead_rows);
}

// A worker's PullHint (--read-ahead-batches) reaches the tiered store's read-ahead under ASP,
// where no pull waits at the gate: the pull then finds every row in memory. A hint the shard
// cannot use (a stale map, a key of another shard) is dropped unanswered.
BOOST_AUTO_TEST_CASE(a_pull_hint_reads_a_tiered_shards_rows_ahead_of_its_pull_under_asp) {
  TempDir dir;
  ShardConfig c = colony::testing::small_adagrad_shard();
  c.consistency = Consistency{ConsistencyKind::asp, 0};
  c.map = ShardMapSpec{1, 2, 16, 0};  // shard 0 of 2
  const size_t floats = ShardCore::row_floats(c).value();
  TieredOptions o;
  o.cache_bytes = 40 * (floats * sizeof(float) + 64);
  o.read_ahead = true;
  auto store = std::make_unique<TieredRowStore>(
      open_table(dir.sub("db"), StoreIdentity{"test-cluster", 0, 2, floats}), o);
  TieredRowStore* tiered = store.get();
  auto core = std::move(ShardCore::make(c, std::move(store)).value());
  ShardMap map = ShardMap::make(c.map).value();
  std::vector<uint64_t> mine, theirs;
  for (uint64_t k = 1; mine.size() < 400 || theirs.empty(); ++k)
    (map.shard_of(k) == 0 ? mine : theirs).push_back(k);
  const std::vector<uint64_t> early(mine.begin(), mine.begin() + 20);
  Outbox out;
  uint64_t request = 1;
  uint32_t clock = 0;
  auto pull = [&](const std::vector<uint64_t>& keys) {
    core->on_message(PullRequest{{7, request++, 1}, clock, 7, keys}, out);
    BOOST_REQUIRE(out.size() == 1u && std::holds_alternative<PullReply>(out[0].message));
    out.clear();
  };
  auto step = [&](std::vector<uint64_t> keys) {  // pull and push, as a worker's step
    pull(keys);
    core->on_message(
        PushRequest{{7, request++, 1}, ++clock, keys, std::vector<float>(keys.size() * 3, 0.5f)},
        out);
    BOOST_REQUIRE(out.size() == 1u && std::holds_alternative<PushAck>(out[0].message));
    out.clear();
  };
  for (size_t first = 0; first < mine.size(); first += 40)
    step(std::vector<uint64_t>(mine.begin() + first, mine.begin() + first + 40));
  BOOST_REQUIRE(core->store().flush().ok());
  // The first rows were evicted long ago. Hints that cannot be used change nothing.
  core->on_message(PullHint{{7, request++, 2}, early}, out);  // a map the shard does not have
  core->on_message(PullHint{{7, request++, 1}, {early[0], theirs[0]}}, out);
  BOOST_TEST(out.empty());
  BOOST_TEST(core->stats().hints_dropped == 2u);
  BOOST_TEST(tiered->stats().read_ahead_rows == 0u);
  // The worker's hint, then its pull: every row is read ahead, none by the pull itself.
  core->on_message(PullHint{{7, request++, 1}, early}, out);
  BOOST_TEST(out.empty());
  BOOST_TEST(core->stats().hints == 1u);
  const StoreStats before = tiered->stats();
  pull(early);
  const StoreStats after = tiered->stats();
  BOOST_TEST(after.read_ahead_rows - before.read_ahead_rows == 20u);
  BOOST_TEST(after.reads == before.reads);
  BOOST_TEST(after.cache_misses == before.cache_misses);
  BOOST_TEST(core->stats().pulls_deferred == 0u);  // ASP: nothing waited, yet all was read ahead
}

BOOST_AUTO_TEST_CASE(every_store_erases_rows_between_batches) {
  TempDir dir;
  TieredOptions small;
  small.cache_bytes = 30 * (rf * sizeof(float) + 64);
  std::vector<std::unique_ptr<RowStore>> stores;
  stores.push_back(std::make_unique<MemoryRowStore>(rf));
  stores.push_back(std::make_unique<RocksRowStore>(open_table(dir.sub("a"))));
  stores.push_back(std::make_unique<TieredRowStore>(open_table(dir.sub("b")), small));
  for (auto& store : stores) {
    std::map<uint64_t, std::vector<float>> expect;
    SplitMix64 rng(8);
    for (int round = 0; round < 10; ++round) {
      exercise(*store, expect, 10 + uint64_t(round), 20, 200);
      std::vector<uint64_t> gone;
      for (int i = 0; i < 30; ++i) gone.push_back(rng.next() % 250);  // some never stored
      BOOST_REQUIRE(store->erase(gone).ok());
      for (uint64_t k : gone) expect.erase(k);
      BOOST_REQUIRE_EQUAL(store->size(), expect.size());
    }
    check_contents(*store, expect);
  }
}

BOOST_AUTO_TEST_CASE(memory_store_iterates_a_range_in_key_order) {
  MemoryRowStore store(rf);
  std::map<uint64_t, std::vector<float>> expect;
  exercise(store, expect, 4, 100, 1000);
  check_contents(store, expect);
  std::vector<uint64_t> got;
  BOOST_REQUIRE(
      store.for_each_in_range(100, 200, [&](uint64_t k, const float*) { got.push_back(k); }).ok());
  std::vector<uint64_t> want;
  for (const auto& [k, v] : expect)
    if (k >= 100 && k < 200) want.push_back(k);
  BOOST_TEST(got == want);
}

BOOST_AUTO_TEST_CASE(a_store_of_another_cluster_shard_or_row_size_is_refused_naming_the_path) {
  TempDir dir;
  open_table(dir.sub("db"));
  RocksTableOptions o;
  o.path = dir.sub("db");
  for (StoreIdentity other :
       {StoreIdentity{"other-cluster", 0, 1, rf}, StoreIdentity{"test-cluster", 0, 2, rf},
        StoreIdentity{"test-cluster", 0, 1, rf + 1}}) {
    auto t = RocksTable::open(o, other);
    BOOST_REQUIRE(!t.ok());
    BOOST_TEST((t.status().code() == Status::Code::invalid_input));
    BOOST_TEST(t.status().message().find(o.path) != std::string::npos, t.status().message());
    BOOST_TEST(t.status().message().find("test-cluster") != std::string::npos,
               t.status().message());
  }
  BOOST_TEST(RocksTable::open(o, ident).ok());  // and the rightful owner still opens it
}

// Issue 14: --resume (RocksTableOptions::adopt) continues another job's rows, with the same
// layout and optimizer, and makes the store that job's; it never takes rows of another size, shard
// count or optimizer.
BOOST_AUTO_TEST_CASE(resume_continues_another_jobs_store_of_the_same_layout_and_makes_it_its_own) {
  TempDir dir;
  const StoreIdentity first{"colony-train model=fm width=2 optimizer=ftrl seed=1", 0, 1, rf};
  const StoreIdentity second{"colony-train model=fm width=2 optimizer=ftrl seed=2", 0, 1, rf};
  {
    auto t = open_table(dir.sub("db"), first);
    const uint64_t key[] = {7};
    const float row[rf] = {1, 2, 3, 4};
    BOOST_REQUIRE(t->write(key, row, 1).ok());
  }
  RocksTableOptions o;
  o.path = dir.sub("db");
  auto refused = RocksTable::open(o, second);
  BOOST_REQUIRE(!refused.ok());
  BOOST_TEST(refused.status().message().find("give --resume") != std::string::npos,
             refused.status().message());
  for (StoreIdentity other :
       {StoreIdentity{"colony-train model=fm width=2 optimizer=adam seed=2", 0, 1, rf},
        StoreIdentity{second.cluster_id, 0, 2, rf},
        StoreIdentity{second.cluster_id, 0, 1, rf + 1}}) {
    o.adopt = true;
    auto t = RocksTable::open(o, other);
    BOOST_REQUIRE(!t.ok());
    BOOST_TEST(t.status().message().find("only with the same") != std::string::npos,
               t.status().message());
  }
  {
    auto t = RocksTable::open(o, second);
    BOOST_REQUIRE(t.ok());
    BOOST_TEST((*t)->adopted_from() == first.cluster_id);
    BOOST_TEST((*t)->rows() == 1u);
    std::vector<float> got(rf);
    BOOST_TEST((*t)->get(7, got.data()).value());
    BOOST_TEST((got == std::vector<float>{1, 2, 3, 4}));
  }
  o.adopt = false;
  BOOST_TEST(RocksTable::open(o, second).ok());  // now the second job's, without --resume
  BOOST_TEST(!RocksTable::open(o, first).ok());
}

// RocksTable::write puts its rows in key order, whatever order it is given them in: every row
// lands under its own key, a key given twice keeps the row given last, and the row count grows
// by what the caller says was added.
BOOST_AUTO_TEST_CASE(a_table_write_in_any_key_order_stores_each_row_under_its_key) {
  TempDir dir;
  auto t = open_table(dir.sub("db"));
  SplitMix64 rng(3);
  std::vector<uint64_t> keys;
  std::map<uint64_t, std::vector<float>> expect;
  std::vector<float> rows;
  for (int i = 0; i < 500; ++i) {
    // Out of order, with repeats (a repeat keeps the row given last).
    const uint64_t k = i % 7 == 6 ? keys[size_t(i / 2)] : rng.next() % 1000000;
    keys.push_back(k);
    std::vector<float> row(rf);
    for (float& x : row) x = float(rng.next() % 1000);
    rows.insert(rows.end(), row.begin(), row.end());
    expect[k] = row;
  }
  BOOST_REQUIRE(t->write(keys, rows, expect.size()).ok());
  BOOST_TEST(t->rows() == expect.size());
  BOOST_TEST(rows_unlike(*t, expect) == 0u);
}

// A write of many rows (a tiered store's write-back of its whole cache) goes in as table files
// rather than through the memtable: it must store what a batch would, over rows the table already
// holds in its memtable and on disk, with its clocks and row count, atomically, and leave no file.
BOOST_AUTO_TEST_CASE(a_large_table_write_stores_what_a_batch_would_and_survives_a_reopen) {
  TempDir dir;
  SplitMix64 rng(5);
  std::map<uint64_t, std::vector<float>> expect;
  auto write = [&](size_t n, uint32_t clock) {
    auto t = open_table(dir.sub("db"));
    std::vector<uint64_t> keys;
    std::vector<float> rows;
    size_t added = 0;
    std::set<uint64_t> seen;
    for (size_t i = 0; i < n; ++i) {
      // Out of order, with repeats within the write and keys of the earlier writes.
      const uint64_t k = i % 5 == 4 ? keys[i / 2] : rng.next() % 400000;
      keys.push_back(k);
      std::vector<float> row(rf);
      for (float& x : row) x = float(rng.next() % 1000);
      rows.insert(rows.end(), row.begin(), row.end());
      if (!expect.count(k) && seen.insert(k).second) ++added;
      expect[k] = row;
    }
    const std::pair<uint64_t, uint32_t> clocks[] = {{7, clock}};
    BOOST_REQUIRE(t->write(keys, rows, added, clocks, RocksTable::Mode::bulk).ok());
    BOOST_TEST(t->rows() == expect.size());
  };
  write(1000, 1);    // a batch, into the memtable
  write(100000, 2);  // files, over it
  write(500, 3);     // a batch again, over the files
  write(90000, 4);   // files, over all of it
  auto t = open_table(dir.sub("db"));
  BOOST_TEST(t->rows() == expect.size());
  BOOST_TEST((t->sender_clocks() == std::map<uint64_t, uint32_t>{{7, 4}}));
  BOOST_TEST(rows_unlike(*t, expect) == 0u);
  size_t stored = 0;
  BOOST_REQUIRE(
      t->for_each_in_range(0, UINT64_MAX, [&](uint64_t, const float*) { ++stored; }).ok());
  BOOST_TEST(stored == expect.size());
  for (const auto& e : fs::directory_iterator(dir.sub("db")))
    BOOST_TEST(e.path().filename().string().find("colony-ingest") == std::string::npos);
}

// A table's memtables are as small as write_buffer_bytes says: RocksDB holds at most two, so
// rows written past them are in table files when the writes return, without a flush.
BOOST_AUTO_TEST_CASE(rows_written_past_two_small_memtables_are_in_table_files_without_a_flush) {
  TempDir dir;
  RocksTableOptions o;
  o.path = dir.sub("db");
  o.block_cache_bytes = o.write_buffer_bytes = size_t{1} << 20;
  auto t = RocksTable::open(o, StoreIdentity{"test-cluster", 0, 1, 64});
  BOOST_REQUIRE(t.ok());
  BOOST_TEST((*t)->buffer_bytes() == size_t{3} << 20);
  SplitMix64 rng(9);
  std::vector<uint64_t> keys;
  std::vector<float> rows;
  const size_t batch = 1000;  // 256 KiB of floats
  for (uint64_t i = 0; i < 24 * batch; ++i) {
    keys.push_back(rng.next());
    rows.resize(rows.size() + 64, float(i));
    if (keys.size() == batch) {
      BOOST_REQUIRE((*t)->write(keys, rows, keys.size()).ok());
      keys.clear();
      rows.clear();
    }
  }
  uintmax_t table_file_bytes = 0;
  for (const auto& e : fs::directory_iterator(o.path))
    if (e.path().extension() == ".sst") table_file_bytes += e.file_size();
  // 6 MiB written; at most two memtables of 1 MiB (and what a memtable over-fills) in memory.
  BOOST_TEST(table_file_bytes >= uintmax_t{3} << 20);
}

// The tiered store's table merges its files by universal compaction (its writes are every
// write-back and eviction); a table written in either style opens in the other with every row,
// so `colony export` and checkpoints read a tiered store's folder as a RocksDB store.
BOOST_AUTO_TEST_CASE(a_table_opens_with_every_row_whichever_compaction_style_wrote_it) {
  using C = RocksTableOptions::Compaction;
  for (const auto& [first, second] :
       {std::pair{C::universal, C::leveled}, std::pair{C::leveled, C::universal}}) {
    TempDir dir;
    RocksTableOptions o;
    o.path = dir.sub("db");
    o.block_cache_bytes = o.write_buffer_bytes = size_t{1} << 20;
    o.compaction = first;
    std::map<uint64_t, std::vector<float>> expect;
    {
      auto t = RocksTable::open(o, ident);
      BOOST_REQUIRE(t.ok());
      // 8 MiB of rows over 8 memtables, each key written about 3 times: files to merge.
      SplitMix64 rng(uint64_t(first) + 1);
      for (int batch = 0; batch < 64; ++batch) {
        std::set<uint64_t> in_batch;
        std::vector<uint64_t> keys;
        std::vector<float> rows;
        for (int i = 0; i < 8192; ++i) {
          const uint64_t k = rng.next() % 150000;
          if (!in_batch.insert(k).second) continue;
          const std::vector<float> row(rf, float(batch * 8192 + i));
          keys.push_back(k);
          rows.insert(rows.end(), row.begin(), row.end());
          expect[k] = row;
        }
        BOOST_REQUIRE((*t)->write(keys, rows, keys.size()).ok());
      }
    }
    o.compaction = second;
    auto t = RocksTable::open(o, ident);
    BOOST_REQUIRE_MESSAGE(t.ok(), (t.ok() ? std::string() : t.status().message()));
    BOOST_TEST(rows_unlike(**t, expect) == 0u);
  }
  TempDir dir;
  auto spec = parse_store_spec("rocksdb:" + dir.sub("tiered"), size_t{16} << 20);
  BOOST_REQUIRE(spec.ok());
  BOOST_REQUIRE(open_shard_store(*spec, ident).ok());
  rocksdb::DBOptions db;
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  BOOST_REQUIRE(rocksdb::LoadLatestOptions(shard_store_path(spec->dir, 0), rocksdb::Env::Default(),
                                           &db, &families)
                    .ok());
  BOOST_REQUIRE(families.size() == 2u);
  for (const auto& f : families)
    BOOST_TEST(f.options.compaction_style == rocksdb::kCompactionStyleUniversal, f.name);
}

// A tiered store gives RocksDB a sixteenth of its budget for the block cache and for each
// memtable (from 1 MiB to 64 MiB), and counts them in its memory.
BOOST_AUTO_TEST_CASE(a_tiered_stores_rocksdb_buffers_are_sized_from_its_budget_and_counted) {
  BOOST_TEST(tiered_rocksdb_buffer_bytes(size_t{64} << 20) == size_t{4} << 20);
  BOOST_TEST(tiered_rocksdb_buffer_bytes(size_t{4} << 20) == size_t{1} << 20);
  BOOST_TEST(tiered_rocksdb_buffer_bytes(size_t{8} << 30) == size_t{64} << 20);
  TempDir dir;
  auto spec = parse_store_spec("rocksdb:" + dir.sub("tiered"), size_t{128} << 20);
  BOOST_REQUIRE(spec.ok());
  // 2 shards: 64 MiB each, 4 MiB for the cache and each memtable; and lfu's frequency sketch,
  // 4 bytes for each of the 838,860 rows the budget holds, rounded up to a power of two: 4 MiB.
  auto store = open_shard_store(*spec, StoreIdentity{"test-cluster", 1, 2, rf});
  BOOST_REQUIRE(store.ok());
  BOOST_TEST((*store)->memory_bytes() == size_t{16} << 20);
  const uint64_t keys[] = {1, 2, 3};
  BOOST_REQUIRE((*store)->load(keys).ok());
  for (uint64_t k : keys) (*store)->find_or_insert(k);
  BOOST_REQUIRE((*store)->commit().ok());
  // Each cached row: its floats and 64 bytes of index and bookkeeping (docs/storage.md); a new
  // row also its 16-byte entry in lfu's window until it is weighed.
  BOOST_TEST((*store)->memory_bytes() == (size_t{16} << 20) + 3 * (rf * sizeof(float) + 64 + 16));
  // lru keeps no sketch and no window (shard 0: the first store holds shard 1 open).
  spec->policy = EvictionPolicy::lru;
  auto lru = open_shard_store(*spec, StoreIdentity{"test-cluster", 0, 2, rf});
  BOOST_REQUIRE(lru.ok());
  BOOST_TEST((*lru)->memory_bytes() == size_t{12} << 20);
}

// A RocksDB store without a cache counts RocksDB's memtables and block cache in its memory, as
// the tiered store does: they are most of what the process holds for it.
BOOST_AUTO_TEST_CASE(a_rocksdb_stores_memory_counts_rocksdbs_buffers) {
  TempDir dir;
  auto spec = parse_store_spec("rocksdb:" + dir.sub("rocks"), 0);
  BOOST_REQUIRE(spec.ok());
  spec->block_cache_bytes = size_t{8} << 20;
  auto store = open_shard_store(*spec, StoreIdentity{"test-cluster", 0, 1, rf});
  BOOST_REQUIRE(store.ok());
  // Two 64 MiB memtables and the 8 MiB block cache; no row handed out yet.
  const size_t buffers = 2 * rocksdb_default_buffer_bytes + (size_t{8} << 20);
  BOOST_TEST((*store)->memory_bytes() == buffers);
  const uint64_t keys[] = {1, 2, 3};
  BOOST_REQUIRE((*store)->load(keys).ok());
  for (uint64_t k : keys) (*store)->find_or_insert(k);
  BOOST_TEST((*store)->memory_bytes() >= buffers + 3 * rf * sizeof(float));
  BOOST_REQUIRE((*store)->commit().ok());
  BOOST_TEST((*store)->stats().memory_bytes == (*store)->memory_bytes());
}

BOOST_AUTO_TEST_CASE(a_missing_store_is_not_found_when_it_must_exist) {
  TempDir dir;
  RocksTableOptions o;
  o.path = dir.sub("nothing-here");
  o.create_if_missing = false;
  auto t = RocksTable::open(o, ident);
  BOOST_REQUIRE(!t.ok());
  BOOST_TEST((t.status().code() == Status::Code::not_found));
  BOOST_TEST(t.status().message().find(o.path) != std::string::npos);
  BOOST_TEST(!RocksTable::open_read_only(o.path).ok());
}

BOOST_AUTO_TEST_CASE(a_corrupt_store_is_an_error_naming_the_path_not_a_fresh_start) {
  TempDir dir;
  {
    RocksRowStore store(open_table(dir.sub("db")));
    std::map<uint64_t, std::vector<float>> expect;
    exercise(store, expect, 5, 20, 100);
  }
  // Overwrite the CURRENT file (which names the manifest) with garbage.
  { std::ofstream(dir.path / "db" / "CURRENT", std::ios::trunc) << "garbage\n"; }
  RocksTableOptions o;
  o.path = dir.sub("db");
  auto t = RocksTable::open(o, ident);
  BOOST_REQUIRE(!t.ok());
  BOOST_TEST(t.status().message().find(o.path) != std::string::npos, t.status().message());
}

BOOST_AUTO_TEST_CASE(a_failed_write_fails_the_commit_and_stops_the_shard) {
  // A full disk, injected through the table (no tmpfs can be mounted here).
  TempDir dir;
  auto table =
      open_table(dir.sub("db"), StoreIdentity{"c", 0, 1, 3 + 3});  // width 3 + adagrad state 3
  RocksTable* raw = table.get();
  const ShardConfig sc = colony::testing::small_adagrad_shard();
  auto shard =
      std::move(ShardCore::make(sc, std::make_unique<RocksRowStore>(std::move(table))).value());
  std::vector<uint64_t> keys{make_key(1, 1), make_key(1, 2)};
  Outbox out;
  shard->on_message(PullRequest{{7, 1, 1}, 0, 7, keys}, out);
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST(shard->error().ok());
  raw->inject_write_failure(Status::io_error(raw->path() + ": No space left on device (injected)"));
  out.clear();
  shard->on_message(PushRequest{{7, 2, 1}, 1, keys, std::vector<float>(6, 1.0f)}, out);
  BOOST_TEST(out.empty());  // not acknowledged
  BOOST_REQUIRE(!shard->error().ok());
  BOOST_TEST((shard->error().code() == Status::Code::io_error));
  BOOST_TEST(shard->error().message().find(dir.sub("db")) != std::string::npos,
             shard->error().message());
  out.clear();
  shard->on_message(PullRequest{{7, 3, 1}, 1, 7, keys}, out);
  BOOST_TEST(out.empty());  // a failed shard answers nothing more
}

// A tiered store whose commit failed (its push log could not be written: a full disk) holds
// that batch's rows changed in its cache, and they are not the store's: it writes nothing back
// after (before, an exit's flush put them in the table without the batch's clocks and emptied
// the log, so a push never acknowledged was there, and taken again when sent again). Reopened,
// the store holds the last committed batch, rows and clocks together.
BOOST_AUTO_TEST_CASE(a_tiered_store_whose_commit_failed_writes_nothing_back) {
  TempDir dir;
  const StoreIdentity id{"c", 0, 1, 2};
  const uint64_t keys[] = {make_key(1, 1)};
  auto batch = [&](TieredRowStore& store, float value, uint32_t clock) {
    BOOST_REQUIRE(store.load(keys).ok());
    std::fill_n(store.find_or_insert(keys[0]).first, 2, value);
    store.stage_clock(7, clock);
    return store.commit();
  };
  auto open = [&] {
    auto store = std::make_unique<TieredRowStore>(open_table(dir.sub("db"), id), TieredOptions{});
    auto log = PushLog::open(dir.sub("log"), 2, false);
    BOOST_REQUIRE(log.ok());
    PushLog* raw = log->get();
    BOOST_REQUIRE(store->attach_log(std::move(log.value()), true).ok());
    return std::make_pair(std::move(store), raw);
  };
  {
    auto [store, log] = open();
    BOOST_REQUIRE(batch(*store, 1.0f, 1).ok());
    log->inject_append_failure(Status::io_error(log->path() + ": No space left on device"));
    BOOST_REQUIRE(!batch(*store, 2.0f, 2).ok());
    const Status flushed = store->flush();  // as the ps does on its way out
    BOOST_TEST(flushed.message().find("failed to commit") != std::string::npos, flushed.message());
    BOOST_TEST(!store->checkpoint(dir.sub("ckpt"), id).ok());
  }
  auto [store, log] = open();
  BOOST_TEST((store->committed_clocks() == std::map<uint64_t, uint32_t>{{7, 1}}));
  BOOST_TEST(store->find(keys[0])[0] == 1.0f);
}

// A read that fails in load_for_write (a row evicted to disk cannot be read back) fails the
// batch, and its commit, with the read's error naming the store; the store writes nothing back
// after, and reopened holds the last committed batch, rows and clock together.
BOOST_AUTO_TEST_CASE(a_failed_read_in_load_for_write_fails_the_batch_and_loses_nothing_committed) {
  TempDir dir;
  const StoreIdentity id{"c", 0, 1, 2};
  const std::vector<uint64_t> keys = {make_key(1, 1), make_key(1, 2)};
  TieredOptions o;
  o.cache_bytes = 1 * (2 * sizeof(float) + 64);  // one row: the other is evicted at each commit
  auto open = [&] {
    auto store = std::make_unique<TieredRowStore>(open_table(dir.sub("db"), id), o);
    auto log = PushLog::open(dir.sub("log"), 2, false);
    BOOST_REQUIRE(log.ok());
    BOOST_REQUIRE(store->attach_log(std::move(log.value()), true).ok());
    return store;
  };
  std::vector<std::pair<float*, bool>> rows;
  {
    auto store = open();
    BOOST_REQUIRE(store->load_for_write(keys, rows).ok());
    BOOST_TEST((rows[0].second && rows[1].second));
    std::fill_n(rows[0].first, 2, 1.0f);
    std::fill_n(rows[1].first, 2, 2.0f);
    store->stage_clock(7, 1);
    BOOST_REQUIRE(store->commit().ok());
    BOOST_REQUIRE(store->cached_rows() == 1u);
    store->table().inject_read_failure(Status::io_error(dir.sub("db") + ": bad sector (injected)"));
    const Status loaded = store->load_for_write(keys, rows);
    BOOST_TEST((loaded.code() == Status::Code::io_error));
    BOOST_TEST(loaded.message().find("bad sector") != std::string::npos, loaded.message());
    store->stage_clock(7, 2);
    const Status committed = store->commit();
    BOOST_TEST(committed.message().find("bad sector") != std::string::npos, committed.message());
    store->table().inject_read_failure(Status());
    BOOST_TEST(!store->flush().ok());  // the failed batch is not the store's
  }
  auto store = open();
  BOOST_TEST((store->committed_clocks() == std::map<uint64_t, uint32_t>{{7, 1}}));
  BOOST_REQUIRE(store->load(keys).ok());
  BOOST_TEST(store->find(keys[0])[0] == 1.0f);
  BOOST_TEST(store->find(keys[1])[0] == 2.0f);
}

BOOST_AUTO_TEST_CASE(shard_over_rocksdb_and_tiered_gives_the_rows_of_the_memory_shard) {
  TempDir dir;
  const ShardConfig sc = colony::testing::small_adagrad_shard();
  const StoreIdentity id{"c", 0, 1, 6};
  auto memory = std::move(ShardCore::make(sc).value());
  auto rocks = std::move(
      ShardCore::make(sc, std::make_unique<RocksRowStore>(open_table(dir.sub("a"), id))).value());
  TieredOptions t;
  t.cache_bytes = 5 * (6 * sizeof(float) + 64);
  auto tiered = std::move(
      ShardCore::make(sc, std::make_unique<TieredRowStore>(open_table(dir.sub("b"), id), t))
          .value());
  SplitMix64 rng(9);
  for (uint32_t step = 0; step < 40; ++step) {
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 8; ++k)
      keys.push_back(make_key(1, (rng.next() % 4) * 8 + k));  // unique
    std::vector<float> grads(keys.size() * 3);
    for (float& g : grads) g = float(unit_double(rng.next()) - 0.5);
    std::vector<std::vector<float>> replies;
    for (ShardCore* s : {memory.get(), rocks.get(), tiered.get()}) {
      Outbox out;
      s->on_message(PullRequest{{7, 2 * step + 1, 1}, step, 7, keys}, out);
      s->on_message(PushRequest{{7, 2 * step + 2, 1}, step + 1, keys, grads}, out);
      BOOST_REQUIRE_EQUAL(out.size(), 2u);
      const FloatBuffer& v = std::get<PullReply>(out[0].message).values;
      replies.emplace_back(v.begin(), v.end());
    }
    BOOST_TEST((replies[0] == replies[1]));
    BOOST_TEST((replies[0] == replies[2]));
  }
  BOOST_TEST(memory->rows() == rocks->rows());
  BOOST_TEST(memory->rows() == tiered->rows());
}

// Issue 14: a tiered store writes the rows it holds only in memory back to disk on its own, not
// only at its end, once the rows updated since its last write-back pass log_bytes_max (as log
// records) and write_back_ratio times the dirty rows: ten rows updated every batch, cached in a
// cache that holds them all, reach the disk every 8 batches with a ratio of 8; with a ratio of 1,
// at the first batch past log_bytes_max.
BOOST_AUTO_TEST_CASE(a_tiered_store_writes_its_cached_rows_back_once_enough_updates_call_for_it) {
  const uint64_t record = rf * sizeof(float) + sizeof(uint64_t);
  for (auto [ratio, log_rows, first] : {std::tuple{8u, 0u, 8u}, std::tuple{1u, 45u, 5u}}) {
    BOOST_TEST_CONTEXT("ratio " << ratio << ", log_bytes_max " << log_rows << " records") {
      TempDir dir;
      TieredOptions t;
      t.cache_bytes = 1 << 20;
      t.write_back_ratio = ratio;
      t.log_bytes_max = log_rows * record;
      TieredRowStore store(open_table(dir.sub("db")), t);
      std::vector<uint64_t> keys(10);
      std::iota(keys.begin(), keys.end(), 1);
      std::vector<uint64_t> on_disk, want;
      for (uint32_t batch = 1; batch <= 2 * first; ++batch) {
        BOOST_REQUIRE(store.load(keys).ok());
        for (uint64_t k : keys) store.find_or_insert(k).first[0] += 1.0f;
        BOOST_REQUIRE(store.commit().ok());
        on_disk.push_back(store.table().rows());
        want.push_back(batch >= first ? 10 : 0);
      }
      BOOST_TEST(on_disk == want, boost::test_tools::per_element());
      BOOST_TEST(store.stats().write_batches == 2u);  // at `first` and 2 x `first`
      BOOST_TEST(store.cached_rows() == 10u);         // still all in memory too
    }
  }
}

BOOST_AUTO_TEST_CASE(store_flags_parse_and_name_the_flag_when_wrong) {
  BOOST_TEST((parse_store_spec("memory", 0).value().kind == StoreKind::memory));
  BOOST_TEST((parse_store_spec("rocksdb:/x", 0).value().kind == StoreKind::rocksdb));
  auto tiered = parse_store_spec("rocksdb:/x", 1000);
  BOOST_TEST((tiered.value().kind == StoreKind::tiered));
  BOOST_TEST(tiered.value().dir == "/x");
  for (auto [text, cache] :
       {std::pair{"rocksdb:", 0}, std::pair{"disk", 0}, std::pair{"memory", 5}}) {
    auto s = parse_store_spec(text, size_t(cache));
    BOOST_REQUIRE(!s.ok());
    BOOST_TEST(s.status().message().find("--") != std::string::npos);
  }
  BOOST_TEST(shard_store_path("/a/b", 3) == "/a/b/shard-3");
  // --durability: each store's default, the job's choice, and what a store cannot promise.
  BOOST_TEST((parse_store_spec("memory", 0).value().durability == Durability::none));
  BOOST_TEST((tiered.value().durability == Durability::log));
  StoreSpec memory = parse_store_spec("memory", 0).value();
  BOOST_TEST(set_durability(memory, Durability::none).ok());
  for (Durability d : {Durability::log, Durability::fsync}) {
    Status st = set_durability(memory, d);
    BOOST_REQUIRE(!st.ok());
    BOOST_TEST(st.message().find("--durability") != std::string::npos, st.message());
  }
  for (const char* text : {"none", "log", "fsync"})
    BOOST_TEST(to_string(parse_durability(text).value()) == std::string(text));
  for (const char* bad : {"replicated:2", "always", ""}) {
    auto d = parse_durability(bad);
    BOOST_REQUIRE(!d.ok());
    BOOST_TEST(d.status().message().find("--durability") != std::string::npos);
  }
  BOOST_TEST(set_durability(tiered.value(), Durability::fsync).ok());
  BOOST_TEST((tiered.value().durability == Durability::fsync));
}
