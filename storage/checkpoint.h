// Checkpoints of a job's shard stores, and the tools that list, verify, restore and export
// them. Layout under a checkpoint root (by default DIR/checkpoints for --store rocksdb:DIR):
//
//   ROOT/step-<S>/shard-<i>/       shard i's rows at step S: a RocksDB database (parameters
//                                  and optimizer state in one value per key, so they are
//                                  always saved and restored together)
//   ROOT/step-<S>/dense.bin        a deep model's dense layers and their optimizer state at
//                                  step S (storage/dense_file.h); none for LR and FM
//   ROOT/step-<S>/MANIFEST.json    written last (to a temporary name, then renamed): a step
//                                  folder without it is an incomplete checkpoint
//
// MANIFEST.json: {"format": 1, "step": S, "cluster_id": "...", "shards": N, "row_floats": F,
// "value_floats": V,
//   "shard_checkpoints": [{"shard": i, "dir": "shard-<i>", "rows": R,
//                          "sender_clocks": [[node, clock], ...]}, ...],
//   "dense": {"file": "dense.bin", "shape": "...", "params": P}}     (deep models only)
// A shard's sender clocks say what its copy holds: every update of steps below each
// sender's clock (ShardCore::checkpoint_due).
//
// Errors: every failure names the file or folder (invalid_input for a malformed manifest or a
// checkpoint whose contents disagree with it, not_found for a missing one, io_error for the
// disk). Thread-safety: functions are independent; do not run two on one folder at once.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace colony {

struct ShardCheckpoint {
  uint32_t shard = 0;
  std::string dir;  // relative to the step folder
  uint64_t rows = 0;
  std::vector<std::pair<uint64_t, uint32_t>> sender_clocks;
};

struct CheckpointManifest {
  uint32_t step = 0;
  std::string cluster_id;
  uint32_t shards = 0;
  uint64_t row_floats = 0;
  uint64_t value_floats = 0;  // the parameters at the front of a row; the rest is optimizer state
  std::vector<ShardCheckpoint> shard_checkpoints;  // one per shard, by shard index
  // A deep model's dense layers in dense.bin (DenseState::shape and its parameter count); an
  // empty shape for LR and FM.
  std::string dense_shape{};
  uint64_t dense_params = 0;
};

// ROOT/step-<step> and ROOT/step-<step>/shard-<shard>.
std::string checkpoint_step_dir(const std::string& root, uint32_t step);
std::string checkpoint_shard_dir(const std::string& root, uint32_t step, uint32_t shard);

// Writes ROOT/step-<m.step>/MANIFEST.json atomically (temporary file, fsync, rename).
Status write_manifest(const std::string& root, const CheckpointManifest& m);
// Reads and checks a step folder's manifest: not_found when absent, invalid_input (naming the
// file and field) when malformed.
Expected<CheckpointManifest> read_manifest(const std::string& step_dir);

struct CheckpointListing {
  uint32_t step = 0;
  std::string dir;
  bool complete = false;  // has a readable manifest
  std::string problem;    // why not, when not
};
// The step folders under `root`, oldest first. not_found when root does not exist.
Expected<std::vector<CheckpointListing>> list_checkpoints(const std::string& root);
// The newest step folder with a readable manifest; not_found (naming root) when there is none.
Expected<std::string> latest_checkpoint(const std::string& root);
// `dir` when it is a step folder (it has a readable manifest), else the newest complete
// checkpoint under it (a root); not_found naming it when it is neither.
Expected<std::string> checkpoint_step(const std::string& dir);

// Makes ROOT/step-<step> for shard `shard`'s copy and returns ROOT/step-<step>/shard-<shard>,
// which then does not exist: a shard folder left in a step that has no manifest (a crash while
// checkpointing, or a run that stopped before the step completed) is not a checkpoint and is
// removed first. invalid_input naming the step folder when it has a manifest (a complete
// checkpoint is never overwritten); io_error naming the folder when it cannot be made or cleared.
Expected<std::string> prepare_checkpoint_copy(const std::string& root, uint32_t step,
                                              uint32_t shard);
// Ok when a job that checkpoints every `every` steps from step 0 into `root` will find none of its
// steps taken: no step folder with a manifest at a multiple of `every` (a root that does not
// exist is free). invalid_input naming the root and the steps taken otherwise, before any work:
// another run's complete checkpoints are never overwritten, and a job would otherwise fail at
// its first checkpoint.
Status check_checkpoint_root_free(const std::string& root, uint32_t every);

// Opens every shard's copy read-only and checks it against the manifest: its identity
// (cluster, shard, shard count, row size), its row count, every row's size; and a deep
// model's dense.bin (its checksum, shape, size and step). Returns the total number of rows.
Expected<uint64_t> verify_checkpoint(const std::string& step_dir);

// Verifies the checkpoint, then copies shard i's rows to STORE_DIR/shard-<i> for every shard
// (and a deep model's dense.bin to STORE_DIR/dense.bin), so that a job (or a PS daemon) opened
// on STORE_DIR continues from it. Fails, touching nothing, when a STORE_DIR/shard-<i> or
// STORE_DIR/dense.bin exists (remove it first: restoring never merges). All or nothing: every
// copy is made beside its place (NAME.restoring) and synced, and renamed into place only once
// all are complete, under the marker STORE_DIR/RESTORING (restore_marker_name,
// storage/store_spec.h), written first and removed last. A failed restore removes what it made;
// one that stopped (a crash) leaves the marker, so that no shard of STORE_DIR opens, and the next
// restore into STORE_DIR first removes what the marker names. io_error naming the file or folder
// when a copy fails.
Status restore_checkpoint(const std::string& step_dir, const std::string& store_dir);

// Writes every row of a checkpoint (or of a store folder holding shard-<i>/ databases) to
// `out` in the export format:
//   header: 8 bytes "COLONYX1", then little-endian u32 row_floats, u32 value_floats
//   (the parameters; the rest of a row is optimizer state), u64 rows;
//   then per row: u64 key, row_floats x f32 (little-endian), in key order within a shard,
//   shards one after another.
// A serving system needs the first value_floats of each row. `dir` is a checkpoint's step
// folder (value_floats 0: take it from the manifest) or a store folder (value_floats needed).
// Returns the rows written. The output is written to a temporary name and renamed. A store folder
// whose push log holds pushes not written back yet (storage/push_log.h) is refused
// (invalid_input naming it): its table alone would miss them.
Expected<uint64_t> export_rows(const std::string& dir, uint32_t value_floats,
                               const std::string& out);

}  // namespace colony
