// colony bench SUITE: figures measured next to a baseline from the same run, as ratios.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "actors/embedded_cluster.h"
#include "bench/store_bench.h"
#include "bench/train_bench.h"
#include "bench/wire_bench.h"
#include "cli/commands.h"
#include "common/hash.h"
#include "common/parallel.h"
#include "data/generator.h"
#include "data/reader.h"
#include "gpu/device.h"
#include "monitor/http_server.h"
#include "monitor/ps_metrics.h"
#include "worker/train_job.h"
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
  size_t in_flight = 8;                                                  // wire
  std::string wire_format = "fp32";                                      // wire
  size_t part_bytes = part_bytes_default;                                // wire
  std::vector<size_t> floats{1, 8, 64}, keys{100, 1000, 10000, 100000};  // wire
  std::string model;  // train: a deep model against its PyTorch peer; empty: lr and fm
  std::string peer_script;
};

// One pass over the cache: returns seconds; `work` is called for every batch.
template <class F>
Expected<double> timed_pass(const std::string& path, const ReaderOptions& ro, uint64_t& samples,
                            F&& work) {
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

// Where a suite's generated data goes: --dir, or a temporary folder (removed at the end).
std::filesystem::path data_dir(const BenchArgs& a) {
  return a.dir.empty()
             ? std::filesystem::temp_directory_path() / fmt::format("colony-bench-{}", ::getpid())
             : std::filesystem::path(a.dir);
}

// A suite's data folder for one run: a temporary one (no --dir) is removed when the run ends,
// whether it succeeded or failed; --dir is kept.
struct BenchDataDir {
  explicit BenchDataDir(const BenchArgs& a) : path(data_dir(a)), temporary(a.dir.empty()) {}
  ~BenchDataDir() {
    std::error_code ignored;  // nothing to report it to at the end of a run
    if (temporary) std::filesystem::remove_all(path, ignored);
  }
  BenchDataDir(const BenchDataDir&) = delete;
  BenchDataDir& operator=(const BenchDataDir&) = delete;
  const std::filesystem::path path;
  const bool temporary;
};

// Generates the suite's data into data_dir(a): --rows training rows with seed 1, `test_rows`
// test rows, in `format` with labels from `planted`.
Expected<GenSummary> generate_bench_data(const BenchArgs& a, const char* suite, uint64_t test_rows,
                                         const std::string& format = "libsvm",
                                         PlantedKind planted = PlantedKind::fm) {
  GenOptions g;
  g.rows = a.rows;
  g.test_rows = test_rows;
  g.seed = 1;
  g.out_dir = data_dir(a).string();
  g.format = format;
  g.planted = planted;
  std::fprintf(stderr, "bench %s: generating %llu rows (%s, planted %s) in %s\n", suite,
               static_cast<unsigned long long>(a.rows), format.c_str(), to_string(planted),
               g.out_dir.c_str());
  return generate_dataset(g, nullptr);
}

// One timed training pass of `trainer` over the cache: seconds, or the first error.
Expected<double> training_pass(const std::string& path, const ReaderOptions& ro, uint64_t& samples,
                               LocalTrainer& trainer) {
  Status trained;
  auto t = timed_pass(path, ro, samples, [&](const Batch& b) {
    if (auto loss = trainer.train_batch(b); !loss && trained.ok()) trained = loss.status();
  });
  if (t && !trained.ok()) return trained;
  return t;
}

int bench_train(const BenchArgs& a) {
  const BenchDataDir data(a);
  auto gen = generate_bench_data(a, "train", 1000);
  if (!gen) return fail(gen.status());
  ReaderOptions ro;
  ro.batch_rows = 512;
  // Build the binary cache: every timed pass below reads it.
  uint64_t samples = 0;
  auto first = timed_pass(gen->train_path, ro, samples, [](const Batch&) {});
  if (!first) return fail(first.status());

  auto stream_once = [&]() {
    return timed_pass(gen->train_path, ro, samples, [](const Batch&) {});
  };
  nlohmann::json rep = {
      {"suite", "train"}, {"rows", a.rows}, {"repeats", a.repeats}, {"batch", ro.batch_rows}};
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
      auto t = training_pass(gen->train_path, ro, samples, **trainer);
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
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

// Where scripts/torch_ctr.py is: beside the source tree this binary was built in
// (<repo>/build/colony), else under the working directory.
std::string default_peer_script() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = exe.parent_path().parent_path() / "scripts" / "torch_ctr.py";
    if (fs::exists(beside)) return beside.string();
  }
  return "scripts/torch_ctr.py";
}

