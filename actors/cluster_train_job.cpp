// `colony train` on the embedded cluster (actors/embedded_cluster.h): the train job's data,
// evaluation and report around the cluster's training.
#include <chrono>

#include "actors/embedded_cluster.h"
#include "worker/train_job.h"

namespace colony {

Expected<TrainJobResult> run_cluster_train_job(
    const TrainJobOptions& o, const ClusterOptions& cluster,
    const std::function<void(const TrainProgress&)>& progress) {
  if (Status s = validate(o); !s.ok()) return s;
  const JobData data = prepare_job_data(o, progress);
  ClusterJob job;
  job.trainer = o.trainer;
  job.cluster = cluster;
  job.batch = o.batch;
  job.epochs = o.epochs;
  job.data = o.data;
  job.memory = data.train;
  job.reader = o.reader;
  job.reader.holdout = HoldoutSplit{o.valid_fraction, false};
  {
    ReaderOptions ro = job.reader;
    ro.batch_rows = o.batch;
    auto shape = detect_input_shape(job.trainer.model, o.data, data.train, ro);
    if (!shape) return shape.status();
    job.trainer.model = *shape;
  }
  auto made = EmbeddedCluster::make(job);
  if (!made) return made.status();
  EmbeddedCluster& c = **made;

  // Progress: the fraction is known once the size of an epoch is (generated data, a cache).
  uint64_t samples_per_epoch = 0;
  if (data.train) {
    for (const Batch& b : *data.train) samples_per_epoch += b.rows();
    samples_per_epoch = uint64_t(double(samples_per_epoch) * (1.0 - o.valid_fraction));
  } else {
    // A binary cache knows its row count when opened; a text file only after a full pass.
    ReaderOptions peek = job.reader;
    peek.prefetch_batches = 0;
    if (auto r = open_reader(o.data, peek)) samples_per_epoch = (*r)->stats().rows_total;
  }
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  // The running logloss: of the samples trained since the last call (the last value when none).
  uint64_t seen_samples = 0;
  double seen_loss = 0.0, running = 0.0;
  auto ran = c.run([&](const ClusterProgress& now) {
    if (!progress) return;
    const uint64_t samples = now.samples;
    const double loss_sum = now.loss_sum;
    if (samples > seen_samples) running = (loss_sum - seen_loss) / double(samples - seen_samples);
    seen_samples = samples;
    seen_loss = loss_sum;
    const double total = double(samples_per_epoch) * o.epochs;
    const int epoch =
        samples_per_epoch ? std::min<int>(o.epochs, 1 + samples / samples_per_epoch) : 1;
    TrainProgress p{"train", epoch, o.epochs, samples, total > 0 ? double(samples) / total : 0.0,
                    running};
    p.steps_skipped = now.steps_skipped;
    p.last_skip = now.last_skip;
    p.gradient_alerts = now.gradient_alerts;
    p.last_gradient_alert_kind = now.last_gradient_alert.kind;
    p.last_gradient_alert = now.last_gradient_alert.message;
    p.updates_not_finite = now.updates_not_finite;
    p.last_update_not_finite = now.last_update_not_finite;
    p.load = now.load;
    progress(p);
  });
  if (!ran) return ran.status();
  TrainJobResult r;
  r.model = job.trainer.model;
  r.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.train_cpu_seconds = cpu_seconds() - cpu_start;
  r.planted = data.planted;
  r.counters = ran->counters;
  r.read_from_cache = ran->read_from_cache;
  r.model_rows = ran->model_rows;
  r.model_bytes = ran->model_bytes;
  r.table_bytes = ran->table_bytes;
  r.updates_dropped = ran->updates_dropped;
  r.rows_evicted = ran->rows_evicted;
  r.cache_hits = ran->cache_hits;
  r.cache_misses = ran->cache_misses;
  r.rows_read_ahead = ran->rows_read_ahead;
  r.pull_hints = ran->pull_hints;
  r.checkpoints = ran->checkpoints;
  r.updates_lost = ran->updates_lost;
  r.pulls_deferred = ran->pulls_deferred;
  if (r.counters.samples == 0) return Status::invalid_input(o.data + ": no samples to train on");

  if (progress)
    progress(TrainProgress{"evaluate", o.epochs, o.epochs, r.counters.samples, 1.0, 0.0});
  ReaderOptions ro = o.reader;
  ro.batch_rows = o.batch;
  auto ev = evaluate(o.test, data.test, ro, [&](const Batch& b, std::vector<float>& logits) {
    return c.predict(b, logits);
  });
  if (!ev) return ev.status();
  if (Status s = c.error(); !s.ok()) return s;
  r.epochs.push_back(EpochResult{o.epochs, ran->counters.loss_sum / double(r.counters.samples),
                                 ev->logloss, ev->auc});
  r.test_logloss = ev->logloss;
  r.test_auc = ev->auc;
  r.test_samples = ev->samples;
  if (o.valid_fraction > 0) {
    auto valid = evaluate_held_out(o, data.train, [&](const Batch& b, std::vector<float>& logits) {
      return c.predict(b, logits);
    });
    if (!valid) return valid.status();
    r.epochs.back().valid_logloss = valid->logloss;
    r.epochs.back().valid_auc = valid->auc;
    r.valid_samples = valid->samples;
  }
  if (progress) {
    TrainProgress p{"evaluate",         o.epochs, o.epochs,
                    r.counters.samples, 1.0,      r.epochs.back().train_logloss};
    p.scored = r.epochs.back();
    progress(p);
  }
  return r;
}

}  // namespace colony
