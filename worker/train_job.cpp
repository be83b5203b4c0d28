#include "worker/train_job.h"

#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/hash.h"
#include "common/metrics.h"
#include "data/holdout.h"

namespace colony {

std::optional<GenSummary> read_gen_meta(const std::string& data_path) {
  const auto meta = std::filesystem::path(data_path).parent_path() / "meta.json";
  std::ifstream in(meta);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("planted_logloss_test") ||
      !j["planted_logloss_test"].is_number())
    return std::nullopt;
  GenSummary s;
  s.planted_logloss_test = j.value("planted_logloss_test", 0.0);
  s.planted_auc_test = j.value("planted_auc_test", 0.0);
  s.base_rate_logloss_test = j.value("base_rate_logloss_test", 0.0);
  s.positive_rate = j.value("positive_rate", 0.0);
  s.meta_path = meta.string();
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Status validate(const TrainJobOptions& o) {
  if (o.epochs < 1) return Status::invalid_input("--epochs must be at least 1");
  if (o.batch < 1) return Status::invalid_input("--batch must be at least 1");
  if (!o.data.empty() && o.test.empty())
    return Status::invalid_input("--test is required with --data (a file to evaluate on)");
  if (o.data.empty() && !o.test.empty())
    return Status::invalid_input("--test needs --data (without --data, test data is generated)");
  if (!(o.valid_fraction >= 0.0 && o.valid_fraction < 1.0))
    return Status::invalid_input(
        fmt::format("--valid-fraction {} is outside [0, 1): the share of training rows held out "
                    "for validation",
                    o.valid_fraction));
  if (o.patience < 0) return Status::invalid_input("--patience must be at least 0");
  return Status();
}

bool stop_early(const std::vector<double>& losses, int patience) {
  if (patience <= 0 || losses.size() <= size_t(patience)) return false;
  const size_t best = best_epoch_index(losses);
  return losses.size() - 1 - best >= size_t(patience);
}

size_t best_epoch_index(const std::vector<double>& losses) {
  size_t best = 0;
  for (size_t i = 1; i < losses.size(); ++i)
    if (losses[i] < losses[best]) best = i;
  return best;
}

Expected<Evaluation> evaluate_held_out(
    const TrainJobOptions& o, const std::shared_ptr<const std::vector<Batch>>& mem,
    const std::function<Status(const Batch&, std::vector<float>&)>& predict) {
  ReaderOptions ro = o.reader;
  ro.batch_rows = o.batch;
  ro.holdout = HoldoutSplit{o.valid_fraction, true};
  return evaluate(o.data, mem, ro, predict,
                  fmt::format("the rows --valid-fraction {} holds out of {}", o.valid_fraction,
                              o.data.empty() ? "the generated data" : o.data));
}

JobData prepare_job_data(const TrainJobOptions& o,
                         const std::function<void(const TrainProgress&)>& progress) {
  JobData d;
  if (!o.data.empty()) {
    d.planted = read_gen_meta(o.data);
    return d;
  }
  if (progress) progress(TrainProgress{"generate", 0, o.epochs, 0, 0.0, 0.0});
  GenOptions g = o.generate;
  if (!o.score_test) g.test_rows = 0;  // not read
  auto data =
      std::make_shared<InMemoryData>(generate_in_memory(g, [&](uint64_t done, uint64_t total) {
        if (progress)
          progress(TrainProgress{"generate", 0, o.epochs, done, double(done) / double(total), 0.0});
      }));
  if (g.test_rows > 0) d.planted = data->summary;
  d.train = std::shared_ptr<const std::vector<Batch>>(data, &data->train);
  d.test = std::shared_ptr<const std::vector<Batch>>(data, &data->test);
  return d;
}

Expected<std::unique_ptr<BatchReader>> open_source(
    const std::string& path, const std::shared_ptr<const std::vector<Batch>>& mem,
    const ReaderOptions& ro) {
  if (mem) return make_memory_reader(mem, ro.batch_rows, ro.holdout, ro.max_rows);
  return open_reader(path, ro);
}

Expected<Evaluation> evaluate(
    const std::string& test, const std::shared_ptr<const std::vector<Batch>>& mem,
    const ReaderOptions& ro,
    const std::function<Status(const Batch&, std::vector<float>&)>& predict,
    const std::string& name) {
  const std::string what = !name.empty() ? name : test.empty() ? "test data" : test;
  auto reader = open_source(test, mem, ro);
  if (!reader) return reader.status();
  std::vector<float> logits, scores, labels;
  Batch batch;
  while (true) {
    auto more = (*reader)->next(batch);
    if (!more) return more.status();
    if (!*more) break;
    if (Status s = predict(batch, logits); !s.ok())
      return Status::invalid_input(fmt::format("{}: {}", what, s.message()));
    for (size_t i = 0; i < batch.rows(); ++i) {
      scores.push_back(static_cast<float>(sigmoid(logits[i])));
      labels.push_back(batch.labels[i]);
    }
  }
  if (scores.empty()) return Status::invalid_input(what + ": no samples to evaluate on");
  return Evaluation{logloss(scores, labels), auc(scores, labels), scores.size()};
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

Expected<ModelSpec> detect_input_shape(ModelSpec spec, const std::string& path,
                                       const std::shared_ptr<const std::vector<Batch>>& mem,
                                       const ReaderOptions& options) {
  if (!spec.deep()) return spec;
  ReaderOptions probe = options;  // a partial pass: no cache to write, no thread to start
  probe.use_cache = false;
  probe.prefetch_batches = 0;
  auto reader = open_source(path, mem, probe);
  if (!reader) return reader.status();
  uint32_t max_field = 0;
  uint64_t rows = 0;
  Batch batch;
  bool first = true;
  while (rows < input_shape_rows) {
    auto more = (*reader)->next(batch);
    if (!more) return more.status();
    if (!*more) break;
    if (first) spec.dense = batch.dense_dim;
    first = false;
    for (uint64_t key : batch.keys) max_field = std::max(max_field, key_field(key));
    rows += batch.rows();
  }
  if (spec.fields == 0) spec.fields = max_field + 1;
  return spec;
}

namespace {

// run_train_job on data already prepared (validated options).
Expected<TrainJobResult> run_on(const TrainJobOptions& options, const JobData& data,
                                const std::function<void(const TrainProgress&)>& progress) {
  TrainJobResult result;
  result.planted = data.planted;
  ReaderOptions ro = options.reader;
  ro.batch_rows = options.batch;
  ro.holdout = HoldoutSplit{options.valid_fraction, false};
  TrainJobOptions o = options;
  auto shape = detect_input_shape(o.trainer.model, o.data, data.train, ro);
  if (!shape) return shape.status();
  o.trainer.model = *shape;
  result.model = *shape;
  auto trainer_or = LocalTrainer::make(o.trainer);
  if (!trainer_or) return trainer_or.status();
  LocalTrainer& trainer = **trainer_or;

  uint64_t samples_per_epoch = 0;    // known after the first epoch (or from the cache)
  std::vector<double> valid_losses;  // per epoch, with valid_fraction
  uint64_t steps = 0;                // over all epochs
  Batch batch;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    auto reader_or = open_source(o.data, data.train, ro);
    if (!reader_or) return reader_or.status();
    BatchReader& reader = **reader_or;
    double epoch_loss = 0.0, window_loss = 0.0;
    uint64_t epoch_samples = 0, window_samples = 0, batches = 0;
    const auto start = Clock::now();
    const double cpu_start = cpu_seconds();
    while (true) {
      auto more = reader.next(batch);
      if (!more) return more.status();
      if (!*more) break;
      const uint64_t skipped_before = trainer.steps_skipped();
      const uint64_t alerts_before = trainer.gradient_alerts();
      const uint64_t refused_before = trainer.updates_not_finite();
      auto trained = trainer.train_batch(batch);
      ++steps;
      if (!trained && trained.status().code() == Status::Code::internal)  // not finite
        return Status::internal(fmt::format(
            "step {} made {} (the model diverged: try a lower --lr or --dense-lr, or --on-nan "
            "skip); nothing of the step was applied",
            steps, trained.status().message()));
      if (!trained)
        return Status::invalid_input(fmt::format(
            "{}: {}", o.data.empty() ? "generated data" : o.data, trained.status().message()));
      const bool skipped = trainer.steps_skipped() > skipped_before;  // --on-nan skip
      if (!skipped) {  // a skipped step was not trained on
        const double loss = *trained;
        epoch_loss += loss;
        window_loss += loss;
        epoch_samples += batch.rows();
        window_samples += batch.rows();
      }
      const bool alerted = trainer.gradient_alerts() > alerts_before ||
                           trainer.updates_not_finite() > refused_before;
      if (progress && (skipped || alerted || ++batches % 64 == 0)) {
        const ReaderStats st = reader.stats();
        double within = 0.0;
        if (samples_per_epoch > 0)
          within = double(epoch_samples) / double(samples_per_epoch);
        else if (st.rows_total > 0)
          within = double(epoch_samples) / double(st.rows_total);
        else if (st.bytes_total > 0)
          within = double(st.bytes_read) / double(st.bytes_total);
        TrainProgress p{"train",
                        epoch,
                        o.epochs,
                        result.counters.samples + epoch_samples,
                        (epoch - 1 + std::min(within, 1.0)) / o.epochs,
                        window_samples ? window_loss / double(window_samples) : 0.0};
        p.steps_skipped = trainer.steps_skipped();
        if (skipped) p.last_skip = fmt::format("step {} made {}", steps, trainer.last_skip());
        p.gradient_alerts = trainer.gradient_alerts();
        p.last_gradient_alert_kind = trainer.last_gradient_alert().kind;
        p.last_gradient_alert = trainer.last_gradient_alert().message;
        p.updates_not_finite = trainer.updates_not_finite();
        p.last_update_not_finite = trainer.last_update_not_finite();
        progress(p);
        window_loss = 0.0;
        window_samples = 0;
      }
    }
    result.train_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    result.train_cpu_seconds += cpu_seconds() - cpu_start;
    const ReaderStats st = reader.stats();
    result.counters.bad_lines_skipped = st.bad_lines_skipped;
    result.read_from_cache = st.from_cache;
    if (!st.cache_note.empty()) result.cache_note = st.cache_note;
    if (epoch_samples == 0)
      return Status::invalid_input(
          o.data + (o.valid_fraction > 0 ? ": no samples to train on outside --valid-fraction"
                                         : ": no samples to train on"));
    samples_per_epoch = epoch_samples;
    result.counters.samples += epoch_samples;

    if (progress)
      progress(TrainProgress{"evaluate", epoch, o.epochs, result.counters.samples,
                             double(epoch) / o.epochs, epoch_loss / double(epoch_samples)});
    auto predict = [&](const Batch& b, std::vector<float>& logits) {
      return trainer.predict(b, logits);
    };
    EpochResult er{epoch, epoch_loss / double(epoch_samples), 0.0, 0.0};
    if (o.score_test) {
      ReaderOptions test_ro = ro;
      test_ro.holdout = {};
      test_ro.max_rows = 0;
      auto ev = evaluate(o.test, data.test, test_ro, predict);
      if (!ev) return ev.status();
      er.test_logloss = ev->logloss;
      er.test_auc = ev->auc;
      result.test_samples = ev->samples;
    }
    if (o.valid_fraction > 0) {
      auto valid = evaluate_held_out(o, data.train, predict);
      if (!valid) return valid.status();
      er.valid_logloss = valid->logloss;
      er.valid_auc = valid->auc;
      result.valid_samples = valid->samples;
      valid_losses.push_back(valid->logloss);
    }
    result.epochs.push_back(er);
    if (progress) {
      TrainProgress p{
          "evaluate",      epoch, o.epochs, result.counters.samples, double(epoch) / o.epochs,
          er.train_logloss};
      p.scored = er;
      progress(p);
    }
    if (stop_early(valid_losses, o.patience)) break;
  }
  result.counters.steps_skipped = trainer.steps_skipped();
  result.test_logloss = result.epochs.back().test_logloss;
  result.test_auc = result.epochs.back().test_auc;
  result.model_rows = trainer.rows();
  result.model_bytes = trainer.table_bytes();
  result.table_bytes = trainer.rows() * trainer.row_floats() * sizeof(float);
  return result;
}

// The rows of the training data a job with valid_fraction holds out, and the others.
struct SplitCount {
  uint64_t held_out = 0, trained = 0;
};
Expected<SplitCount> count_split(const TrainJobOptions& o, const JobData& data) {
  ReaderOptions ro = o.reader;
  ro.batch_rows = o.batch;
  ro.holdout = {};
  auto reader = open_source(o.data, data.train, ro);
  if (!reader) return reader.status();
  SplitCount n;
  Batch batch;
  while (true) {
    auto more = (*reader)->next(batch);
    if (!more) return more.status();
    if (!*more) break;
    for (size_t i = 0; i < batch.rows(); ++i)
      ++(row_held_out(batch, i, o.valid_fraction) ? n.held_out : n.trained);
  }
  return n;
}

}  // namespace

Expected<TrainJobResult> run_train_job(const TrainJobOptions& options,
                                       const std::function<void(const TrainProgress&)>& progress) {
  if (Status s = validate(options); !s.ok()) return s;
  return run_on(options, prepare_job_data(options, progress), progress);
}

std::vector<OptimizerCandidate> optimizer_candidates() {
  OptimizerConfig long_tailed = default_optimizer_config(OptimizerKind::ftrl);
  OptimizerConfig interactions = long_tailed;
  interactions.lr = 0.1f;
  interactions.l1 = 1.0f;
  interactions.l2 = 1.0f;
  return {{"long-tailed", long_tailed, 8}, {"interaction-heavy", interactions, 16}};
}

Expected<OptimizerChoice> choose_optimizer(
    const TrainJobOptions& job, bool keep_dim, uint64_t trial_rows,
    const std::function<void(const OptimizerTrial&, bool)>& on_trial,
    const std::function<void(const TrainProgress&)>& progress) {
  TrainJobOptions base = job;
  base.epochs = 1;
  base.patience = 0;
  base.score_test = false;
  if (base.valid_fraction == 0.0) base.valid_fraction = choice_valid_fraction;
  base.reader.max_rows = trial_rows;
  // Generated rows are made by index: the first trial_rows are the job's first.
  if (base.data.empty() && trial_rows > 0)
    base.generate.rows = std::min(base.generate.rows, trial_rows);
  const std::string context = "choosing the optimizer (--optimizer auto)";
  if (Status s = validate(base); !s.ok()) return s.with_context(context);
  const JobData data = prepare_job_data(base, progress);
  auto split = count_split(base, data);
  if (!split) return split.status().with_context(context);

  OptimizerChoice choice;
  choice.rows = split->held_out + split->trained;
  choice.valid_rows = split->held_out;
  std::vector<OptimizerCandidate> candidates = optimizer_candidates();
  // LR has no factors: its dimension means nothing, and stays the job's.
  if (keep_dim || job.trainer.model.kind == ModelKind::lr)
    for (OptimizerCandidate& c : candidates) c.dim = job.trainer.model.dim;
  choice.chosen = candidates.front();
  if (split->held_out < choice_valid_rows_min || split->trained == 0) return choice;
  for (const OptimizerCandidate& candidate : candidates) {
    OptimizerTrial trial{candidate};
    TrainJobOptions o = base;
    o.trainer.optimizer = candidate.optimizer;
    o.trainer.model.dim = candidate.dim;
    if (on_trial) on_trial(trial, false);
    const auto start = Clock::now();
    auto r = run_on(o, data, progress);
    if (!r) return r.status().with_context(context + ", candidate " + candidate.name);
    trial.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    trial.valid_logloss = r->epochs.back().valid_logloss;
    trial.valid_auc = r->epochs.back().valid_auc;
    trial.samples = r->counters.samples;
    trial.valid_samples = r->valid_samples;
    choice.trials.push_back(trial);
    if (on_trial) on_trial(trial, true);
  }
  size_t best = 0;
  for (size_t i = 1; i < choice.trials.size(); ++i)
    if (choice.trials[i].valid_logloss < choice.trials[best].valid_logloss) best = i;
  choice.chosen = choice.trials[best].candidate;
  return choice;
}

}  // namespace colony
