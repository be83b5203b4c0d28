#include "storage/checkpoint.h"

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "storage/dense_file.h"
#include "storage/push_log.h"
#include "storage/rocks_table.h"
#include "storage/store_spec.h"

namespace colony {

namespace fs = std::filesystem;

namespace {
constexpr const char* manifest_name = "MANIFEST.json";
constexpr uint32_t manifest_format = 1;
constexpr const char* step_prefix = "step-";

bool parse_step(const std::string& name, uint32_t& step) {
  if (name.rfind(step_prefix, 0) != 0 || name.size() == 5 || name.size() > 15) return false;
  uint64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + uint64_t(name[i] - '0');
  }
  if (v > UINT32_MAX) return false;
  step = uint32_t(v);
  return true;
}
}  // namespace

std::string checkpoint_step_dir(const std::string& root, uint32_t step) {
  return (fs::path(root) / fmt::format("{}{}", step_prefix, step)).string();
}

std::string checkpoint_shard_dir(const std::string& root, uint32_t step, uint32_t shard) {
  return (fs::path(checkpoint_step_dir(root, step)) / fmt::format("shard-{}", shard)).string();
}

Status write_manifest(const std::string& root, const CheckpointManifest& m) {
  nlohmann::json j = {{"format", manifest_format},  {"step", m.step},
                      {"cluster_id", m.cluster_id}, {"shards", m.shards},
                      {"row_floats", m.row_floats}, {"value_floats", m.value_floats}};
  nlohmann::json list = nlohmann::json::array();
  for (const ShardCheckpoint& s : m.shard_checkpoints)
    list.push_back(
        {{"shard", s.shard}, {"dir", s.dir}, {"rows", s.rows}, {"sender_clocks", s.sender_clocks}});
  j["shard_checkpoints"] = list;
  if (!m.dense_shape.empty())
    j["dense"] = {{"file", dense_file_name}, {"shape", m.dense_shape}, {"params", m.dense_params}};
  // The copies' folders are on disk before the manifest says the step is complete (RocksDB syncs
  // the files of a copy, not the folder that names them), and so are their names in the step
  // folder (a copy is renamed into place there)...
  const fs::path step_dir = checkpoint_step_dir(root, m.step);
  std::error_code ec;
  for (const ShardCheckpoint& s : m.shard_checkpoints)
    if (fs::exists(step_dir / s.dir, ec))  // another ps's copy may live on another host
      if (Status st = sync_folder((step_dir / s.dir).string()); !st.ok()) return st;
  if (Status st = sync_folder(step_dir.string()); !st.ok()) return st;
  // ...and the manifest is written with a temporary name of this process's own: the ps daemons
  // of one job may share a checkpoint folder and write the same manifest at once. The step
  // folder is synced with it; the root, which names the step folder, after it.
  if (Status st = write_file_atomically((step_dir / manifest_name).string(), j.dump(2) + "\n");
      !st.ok())
    return st;
  return sync_folder(root);
}