// A deep model against the same model in PyTorch on the same generated files (labels from a
// planted deep network), both on the same BLAS threads, with the dense layers' FLOP rate next
// to sgemm's in the same run.
int bench_train_deep(const BenchArgs& a) {
  const BenchDataDir data(a);
  auto gen = generate_bench_data(a, "train", std::max<uint64_t>(20000, a.rows / 10), "criteo",
                                 PlantedKind::deep);
  if (!gen) return fail(gen.status());
  ReaderOptions ro;
  ro.batch_rows = 512;
  TrainerConfig tc;
  tc.model.kind = *parse_model(a.model);
  tc.model = with_model_defaults(tc.model);
  tc.model.fields = 0;  // detected: Criteo's 26 fields and 13 dense features
  auto shape = detect_input_shape(tc.model, gen->train_path, nullptr, ro);
  if (!shape) return fail(shape.status());
  tc.model = *shape;
  // The peer has no FTRL: both sides train the embeddings with Adagrad (the same algorithm).
  tc.optimizer = default_optimizer_config(OptimizerKind::adagrad);
  tc.dense_optimizer.kind = nn::DenseOptimizerKind::adam;
  tc.dense_optimizer.lr = 1e-3f;
  auto probe = Model::make(tc.model);
  if (!probe) return fail(probe.status());
  const double flops_per_sample = 3.0 * double((*probe)->dense_flops_per_sample());
  uint64_t samples = 0;
  auto first = timed_pass(gen->train_path, ro, samples, [](const Batch&) {});  // builds the cache
  if (!first) return fail(first.status());

  const int threads = static_cast<int>(hardware_threads());
  tc.model.compute_threads = static_cast<size_t>(threads);
  double best = 1e300;
  std::unique_ptr<LocalTrainer> last;
  for (int r = 0; r < a.repeats; ++r) {
    auto trainer = LocalTrainer::make(tc);
    if (!trainer) return fail(trainer.status());
    auto t = training_pass(gen->train_path, ro, samples, **trainer);
    if (!t) return fail(t.status());
    best = std::min(best, *t);
    last = std::move(trainer.value());
  }
  auto ev = evaluate(gen->test_path, nullptr, ro,
                     [&](const Batch& b, std::vector<float>& z) { return last->predict(b, z); });
  if (!ev) return fail(ev.status());
  const double sgemm = sgemm_gflops(1024, 5, threads);
  const double sps = double(samples) / best;
  const double gflops = sps * flops_per_sample / 1e9;

  TorchPeerOptions po;
  po.script = a.peer_script.empty() ? default_peer_script() : a.peer_script;
  po.model = a.model;
  po.train = gen->train_path;
  po.test = gen->test_path;
  po.threads = threads;
  po.sparse_lr = tc.optimizer.lr;
  po.dense_lr = tc.dense_optimizer.lr;
  po.dim = tc.model.dim;
  po.mlp = layer_sizes_text(tc.model.mlp);
  if (tc.model.kind == ModelKind::dlrm) po.bottom = layer_sizes_text(tc.model.bottom);
  po.batch = ro.batch_rows;
  std::fprintf(stderr, "bench train: running the PyTorch peer (%s)\n", po.script.c_str());
  auto peer = run_torch_peer(po);

  nlohmann::json rep = {
      {"suite", "train"},       {"model", a.model},       {"rows", a.rows},
      {"repeats", a.repeats},   {"batch", ro.batch_rows}, {"threads", threads},
      {"samples_per_sec", sps}, {"test_auc", ev->auc},    {"test_logloss", ev->logloss},
      {"dense_gflops", gflops}, {"sgemm_gflops", sgemm},  {"dense_share_of_sgemm", gflops / sgemm}};
  std::printf("%-28s %12s %10s %10s\n", "figure", "samples/s", "test auc", "logloss");
  std::printf("%-28s %12.0f %10.4f %10.5f\n",
              fmt::format("colony {} ({} threads)", a.model, threads).c_str(), sps, ev->auc,
              ev->logloss);
  if (peer) {
    const double psps = (*peer)["samples_per_sec"].get<double>();
    std::printf("%-28s %12.0f %10.4f %10.5f\n",
                fmt::format("pytorch {} ({} threads)", a.model, threads).c_str(), psps,
                (*peer)["test_auc"].get<double>(), (*peer)["test_logloss"].get<double>());
    std::printf("ratio colony / pytorch: %.2f x samples/s, %+.4f auc\n", sps / psps,
                ev->auc - (*peer)["test_auc"].get<double>());
    rep["peer"] = *peer;
    rep["ratio_to_peer"] = sps / psps;
  } else {
    std::printf("pytorch peer not run: %s\n", peer.status().message().c_str());
    rep["peer_error"] = peer.status().message();
  }
  std::printf("dense layers %.1f GFLOP/s = %.1f%% of sgemm's %.1f GFLOP/s (1024^3, same run)\n",
              gflops, 100.0 * gflops / sgemm, sgemm);
  std::printf(
      "both sides: Adagrad %.3g on the embeddings, Adam %.3g on the dense layers, batch "
      "%zu, one epoch, training loop timed\n",
      tc.optimizer.lr, tc.dense_optimizer.lr, ro.batch_rows);
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

// Bytes per second of memcpy between two 256 MiB buffers (best of a few copies).
double memcpy_bandwidth() {
  const size_t bytes = size_t{256} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 1e300;
  for (int i = 0; i < 4; ++i) {
    const auto start = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    a[i] = b[bytes - 1 - i];  // keep the copies observable
  }
  return double(bytes) / best;
}

int bench_ps(const BenchArgs& a) {
  nlohmann::json rep = {{"suite", "ps"}};
  const double memcpy_bps = memcpy_bandwidth();
  rep["memcpy_bytes_per_sec"] = memcpy_bps;
  std::printf("memcpy baseline: %.2f GB/s\n", memcpy_bps / 1e9);
  std::printf("%-7s %-9s %14s %10s %12s\n", "floats", "keys/req", "rows/s", "GB/s", "of memcpy");
  nlohmann::json figures = nlohmann::json::array();
  for (size_t width : {size_t{1}, size_t{8}, size_t{64}}) {
    for (size_t keys : {size_t{1000}, size_t{10000}, size_t{100000}}) {
      // About the same bytes per figure, so each takes a similar time.
      const uint64_t trips =
          std::max<uint64_t>(20, (uint64_t{400} << 20) / (keys * (8 + 4 * width) * 2));
      double best = 1e300;
      PsBenchFigure f;
      for (int r = 0; r < a.repeats; ++r) {
        auto m = measure_ps_round_trips(width, keys, trips, 1);
        if (!m) return fail(m.status());
        if (m->seconds < best) {
          best = m->seconds;
          f = *m;
        }
      }
      const double rows_ps = double(f.rows) / f.seconds, bps = double(f.bytes) / f.seconds;
      std::printf("%-7zu %-9zu %14.0f %10.2f %11.1f%%\n", width, keys, rows_ps, bps / 1e9,
                  100.0 * bps / memcpy_bps);
      figures.push_back({{"floats", width},
                         {"keys_per_request", keys},
                         {"rows_per_sec", rows_ps},
                         {"bytes_per_sec", bps},
                         {"ratio_to_memcpy", bps / memcpy_bps}});
    }
  }
  std::printf("rows = rows pulled + rows pushed (one shard actor, Zipf keys, in process)\n");
  rep["figures"] = figures;
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

// The models' forward and backward pass on each backend this machine has (the CPU backend, the
// CUDA backend's device code built for the host, CUDA device 0 when there is one) over the same
// generated batches of 512, as ratios to the CPU backend. For LR and FM, the bytes a step moves
// (the batch and its rows in, the gradients in and out) against a copy bandwidth measured in the
// same run: memcpy on the host, host-to-device copies for the GPU; for the deep models, their
// dense layers' FLOP/s against the peak of the device's products, also measured in the run.
int bench_device(const BenchArgs& a) {
  GenOptions g;
  g.rows = a.rows;
  g.test_rows = 1;
  std::fprintf(stderr, "bench device: generating %llu rows\n",
               static_cast<unsigned long long>(a.rows));
  auto data = std::make_shared<const std::vector<Batch>>(generate_in_memory(g).train);
  std::vector<Batch> batches;
  std::vector<std::vector<uint32_t>> slots;
  std::vector<size_t> unique;
  auto reader = make_memory_reader(data, 512);
  BatchIndex index;
  for (Batch b; *reader->next(b);) {
    index.build(b);
    slots.emplace_back(index.slots().begin(), index.slots().end());
    unique.push_back(index.unique_keys().size());
    batches.push_back(b);
  }
  const size_t most = *std::max_element(unique.begin(), unique.end());
  std::vector<DeviceChoice> devices{DeviceChoice{}, DeviceChoice{Backend::device_host, 0}};
  const double memcpy_bps = memcpy_bandwidth();
  double cuda_bps = 0.0;
  if (check_device(DeviceChoice{Backend::cuda, 0}).ok()) {
    auto bps = cuda_copy_bandwidth(0);
    if (!bps) return fail(bps.status());
    cuda_bps = *bps;
    devices.push_back(DeviceChoice{Backend::cuda, 0});
  }
  nlohmann::json rep = {{"suite", "device"},
                        {"rows", a.rows},
                        {"batch", 512},
                        {"repeats", a.repeats},
                        {"memcpy_bytes_per_sec", memcpy_bps},
                        {"backends", describe_backends()}};
  if (cuda_bps > 0) rep["cuda_copy_bytes_per_sec"] = cuda_bps;
  std::printf("baselines: memcpy %.2f GB/s%s\n", memcpy_bps / 1e9,
              cuda_bps > 0 ? fmt::format(", host to cuda:0 {:.2f} GB/s", cuda_bps / 1e9).c_str()
                           : " (no CUDA device: cpu and the device code's host build only)");
  // Best seconds of one forward and backward pass of `model` over the batches (pass 0 warms
  // up, untimed: allocations).
  std::vector<float> rows, grads, logits;
  const auto best_pass = [&](Model& model, std::span<const float> dense,
                             std::span<float> dense_grads) {
    double best = 1e300;
    for (int r = 0; r <= a.repeats; ++r) {
      const auto start = Clock::now();
      for (size_t i = 0; i < batches.size(); ++i) {
        const size_t n = unique[i] * model.width();
        logits.resize(batches[i].rows());
        (void)model.forward_backward(batches[i], slots[i], {rows.data(), n}, dense,
                                     {grads.data(), n}, dense_grads, logits);
      }
      if (r > 0) best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
    return best;
  };
  const auto random_rows = [&](size_t width) {
    rows.resize(most * width);
    grads.assign(rows.size(), 0.0f);
    SplitMix64 rng(7);
    for (float& r : rows) r = static_cast<float>((rng.uniform() - 0.5) * 0.1);
  };
  double samples = 0.0, features = 0.0;
  for (const Batch& b : batches) {
    samples += double(b.rows());
    features += double(b.features());
  }
  // One row of a table, and its figure in the report: `amount` printed in units of 1e9 (GB/s,
  // GFLOP/s), `ratio` as a percentage.
  nlohmann::json figures = nlohmann::json::array();
  const auto figure = [&](const std::string& name, const DeviceChoice& device, double sps,
                          double cpu_sps, std::pair<const char*, double> amount,
                          std::pair<const char*, double> ratio) {
    std::printf("%-7s %-12s %12.0f %8.2fx %13.2f %11.1f%%\n", name.c_str(),
                device_text(device).c_str(), sps, sps / cpu_sps, amount.second / 1e9,
                100.0 * ratio.second);
    figures.push_back({{"model", name},
                       {"device", device_text(device)},
                       {"samples_per_sec", sps},
                       {"ratio_to_cpu", sps / cpu_sps},
                       {amount.first, amount.second},
                       {ratio.first, ratio.second}});
  };
  std::printf("%-7s %-12s %12s %9s %13s %12s\n", "model", "device", "samples/s", "of cpu",
              "GB/s moved", "of baseline");
  for (const ModelSpec& spec :
       {ModelSpec{ModelKind::lr, 8}, ModelSpec{ModelKind::fm, 8}, ModelSpec{ModelKind::fm, 32}}) {
    random_rows(spec.width());
    double rows_moved = 0.0;
    for (size_t u : unique) rows_moved += double(u * spec.width());
    // The batch, the rows in, and the gradients in and out.
    const double bytes = 4.0 * (3.0 * rows_moved + 2.0 * features + 2.0 * samples);
    double cpu_sps = 0.0;
    for (const DeviceChoice& device : devices) {
      ModelSpec on = spec;
      on.device = device;
      auto model = Model::make(on);
      if (!model) return fail(model.status());
      const double best = best_pass(**model, {}, {});
      const double sps = samples / best, moved = bytes / best;
      const double baseline = device.backend == Backend::cuda ? cuda_bps : memcpy_bps;
      if (device.backend == Backend::cpu) cpu_sps = sps;
      figure(spec.kind == ModelKind::lr ? "lr" : fmt::format("fm {}", spec.dim), device, sps,
             cpu_sps, {"bytes_moved_per_sec", moved}, {"ratio_to_copy_baseline", moved / baseline});
    }
  }
  std::printf(
      "one forward and backward pass per batch of 512 (rows gathered, gradients reduced per "
      "key), best of %d; bytes moved = batch + rows in + gradients in and out\n",
      a.repeats);

  // The deep models (their default layers over the data's fields): their dense layers' FLOP/s
  // against the peak of the products of the same device, measured here: OpenBLAS's 1024^3 sgemm
  // on this machine's threads for the CPU and the host build, cuBLAS's 4096^3 bf16 product on
  // the GPU (the models' own products there).
  uint32_t fields = 1;
  for (const Batch& b : batches)
    for (uint64_t k : b.keys) fields = std::max<uint32_t>(fields, key_field(k) + 1);
  const double cpu_peak = sgemm_gflops(1024, 5, static_cast<int>(hardware_threads())) * 1e9;
  double cuda_peak = 0.0;
  if (cuda_bps > 0) {
    auto peak = cuda_gemm_flops(0, 4096, true);
    if (!peak) return fail(peak.status());
    cuda_peak = *peak;
  }
  std::printf("\n%-7s %-12s %12s %9s %13s %12s\n", "model", "device", "samples/s", "of cpu",
              "dense GFLOP/s", "of peak");
  for (ModelKind kind : {ModelKind::deepfm, ModelKind::dlrm, ModelKind::dcn}) {
    ModelSpec deep = with_model_defaults(ModelSpec{kind, 8});
    deep.fields = fields;
    deep.dense = batches.front().dense_dim;
    random_rows(deep.width());
    double cpu_sps = 0.0;
    for (const DeviceChoice& device : devices) {
      ModelSpec on = deep;
      on.device = device;
      auto model = Model::make(on);
      if (!model) return fail(model.status());
      std::vector<float> dense((*model)->dense_params()), dense_grads(dense.size());
      (*model)->init_dense(dense, 7);
      const double sps = samples / best_pass(**model, dense, dense_grads);
      // A training step's products cost three forward passes' (models/layers.h).
      const double flops = sps * 3.0 * double((*model)->dense_flops_per_sample());
      const double peak = device.backend == Backend::cuda ? cuda_peak : cpu_peak;
      if (device.backend == Backend::cpu) cpu_sps = sps;
      figure(to_string(kind), device, sps, cpu_sps, {"dense_flops_per_sec", flops},
             {"ratio_to_gemm_peak", flops / peak});
    }
  }
  std::printf(
      "peak: sgemm 1024^3 on %zu threads %.1f GFLOP/s%s\n", hardware_threads(), cpu_peak / 1e9,
      cuda_peak > 0
          ? fmt::format(", cuBLAS bf16 4096^3 on cuda:0 {:.1f} GFLOP/s", cuda_peak / 1e9).c_str()
          : "");
  rep["cpu_gemm_flops_per_sec"] = cpu_peak;
  if (cuda_peak > 0) rep["cuda_gemm_flops_per_sec"] = cuda_peak;
  rep["figures"] = figures;
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

// The embedded cluster against the single-process trainer on the same data, in one run. With
// --model (a deep model, on planted-deep Criteo-shaped data): hierarchical push, so that the
// workers' dense layers are all-reduced through the aggregators, and a run of 4 workers on 2
// nodes.
int bench_cluster(const BenchArgs& a) {
  const BenchDataDir data(a);
  const bool deep = !a.model.empty();
  auto gen = deep ? generate_bench_data(a, "cluster", 20000, "criteo", PlantedKind::deep)
                  : generate_bench_data(a, "cluster", 20000);
  if (!gen) return fail(gen.status());
  TrainJobOptions o;
  o.data = gen->train_path;
  o.test = gen->test_path;
  o.trainer.model = {ModelKind::fm, 8};
  if (deep) {
    o.trainer.model.kind = *parse_model(a.model);
    o.trainer.model = with_model_defaults(o.trainer.model);
    o.trainer.model.fields = 0;  // detected
  }
  o.trainer.optimizer = default_optimizer_config(OptimizerKind::ftrl);
  // One untimed pass builds the binary cache that every timed run reads.
  if (auto warm = run_train_job(o, nullptr); !warm) return fail(warm.status());

  struct Run {
    const char* name;
    bool local;
    uint32_t shards, workers, per_node;
  };
  const std::vector<Run> runs =
      deep ? std::vector<Run>{{"single-process trainer", true, 1, 1, 0},
                              {"cluster 1 shard, 1 worker", false, 1, 1, 0},
                              {"cluster 2 shards, 2 workers", false, 2, 2, 0},
                              {"cluster 2 shards, 2x2 workers", false, 2, 4, 2}}
           : std::vector<Run>{{"single-process trainer", true, 1, 1, 0},
                              {"cluster 1 shard, 1 worker", false, 1, 1, 0},
                              {"cluster 2 shards, 1 worker", false, 2, 1, 0},
                              {"cluster 2 shards, 2 workers", false, 2, 2, 0}};
  const PushMode push = deep ? PushMode::hierarchical : PushMode::flat;
  nlohmann::json rep = {{"suite", "cluster"},
                        {"rows", a.rows},
                        {"consistency", "ssp:2"},
                        {"push", to_string(push)},
                        {"model", to_string(o.trainer.model.kind)}};
  nlohmann::json figures = nlohmann::json::array();
  double local_cpu = 0.0;
  std::printf(
      "%-30s %12s %14s %10s %12s\n",
      fmt::format("run ({}, ssp:2, {} push)", to_string(o.trainer.model.kind), to_string(push))
          .c_str(),
      "samples/s", "cpu us/sample", "cpu ratio", "test logloss");
  for (const Run& run : runs) {
    double best_sps = 0.0, best_cpu = 1e300, loss = 0.0;
    for (int r = 0; r < a.repeats; ++r) {
      ClusterOptions c;
      c.shards = run.shards;
      c.workers = run.workers;
      c.replicas_per_node = run.per_node;
      c.consistency = {ConsistencyKind::ssp, 2};
      c.push = push;
      auto res = run.local ? run_train_job(o, nullptr) : run_cluster_train_job(o, c, nullptr);
      if (!res) return fail(res.status());
      best_sps = std::max(best_sps, double(res->counters.samples) / res->train_seconds);
      best_cpu = std::min(best_cpu, res->train_cpu_seconds / double(res->counters.samples));
      loss = res->test_logloss;
    }
    if (run.local) local_cpu = best_cpu;
    std::printf("%-30s %12.0f %14.3f %10.2f %12.5f\n", run.name, best_sps, best_cpu * 1e6,
                best_cpu / local_cpu, loss);
    figures.push_back({{"run", run.name},
                       {"samples_per_sec", best_sps},
                       {"cpu_seconds_per_sample", best_cpu},
                       {"cpu_ratio_to_single_process", best_cpu / local_cpu},
                       {"test_logloss", loss}});
  }
  std::printf(
      "cpu ratio = CPU seconds (user+sys) per trained sample / the single-process trainer's\n");
  rep["figures"] = figures;
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

// The job of the cluster suites: FM dim 8 with FTRL on --rows generated rows (20k test rows),
// after one untimed pass that builds the binary cache every timed run reads.
Expected<TrainJobOptions> fm_bench_job(const BenchArgs& a, const char* suite) {
  auto gen = generate_bench_data(a, suite, 20000);
  if (!gen) return gen.status();
  TrainJobOptions o;
  o.data = gen->train_path;
  o.test = gen->test_path;
  o.trainer.model = {ModelKind::fm, 8};
  o.trainer.optimizer = default_optimizer_config(OptimizerKind::ftrl);
  if (auto warm = run_train_job(o, nullptr); !warm) return warm.status();
  return o;
}

// The cost of live metrics: `colony train`'s embedded cluster (2 shards, 2 workers, BSP,
// hierarchical push, as `colony train` runs by default) with metrics off and on, in pairs
// whose order alternates, on the same data in one run. "On" records every instrument and
// serves /metrics while a scraper asks for it every 100 ms (Prometheus scrapes every 5-60 s):
// the worst case. The figure is on/off samples/s per pair; the median is the result.
int bench_metrics(const BenchArgs& a) {
  const BenchDataDir data(a);
  auto job = fm_bench_job(a, "metrics");
  if (!job) return fail(job.status());
  const TrainJobOptions& o = *job;
  auto run = [&](bool on) -> Expected<std::pair<double, uint64_t>> {
    ClusterOptions c;
    c.shards = 2;
    c.workers = 2;
    c.push = PushMode::hierarchical;
    std::unique_ptr<monitor::HttpServer> server;
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> scrapes{0};
    std::thread scraper;
    if (on) {
      c.metrics = std::make_shared<monitor::Registry>();
      monitor::add_process_metrics(*c.metrics);
      auto started = monitor::HttpServer::start("127.0.0.1", 0, c.metrics);
      if (!started) return started.status();
      server = std::move(*started);
      scraper = std::thread([&stop, &scrapes, port = server->port()] {
        httplib::Client client("127.0.0.1", port);
        while (!stop.load()) {
          if (auto res = client.Get("/metrics"); res && res->status == 200) ++scrapes;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      });
    }
    auto res = run_cluster_train_job(o, c, nullptr);
    stop = true;
    if (scraper.joinable()) scraper.join();
    if (!res) return res.status();
    return std::make_pair(double(res->counters.samples) / res->train_seconds, scrapes.load());
  };
  std::printf("%-6s %14s %14s %8s %8s\n", "pair", "off samples/s", "on samples/s", "on/off",
              "scrapes");
  std::vector<double> ratios;
  nlohmann::json pairs = nlohmann::json::array();
  for (int r = 0; r < a.repeats; ++r) {
    const bool on_first = r % 2 == 1;
    auto first = run(on_first);
    if (!first) return fail(first.status());
    auto second = run(!on_first);
    if (!second) return fail(second.status());
    const auto& on = on_first ? *first : *second;
    const auto& off = on_first ? *second : *first;
    ratios.push_back(on.first / off.first);
    std::printf("%-6d %14.0f %14.0f %8.3f %8llu\n", r + 1, off.first, on.first, ratios.back(),
                static_cast<unsigned long long>(on.second));
    pairs.push_back({{"off_samples_per_sec", off.first},
                     {"on_samples_per_sec", on.first},
                     {"ratio", ratios.back()},
                     {"scrapes", on.second}});
  }
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  const double median = sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  std::printf("median on/off %.3f (min %.3f, max %.3f) over %zu pairs\n", median, sorted.front(),
              sorted.back(), sorted.size());
  nlohmann::json rep = {{"suite", "metrics"},
                        {"rows", a.rows},
                        {"pairs", pairs},
                        {"median_ratio", median},
                        {"min_ratio", sorted.front()},
                        {"max_ratio", sorted.back()}};
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

// The embedded cluster (2 shards, 2 workers, SSP(2), hierarchical push) on the same data over
// every store and durability, in one run: samples/s as a ratio to the memory store's.
int bench_durability(const BenchArgs& a) {
  namespace fs = std::filesystem;
  const BenchDataDir data(a);
  const fs::path& dir = data.path;
  auto job = fm_bench_job(a, "durability");
  if (!job) return fail(job.status());
  const TrainJobOptions& o = *job;
  struct Run {
    const char* store;
    Durability durability;
  };
  // The tiered store's cache: 16 MiB for both shards, about a quarter of the rows of 500k
  // generated samples.
  const size_t cache_bytes = size_t{16} << 20;
  const Run runs[] = {{"memory", Durability::none}, {"rocksdb", Durability::none},
                      {"rocksdb", Durability::log}, {"rocksdb", Durability::fsync},
                      {"tiered", Durability::none}, {"tiered", Durability::log},
                      {"tiered", Durability::fsync}};
  nlohmann::json rep = {{"suite", "durability"},
                        {"rows", a.rows},
                        {"shards", 2},
                        {"workers", 2},
                        {"consistency", "ssp:2"},
                        {"push", "hierarchical"},
                        {"tiered_cache_bytes", cache_bytes}};
  nlohmann::json figures = nlohmann::json::array();
  std::printf("%-10s %-11s %12s %12s %12s\n", "store", "durability", "samples/s", "of memory",
              "test logloss");
  double memory_sps = 0.0;
  for (const Run& run : runs) {
    double best = 0.0, loss = 0.0;
    for (int r = 0; r < a.repeats; ++r) {
      const fs::path store_dir = dir / fmt::format("store-{}", r);
      fs::remove_all(store_dir);
      ClusterOptions c;
      c.shards = 2;
      c.workers = 2;
      c.consistency = {ConsistencyKind::ssp, 2};
      c.push = PushMode::hierarchical;
      if (std::string(run.store) != "memory") {
        auto spec = parse_store_spec("rocksdb:" + store_dir.string(),
                                     std::string(run.store) == "tiered" ? cache_bytes : 0);
        if (!spec) return fail(spec.status());
        c.store = *spec;
      }
      if (Status st = set_durability(c.store, run.durability); !st.ok()) return fail(st);
      auto res = run_cluster_train_job(o, c, nullptr);
      fs::remove_all(store_dir);
      if (!res) return fail(res.status());
      best = std::max(best, double(res->counters.samples) / res->train_seconds);
      loss = res->test_logloss;
    }
    if (memory_sps == 0.0) memory_sps = best;
    std::printf("%-10s %-11s %12.0f %12.2f %12.5f\n", run.store, to_string(run.durability), best,
                best / memory_sps, loss);
    figures.push_back({{"store", run.store},
                       {"durability", to_string(run.durability)},
                       {"samples_per_sec", best},
                       {"ratio_to_memory", best / memory_sps},
                       {"test_logloss", loss}});
  }
  std::printf("best of %d runs each; the ratio is to the memory store in the same run\n",
              a.repeats);
  rep["figures"] = figures;
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

int bench_wire(const BenchArgs& a) {
  auto format = parse_value_format(a.wire_format);
  if (!format) return fail(Status::invalid_input("--wire-format: " + format.status().message()));
  auto figures =
      run_wire_bench(a.floats, a.keys, uint64_t{200} << 20, a.in_flight, *format, a.part_bytes);
  if (!figures) return fail(figures.status());
  nlohmann::json rep = {{"suite", "wire"},
                        {"transport", "zeromq tcp loopback, no CURVE"},
                        {"in_flight", a.in_flight},
                        {"wire_format", to_string(*format)},
                        {"part_bytes", a.part_bytes}};
  nlohmann::json list = nlohmann::json::array();
  std::printf("%-7s %-9s %9s %14s %10s %14s %8s\n", "floats", "keys/req", "messages", "rows/s",
              "GB/s", "baseline GB/s", "ratio");
  for (const WireFigure& f : *figures) {
    std::printf("%-7zu %-9zu %9zu %14.0f %10.3f %14.3f %8.3f\n", f.width, f.keys, f.messages,
                f.rows_per_sec, f.bytes_per_sec / 1e9, f.baseline_bytes_per_sec / 1e9, f.ratio);
    list.push_back({{"floats", f.width},
                    {"keys_per_request", f.keys},
                    {"messages_per_round_trip", f.messages},
                    {"rows_per_sec", f.rows_per_sec},
                    {"bytes_per_sec", f.bytes_per_sec},
                    {"baseline_bytes_per_sec", f.baseline_bytes_per_sec},
                    {"ratio_to_baseline", f.ratio}});
  }
  std::printf(
      "a round trip = pull + replies + push + acks between two processes, in parts of at most %zu "
      "bytes;\n"
      "%zu workers, one round trip in flight each; baseline = ZeroMQ echo of the same bytes in "
      "two stages\n"
      "of messages no larger, %zu round trips in flight, measured in the same run\n",
      a.part_bytes, a.in_flight, a.in_flight);
  rep["figures"] = list;
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

// Row stores (memory, RocksDB, tiered) against RocksDB's own point lookups on the same data.
int bench_store(const BenchArgs& a, bool rows_given) {
  const BenchDataDir data(a);
  StoreBenchOptions o;
  o.dir = data.path.string();
  if (rows_given) o.rows = a.rows;
  auto figures = run_store_bench(
      o, [](const std::string& line) { std::fprintf(stderr, "bench store: %s\n", line.c_str()); });
  if (!figures) return fail(figures.status());
  double raw = 0;
  for (const StoreBenchFigure& f : *figures)
    if (f.store == "rocksdb-raw-get") raw = f.rows_per_sec;
  nlohmann::json rep = {{"suite", "store"},
                        {"rows", o.rows},
                        {"row_floats", o.row_floats},
                        {"batch_keys", o.batch_keys},
                        {"zipf_exponent", o.zipf_exponent},
                        {"cache_fraction", o.cache_fraction},
                        {"block_cache_bytes", o.block_cache_bytes}};
  nlohmann::json list = nlohmann::json::array();
  std::printf("%-18s %14s %12s %10s %11s %12s %12s", "store", "rows/s", "of raw get", "hit rate",
              "read ahead", "belady hits", "A0 hits");
  for (size_t k : o.lookahead_batches) std::printf(" %9s", fmt::format("ahead {}", k).c_str());
  std::printf("\n");
  for (const StoreBenchFigure& f : *figures) {
    const bool tiered = f.store.rfind("tiered", 0) == 0;
    const bool read_ahead = f.store.ends_with("-ahead");
    const bool replayed = tiered && !f.store.ends_with("-all");  // a cache that can miss
    std::printf("%-18s %14.0f %12.3f %10s %11s %12s %12s", f.store.c_str(), f.rows_per_sec,
                f.rows_per_sec / raw, tiered ? fmt::format("{:.3f}", f.hit_rate).c_str() : "",
                read_ahead ? fmt::format("{:.3f}", f.read_ahead_share).c_str() : "",
                replayed ? fmt::format("{:.3f}", f.belady_hit_rate).c_str() : "",
                replayed ? fmt::format("{:.3f}", f.a0_hit_rate).c_str() : "");
    nlohmann::json ahead = nlohmann::json::object();
    for (const auto& [k, rate] : f.lookahead_hit_rates) {
      std::printf(" %9.3f", rate);
      ahead[std::to_string(k)] = rate;
    }
    std::printf("\n");
    nlohmann::json figure = {{"store", f.store},
                             {"rows_per_sec", f.rows_per_sec},
                             {"ratio_to_raw_get", f.rows_per_sec / raw},
                             {"hit_rate", f.hit_rate},
                             {"read_ahead_share", f.read_ahead_share},
                             {"disk_writes", f.disk_writes}};
    if (replayed) {
      figure["belady_hit_rate"] = f.belady_hit_rate;
      figure["a0_hit_rate"] = f.a0_hit_rate;
      figure["lookahead_hit_rates"] = ahead;
    }
    list.push_back(std::move(figure));
  }
  std::printf(
      "rows/s = rows read and written back (load, update, commit) in batches of %zu unique "
      "Zipf(%.1f) keys;\n"
      "raw get = one RocksDB Get per key of the same batches on the same database, no writes;\n"
      "belady hits = Belady's MIN (evicts the row used furthest ahead) replaying the same "
      "accesses with as many rows;\n"
      "A0 hits = the same replay keeping the most probable rows (the lowest Zipf ranks): the "
      "best a cache can expect without knowing the coming accesses;\n"
      "ahead K = the same replay evicting rows the next K batches do not access, by the "
      "figure's policy;\n"
      "-ahead = each batch's keys handed to the store's read-ahead %zu batches early; read ahead "
      "= the share of the rows loaded that it had read;\n"
      "tiered-lfu-all = a cache that holds every row, all read in before timing: the hit path "
      "alone, to set against memory\n",
      o.batch_keys, o.zipf_exponent, o.read_ahead_batches);
  rep["read_ahead_batches"] = o.read_ahead_batches;
  rep["figures"] = list;
  if (!a.report.empty() && !write_report(a.report, rep.dump(2))) return 1;
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd =
      app.add_subcommand("bench", "Measure a suite against a baseline from the same run");
  cmd->add_option("suite", a->suite,
                  "Suite: train, ps, cluster, durability, wire, store, device or metrics")
      ->required()
      ->check(CLI::IsMember(
          {"train", "ps", "cluster", "durability", "wire", "store", "device", "metrics"}));
  cmd->add_option("--report", a->report, "Write a JSON report to this file");
  CLI::Option* rows = cmd->add_option("--rows", a->rows,
                                      "Generated rows to train on (store: rows stored, default 1M)")
                          ->check(positive_number())
                          ->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "Timed passes per figure (best is kept)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--dir", a->dir, "Directory for the generated data (default: a temporary one)");
  cmd->add_option("--model", a->model,
                  "train: deepfm or dlrm against the same model in PyTorch (scripts/torch_ctr.py) "
                  "on the same data (default: lr and fm against streaming the data); cluster: "
                  "deepfm or dlrm in the cluster, dense layers all-reduced (default: fm)")
      ->check(CLI::IsMember({"deepfm", "dlrm"}));
  cmd->add_option("--peer-script", a->peer_script,
                  "train --model: the PyTorch peer (default: scripts/torch_ctr.py of this build's "
                  "source tree)");
  cmd->add_option("--in-flight", a->in_flight,
                  "wire: round trips in flight (workers in the client process)")
      ->check(CLI::Range(size_t{1}, wire_bench_in_flight_max))
      ->capture_default_str();
  cmd->add_option("--wire-format", a->wire_format,
                  "wire: how replies and pushes carry rows and gradients, fp32, bf16, fp16 or int8")
      ->capture_default_str();
  auto* part_bytes =
      cmd->add_option("--part-bytes", a->part_bytes,
                      "wire: the largest message; a larger request travels in parts this large")
          ->check(CLI::Range(part_bytes_min, part_bytes_max))
          ->capture_default_str();
  auto* floats = cmd->add_option("--floats", a->floats, "wire: floats a row, a list (1,8,64)")
                     ->delimiter(',')
                     ->check(CLI::Range(size_t{1}, size_t{4096}));
  auto* keys =
      cmd->add_option("--keys", a->keys, "wire: keys a request, a list (100,1000,10000,100000)")
          ->delimiter(',')
          ->check(CLI::Range(size_t{1}, size_t{100'000'000}));
  return [a, rows, floats, keys, part_bytes]() {
    if (!a->model.empty() && a->suite != "train" && a->suite != "cluster")
      return fail(Status::invalid_input("--model: only bench train and bench cluster take it"));
    if (a->wire_format != "fp32" && a->suite != "wire")
      return fail(Status::invalid_input("--wire-format: only bench wire takes it"));
    if ((floats->count() > 0 || keys->count() > 0 || part_bytes->count() > 0) && a->suite != "wire")
      return fail(
          Status::invalid_input("--floats, --keys and --part-bytes: only bench wire takes them"));
    if (a->suite == "store") return bench_store(*a, rows->count() > 0);
    if (a->suite == "ps") return bench_ps(*a);
    if (a->suite == "cluster") return bench_cluster(*a);
    if (a->suite == "durability") return bench_durability(*a);
    if (a->suite == "wire") return bench_wire(*a);
    if (a->suite == "device") return bench_device(*a);
    if (a->suite == "metrics") return bench_metrics(*a);
    if (!a->model.empty()) return bench_train_deep(*a);
    return bench_train(*a);
  };
}

}  // namespace colony::cli
