// colony train: train a model on one machine.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "actors/embedded_cluster.h"
#include "cli/commands.h"
#include "cli/metrics_flags.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "cli/value_format_flags.h"
#include "common/log_cadence.h"
#include "common/parallel.h"
#include "gpu/device.h"
#include "monitor/alerts.h"
#include "monitor/ps_metrics.h"
#include "worker/train_job.h"

namespace colony::cli {

namespace {

struct TrainArgs {
  TrainJobOptions job;
  ModelFlags flags;
  // auto unless --lr, --l1 or --l2 is given without --optimizer (then ftrl).
  std::string optimizer = "auto";
  CLI::Option* optimizer_option = nullptr;
  // Negative = the optimizer's default (default_optimizer_config).
  float lr = -1.0f, l1 = -1.0f, l2 = -1.0f;
  uint64_t trial_rows = choice_rows_default;
  std::string store = "memory";
  size_t cache_bytes = 0;
  std::string eviction = "lfu";
  bool read_ahead = false;
  std::string durability;
  bool resume = false;
  std::string engine = "cluster";
  std::string device = "cpu";
  size_t compute_threads = 0;  // 0: one per core with --engine local, 1 with --engine cluster
  CLI::Option* compute_threads_option = nullptr;
  std::string consistency = "bsp";
  ValueFormatFlags formats;
  std::string push = "hierarchical";
  ClusterOptions cluster;
  std::string report;
  bool no_cache = false;
  MetricsFlags metrics;
  double metrics_linger_s = 0.0;
  std::string on_nan = "fail";
  double alert_window_s = monitor::AlertConfig{}.window_s;
  std::string fault_slow_worker;  // W:MS
  uint32_t fault_leak_mb = 0;
  std::string timeline;
};

}  // namespace

Runner add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  TrainJobOptions& j = a->job;
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model on one machine (on generated data when --data is not given)");
  cmd->add_option("--data", j.data, "Training file: libsvm, Criteo TSV or a Colony binary cache");
  cmd->add_option("--test", j.test, "Test file (required with --data)");
  add_model_flags(cmd, a->flags, "the first 65536 training rows");
  a->optimizer_option =
      cmd->add_option("--optimizer", a->optimizer,
                      "sgd, adagrad, ftrl or adam; or auto: train each candidate setting (FTRL's "
                      "alpha, L1, L2 and --dim; docs/models.md) for an epoch with the "
                      "single-process trainer on the first --trial-rows training rows, score it "
                      "on rows held out of them (the --valid-fraction, or 10%), and train with "
                      "the best. Default: auto, or ftrl when --lr, --l1 or --l2 is given")
          ->capture_default_str();
  cmd->add_option(
         "--trial-rows", a->trial_rows,
         "--optimizer auto: the trials read the first N training rows (0: all); with fewer "
         "than 1000 of them held out, no trial runs and the defaults (long-tailed) train")
      ->capture_default_str();
  cmd->add_option("--lr", a->lr,
                  "Step size, FTRL's alpha (default per optimizer: sgd 0.02, "
                  "adagrad 0.02, ftrl 0.05, adam 0.001)");
  cmd->add_option("--l1", a->l1, "L1 strength, FTRL only (default: ftrl 20)");
  cmd->add_option("--l2", a->l2, "L2 strength (default: ftrl 20, others 0)");
  cmd->add_option("--batch", j.batch, "Samples per step")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--epochs", j.epochs, "Passes over the training data")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--valid-fraction", j.valid_fraction,
                  "Hold out this share of the training rows (chosen by a hash of each row) and "
                  "report their logloss and AUC after every epoch (0: none)")
      ->capture_default_str();
  cmd->add_option("--patience", j.patience,
                  "With --valid-fraction and --engine local: stop after N epochs in a row with "
                  "no better validation logloss (0: never stop early)")
      ->capture_default_str();
  cmd->add_option(
         "--store", a->store,
         "Row store of the shards: memory, or rocksdb:DIR (shard i in DIR/shard-<i>; a store "
         "left by the same job is continued, another job's is refused)")
      ->capture_default_str();
  cmd->add_option(
      "--cache-bytes", a->cache_bytes,
      "With rocksdb:DIR: keep hot rows in this many bytes of memory (all shards together) "
      "over RocksDB, writing rows back when evicted (tiered store)");
  cmd->add_flag("--resume", a->resume,
                "With rocksdb:DIR: continue the rows of a store another job wrote (same shard "
                "count, row size and optimizer), which becomes this job's; without it such a "
                "store is refused");
  cmd->add_option("--durability", a->durability,
                  "What a shard's acknowledgement of a push promises: none (memory only), log (on "
                  "disk: survives a crash of the process) or fsync (synced: survives a crash of "
                  "the machine); default none for --store memory, log for rocksdb:DIR");
  cmd->add_option("--admit-after", a->cluster.admit_after,
                  "Feature admission: a key gets a row once pulled this many times (counted in a "
                  "count-min sketch); until then pulls see its initial value and pushes to it are "
                  "dropped (0: at once)")
      ->check(CLI::Range(0u, 255u))
      ->capture_default_str();
  cmd->add_option("--evict-after", a->cluster.evict_after,
                  "Remove rows not updated during the last T steps (0: never)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", a->cluster.checkpoint_every,
                  "Checkpoint every shard's rows and optimizer state every N steps (0: never)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", a->cluster.checkpoint_dir,
                  "Where checkpoints go (default with rocksdb:DIR: DIR/checkpoints)");
  add_tiered_store_flags(cmd, a->eviction, a->read_ahead);
  cmd->add_option("--on-nan", a->on_nan,
                  "A step whose gradient is NaN or infinite: fail (stop, naming the step and key) "
                  "or skip (apply nothing of it, log it, count it in steps_skipped)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  cmd->add_option("--alert-window", a->alert_window_s,
                  "Seconds over which the cluster engine's alerts (leak suspect, straggler, hot "
                  "shard; docs/monitoring.md) measure growth and rates")
      ->check(CLI::Range(0.5, 3600.0))
      ->capture_default_str();
  // Faults for tests and drills (hidden from --help): a straggler, a leak.
  cmd->add_option("--fault-slow-worker", a->fault_slow_worker,
                  "Worker W (0-based) sleeps MS milliseconds after each of its steps (W:MS)")
      ->group("");
  cmd->add_option("--fault-leak-mb", a->fault_leak_mb,
                  "While training, allocate and keep N MiB more (320 MiB a second)")
      ->check(CLI::Range(0u, 65536u))
      ->group("");
  cmd->add_option("--seed", j.trainer.seed, "Seed for initialisation and generated data")
      ->capture_default_str();
  cmd->add_option("--report", a->report, "Write a JSON report to this file");
  cmd->add_option("--timeline", a->timeline,
                  "Cluster engine: write what every worker, shard and aggregator did and when, "
                  "as a Chrome trace (opens in Perfetto; colony profile summarises it)");
  add_metrics_flags(cmd, a->metrics, true);
  cmd->add_option("--metrics-linger", a->metrics_linger_s,
                  "With --metrics-port: keep serving for this many seconds after the job has "
                  "ended and printed its results, so a last scrape sees the final scores")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--skip-bad-lines", j.reader.skip_bad_lines,
                  "Tolerate up to N malformed input lines (counted in the report)")
      ->capture_default_str();
  cmd->add_option("--cache-dir", j.reader.cache_dir,
                  "Where binary caches of text files go (default: beside each file)");
  cmd->add_flag("--no-cache", a->no_cache, "Neither read nor write binary caches");
  add_format_option(cmd, j.reader.format);
  cmd->add_option("--shards", a->cluster.shards, "Parameter-server shards (actors)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--workers", a->cluster.workers, "Worker replicas (actors)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--consistency", a->consistency,
                  "bsp, ssp:K (reads at most K clocks stale) or asp")
      ->capture_default_str();
  cmd->add_option(
         "--push", a->push,
         "hierarchical (one push per node and shard, summed by the node's aggregator) or flat")
      ->capture_default_str();
  add_value_format_flags(cmd, a->formats);
  cmd->add_option("--replicas-per-node", a->cluster.replicas_per_node,
                  "Workers per node for hierarchical push (0: all workers form one node)")
      ->capture_default_str();
  cmd->add_option(
         "--max-inflight", a->cluster.max_inflight,
         "Steps whose pulls a worker keeps in flight (2: pull batch i+1 while computing i)")
      ->check(CLI::Range(size_t{1}, size_t{64}))
      ->capture_default_str();
  cmd->add_option("--read-ahead-batches", a->cluster.read_ahead_batches,
                  "With --read-ahead: batches each worker reads beyond --max-inflight and hints to "
                  "the shards before pulling them, so that the tiered store reads their rows in "
                  "first, under any --consistency (0: only pulls waiting at the gate are read "
                  "ahead)")
      ->check(CLI::Range(0u, read_ahead_batches_max))
      ->capture_default_str();
  cmd->add_option("--threads", a->cluster.threads, "Actor scheduler threads (0: one per core)")
      ->capture_default_str();
  cmd->add_option("--device", a->device,
                  "Where the workers' math runs: cpu, or cuda[:N] (a CUDA build)")
      ->capture_default_str();
  a->compute_threads_option =
      cmd->add_option("--compute-threads", a->compute_threads,
                      "Threads that share each batch of a deep model, its samples split among "
                      "them (0: one per core with --engine local, 1 a worker with --engine "
                      "cluster, whose workers share the cores already)")
          ->check(CLI::Range(size_t{0}, max_compute_threads))
          ->capture_default_str();
  cmd->add_option(
         "--engine", a->engine,
         "cluster (PS shards and workers as actors) or local (the single-process reference "
         "trainer; ignores the cluster flags)")
      ->check(CLI::IsMember({"cluster", "local"}))
      ->capture_default_str();
  cmd->add_option("--rows", j.generate.rows, "Generated training rows (without --data)")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--test-rows", j.generate.test_rows, "Generated test rows (without --data)")
      ->check(positive_number())
      ->capture_default_str();
  return [a]() {
    TrainJobOptions o = a->job;
    auto parsed = parse_model_flags(a->flags);
    if (!parsed) return fail(parsed.status());
    o.trainer.model = parsed->spec;
    o.trainer.dense_optimizer = parsed->dense_optimizer;
    auto device = parse_device(a->device);
    if (!device) return fail(device.status());
    o.trainer.model.device = *device;
    if (Status s = check_device(o.trainer.model.device); !s.ok()) return fail(s);
    if (a->compute_threads_option->count() > 0 && !o.trainer.model.deep())
      return fail(Status::invalid_input(fmt::format(
          "--compute-threads shares the dense layers of deepfm, dlrm and dcn among threads; "
          "--model {} has none",
          to_string(o.trainer.model.kind))));
    o.trainer.model.compute_threads = a->compute_threads > 0 ? a->compute_threads
                                      : a->engine == "local"
                                          ? std::min(hardware_threads(), max_compute_threads)
                                          : 1;
    // Generated data keeps Criteo's fields and dense features for the deep models.
    if (o.trainer.model.deep()) o.generate.format = "criteo";
    const bool tuned_by_hand = a->lr >= 0.0f || a->l1 >= 0.0f || a->l2 >= 0.0f;
    if (a->optimizer_option->count() == 0 && tuned_by_hand) a->optimizer = "ftrl";
    const bool auto_optimizer = a->optimizer == "auto";
    if (auto_optimizer && tuned_by_hand)
      return fail(Status::invalid_input(
          "--optimizer auto chooses the step size and L1/L2 strengths: give --lr, --l1 and --l2 "
          "with a named optimizer instead"));
    auto opt = parse_optimizer(auto_optimizer ? "ftrl" : a->optimizer);
    if (!opt)
      return fail(Status::invalid_input("--optimizer: " + opt.status().message() + " or auto"));
    o.trainer.optimizer = default_optimizer_config(*opt);
    if (a->lr >= 0.0f) o.trainer.optimizer.lr = a->lr;
    if (a->l1 >= 0.0f) o.trainer.optimizer.l1 = a->l1;
    if (a->l2 >= 0.0f) o.trainer.optimizer.l2 = a->l2;
    o.reader.use_cache = !a->no_cache;
    o.trainer.skip_not_finite = a->on_nan == "skip";
    ClusterOptions cluster = a->cluster;
    cluster.dense_sync_every = parsed->dense_sync_every;
    auto store = parse_store_spec(a->store, a->cache_bytes);
    if (!store) return fail(store.status());
    cluster.store = *store;
    if (Status s = set_tiered_store_flags(cluster.store, a->eviction, a->read_ahead); !s.ok())
      return fail(s);
    if (cluster.read_ahead_batches > 0 && !a->read_ahead)
      return fail(Status::invalid_input(
          "--read-ahead-batches: the hints are read by a tiered store with --read-ahead, which "
          "this job has not"));
    if (!a->durability.empty()) {
      auto d = parse_durability(a->durability);
      if (!d) return fail(d.status());
      if (Status s = set_durability(cluster.store, *d); !s.ok()) return fail(s);
    }
    if (Status s = set_resume(cluster.store, a->resume); !s.ok()) return fail(s);
    if (a->engine == "local" && cluster.admit_after > 1)
      return fail(Status::invalid_input(
          "--admit-after: feature admission runs in the PS shards; use --engine cluster"));
    if (a->engine == "local" && cluster.evict_after)
      return fail(Status::invalid_input(
          "--evict-after: eviction runs in the PS shards; use --engine cluster"));
    if (a->engine == "local" && a->flags.dense_sync_option->count() > 0)
      return fail(Status::invalid_input(
          "--dense-sync: the local engine has one copy of the dense layers; use --engine cluster"));
    if (a->engine == "local" && cluster.checkpoint_every)
      return fail(Status::invalid_input(
          "--checkpoint-every: checkpoints are taken by the PS shards; use --engine cluster"));
    if (a->engine == "local" && cluster.store.kind != StoreKind::memory)
      return fail(Status::invalid_input(
          "--store " + a->store + ": the local engine keeps rows in memory; use --engine cluster"));
    auto consistency = parse_consistency(a->consistency);
    if (!consistency)
      return fail(Status::invalid_input("--consistency: " + consistency.status().message()));
    cluster.consistency = *consistency;
    auto formats = parse_value_format_flags(a->formats, o.trainer.optimizer.kind);
    if (!formats) return fail(formats.status());
    if (a->engine == "local" && message_flag(*formats))
      return fail(Status::invalid_input(std::string(message_flag(*formats)) +
                                        ": the local engine sends no messages; use --engine "
                                        "cluster"));
    if (a->engine == "local" && row_flag(*formats))
      return fail(Status::invalid_input(std::string(row_flag(*formats)) +
                                        ": the local engine keeps rows in fp32; use --engine "
                                        "cluster"));
    cluster.formats = *formats;
    auto push = parse_push_mode(a->push);
    if (!push) return fail(Status::invalid_input("--push: " + push.status().message()));
    cluster.push = *push;
    const bool local = a->engine == "local";
    o.generate.seed = o.trainer.seed;
    if (!a->timeline.empty()) {
      if (local)
        return fail(Status::invalid_input(
            "--timeline: the timeline records the cluster engine's actors; use --engine cluster"));
      auto recorder = start_timeline(a->timeline);
      if (!recorder) return fail(recorder.status());
      cluster.timeline = *recorder;
    }

    // Live metrics: the shards' and workers' actors record into the registry; the progress
    // below sets the colony_train_* ones.
    auto endpoint = start_metrics(
        a->metrics, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
    if (!endpoint) return fail(endpoint.status());
    if (a->metrics_linger_s > 0 && !endpoint->server)
      std::fprintf(stderr, "warning: --metrics-linger has no effect without --metrics-port\n");
    std::optional<monitor::TrainInstruments> metrics;
    if (endpoint->registry) {
      metrics = monitor::train_instruments(*endpoint->registry);
      if (local)
        std::fprintf(stderr,
                     "note: --engine local has no shards or workers: /metrics shows the job's "
                     "progress and scores only\n");
    }
    cluster.metrics = endpoint->registry;
    if (!a->fault_slow_worker.empty()) {
      unsigned w = 0, ms = 0;
      char tail = 0;
      if (std::sscanf(a->fault_slow_worker.c_str(), "%u:%u%c", &w, &ms, &tail) != 2 ||
          w >= cluster.workers || ms == 0 || ms > 60000)
        return fail(Status::invalid_input(
            "--fault-slow-worker " + a->fault_slow_worker +
            ": expected W:MS, W a worker below --workers and MS in 1..60000"));
      cluster.slow_worker = w;
      cluster.slow_ms = ms;
    }
    // Alerts beyond NaN, decided from the cluster engine's load (monitor/alerts.h).
    monitor::AlertConfig alert_config;
    alert_config.window_s = a->alert_window_s;
    monitor::AlertMonitor alert_monitor(alert_config);
    std::vector<monitor::Alert> alerts_raised;
    monitor::FaultLeak leak(a->fault_leak_mb);
    std::optional<OptimizerChoice> choice;
    if (auto_optimizer) {
      const bool keep_dim = a->flags.dim_option->count() > 0;
      const std::string trial_rows_text =
          a->trial_rows == 0 ? std::string("the training rows")
                             : fmt::format("the first {} training rows", a->trial_rows);
      Progress bar(stderr);
      std::string trying;
      bool training = false;  // the trial's data generated (rates count its training only)
      auto on_trial = [&](const OptimizerTrial& t, bool done) {
        const OptimizerCandidate& c = t.candidate;
        if (!done) {
          std::fprintf(stderr,
                       "--optimizer auto: trying %s (ftrl lr %g l1 %g l2 %g, dim %zu) for an "
                       "epoch on %s, scored on the %g%% of them held out\n",
                       c.name.c_str(), c.optimizer.lr, c.optimizer.l1, c.optimizer.l2, c.dim,
                       trial_rows_text.c_str(),
                       100 * (o.valid_fraction > 0 ? o.valid_fraction : choice_valid_fraction));
          trying = "trying " + c.name;
          training = false;
          return;
        }
        bar.finish();
        std::fprintf(stderr, "--optimizer auto: %s: valid logloss %.5f  valid auc %.4f  (%.1f s)\n",
                     c.name.c_str(), t.valid_logloss, t.valid_auc, t.seconds);
      };
      auto on_progress = [&](const TrainProgress& p) {
        if (std::string(p.phase) != "train") return;
        if (!training) bar.restart();
        training = true;
        bar.update(p.fraction, double(p.samples), "samples", trying);
      };
      auto chosen = choose_optimizer(o, keep_dim, a->trial_rows, on_trial, on_progress);
      if (!chosen) return fail(chosen.status());
      choice = *chosen;
      const OptimizerCandidate& best = choice->chosen;
      o.trainer.optimizer = best.optimizer;
      o.trainer.model.dim = best.dim;
      if (choice->trials.empty())
        std::fprintf(stderr,
                     "--optimizer auto: %llu of the %llu training rows read held out, fewer than "
                     "%llu to choose by: no trials; training with %s (the defaults)\n",
                     (unsigned long long)choice->valid_rows, (unsigned long long)choice->rows,
                     (unsigned long long)choice_valid_rows_min, best.name.c_str());
      else
        std::fprintf(stderr, "--optimizer auto: chose %s\n", best.name.c_str());
    }
    const std::string engine_text =
        local ? std::string("single-process trainer")
              : fmt::format("{} shard{}, {} worker{}, {}, {} push, store {}", cluster.shards,
                            cluster.shards == 1 ? "" : "s", cluster.workers,
                            cluster.workers == 1 ? "" : "s", to_string(cluster.consistency),
                            to_string(cluster.push), to_string(cluster.store));
    std::fprintf(
        stderr, "colony train: %s%s, %s lr %g, batch %zu, %d epoch%s; %s; device %s; backends %s\n",
        to_string(o.trainer.model.kind),
        o.trainer.model.kind == ModelKind::fm
            ? fmt::format(" (dim {})", o.trainer.model.dim).c_str()
        : o.trainer.model.deep()
            ? fmt::format(" (dim {}, mlp {}, dense layers {} lr {:g}, {} compute thread{})",
                          o.trainer.model.dim, layer_sizes_text(o.trainer.model.mlp),
                          nn::to_string(o.trainer.dense_optimizer.kind),
                          o.trainer.dense_optimizer.lr, o.trainer.model.compute_threads,
                          o.trainer.model.compute_threads == 1 ? "" : "s")
                  .c_str()
            : "",
        to_string(o.trainer.optimizer.kind), o.trainer.optimizer.lr, o.batch, o.epochs,
        o.epochs == 1 ? "" : "s", engine_text.c_str(), device_text(o.trainer.model.device).c_str(),
        describe_backends().c_str());
    if (o.data.empty())
      std::fprintf(stderr, "no --data: generating %s training and %s test rows in memory\n",
                   human_count(double(o.generate.rows)).c_str(),
                   human_count(double(o.generate.test_rows)).c_str());
    const auto start = std::chrono::steady_clock::now();
    Progress progress(stderr);
    uint64_t samples_counted = 0, skips_logged = 0, gradient_alerts_logged = 0,
             updates_refused_logged = 0;
    bool training_started = false;
    auto on_progress = [&](const TrainProgress& p) {
      if (!training_started && std::string(p.phase) == "train") {
        progress.finish();   // the generation bar stays on screen
        progress.restart();  // rates count training only, not data generation
        training_started = true;
      }
      const std::string phase = p.phase;
      if (p.steps_skipped > skips_logged) {
        if (metrics) metrics->not_finite_alerts->inc(double(p.steps_skipped - skips_logged));
        if (log_this_count(skips_logged, p.steps_skipped)) {
          progress.finish();
          std::fprintf(stderr,
                       "warning: %s: skipped, nothing of it applied (--on-nan skip; %llu step%s "
                       "skipped so far, logged one by one up to 10, then at every power of 10)\n",
                       p.last_skip.c_str(), static_cast<unsigned long long>(p.steps_skipped),
                       p.steps_skipped == 1 ? "" : "s");
        }
        skips_logged = p.steps_skipped;
      }
      if (p.gradient_alerts > gradient_alerts_logged) {
        // Raised once per excursion by each worker: each logged (the last, when several came
        // between two progress updates), all counted.
        progress.finish();
        std::fprintf(stderr, "warning: alert %s: %s%s\n", p.last_gradient_alert_kind.c_str(),
                     p.last_gradient_alert.c_str(),
                     p.gradient_alerts - gradient_alerts_logged > 1
                         ? fmt::format(" ({} more since the last update)",
                                       p.gradient_alerts - gradient_alerts_logged - 1)
                               .c_str()
                         : "");
        if (endpoint->registry)
          monitor::alerts(*endpoint->registry, p.last_gradient_alert_kind)
              .inc(double(p.gradient_alerts - gradient_alerts_logged));
        alerts_raised.push_back({p.last_gradient_alert_kind, "gradients", p.last_gradient_alert});
        gradient_alerts_logged = p.gradient_alerts;
      }
      if (p.updates_not_finite > updates_refused_logged) {
        // Counted each; logged (and listed in the report) one by one up to 10, then at every
        // power of 10.
        if (endpoint->registry)
          monitor::alerts(*endpoint->registry, "not_finite_row")
              .inc(double(p.updates_not_finite - updates_refused_logged));
        if (log_this_count(updates_refused_logged, p.updates_not_finite)) {
          progress.finish();
          const std::string message =
              monitor::not_finite_row_message(p.last_update_not_finite, p.updates_not_finite);
          std::fprintf(stderr, "warning: alert not_finite_row: %s\n", message.c_str());
          alerts_raised.push_back({"not_finite_row", "rows", message});
        }
        updates_refused_logged = p.updates_not_finite;
      }
      if (phase == "train") leak.start(monitor::fault_leak_mb_per_s);
      if (phase == "train" && !p.load.worker_steps.empty()) {
        monitor::AlertSample sample;
        sample.time_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        sample.rss_bytes = monitor::resident_bytes();
        sample.rows_memory_bytes = p.load.rows_memory_bytes;
        sample.worker_busy_s = p.load.worker_busy_s;
        sample.worker_steps = p.load.worker_steps;
        sample.shard_rows = p.load.shard_rows;
        for (monitor::Alert& alert : alert_monitor.observe(std::move(sample))) {
          progress.finish();
          std::fprintf(stderr, "warning: alert %s: %s\n", alert.kind.c_str(),
                       alert.message.c_str());
          if (endpoint->registry) monitor::alerts(*endpoint->registry, alert.kind).inc();
          alerts_raised.push_back(std::move(alert));
        }
      }
      if (metrics && phase != "generate") {
        metrics->samples->inc(double(p.samples - std::min(p.samples, samples_counted)));
        samples_counted = std::max(samples_counted, p.samples);
        if (p.running_logloss > 0) metrics->logloss->set(p.running_logloss);
        metrics->epoch->set(p.epoch);
        metrics->progress->set(p.fraction);
        if (p.scored) {
          metrics->test_logloss->set(p.scored->test_logloss);
          metrics->test_auc->set(p.scored->test_auc);
          if (o.valid_fraction > 0) {
            metrics->valid_logloss->set(p.scored->valid_logloss);
            metrics->valid_auc->set(p.scored->valid_auc);
          }
        }
      }
      if (phase == "generate") {
        progress.update(p.fraction, double(p.samples), "rows", "generating data");
      } else {
        std::string status = phase;
        if (phase == "train") {
          status = fmt::format("epoch {}/{}", p.epoch, p.epochs);
          if (p.running_logloss > 0) status += fmt::format(" logloss {:.4f}", p.running_logloss);
        }
        progress.update(p.fraction, double(p.samples), "samples", status);
      }
    };
    auto result =
        local ? run_train_job(o, on_progress) : run_cluster_train_job(o, cluster, on_progress);
    progress.finish();
    if (!result) return fail(result.status());
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const TrainJobResult& r = *result;
    if (!r.cache_note.empty())
      std::fprintf(stderr, "note: binary cache: %s\n", r.cache_note.c_str());
    const double sps = r.train_seconds > 0 ? double(r.counters.samples) / r.train_seconds : 0.0;
    for (const EpochResult& e : r.epochs) {
      std::printf("epoch %d: train logloss %.5f  test logloss %.5f  test auc %.4f", e.epoch,
                  e.train_logloss, e.test_logloss, e.test_auc);
      if (o.valid_fraction > 0)
        std::printf("  valid logloss %.5f  valid auc %.4f", e.valid_logloss, e.valid_auc);
      std::printf("\n");
    }
    // Early stopping, read off the epochs: the last one trained, and the best by validation.
    const bool stopped_early = r.epochs.back().epoch < o.epochs;
    std::vector<double> valid_losses;
    for (const EpochResult& e : r.epochs) valid_losses.push_back(e.valid_logloss);
    const int best_epoch = r.epochs[best_epoch_index(valid_losses)].epoch;
    if (stopped_early)
      std::printf("stopped early: validation logloss best at epoch %d, no better for %d epoch%s\n",
                  best_epoch, o.patience, o.patience == 1 ? "" : "s");
    nlohmann::json rep = {
        {"test_logloss", r.test_logloss},
        {"test_auc", r.test_auc},
        {"train_samples", r.counters.samples},
        {"samples_per_sec", sps},
        {"wall_seconds", wall},
        {"peak_rss_bytes", peak_rss_bytes()},
        {"test_samples", r.test_samples},
        {"train_seconds", r.train_seconds},
        {"bad_lines_skipped", r.counters.bad_lines_skipped},
        {"model", to_string(o.trainer.model.kind)},
        {"dim", o.trainer.model.dim},
        {"optimizer", to_string(o.trainer.optimizer.kind)},
        {"lr", o.trainer.optimizer.lr},
        {"l1", o.trainer.optimizer.l1},
        {"l2", o.trainer.optimizer.l2},
        {"batch", o.batch},
        {"epochs", o.epochs},
        {"seed", o.trainer.seed},
        {"model_rows", r.model_rows},
        {"model_bytes", r.model_bytes},
        {"table_rows", r.model_rows},
        {"table_bytes", r.table_bytes},
        {"bytes_per_row", r.model_rows ? double(r.table_bytes) / double(r.model_rows) : 0.0},
        {"read_from_cache", r.read_from_cache},
        {"engine", a->engine},
        {"device", device_text(o.trainer.model.device)},
        {"compute_threads", o.trainer.model.deep() ? o.trainer.model.compute_threads : 1},
        {"train_cpu_seconds", r.train_cpu_seconds},
        {"cpu_seconds_per_sample",
         r.counters.samples ? r.train_cpu_seconds / double(r.counters.samples) : 0.0},
    };
    report_model(rep, r.model, o.trainer.dense_optimizer, local ? 0 : cluster.dense_sync_every);
    if (!local) {
      const double n = double(std::max<uint64_t>(r.counters.samples, 1));
      rep["shards"] = cluster.shards;
      rep["workers"] = cluster.workers;
      rep["consistency"] = to_string(cluster.consistency);
      rep["push"] = to_string(cluster.push);
      report_value_formats(rep, *formats);
      rep["pull_messages_per_sample"] = double(r.counters.pull_messages) / n;
      rep["push_messages_per_sample"] = double(r.counters.push_messages) / n;
      rep["push_bytes_per_sample"] = double(r.counters.push_bytes) / n;
      rep["pull_bytes_per_sample"] = double(r.counters.pull_bytes) / n;
      rep["wire_bytes_per_sample"] = double(r.counters.pull_bytes + r.counters.push_bytes) / n;
      rep["pulls_deferred"] = r.pulls_deferred;
      rep["replies_dropped"] = r.counters.replies_dropped;
      rep["store"] = to_string(cluster.store);
      rep["durability"] = to_string(cluster.store.durability);
      if (cluster.store.kind == StoreKind::tiered) {
        // Of the rows the shards loaded, those found in memory (rows read ahead count: they were
        // there when their pull was answered).
        rep["cache_hit_rate"] =
            double(r.cache_hits) / double(std::max<uint64_t>(1, r.cache_hits + r.cache_misses));
        rep["rows_read_ahead"] = r.rows_read_ahead;
        rep["pull_hints"] = r.pull_hints;
      }
      rep["admit_after"] = cluster.admit_after;
      rep["updates_dropped"] = r.updates_dropped;
      rep["evict_after"] = cluster.evict_after;
      rep["rows_evicted"] = r.rows_evicted;
      rep["checkpoints"] = r.checkpoints;
      rep["updates_lost"] = r.updates_lost;
    }
    if (choice) {
      nlohmann::json trials = nlohmann::json::array();
      for (const OptimizerTrial& t : choice->trials)
        trials.push_back({{"candidate", t.candidate.name},
                          {"optimizer", to_string(t.candidate.optimizer.kind)},
                          {"lr", t.candidate.optimizer.lr},
                          {"l1", t.candidate.optimizer.l1},
                          {"l2", t.candidate.optimizer.l2},
                          {"dim", t.candidate.dim},
                          {"valid_logloss", t.valid_logloss},
                          {"valid_auc", t.valid_auc},
                          {"samples", t.samples},
                          {"valid_samples", t.valid_samples},
                          {"seconds", t.seconds}});
      rep["optimizer_auto"] = {{"trials", trials},
                               {"chosen", choice->chosen.name},
                               {"trial_rows", a->trial_rows},
                               {"rows", choice->rows},
                               {"valid_rows", choice->valid_rows}};
    }
    rep["on_nan"] = a->on_nan;
    rep["alerts"] = alerts_json(alerts_raised);
    rep["steps_skipped"] = r.counters.steps_skipped;
    rep["updates_not_finite"] = updates_refused_logged;
    nlohmann::json per_epoch = nlohmann::json::array();
    for (const EpochResult& e : r.epochs) {
      nlohmann::json pe = {{"epoch", e.epoch},
                           {"train_logloss", e.train_logloss},
                           {"test_logloss", e.test_logloss},
                           {"test_auc", e.test_auc}};
      if (o.valid_fraction > 0) {
        pe["valid_logloss"] = e.valid_logloss;
        pe["valid_auc"] = e.valid_auc;
      }
      per_epoch.push_back(pe);
    }
    rep["per_epoch"] = per_epoch;
    if (o.valid_fraction > 0) {
      rep["valid_fraction"] = o.valid_fraction;
      rep["valid_samples"] = r.valid_samples;
      rep["valid_logloss"] = r.epochs.back().valid_logloss;
      rep["valid_auc"] = r.epochs.back().valid_auc;
      rep["best_epoch"] = best_epoch;
      rep["stopped_early"] = stopped_early;
      rep["epochs_trained"] = r.epochs.size();
    }
    std::printf("test_logloss %.5f  test_auc %.4f  table_rows %llu  table_bytes %s", r.test_logloss,
                r.test_auc, static_cast<unsigned long long>(r.model_rows),
                human_count(double(r.table_bytes)).c_str());
    if (r.planted) {
      const double gap = r.test_logloss / r.planted->planted_logloss_test - 1.0;
      rep["planted_logloss_test"] = r.planted->planted_logloss_test;
      rep["planted_auc_test"] = r.planted->planted_auc_test;
      rep["base_rate_logloss_test"] = r.planted->base_rate_logloss_test;
      rep["gap_to_planted"] = gap;
      std::printf("  (planted %.5f, %+.2f%%; base rate %.5f)", r.planted->planted_logloss_test,
                  100.0 * gap, r.planted->base_rate_logloss_test);
    }
    std::printf("\ntrain_samples %llu  samples_per_sec %s  wall_seconds %.1f  peak_rss %s bytes",
                static_cast<unsigned long long>(r.counters.samples), human_count(sps).c_str(), wall,
                human_count(double(peak_rss_bytes())).c_str());
    if (!local)
      std::printf(
          "\npush_messages_per_sample %.4f  push_bytes_per_sample %.1f  pulls_deferred %llu",
          double(r.counters.push_messages) / double(std::max<uint64_t>(r.counters.samples, 1)),
          double(r.counters.push_bytes) / double(std::max<uint64_t>(r.counters.samples, 1)),
          static_cast<unsigned long long>(r.pulls_deferred));
    if (r.counters.bad_lines_skipped > 0)
      std::printf("  bad_lines_skipped %llu",
                  static_cast<unsigned long long>(r.counters.bad_lines_skipped));
    std::printf("\n");
    if (r.counters.steps_skipped > 0)
      std::fprintf(stderr,
                   "warning: %llu step%s skipped in all for a gradient that was not finite "
                   "(--on-nan skip)\n",
                   static_cast<unsigned long long>(r.counters.steps_skipped),
                   r.counters.steps_skipped == 1 ? "" : "s");
    if (!a->report.empty() && !write_report(a->report, rep.dump(2))) return 1;
    if (cluster.timeline &&
        !write_timeline(a->timeline, *cluster.timeline, [](const std::string& line) {
          std::fprintf(stderr, "%s\n", line.c_str());
        }))
      return 1;
    if (endpoint->server && a->metrics_linger_s > 0) {
      std::fflush(stdout);
      std::fprintf(stderr, "serving %s for %g s more (--metrics-linger)\n",
                   endpoint->server->url().c_str(), a->metrics_linger_s);
      std::this_thread::sleep_for(std::chrono::duration<double>(a->metrics_linger_s));
    }
    return 0;
  };
}

}  // namespace colony::cli
