// A whole single-process training run: epochs over a file (or generated data), evaluation on
// a test file, and the numbers a report needs. The CLI's `colony train` is a thin shell
// around run_train_job; tests call it directly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/generator.h"
#include "data/reader.h"
#include "ps/cluster_protocol.h"
#include "worker/trainer.h"

namespace colony {

struct TrainJobOptions {
  std::string data;  // training file; empty = generate data in memory (see `generate`)
  std::string test;  // test file; required with `data`, generated otherwise
  TrainerConfig trainer;
  size_t batch = 512;
  int epochs = 1;
  ReaderOptions reader;  // batch_rows is overridden by `batch`
  GenOptions generate;   // rows, test_rows, seed and vocab_scale when `data` is empty
  // Training rows held out for validation (data/holdout.h): 0 = none, else in (0, 1). The
  // held-out rows are scored after every epoch (the cluster engine: after the last).
  double valid_fraction = 0.0;
  // With valid_fraction: the single-process trainer stops after `patience` epochs in a row
  // whose validation logloss is no better than the best before them (0: never stops early).
  int patience = 1;
  // False: run_train_job neither reads nor scores the test set (EpochResult's test_logloss and
  // test_auc stay 0), as in the trials that choose a job's settings (choose_optimizer), which
  // must not see it.
  bool score_test = true;
};

struct EpochResult {
  int epoch = 0;
  double train_logloss = 0.0;  // progressive: each sample scored before it was learned
  double test_logloss = 0.0;
  double test_auc = 0.0;
  double valid_logloss = 0.0;  // on the held-out rows, when valid_fraction > 0
  double valid_auc = 0.0;
};

// A cluster's load so far, for alerts (monitor/alerts.h): each worker's seconds busy on its
// messages and its steps, each shard's rows served (pulled and pushed), the memory all shards'
// rows hold.
struct JobLoad {
  std::vector<double> worker_busy_s{};
  std::vector<uint64_t> worker_steps{};
  std::vector<uint64_t> shard_rows{};
  double rows_memory_bytes = 0.0;
};

struct TrainProgress {
  const char* phase = "train";  // "generate", "train" or "evaluate"
  int epoch = 0;                // 1-based
  int epochs = 0;
  uint64_t samples = 0;          // trained so far, over all epochs ("generate": rows made)
  double fraction = 0.0;         // of the phase's work, 0..1 (estimated for text)
  double running_logloss = 0.0;  // progressive logloss over recent batches
  // Set once per scored epoch ("evaluate", after the test and validation sets were scored).
  std::optional<EpochResult> scored{};
  // --on-nan skip: steps skipped so far for a gradient that was not finite, and what the last
  // one made ("worker 1: step 12 made a gradient of nan for key 77").
  uint64_t steps_skipped = 0;
  std::string last_skip{};
  // Exploding or vanishing gradient alerts so far (the cluster engine's replicas' summed, or
  // the single-process trainer's), and the last of them (worker/gradient_alert.h).
  uint64_t gradient_alerts = 0;
  std::string last_gradient_alert_kind{}, last_gradient_alert{};
  // Row updates refused as not finite so far (ShardStats::updates_not_finite, or the
  // single-process trainer's), and the last of them.
  uint64_t updates_not_finite = 0;
  std::string last_update_not_finite{};
  // The cluster engine's load, for alerts; empty for the single-process trainer.
  JobLoad load{};
};

struct TrainJobResult {
  double test_logloss = 0.0;
  double test_auc = 0.0;
  // Samples trained, their loss, input lines skipped; with a cluster, the messages between
  // workers and shards (zero for the single-process trainer).
  WorkerCounters counters;
  uint64_t test_samples = 0;
  uint64_t valid_samples = 0;      // held-out rows scored (0 without valid_fraction)
  double train_seconds = 0.0;      // wall time of the training passes only (no evaluation)
  double train_cpu_seconds = 0.0;  // user + system CPU of the process during those passes
  uint64_t pulls_deferred = 0;     // pulls a shard held back for the consistency gate
  uint64_t model_rows = 0;
  uint64_t model_bytes = 0;      // memory held by the rows (the store's tables and indexes)
  uint64_t table_bytes = 0;      // rows times a row's bytes (parameters and optimizer state)
  uint64_t updates_dropped = 0;  // pushed rows dropped by feature admission (cluster only)
  uint64_t rows_evicted = 0;     // rows removed by --evict-after (cluster only)
  // The tiered stores' rows found in memory or not, and rows read ahead (cluster only).
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t rows_read_ahead = 0;
  uint64_t pull_hints = 0;       // workers' PullHints the shards took (cluster only)
  uint64_t checkpoints = 0;      // complete checkpoints written (cluster only)
  uint64_t updates_lost = 0;     // pushed rows lost to shard restarts (cluster only)
  bool read_from_cache = false;  // the last training epoch read the binary cache
  std::string cache_note;        // why a cache was not used or written, when it was not
  std::vector<EpochResult> epochs;
  ModelSpec model;  // the model trained, with its detected fields and dense features
  // Set when the data is generated, or when a meta.json written by `colony gen` sits beside
  // the training file.
  std::optional<GenSummary> planted;
};

// Runs the job. Fails with the reader's Status (invalid_input naming file:line:column,
// not_found) or with invalid_input for bad options (--test missing, epochs < 1, batch < 1,
// valid_fraction outside [0, 1), patience < 0, no row held out or none left to train on).
// `progress` is called after every few batches, from the calling thread.
Expected<TrainJobResult> run_train_job(const TrainJobOptions& options,
                                       const std::function<void(const TrainProgress&)>& progress);

// `--optimizer auto` (docs/models.md, "Choosing defaults"): each candidate is a setting of the
// sparse optimizer and the factor dimension that held best on one kind of data in the sweeps,
// and none held on both.
struct OptimizerCandidate {
  std::string name;  // what data it suits, as the report and the log name it
  OptimizerConfig optimizer;
  size_t dim = 8;  // the FM factor and embedding dimension (unused by LR)
};
// The candidates, in the order they are tried: "long-tailed" (the defaults: FTRL alpha 0.05,
// L1 = L2 = 20, dim 8; best on Criteo-like vocabularies) and "interaction-heavy" (FTRL alpha 0.1,
// L1 = L2 = 1, dim 16; best on the Debian data, where the signal is in interactions).
std::vector<OptimizerCandidate> optimizer_candidates();

struct OptimizerTrial {
  OptimizerCandidate candidate;  // as tried: dim is the job's when the job keeps its own
  double valid_logloss = 0.0;
  double valid_auc = 0.0;
  uint64_t samples = 0;  // trained on
  uint64_t valid_samples = 0;
  double seconds = 0.0;  // wall time of the trial
};
struct OptimizerChoice {
  // One per candidate, in order; none when too few rows were held out to choose by.
  std::vector<OptimizerTrial> trials;
  OptimizerCandidate chosen;  // as tried: the lowest validation logloss, or else the first
  uint64_t rows = 0;          // the training rows the trials read (at most trial_rows)
  uint64_t valid_rows = 0;    // of them, the rows held out
};
// The valid_fraction of the trials when the job has none.
inline constexpr double choice_valid_fraction = 0.1;
// The rows a trial reads when the job does not say (`colony train --trial-rows`).
inline constexpr uint64_t choice_rows_default = 200000;
// Fewer rows held out than this, and no trial runs: the first candidate is chosen.
inline constexpr uint64_t choice_valid_rows_min = 1000;
// Chooses the job's sparse optimizer: trains each candidate for one epoch with the single-process
// trainer, on the training rows outside a validation hold-out (the job's valid_fraction, or
// choice_valid_fraction) among the first `trial_rows` rows of the training data (0: all of
// them), scores the hold-out, and chooses the lowest validation logloss (the earlier candidate on
// a tie). With fewer than choice_valid_rows_min rows held out (or none left to train on) no
// trial runs and the first candidate is chosen. The test set is never read. `keep_dim` (or LR):
// every candidate takes the job's dimension (the user gave one). `on_trial(trial, done)` is called
// before each trial (its candidate as tried, done false) and after it (its results, done true), and
// `progress` during it, as run_train_job calls it. Fails as run_train_job does, naming the
// candidate.
Expected<OptimizerChoice> choose_optimizer(
    const TrainJobOptions& job, bool keep_dim, uint64_t trial_rows,
    const std::function<void(const OptimizerTrial&, bool)>& on_trial,
    const std::function<void(const TrainProgress&)>& progress = nullptr);

// The rows a deep model's input shape is detected from (detect_input_shape).
inline constexpr uint64_t input_shape_rows = 65536;
// For a deep model: spec.dense set to the dense features of the training data, and, when
// spec.fields is 0 (auto), spec.fields to one more than the highest field among the keys of
// its first input_shape_rows rows (a later key of a higher field fails the job with a message
// naming --fields). LR and FM: `spec` unchanged. Fails with the reader's Status.
Expected<ModelSpec> detect_input_shape(ModelSpec spec, const std::string& path,
                                       const std::shared_ptr<const std::vector<Batch>>& mem,
                                       const ReaderOptions& options);

// The pieces run_train_job is made of, for other engines (the embedded cluster) to share.
Status validate(const TrainJobOptions& options);
struct JobData {
  std::shared_ptr<const std::vector<Batch>> train, test;  // set when the data is generated
  std::optional<GenSummary> planted;
};
// Generates the data in memory when options.data is empty; otherwise reads meta.json.
JobData prepare_job_data(const TrainJobOptions& options,
                         const std::function<void(const TrainProgress&)>& progress);
// A reader over `mem` when it is set, else over the file `path`.
Expected<std::unique_ptr<BatchReader>> open_source(
    const std::string& path, const std::shared_ptr<const std::vector<Batch>>& mem,
    const ReaderOptions& options);
struct Evaluation {
  double logloss = 0.0;
  double auc = 0.0;
  uint64_t samples = 0;
};
// Scores every test sample with `predict` (logits) and computes logloss and AUC. A batch that
// `predict` refuses, or no sample at all, fails the evaluation with a message that starts with
// `name` (default: the file, or "test data" for `mem`).
Expected<Evaluation> evaluate(
    const std::string& test, const std::shared_ptr<const std::vector<Batch>>& mem,
    const ReaderOptions& options,
    const std::function<Status(const Batch&, std::vector<float>&)>& predict,
    const std::string& name = {});
// Early stopping: whether the last `patience` of `valid_loglosses` (one per epoch so far) are
// all no lower than the lowest before them. Never with patience 0 or fewer epochs than
// patience + 1.
bool stop_early(const std::vector<double>& valid_loglosses, int patience);
// Index (0-based) of the lowest of `valid_loglosses`, the first of equal ones; 0 when empty.
size_t best_epoch_index(const std::vector<double>& valid_loglosses);
// Scores the held-out rows of the training data (options.data, or `mem`) like evaluate().
Expected<Evaluation> evaluate_held_out(
    const TrainJobOptions& options, const std::shared_ptr<const std::vector<Batch>>& mem,
    const std::function<Status(const Batch&, std::vector<float>&)>& predict);
// User + system CPU seconds this process has used.
double cpu_seconds();

// Reads `planted_logloss_test` and friends from DIR/meta.json for a file DIR/<name>; nullopt
// when there is no such file or it does not parse.
std::optional<GenSummary> read_gen_meta(const std::string& data_path);

}  // namespace colony
