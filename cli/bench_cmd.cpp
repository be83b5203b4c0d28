// colony bench SUITE: figures measured next to a baseline from the same run, as ratios.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "worker/generator.h"
#include "worker/reader.h"
#include "worker/trainer.h"

namespace colony::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string suite;
  std::string report;
  uint64_t rows = 500000;
  int repeats = 3;
  std::string dir;
};

// One pass over the cache: returns seconds; `work` is called for every batch.
template <class F>
Expected<double> timed_pass(const std::string& path, const ReaderOptions& ro, uint64_t& samples, F&& work) {
  auto reader = open_reader(path, ro);
  if (!reader) return reader.status();
  Batch batch;
  samples = 0;
  const auto start = Clock::now();
  while (true) {
    auto more = (*reader)->next(batch);
    if (!more) return more.status();
    if (!*more) break;
    work(batch);
    samples += batch.rows();
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int bench_train(const BenchArgs& a) {
  namespace fs = std::filesystem;
  const fs::path dir = a.dir.empty() ? fs::temp_directory_path() / fmt::format("colony-bench-{}", ::getpid())
                                     : fs::path(a.dir);
  GenOptions g;
  g.rows = a.rows;
  g.test_rows = 1000;
  g.seed = 1;
  g.out_dir = dir.string();
  std::fprintf(stderr, "bench train: generating %llu rows in %s\n",
               static_cast<unsigned long long>(a.rows), dir.c_str());
  auto gen = generate_dataset(g, nullptr);
  if (!gen) return fail(gen.status());
  ReaderOptions ro;
  ro.batch_rows = 512;
  // Build the binary cache: every timed pass below reads it.
  uint64_t samples = 0;
  auto first = timed_pass(gen->train_path, ro, samples, [](const Batch&) {});
  if (!first) return fail(first.status());

  auto stream_once = [&]() { return timed_pass(gen->train_path, ro, samples, [](const Batch&) {}); };
  nlohmann::json rep = {{"suite", "train"}, {"rows", a.rows}, {"repeats", a.repeats}, {"batch", ro.batch_rows}};
  std::printf("%-22s %14s %14s %8s\n", "figure", "samples/s", "stream/s", "ratio");
  for (const char* model : {"lr", "fm"}) {
    double best_train = 1e300, best_stream = 1e300;
    for (int rep_i = 0; rep_i < a.repeats; ++rep_i) {
      // Baseline and figure alternate, so drift on a shared machine affects both alike.
      auto s = stream_once();
      if (!s) return fail(s.status());
      best_stream = std::min(best_stream, *s);
      TrainerConfig tc;
      tc.model.kind = *parse_model(model);
      tc.optimizer = default_optimizer_config(OptimizerKind::ftrl);
      auto trainer = LocalTrainer::make(tc);
      if (!trainer) return fail(trainer.status());
      auto t = timed_pass(gen->train_path, ro, samples, [&](const Batch& b) { (*trainer)->train_batch(b); });
      if (!t) return fail(t.status());
      best_train = std::min(best_train, *t);
    }
    const double train_sps = double(samples) / best_train;
    const double stream_sps = double(samples) / best_stream;
    std::printf("%-22s %14.0f %14.0f %8.3f\n", fmt::format("train {} (1 thread)", model).c_str(),
                train_sps, stream_sps, train_sps / stream_sps);
    rep[fmt::format("{}_samples_per_sec", model)] = train_sps;
    rep[fmt::format("{}_stream_samples_per_sec", model)] = stream_sps;
    rep[fmt::format("{}_ratio_to_stream", model)] = train_sps / stream_sps;
    rep[fmt::format("{}_model_share_of_time", model)] = 1.0 - best_stream / best_train;
  }
  std::printf("ratio = training throughput / streaming the same batches from the binary cache\n");
  if (a.dir.empty()) fs::remove_all(dir);
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure a suite against a baseline from the same run");
  cmd->add_option("suite", a->suite, "Suite: train")->required()->check(CLI::IsMember({"train"}));
  cmd->add_option("--report", a->report, "Write a JSON report to this file");
  cmd->add_option("--rows", a->rows, "Generated rows to train on")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "Timed passes per figure (best is kept)")
      ->check(CLI::Range(1, 100))->capture_default_str();
  cmd->add_option("--dir", a->dir, "Directory for the generated data (default: a temporary one)");
  return [a]() { return bench_train(*a); };
}

}  // namespace colony::cli