Expected<CheckpointManifest> read_manifest(const std::string& step_dir) {
  const fs::path path = fs::path(step_dir) / manifest_name;
  std::ifstream in(path);
  if (!in)
    return Status::not_found(fmt::format(
        "{}: no checkpoint manifest (an incomplete or missing checkpoint)", path.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_input(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
  CheckpointManifest m;
  try {
    if (j.at("format").get<uint32_t>() != manifest_format)
      return Status::invalid_input(fmt::format("{}: format {} is not {}", path.string(),
                                               j.at("format").dump(), manifest_format));
    m.step = j.at("step").get<uint32_t>();
    m.cluster_id = j.at("cluster_id").get<std::string>();
    m.shards = j.at("shards").get<uint32_t>();
    m.row_floats = j.at("row_floats").get<uint64_t>();
    m.value_floats = j.at("value_floats").get<uint64_t>();
    for (const auto& s : j.at("shard_checkpoints")) {
      ShardCheckpoint c;
      c.shard = s.at("shard").get<uint32_t>();
      c.dir = s.at("dir").get<std::string>();
      c.rows = s.at("rows").get<uint64_t>();
      c.sender_clocks = s.at("sender_clocks").get<std::vector<std::pair<uint64_t, uint32_t>>>();
      m.shard_checkpoints.push_back(std::move(c));
    }
    if (j.contains("dense")) {
      const auto& d = j.at("dense");
      if (d.at("file").get<std::string>() != dense_file_name)
        return Status::invalid_input(fmt::format("{}: dense.file is {}; expected \"{}\"",
                                                 path.string(), d.at("file").dump(),
                                                 dense_file_name));
      m.dense_shape = d.at("shape").get<std::string>();
      m.dense_params = d.at("params").get<uint64_t>();
      if (m.dense_shape.empty())
        return Status::invalid_input(fmt::format("{}: dense.shape is empty", path.string()));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_input(
        fmt::format("{}: a field is missing or of the wrong type: {}", path.string(), e.what()));
  }
  if (m.shards == 0 || m.shard_checkpoints.size() != m.shards || m.row_floats == 0 ||
      m.value_floats == 0 || m.value_floats > m.row_floats)
    return Status::invalid_input(fmt::format(
        "{}: {} shard checkpoints for {} shards, rows of {} floats ({} values)", path.string(),
        m.shard_checkpoints.size(), m.shards, m.row_floats, m.value_floats));
  for (uint32_t i = 0; i < m.shards; ++i) {
    const ShardCheckpoint& c = m.shard_checkpoints[i];
    // The folder must be the shard's own, inside the step folder: never a path elsewhere.
    if (c.shard != i || c.dir != fmt::format("shard-{}", i))
      return Status::invalid_input(
          fmt::format("{}: shard_checkpoints[{}] is shard {} in \"{}\"; expected shard {} "
                      "in \"shard-{}\"",
                      path.string(), i, c.shard, c.dir, i, i));
  }
  return m;
}

Expected<std::vector<CheckpointListing>> list_checkpoints(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return Status::not_found(fmt::format("{}: no checkpoint folder there", root));
  std::vector<CheckpointListing> out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    uint32_t step = 0;
    if (!e.is_directory() || !parse_step(e.path().filename().string(), step)) continue;
    CheckpointListing l{step, e.path().string(), false, ""};
    auto m = read_manifest(l.dir);
    if (m)
      l.complete = true;
    else
      l.problem = m.status().message();
    out.push_back(std::move(l));
  }
  if (ec) return Status::io_error(fmt::format("{}: cannot list: {}", root, ec.message()));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

Expected<std::string> checkpoint_step(const std::string& dir) {
  if (auto m = read_manifest(dir)) return dir;
  auto latest = latest_checkpoint(dir);
  if (!latest)
    return Status::not_found(latest.status().message() +
                             " (and it is not a checkpoint step folder)");
  return latest;
}

Expected<std::string> latest_checkpoint(const std::string& root) {
  auto all = list_checkpoints(root);
  if (!all) return all.status();
  for (auto it = all->rbegin(); it != all->rend(); ++it)
    if (it->complete) return it->dir;
  return Status::not_found(fmt::format("{}: no complete checkpoint there", root));
}

Expected<std::string> prepare_checkpoint_copy(const std::string& root, uint32_t step,
                                              uint32_t shard) {
  const std::string step_dir = checkpoint_step_dir(root, step);
  const std::string dir = checkpoint_shard_dir(root, step, shard);
  std::error_code ec;
  if (fs::exists(fs::path(step_dir) / manifest_name, ec))
    return Status::invalid_input(fmt::format(
        "{}: a complete checkpoint of step {} is already there (another run's?): checkpoints are "
        "never overwritten; give another --checkpoint-dir or move it away",
        step_dir, step));
  fs::create_directories(step_dir, ec);
  if (ec) return Status::io_error(fmt::format("{}: cannot create: {}", step_dir, ec.message()));
  // Left by a checkpoint that never completed: not a checkpoint, and in the copy's way.
  fs::remove_all(dir, ec);
  if (ec)
    return Status::io_error(
        fmt::format("{}: cannot remove this unfinished copy: {}", dir, ec.message()));
  return dir;
}

Status check_checkpoint_root_free(const std::string& root, uint32_t every) {
  if (every == 0) return {};
  std::error_code ec;
  if (!fs::exists(root, ec)) return {};
  auto all = list_checkpoints(root);
  if (!all) return all.status();
  std::vector<std::string> taken;
  for (const CheckpointListing& l : *all)
    if (l.step % every == 0 && fs::exists(fs::path(l.dir) / manifest_name, ec))
      taken.push_back(fs::path(l.dir).filename().string());
  if (taken.empty()) return {};
  std::string list;
  for (size_t i = 0; i < taken.size() && i < 4; ++i) list += (i ? ", " : "") + taken[i];
  if (taken.size() > 4) list += fmt::format(" and {} more", taken.size() - 4);
  return Status::invalid_input(fmt::format(
      "{} holds complete checkpoints of an earlier run ({}) at steps this job would checkpoint "
      "(--checkpoint-every {}), and checkpoints are never overwritten: give another "
      "--checkpoint-dir, or move them away",
      root, list, every));
}

Expected<uint64_t> verify_checkpoint(const std::string& step_dir) {
  auto m = read_manifest(step_dir);
  if (!m) return m.status();
  uint64_t total = 0;
  for (const ShardCheckpoint& c : m->shard_checkpoints) {
    const std::string dir = (fs::path(step_dir) / c.dir).string();
    auto t = RocksTable::open_read_only(dir);
    if (!t) return t.status();
    const StoreIdentity& id = (*t)->identity();
    if (id.cluster_id != m->cluster_id || id.shard_index != c.shard || id.shards != m->shards ||
        id.row_floats != m->row_floats)
      return Status::invalid_input(
          fmt::format("{}: holds cluster \"{}\" shard {} of {} (rows of {} floats); the manifest "
                      "says cluster \"{}\" shard {} "
                      "of {} (rows of {} floats)",
                      dir, id.cluster_id, id.shard_index, id.shards, id.row_floats, m->cluster_id,
                      c.shard, m->shards, m->row_floats));
    uint64_t rows = 0;
    if (Status s = (*t)->for_each_in_range(0, UINT64_MAX, [&](uint64_t, const float*) { ++rows; });
        !s.ok())
      return s;
    if (rows != c.rows || rows != (*t)->rows())
      return Status::invalid_input(
          fmt::format("{}: holds {} rows; its count says {} and the manifest {}", dir, rows,
                      (*t)->rows(), c.rows));
    total += rows;
  }
  if (!m->dense_shape.empty()) {
    const std::string path = (fs::path(step_dir) / dense_file_name).string();
    auto d = read_dense_state(path);
    if (!d) return d.status();
    if (d->shape != m->dense_shape || d->params.size() != m->dense_params || d->step != m->step)
      return Status::invalid_input(fmt::format(
          "{}: holds {} parameters of \"{}\" at step {}; the manifest says {} of "
          "\"{}\" at step {}",
          path, d->params.size(), d->shape, d->step, m->dense_params, m->dense_shape, m->step));
  }
  return total;
}

namespace {
// Removes what an interrupted restore_checkpoint put into `store_dir` (the names its marker
// lists, and their staged copies), then the marker.
Status undo_restore(const fs::path& store_dir) {
  const fs::path marker = store_dir / restore_marker_name;
  std::ifstream in(marker);
  std::error_code ec;
  for (std::string name; std::getline(in, name);) {
    // The marker names plain entries of the folder; anything else is not this code's.
    if (name.empty() || fs::path(name).filename() != name || name == "." || name == "..")
      return Status::invalid_input(
          fmt::format("{}: names \"{}\", not an entry of the folder", marker.string(), name));
    fs::remove_all(store_dir / name, ec);
    if (!ec) fs::remove_all(store_dir / (name + ".restoring"), ec);
    if (ec)
      return Status::io_error(fmt::format("{}: cannot remove what an unfinished restore left: {}",
                                          (store_dir / name).string(), ec.message()));
  }
  fs::remove(marker, ec);
  if (ec)
    return Status::io_error(fmt::format("{}: cannot remove: {}", marker.string(), ec.message()));
  return sync_folder(store_dir.string());
}
}  // namespace

Status restore_checkpoint(const std::string& step_dir, const std::string& store_dir) {
  auto verified = verify_checkpoint(step_dir);
  if (!verified) return verified.status();
  const CheckpointManifest m = read_manifest(step_dir).value();
  const fs::path store(store_dir);
  std::error_code ec;
  // An earlier restore into this folder stopped before its end: what it left is no store.
  if (fs::exists(store / restore_marker_name, ec))
    if (Status s = undo_restore(store); !s.ok()) return s;
  // What the restore puts into the store folder, each made beside its place (NAME.restoring).
  std::vector<std::string> names;
  for (uint32_t i = 0; i < m.shards; ++i) names.push_back(fmt::format("shard-{}", i));
  if (!m.dense_shape.empty()) names.push_back(dense_file_name);
  for (const std::string& name : names)
    if (fs::exists(store / name, ec))
      return Status::invalid_input(
          fmt::format("{}: exists; restoring never merges into a store: remove it first",
                      (store / name).string()));
  // The marker, before the first change: until it is removed, after the last, no shard store of
  // this folder opens (open_shard_store), and a restore run again starts by undoing this one.
  std::string listed;
  for (const std::string& name : names) listed += name + "\n";
  fs::create_directories(store, ec);
  if (ec) return Status::io_error(fmt::format("{}: cannot create: {}", store_dir, ec.message()));
  if (Status s = write_file_atomically((store / restore_marker_name).string(), listed); !s.ok())
    return s;
  Status done;
  for (uint32_t i = 0; i < m.shards && done.ok(); ++i)
    // A copy, not hard links: RocksDB appends to some of its files (the MANIFEST) in place.
    done = copy_folder_synced((fs::path(step_dir) / m.shard_checkpoints[i].dir).string(),
                              (store / (names[i] + ".restoring")).string());
  if (done.ok() && !m.dense_shape.empty()) {
    auto d = read_dense_state((fs::path(step_dir) / dense_file_name).string());
    done = d ? write_dense_state((store / (names.back() + ".restoring")).string(), *d) : d.status();
  }
  for (size_t i = 0; i < names.size() && done.ok(); ++i) {
    fs::rename(store / (names[i] + ".restoring"), store / names[i], ec);
    if (ec)
      done = Status::io_error(fmt::format("{}: cannot rename into place: {}",
                                          (store / names[i]).string(), ec.message()));
  }
  if (done.ok()) done = sync_folder(store_dir);
  if (!done.ok()) {
    // Nothing of this restore stays: the store folder is as it was.
    if (Status u = undo_restore(store); !u.ok())
      return Status::io_error(
          fmt::format("{}; and undoing the restore failed: {}", done.message(), u.message()));
    return Status::io_error(fmt::format("{}; nothing was restored", done.message()));
  }
  fs::remove(store / restore_marker_name, ec);
  if (ec)
    return Status::io_error(
        fmt::format("{}: cannot remove: {}", (store / restore_marker_name).string(), ec.message()));
  return sync_folder(store_dir);
}

Expected<uint64_t> export_rows(const std::string& dir, uint32_t value_floats,
                               const std::string& out) {
  std::vector<std::string> shard_dirs;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / manifest_name, ec)) {
    auto m = read_manifest(dir);
    if (!m) return m.status();
    if (value_floats == 0) value_floats = uint32_t(m->value_floats);
    for (const ShardCheckpoint& c : m->shard_checkpoints)
      shard_dirs.push_back((fs::path(dir) / c.dir).string());
  } else {
    for (uint32_t i = 0; fs::exists(shard_store_path(dir, i), ec); ++i)
      shard_dirs.push_back(shard_store_path(dir, i));
    if (shard_dirs.empty())
      return Status::not_found(fmt::format(
          "{}: neither a checkpoint (no {}) nor a store (no shard-0)", dir, manifest_name));
    if (value_floats == 0)
      return Status::invalid_input(
          fmt::format("{}: a store folder does not say how many floats of a row are "
                      "values: give --value-floats",
                      dir));
  }
  std::vector<std::unique_ptr<RocksTable>> tables;
  uint64_t rows = 0;
  uint32_t row_floats = 0;
  for (const std::string& d : shard_dirs) {
    if (push_log_pending(d))
      return Status::invalid_input(fmt::format(
          "{}: its push log ({}) holds pushes not written back yet (the ps or job that had the "
          "store open did not exit cleanly): run the job that wrote it once more, or start its "
          "ps again, which replays the log; then export",
          d, push_log_file_name));
    auto t = RocksTable::open_read_only(d);
    if (!t) return t.status();
    if (row_floats == 0) row_floats = uint32_t((*t)->row_floats());
    if ((*t)->row_floats() != row_floats)
      return Status::invalid_input(
          fmt::format("{}: rows of {} floats, other shards {}", d, (*t)->row_floats(), row_floats));
    rows += (*t)->rows();
    tables.push_back(std::move(t.value()));
  }
  if (value_floats > row_floats)
    return Status::invalid_input(
        fmt::format("--value-floats {} is more than a row's {} floats", value_floats, row_floats));
  const std::string tmp = out + ".tmp";
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) return Status::io_error(fmt::format("{}: cannot create", tmp));
  auto put = [&](const void* p, size_t n) {
    f.write(static_cast<const char*>(p), std::streamsize(n));
  };
  static_assert(std::endian::native == std::endian::little, "the export format is little-endian");
  put("COLONYX1", 8);
  put(&row_floats, 4);
  put(&value_floats, 4);
  put(&rows, 8);
  uint64_t written = 0;
  for (const auto& t : tables) {
    Status s = t->for_each_in_range(0, UINT64_MAX, [&](uint64_t key, const float* row) {
      put(&key, 8);
      put(row, row_floats * sizeof(float));
      ++written;
    });
    if (!s.ok()) return s;
  }
  f.close();
  if (!f) return Status::io_error(fmt::format("{}: cannot write (disk full?)", tmp));
  if (written != rows)
    return Status::invalid_input(
        fmt::format("{}: the shards' counts say {} rows, iteration found {}", dir, rows, written));
  fs::rename(tmp, out, ec);
  if (ec)
    return Status::io_error(fmt::format("{}: cannot rename into place: {}", out, ec.message()));
  return written;
}

}  // namespace colony
