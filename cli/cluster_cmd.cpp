// colony coordinator | ps | worker: the daemons of a real cluster (see docs/deploy.md).
#include <unistd.h>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>

#include <nlohmann/json.hpp>

#include "actors/daemon.h"
#include "actors/envelope.h"
#include "cli/commands.h"
#include "cli/metrics_flags.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "cli/value_format_flags.h"
#include "models/model.h"
#include "worker/train_job.h"
#include "worker/wiring.h"

namespace colony::cli {

namespace {

// The signal handlers' only state: async-signal-safe counters.
DaemonSignals* g_signals = nullptr;
std::atomic<int> g_interrupts{0};  // lock-free, so safe in a handler

void on_signal(int sig) {
  if (sig == SIGINT && g_interrupts.fetch_add(1) >= 1) {
    const char msg[] = "colony: second SIGINT: exiting at once\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(130);
  }
  if (g_signals) g_signals->stop_requests.fetch_add(1);
}

void install_signal_handlers(DaemonSignals& signals) {
  g_signals = &signals;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

DaemonLog make_log(const std::string& role) {
  return [role](const std::string& line) {
    const std::time_t t = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
    std::fprintf(stderr, "%s colony %s[%d]: %s\n", stamp, role.c_str(),
                 static_cast<int>(::getpid()), line.c_str());
    std::fflush(stderr);
  };
}

struct CommonArgs {
  DaemonSecurity security;
  uint64_t cluster_id = 1;
  double join_timeout_s = 60;
  MetricsFlags metrics;
};

void add_common(CLI::App* cmd, CommonArgs& a) {
  cmd->add_option("--keys", a.security.keys_dir,
                  "Key directory from `colony keygen` (CURVE authentication)");
  cmd->add_option(
      "--key", a.security.key_name,
      "Which key pair in --keys is this process's, e.g. node-3 (coordinator default: server)");
  cmd->add_flag("--insecure", a.security.insecure,
                "Plain TCP without authentication or encryption (prints a warning)");
  cmd->add_option("--cluster-id", a.cluster_id, "Messages of another cluster id are refused")
      ->capture_default_str();
  cmd->add_option("--join-timeout", a.join_timeout_s,
                  "Seconds to wait for the cluster to form before giving up")
      ->check(positive_number())
      ->capture_default_str();
  add_metrics_flags(cmd, a.metrics);
  add_config_option(cmd);
}

Status check_security(const CommonArgs& a, const DaemonLog& log) {
  if (a.security.insecure && !a.security.keys_dir.empty())
    return Status::invalid_input("--insecure and --keys exclude each other");
  if (!a.security.insecure && a.security.keys_dir.empty())
    return Status::invalid_input(
        "--keys DIR is required (make one with `colony keygen`), or --insecure for plain TCP");
  if (a.security.insecure)
    log("WARNING: --insecure: plain TCP, no authentication and no encryption; anyone who can reach "
        "this port can "
        "join the cluster and read or change the model");
  return Status();
}

struct CoordinatorArgs {
  CommonArgs common;
  std::string listen;
  uint32_t shards = 1, workers = 1;
  ModelFlags flags;
  std::string optimizer = "ftrl", consistency = "bsp", push = "hierarchical";
  ValueFormatFlags formats;
  float lr = -1.0f, l1 = -1.0f, l2 = -1.0f;
  uint32_t batch = 512, epochs = 1, max_inflight = 2, read_ahead_batches = 0;
  uint64_t seed = 1, skip_bad_lines = 0;
  uint32_t admit_after = 0, evict_after = 0, checkpoint_every = 0;
  std::string durability, on_nan = "fail";
  bool no_cache = false, require_all = false;
  std::optional<DataFormat> format;  // of the test file
  // `colony train` flags that belong to the ps or worker daemons, or to train alone: given to
  // the coordinator, each is refused with where it goes.
  struct Elsewhere {
    CLI::Option* option;
    const char* flag;
    const char* where;
  };
  std::vector<Elsewhere> elsewhere;
  std::string test, report, cache_dir;
  uint32_t heartbeat_ms = 1000, heartbeat_timeout_ms = 10000;
  double alert_window_s = monitor::AlertConfig{}.window_s;
};

}  // namespace

Runner add_coordinator(CLI::App& app) {
  auto a = std::make_shared<CoordinatorArgs>();
  CLI::App* cmd = app.add_subcommand(
      "coordinator", "Run a cluster's coordinator: membership, layout, the job's end");
  cmd->add_option("--listen", a->listen, "Where members reach it, e.g. tcp://10.0.0.1:7100")
      ->required();
  cmd->add_option("--shards", a->shards, "PS shards, over all `colony ps` members")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--workers", a->workers, "Worker replicas, over all `colony worker` members")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--test", a->test,
                  "Test file evaluated at the end (libsvm, Criteo TSV or a binary cache)");
  cmd->add_option("--report", a->report, "Write a JSON report to this file");
  add_model_flags(cmd, a->flags, "the first 65536 rows of --test");
  cmd->add_option("--optimizer", a->optimizer, "sgd, adagrad, ftrl or adam")->capture_default_str();
  cmd->add_option("--lr", a->lr, "Step size (default per optimizer, as `colony train`)");
  cmd->add_option("--l1", a->l1, "L1 strength, FTRL only");
  cmd->add_option("--l2", a->l2, "L2 strength");
  cmd->add_option("--batch", a->batch, "Samples per step")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--epochs", a->epochs, "Passes over the training data")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for initialisation and the shard map")
      ->capture_default_str();
  cmd->add_option("--consistency", a->consistency, "bsp, ssp:K or asp")->capture_default_str();
  add_value_format_flags(cmd, a->formats);
  cmd->add_option("--push", a->push, "hierarchical (one aggregator per worker member) or flat")
      ->capture_default_str();
  cmd->add_option("--max-inflight", a->max_inflight, "Steps whose pulls a worker keeps in flight")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  cmd->add_option(
         "--read-ahead-batches", a->read_ahead_batches,
         "Batches each worker reads beyond --max-inflight and hints to the shards before "
         "pulling them, so that a ps with --read-ahead reads their rows in first (0: none)")
      ->check(CLI::Range(0u, read_ahead_batches_max))
      ->capture_default_str();
  cmd->add_option("--skip-bad-lines", a->skip_bad_lines,
                  "Malformed input lines each worker tolerates")
      ->capture_default_str();
  cmd->add_flag("--no-cache", a->no_cache, "Workers neither read nor write binary caches");
  cmd->add_option("--cache-dir", a->cache_dir, "Where the test file's binary cache goes");
  add_format_option(cmd, a->format);
  cmd->add_option("--heartbeat-ms", a->heartbeat_ms, "Heartbeat interval")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--heartbeat-timeout-ms", a->heartbeat_timeout_ms,
                  "Silence after which a member is lost")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--alert-window", a->alert_window_s,
                  "Seconds over which the load alerts (leak suspect per member, straggler, hot "
                  "shard; docs/monitoring.md) measure growth and rates from the heartbeats")
      ->check(CLI::Range(0.5, 3600.0))
      ->capture_default_str();
  cmd->add_flag("--require-all-workers", a->require_all,
                "Fail the job when a worker member is lost (default: go on with the rest; always "
                "for a deep model, whose dense all-reduce needs every worker member)");
  cmd->add_option("--admit-after", a->admit_after,
                  "Feature admission on every shard: a key gets a row once pulled this many times "
                  "(0: at once)")
      ->check(CLI::Range(0u, 255u))
      ->capture_default_str();
  cmd->add_option("--evict-after", a->evict_after,
                  "Remove rows not updated during the last T steps (0: never)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", a->checkpoint_every,
                  "Checkpoint every shard every N steps (0: never); each ps writes under its "
                  "--checkpoint-dir")
      ->capture_default_str();
  cmd->add_option("--on-nan", a->on_nan,
                  "A step whose gradient is NaN or infinite: fail (the job fails, naming the "
                  "worker, step and key) or skip (the worker applies nothing of it, logs it, "
                  "counts it in steps_skipped)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  cmd->add_option("--durability", a->durability,
                  "What a shard's acknowledgement of a push promises: none (memory only), log (on "
                  "disk: survives a crash of the ps process), fsync (synced: survives a crash of "
                  "its machine) or replicated:K (on K ps members: each shard has K - 1 backups on "
                  "other ps members); default: each ps store's, none for memory and log on disk");
  // The train flags the coordinator refuses, saying where each goes; `flag`: it takes no value in
  // `colony train`, so it takes none here either.
  struct NotHere {
    const char* name;
    const char* where;
    bool flag;
  };
  static const NotHere not_here[] = {
      {"--data", "give each `colony worker` its --data", false},
      {"--store", "give each `colony ps` its --store", false},
      {"--cache-bytes", "give each `colony ps` its --cache-bytes", false},
      {"--eviction", "give each `colony ps` its --eviction", false},
      {"--read-ahead", "give each `colony ps` its --read-ahead", true},
      {"--checkpoint-dir", "give each `colony ps` its --checkpoint-dir", false},
      {"--resume", "give each `colony ps` whose store another job wrote its --resume", true},
      {"--resume-from", "give each `colony ps` its --resume-from", false},
      {"--replicas-per-node", "start one `colony worker --replicas R` per node", false},
      {"--threads", "give each `colony ps` and `colony worker` its --threads", false},
      {"--device", "give each `colony worker` its --device", false},
      {"--compute-threads", "give each `colony worker` its --compute-threads", false},
      {"--engine", "the daemons are a cluster; `colony train --engine local` trains in one thread",
       false},
      {"--rows", "the daemons train on files: make them with `colony gen`", false},
      {"--test-rows", "the daemons train on files: make them with `colony gen`", false},
      {"--valid-fraction", "hold out validation rows in a file of their own for the daemons",
       false},
      {"--patience", "the daemons do not stop early; `colony train` does", false},
      {"--metrics-linger", "the daemons serve their metrics until they exit", false},
      {"--dashboard", "the coordinator serves its dashboard wherever --metrics-port serves", true},
      {"--timeline", "give each `colony ps` and `colony worker` its --timeline", false},
      {"--fault-slow-worker", "give the `colony worker` to slow its --fault-slow-ms", false},
      {"--fault-leak-mb", "give the `colony ps` or `colony worker` to leak its --fault-leak-mb",
       false},
  };
  for (const NotHere& n : not_here) {
    const std::string help = "Not a coordinator option (refused, saying where it goes)";
    CLI::Option* option = n.flag ? cmd->add_flag(n.name, help) : cmd->add_option(n.name, help);
    a->elsewhere.push_back({option->group(""), n.name, n.where});
  }
  add_common(cmd, a->common);
  return [a]() {
    const DaemonLog log = make_log("coordinator");
    for (const auto& e : a->elsewhere)
      if (e.option->count() > 0)
        return fail(Status::invalid_input(
            fmt::format("{} is not a coordinator option: {}", e.flag, e.where)));
    if (Status s = check_security(a->common, log); !s.ok()) return fail(s);
    CoordinatorDaemonOptions o;
    o.listen = a->listen;
    o.security = a->common.security;
    o.cluster_id = a->common.cluster_id;
    o.shards = a->shards;
    o.workers = a->workers;
    o.test = a->test;
    o.reader.use_cache = !a->no_cache;
    o.reader.cache_dir = a->cache_dir;
    o.reader.format = a->format;
    o.join_timeout_ms = static_cast<uint64_t>(a->common.join_timeout_s * 1000);
    o.heartbeat_ms = a->heartbeat_ms;
    o.heartbeat_timeout_ms = a->heartbeat_timeout_ms;
    o.require_all_workers = a->require_all;
    o.alerts.window_s = a->alert_window_s;
    JobSpec& j = o.job;
    auto parsed = parse_model_flags(a->flags);
    if (!parsed) return fail(parsed.status());
    ModelSpec spec = parsed->spec;
    if (spec.deep()) {
      // The members build the same model: its input shape is read here, from the test file.
      if (o.test.empty())
        return fail(Status::invalid_input(fmt::format(
            "--model {} needs --test: the coordinator reads the input's fields and dense "
            "features from it, and evaluates with the final dense layers",
            to_string(spec.kind))));
      ReaderOptions ro = o.reader;
      ro.batch_rows = a->batch;
      auto shape = detect_input_shape(spec, o.test, nullptr, ro);
      if (!shape) return fail(shape.status());
      spec = *shape;
      auto made = Model::make(spec);
      if (!made) return fail(made.status());
      // Every dense gradient and the final dense layers travel in one message each.
      const size_t dense_bytes = (*made)->dense_params() * sizeof(float);
      if (dense_bytes + (size_t{1} << 20) > wire_message_bytes_max)
        return fail(Status::invalid_input(fmt::format(
            "--model {} has {} dense parameters: over the daemons their gradients travel in one "
            "message of at most {} MiB; use a smaller --dim or --mlp",
            to_string(spec.kind), (*made)->dense_params(), wire_message_bytes_max >> 20)));
      // The dense all-reduce waits for every worker member's aggregator: one lost would stall
      // it, so losing a worker fails the job.
      o.require_all_workers = true;
    }
    j = job_with_model(j, spec);
    j = job_with_dense_optimizer(j, parsed->dense_optimizer);
    j.dense_sync_every = parsed->dense_sync_every;
    if (a->optimizer == "auto")
      return fail(Status::invalid_input(
          "--optimizer auto: the daemons do not try settings; run `colony train --optimizer auto` "
          "on the data (its report's optimizer_auto names the setting chosen) and give that "
          "setting's --optimizer, --lr, --l1, --l2 and --dim here"));
    auto opt = parse_optimizer(a->optimizer);
    if (!opt) return fail(Status::invalid_input("--optimizer: " + opt.status().message()));
    j.optimizer = default_optimizer_config(*opt);
    if (a->lr >= 0.0f) j.optimizer.lr = a->lr;
    if (a->l1 >= 0.0f) j.optimizer.l1 = a->l1;
    if (a->l2 >= 0.0f) j.optimizer.l2 = a->l2;
    j.seed = a->seed;
    j.batch = a->batch;
    j.epochs = a->epochs;
    auto consistency = parse_consistency(a->consistency);
    if (!consistency)
      return fail(Status::invalid_input("--consistency: " + consistency.status().message()));
    j.consistency = *consistency;
    auto formats = parse_value_format_flags(a->formats, j.optimizer.kind);
    if (!formats) return fail(formats.status());
    j.formats = *formats;
    if (a->push != "flat" && a->push != "hierarchical")
      return fail(Status::invalid_input("--push " + a->push + ": expected flat or hierarchical"));
    j.hierarchical = a->push == "hierarchical";
    if (spec.deep() && !j.hierarchical && a->workers > 1)
      return fail(Status::invalid_input(fmt::format(
          "--model {} with {} workers needs --push hierarchical: the node aggregators all-reduce "
          "its dense layers",
          to_string(spec.kind), a->workers)));
    j.max_inflight = a->max_inflight;
    j.read_ahead_batches = a->read_ahead_batches;
    j.skip_bad_lines = a->skip_bad_lines;
    j.use_cache = !a->no_cache;
    j.admit_after = a->admit_after;
    j.evict_after = a->evict_after;
    j.checkpoint_every = a->checkpoint_every;
    j.skip_not_finite = a->on_nan == "skip";
    if (a->durability.rfind("replicated", 0) == 0) {
      auto replicas = parse_replicated("--durability", a->durability, shard_replicas_max);
      if (!replicas) return fail(replicas.status());
      j.replicas = *replicas;
      // Both follow what only a primary sees (pulls, the slowest sender's clock as a promoted
      // primary counts it): ps/replication.h.
      if (j.admit_after > 1 || j.evict_after > 0)
        return fail(Status::invalid_input(fmt::format(
            "--durability {}: shard replication cannot keep {} (its replicas would part)",
            a->durability, j.admit_after > 1 ? "--admit-after above 1" : "--evict-after")));
    } else if (!a->durability.empty()) {
      auto d = parse_durability(a->durability);
      if (!d) return fail(d.status());
      j.durability = *d;
    }
    // The coordinator serves the job's dashboard wherever it serves metrics.
    a->common.metrics.dashboard = a->common.metrics.port >= 0;
    if (Status s = check_coordinator_listen(o); !s.ok()) return fail(s);
    auto endpoint = start_metrics(a->common.metrics, log);
    if (!endpoint) return fail(endpoint.status());
    o.metrics = endpoint->registry;
    DaemonSignals signals;
    install_signal_handlers(signals);
    const auto start = std::chrono::steady_clock::now();
    auto r = run_coordinator(o, log, signals);
    if (!r) return fail(r.status());
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double sps =
        r->train_seconds > 0 ? double(r->totals.counters.samples) / r->train_seconds : 0.0;
    auto optional_number = [](const std::optional<double>& v) {
      return v ? nlohmann::json(*v) : nlohmann::json();
    };
    const double n = double(std::max<uint64_t>(r->totals.counters.samples, 1));
    nlohmann::json rep = {
        {"test_logloss", optional_number(r->test_logloss)},
        {"test_auc", optional_number(r->test_auc)},
        {"train_samples", r->totals.counters.samples},
        {"samples_per_sec", sps},
        {"wall_seconds", wall},
        {"peak_rss_bytes", peak_rss_bytes()},
        {"train_logloss", r->train_logloss},
        {"train_seconds", r->train_seconds},
        {"test_samples", r->test_samples},
        {"shards", a->shards},
        {"workers", a->workers},
        {"members", r->members},
        {"workers_lost", r->totals.workers_lost},
        {"workers_drained", r->totals.workers_drained},
        {"ps_restarts", r->totals.ps_restarts},
        {"pushes_resent", r->totals.counters.pushes_resent},
        {"replies_dropped", r->totals.counters.replies_dropped},
        {"consistency", to_string(j.consistency)},
        {"push", a->push},
        {"model", a->flags.model},
        {"optimizer", a->optimizer},
        {"pull_messages", r->totals.counters.pull_messages},
        {"push_messages", r->totals.counters.push_messages},
        {"push_bytes", r->totals.counters.push_bytes},
        {"bad_lines_skipped", r->totals.counters.bad_lines_skipped},
        {"table_rows", r->totals.shards.table_rows},
        {"table_bytes", r->totals.shards.table_bytes},
        {"bytes_per_row", r->totals.shards.table_rows ? double(r->totals.shards.table_bytes) /
                                                            double(r->totals.shards.table_rows)
                                                      : 0.0},
        {"pulls_deferred", r->totals.shards.pulls_deferred},
        {"rows_not_admitted", r->totals.shards.rows_not_admitted},
        {"updates_dropped", r->totals.shards.updates_dropped},
        {"rows_evicted", r->totals.shards.rows_evicted},
        {"ps_summaries", r->totals.shard_summaries},
        {"bad_messages", r->bad_messages},
        {"on_nan", a->on_nan},
        {"alerts", alerts_json(r->alerts)},
        {"steps_skipped", r->totals.counters.steps_skipped},
        {"updates_not_finite", r->totals.shards.updates_not_finite},
        {"refused_peers", r->refused_peers},
        {"stopped_by_signal", r->stopped_by_signal},
        // The keys `colony train` writes, with the same meaning.
        {"dim", j.dim},
        {"lr", j.optimizer.lr},
        {"l1", j.optimizer.l1},
        {"l2", j.optimizer.l2},
        {"batch", j.batch},
        {"epochs", j.epochs},
        {"seed", j.seed},
        {"model_rows", r->totals.shards.table_rows},
        {"model_bytes", r->totals.shards.memory_bytes},
        {"read_from_cache", r->totals.read_from_cache},
        {"engine", "daemons"},
        {"train_cpu_seconds", r->totals.counters.cpu_seconds},
        {"cpu_seconds_per_sample",
         r->totals.counters.samples
             ? r->totals.counters.cpu_seconds / double(r->totals.counters.samples)
             : 0.0},
        {"pull_messages_per_sample", double(r->totals.counters.pull_messages) / n},
        {"push_messages_per_sample", double(r->totals.counters.push_messages) / n},
        {"push_bytes_per_sample", double(r->totals.counters.push_bytes) / n},
        {"pull_bytes_per_sample", double(r->totals.counters.pull_bytes) / n},
        {"wire_bytes_per_sample",
         double(r->totals.counters.pull_bytes + r->totals.counters.push_bytes) / n},
        {"store", r->store},
        {"admit_after", j.admit_after},
        {"evict_after", j.evict_after},
        {"checkpoints", r->totals.checkpoints},
        {"durability", j.replicas > 1 ? fmt::format("replicated:{}", j.replicas)
                       : j.durability ? std::string(to_string(*j.durability))
                                      : std::string("default (none for memory, log on disk)")},
        {"replicas", j.replicas},
        // Promotions of backups by a ps member in place of a lost one (replication).
        {"failovers", r->totals.failovers},
        // Backups copied to a ps that joined again after its shards failed over (replication).
        {"backups_added", r->totals.backups_added},
        // Every backup held its primary's rows when training ended (ShardSummary).
        // Null where nothing was compared: no replication, no shard still replicated (every
        // one failed over or lost its backup), or backups still taking their copies.
        {"backups_equal",
         j.replicas > 1 && r->totals.shards.replicated_rows > 0 && r->totals.backups_copying == 0
             ? nlohmann::json(r->totals.shards.backups_equal())
             : nlohmann::json(nullptr)},
        // The daemons count what a restarted ps lacked in steps (pushes_lost), not in rows:
        // losing a ps with a memory store fails the job.
        {"updates_lost", nullptr},
        {"pushes_lost", r->totals.shards.pushes_lost},
        {"per_epoch", nlohmann::json::array({{{"epoch", j.epochs},
                                              {"train_logloss", r->train_logloss},
                                              {"test_logloss", optional_number(r->test_logloss)},
                                              {"test_auc", optional_number(r->test_auc)}}})},
    };
    report_model(rep, model_spec(j), dense_optimizer_config(j), j.dense_sync_every);
    report_value_formats(rep, *formats);
    // As `colony train` does: data made by `colony gen` tells the best any model can do.
    if (const auto planted = a->test.empty() ? std::nullopt : read_gen_meta(a->test);
        planted && r->test_logloss) {
      rep["planted_logloss_test"] = planted->planted_logloss_test;
      rep["planted_auc_test"] = planted->planted_auc_test;
      rep["base_rate_logloss_test"] = planted->base_rate_logloss_test;
      rep["gap_to_planted"] = *r->test_logloss / planted->planted_logloss_test - 1.0;
    }
    if (r->test_logloss)
      std::printf("test_logloss %.5f  test_auc %.4f\n", *r->test_logloss,
                  r->test_auc.value_or(0.0));
    std::printf(
        "train_samples %llu  samples_per_sec %.0f  wall_seconds %.1f  workers_lost %u  table_rows "
        "%llu  "
        "table_bytes %s\n",
        static_cast<unsigned long long>(r->totals.counters.samples), sps, wall,
        r->totals.workers_lost, static_cast<unsigned long long>(r->totals.shards.table_rows),
        human_count(double(r->totals.shards.table_bytes)).c_str());
    if (!a->report.empty() && !write_report(a->report, rep.dump(2))) return 1;
    return 0;
  };
}

