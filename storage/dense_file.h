// A deep model's dense layers and their optimizer's state, saved beside its rows: in a
// checkpoint's step folder (ROOT/step-<S>/dense.bin, storage/checkpoint.h) and in a store's
// folder when a job ends (DIR/dense.bin), so that a job restored from a checkpoint or continuing
// a store continues its dense layers too.
//
// File format (little-endian), docs/storage.md:
//   8 bytes "COLONYD1"; u32 shape bytes, then the shape text (what the floats are: model,
//   layer sizes, optimizer; at most 4096 bytes); u32 step; u64 params; u64 state floats;
//   u64 optimizer steps; params x f32; state floats x f32; u64 checksum (FNV-1a, 64-bit, of
//   every byte before it).
//
// Errors: every failure names the file. not_found when it is absent; invalid_input when it is
// not a dense file, is cut short, has bytes after its end, or fails its checksum (nothing is
// allocated beyond what the file's size allows); io_error for the disk.
// Thread-safety: functions are independent; do not write one path from two threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace colony {

inline constexpr const char* dense_file_name = "dense.bin";
inline constexpr size_t dense_shape_max = 4096;
// DIR/dense.bin: a store folder's dense layers (beside its shard-<i> folders).
std::string dense_store_path(const std::string& store_dir);

struct DenseState {
  std::string shape;  // what the floats are (worker/wiring.h dense_shape); compared on load
  uint32_t step = 0;  // steps trained into the parameters (a checkpoint's step)
  std::vector<float> params{};
  std::vector<float> optimizer_state{};  // nn::DenseOptimizer::state()
  uint64_t optimizer_steps = 0;          // nn::DenseOptimizer::steps()
  bool operator==(const DenseState&) const = default;
};

// Writes `state` to `path` atomically: a temporary file in the same folder, fsync, rename, then
// fsync of the folder. Fails with invalid_input when the shape is longer than dense_shape_max,
// io_error naming the file otherwise; `path` is then untouched.
Status write_dense_state(const std::string& path, const DenseState& state);
// Reads and checks a file written by write_dense_state.
Expected<DenseState> read_dense_state(const std::string& path);

// Writes `bytes` to `path` atomically as write_dense_state does (the checkpoint manifest uses it
// too). The temporary name carries the process id: processes sharing a folder do not collide.
Status write_file_atomically(const std::string& path, const std::string& bytes);
// fsync of a folder, so that the names it holds (files renamed or linked into it) survive a
// crash of the machine. io_error naming the folder when it cannot be opened or synced.
Status sync_folder(const std::string& folder);
// Copies folder `from` to `to` (which must not exist) recursively, then fsyncs every file and
// folder of the copy, so that once `to` is renamed into place (and its parent synced) the whole
// copy survives a crash of the machine. io_error naming `to` when a copy or a sync fails (files
// other than regular files and folders cannot be copied); the partial copy is left for the
// caller to remove.
Status copy_folder_synced(const std::string& from, const std::string& to);

}  // namespace colony
