// The embedded cluster's checkpoint orchestration (ClusterOptions::checkpoint_every): each
// shard's actor copies its store at a checkpoint step, a deep model's first replica hands in
// its dense layers of that step, and whichever comes last writes dense.bin and the manifest; and
// the recovery tests' restart of a shard from its newest checkpoint. Internal to actors/ (the
// daemons do the same across processes through the coordinator core).
#pragma once

#include <atomic>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "actors/core_actors.h"
#include "actors/embedded_cluster.h"
#include "ps/shard_core.h"
#include "storage/checkpoint.h"
#include "storage/dense_file.h"
#include "storage/store_spec.h"
#include "worker/worker_core.h"

namespace colony {

// Checkpoints and test restarts of the shards, run by each shard's actor between messages.
class ShardKeeper {
 public:
  // `dense_shape`: a deep model's (worker/wiring.h dense_shape), whose checkpoints wait for
  // its dense layers; empty for LR and FM.
  ShardKeeper(const ClusterOptions& c, std::vector<ShardConfig> configs,
              std::vector<StoreIdentity> identities, size_t value_floats, std::string dense_shape,
              std::shared_ptr<JobShared> shared)
      : options_(c),
        configs_(std::move(configs)),
        identities_(std::move(identities)),
        value_floats_(value_floats),
        dense_shape_(std::move(dense_shape)),
        shared_(std::move(shared)) {}

  // Run by a worker's actor after a message: the dense layers of a checkpoint step, when its
  // core kept a copy (WorkerConfig::dense_checkpoint_every).
  void after_worker_message(WorkerCore& core) {
    while (auto state = core.take_dense_checkpoint()) {
      state->shape = dense_shape_;
      std::lock_guard<std::mutex> lock(mutex_);
      const uint32_t step = state->step;
      pending_[step].dense = std::move(*state);
      if (Status s = complete(step); !s.ok()) shared_->fail(s);
    }
  }

  void after_message(ShardCore& core) {
    if (!core.error().ok()) return;
    if (auto step = core.checkpoint_due()) {
      if (Status s = checkpoint(core, *step); !s.ok()) shared_->fail(s);
    }
    const uint32_t i = core.config().shard_index;
    if (options_.restart_after_pushes && i == options_.restart_shard && !restarted_ &&
        core.stats().pushes_applied >= options_.restart_after_pushes) {
      restarted_ = true;
      if (Status s = restart(core); !s.ok()) shared_->fail(s);
    }
  }

  uint64_t checkpoints() const { return checkpoints_; }
  uint32_t last_step() const { return last_step_; }
  uint64_t restarts() const { return restarts_; }
  uint64_t updates_lost() const { return updates_lost_; }

 private:
  Status checkpoint(ShardCore& core, uint32_t step) {
    const uint32_t i = core.config().shard_index;
    auto dir = prepare_checkpoint_copy(options_.checkpoint_dir, step, i);
    if (!dir) return dir.status();
    if (Status s = core.store().checkpoint(*dir, identities_[i]); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mutex_);
    Pending& p = pending_[step];
    p.shards.resize(configs_.size());
    p.rows_pushed.resize(configs_.size());
    std::vector<std::pair<uint64_t, uint32_t>> clocks;
    for (auto [node, clock] : core.sender_clocks()) clocks.emplace_back(node, clock);
    p.shards[i] = ShardCheckpoint{i, fmt::format("shard-{}", i), core.rows(), std::move(clocks)};
    p.rows_pushed[i] = core.stats().rows_pushed;
    ++p.done;
    return complete(step);
  }

  // Once every shard's copy of `step` (and a deep model's dense layers) is in: dense.bin, then
  // the manifest. A step whose shards never checkpoint keeps its dense layers in memory only
  // until a later step completes. Holds mutex_.
  Status complete(uint32_t step) {
    Pending& p = pending_[step];
    if (p.done < configs_.size() || (!dense_shape_.empty() && !p.dense)) return {};
    const StoreIdentity& id = identities_.front();
    CheckpointManifest m{step,          id.cluster_id, uint32_t(configs_.size()),
                         id.row_floats, value_floats_, {}};
    for (auto& sc : p.shards) m.shard_checkpoints.push_back(*sc);
    if (p.dense) {
      m.dense_shape = p.dense->shape;
      m.dense_params = p.dense->params.size();
      const std::string path =
          (std::filesystem::path(checkpoint_step_dir(options_.checkpoint_dir, step)) /
           dense_file_name)
              .string();
      if (Status s = write_dense_state(path, *p.dense); !s.ok()) return s;
    }
    if (Status s = write_manifest(options_.checkpoint_dir, m); !s.ok()) return s;
    ++checkpoints_;
    last_step_ = step;
    complete_rows_pushed_[step] = p.rows_pushed;
    pending_.erase(pending_.begin(), pending_.upper_bound(step));
    return {};
  }

  Status restart(ShardCore& core) {
    const uint32_t i = core.config().shard_index;
    auto step_dir = latest_checkpoint(options_.checkpoint_dir);
    if (!step_dir)
      return Status::internal("restarting shard " + std::to_string(i) + ": " +
                              step_dir.status().message());
    auto manifest = read_manifest(*step_dir);
    if (!manifest) return manifest.status();
    uint64_t pushed_then = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pushed_then = complete_rows_pushed_.at(manifest->step)[i];
    }
    const auto clocks = core.sender_clocks();
    std::deque<PullRequest> waiting = core.take_waiting();
    const uint64_t pushed_now = core.stats().rows_pushed;
    // Close the old store first (its folder is replaced): swap in a core over an empty memory
    // store.
    auto placeholder = ShardCore::make(configs_[i]);
    if (!placeholder) return placeholder.status();
    core = std::move(**placeholder);
    auto store = restore_shard_store(
        options_.store, identities_[i],
        (std::filesystem::path(*step_dir) / fmt::format("shard-{}", i)).string());
    if (!store) return store.status();
    auto fresh = ShardCore::make(configs_[i], std::move(store.value()));
    if (!fresh) return fresh.status();
    if (Status s = (*fresh)->resume_clocks(clocks); !s.ok()) return s;
    core = std::move(**fresh);
    updates_lost_ += pushed_now - pushed_then;
    ++restarts_;
    Outbox out;
    for (const PullRequest& r : waiting) core.on_message(r, out);
    route(*shared_, out);
    return {};
  }

  struct Pending {
    std::vector<std::optional<ShardCheckpoint>> shards;
    std::vector<uint64_t> rows_pushed;
    size_t done = 0;
    std::optional<DenseState> dense;
  };
  const ClusterOptions options_;
  const std::vector<ShardConfig> configs_;
  const std::vector<StoreIdentity> identities_;
  const size_t value_floats_;
  const std::string dense_shape_;
  std::shared_ptr<JobShared> shared_;
  std::mutex mutex_;
  std::map<uint32_t, Pending> pending_;                             // guarded by mutex_
  std::map<uint32_t, std::vector<uint64_t>> complete_rows_pushed_;  // guarded by mutex_
  std::atomic<uint64_t> checkpoints_{0}, restarts_{0}, updates_lost_{0};
  std::atomic<uint32_t> last_step_{0};
  bool restarted_ = false;  // only the restarted shard's actor reads and writes it
};

}  // namespace colony