namespace {

struct MemberArgs {
  CommonArgs common;
  MemberDaemonOptions options;
  std::string store = "memory";
  size_t cache_bytes = 0;
  std::string eviction = "lfu";  // ps: the tiered store's
  bool read_ahead = false;       // ps: the tiered store's
  bool resume = false;           // ps: continue another job's store
  std::string device = "cpu";
  std::string timeline;
};

Runner add_member(CLI::App& app, MemberRole role) {
  auto a = std::make_shared<MemberArgs>();
  a->options.role = role;
  const bool ps = role == MemberRole::ps;
  CLI::App* cmd = app.add_subcommand(
      ps ? "ps" : "worker", ps ? "Run parameter-server shards for a cluster"
                               : "Run worker replicas (and their node aggregator) for a cluster");
  MemberDaemonOptions& o = a->options;
  cmd->add_option("--coordinator", o.coordinator,
                  "The coordinator's --listen endpoint, e.g. tcp://10.0.0.1:7100")
      ->required();
  cmd->add_option(
         "--listen", o.listen,
         "This process's own socket (peers connect to it), e.g. tcp://10.0.0.2:7101; port * = any")
      ->capture_default_str();
  cmd->add_option("--advertise", o.advertise,
                  "Host or IP peers use to reach --listen (needed with 0.0.0.0)");
  cmd->add_option("--threads", o.threads, "Actor scheduler threads (0: one per core)")
      ->capture_default_str();
  if (ps) {
    cmd->add_option("--shards", o.count, "Shards this process hosts")
        ->check(CLI::Range(1u, 4096u))
        ->capture_default_str();
    cmd->add_option(
           "--store", a->store,
           "Row store of the shards: memory, or rocksdb:DIR (shard i in DIR/shard-<i>; the store "
           "records the cluster id and shard, and refuses another job's)")
        ->capture_default_str();
    cmd->add_option(
        "--cache-bytes", a->cache_bytes,
        "With rocksdb: keep hot rows in this many bytes of memory over RocksDB (tiered store)");
    add_tiered_store_flags(cmd, a->eviction, a->read_ahead);
    cmd->add_option(
        "--checkpoint-dir", o.checkpoint_dir,
        "Where this ps writes its shards' checkpoints when the job has --checkpoint-every "
        "(default with rocksdb:DIR: DIR/checkpoints)");
    cmd->add_option("--resume-from", o.resume_from,
                    "Start this ps's shards from a checkpoint of the same job: ROOT (its newest "
                    "complete step) or ROOT/step-S, holding shard-<i> for each shard it hosts");
    cmd->add_flag("--resume", a->resume,
                  "Continue the rows of a store another job wrote (same shard, shard count, row "
                  "size and optimizer), which becomes this job's; without it such a store is "
                  "refused");
  } else {
    cmd->add_option("--data", o.data, "Training file (libsvm, Criteo TSV or a binary cache)")
        ->required();
    cmd->add_option("--replicas", o.count, "Worker replicas in this process")
        ->check(CLI::Range(1u, 4096u))
        ->capture_default_str();
    cmd->add_option("--cache-dir", o.reader.cache_dir,
                    "Where binary caches of text files go (default: beside each file)");
    add_format_option(cmd, o.reader.format);
    cmd->add_option("--device", a->device,
                    "Where the replicas' math runs: cpu, or cuda[:N] (a CUDA build)")
        ->capture_default_str();
    cmd->add_option("--compute-threads", o.compute_threads,
                    "Threads that share each batch of a deep model in each replica, its samples "
                    "split among them (lr and fm run on one)")
        ->check(CLI::Range(size_t{1}, max_compute_threads))
        ->capture_default_str();
  }
  // Faults for tests and drills (hidden from --help): a straggler or a slow disk, a leak.
  cmd->add_option("--fault-slow-ms", o.fault_slow_ms,
                  ps ? "Each shard takes MS milliseconds more to summarize itself when training "
                       "ends"
                     : "The first replica sleeps MS milliseconds after each of its steps")
      ->check(CLI::Range(1u, 60000u))
      ->group("");
  cmd->add_option("--fault-leak-mb", o.fault_leak_mb,
                  "Once training has begun here, allocate and keep N MiB more (320 MiB a "
                  "second)")
      ->check(CLI::Range(0u, 65536u))
      ->group("");
  cmd->add_option("--timeline", a->timeline,
                  "When this process exits, write what its " +
                      std::string(ps ? "shards" : "worker replicas and aggregator") +
                      " and its bridge did and when, as a Chrome trace (colony profile reads it)");
  add_common(cmd, a->common);
  return [a, ps]() {
    const DaemonLog log = make_log(ps ? "ps" : "worker");
    if (Status s = check_security(a->common, log); !s.ok()) return fail(s);
    MemberDaemonOptions o = a->options;
    if (ps) {
      auto store = parse_store_spec(a->store, a->cache_bytes);
      if (!store) return fail(store.status());
      o.store = *store;
      if (Status s = set_tiered_store_flags(o.store, a->eviction, a->read_ahead); !s.ok())
        return fail(s);
      if (Status s = set_resume(o.store, a->resume); !s.ok()) return fail(s);
      if (!o.resume_from.empty()) {
        auto step = checkpoint_step(o.resume_from);
        if (!step) return fail(Status::invalid_input("--resume-from: " + step.status().message()));
        o.resume_from = *step;
      }
    } else {
      auto device = parse_device(a->device);
      if (!device) return fail(device.status());
      if (Status s = check_device(*device); !s.ok()) return fail(s);
      o.device = *device;
    }
    o.security = a->common.security;
    o.cluster_id = a->common.cluster_id;
    o.join_timeout_ms = static_cast<uint64_t>(a->common.join_timeout_s * 1000);
    if (Status s = check_member_options(o); !s.ok()) return fail(s);
    auto endpoint = start_metrics(a->common.metrics, log);
    if (!endpoint) return fail(endpoint.status());
    o.metrics = endpoint->registry;
    if (!a->timeline.empty()) {
      auto recorder = start_timeline(a->timeline);
      if (!recorder) return fail(recorder.status());
      o.timeline = *recorder;
    }
    DaemonSignals signals;
    install_signal_handlers(signals);
    Status s = run_member(o, log, signals);
    // Written however the job ended: a failed job's timeline is what explains it.
    if (o.timeline && !write_timeline(a->timeline, *o.timeline, log)) return 1;
    if (!s.ok()) return fail(s);
    return 0;
  };
}

}  // namespace

Runner add_ps(CLI::App& app) {
  return add_member(app, MemberRole::ps);
}
Runner add_worker(CLI::App& app) {
  return add_member(app, MemberRole::worker);
}

}  // namespace colony::cli
