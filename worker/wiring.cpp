#include "worker/wiring.h"

namespace colony {

ModelSpec model_spec(const JobSpec& job) {
  ModelSpec spec;
  spec.kind = static_cast<ModelKind>(job.model);
  spec.dim = job.dim;
  spec.fields = job.fields;
  spec.dense = job.dense;
  spec.mlp.assign(job.mlp.begin(), job.mlp.end());
  spec.bottom.assign(job.bottom.begin(), job.bottom.end());
  spec.cross_layers = job.cross_layers;
  return spec;
}

JobSpec job_with_model(JobSpec job, const ModelSpec& model) {
  job.model = static_cast<uint8_t>(model.kind);
  job.dim = static_cast<uint32_t>(model.dim);
  job.fields = static_cast<uint32_t>(model.fields);
  job.dense = static_cast<uint32_t>(model.dense);
  job.mlp.assign(model.mlp.begin(), model.mlp.end());
  job.bottom.assign(model.bottom.begin(), model.bottom.end());
  job.cross_layers = static_cast<uint32_t>(model.cross_layers);
  return job;
}

nn::DenseOptimizerConfig dense_optimizer_config(const JobSpec& job) {
  nn::DenseOptimizerConfig c;
  c.kind = static_cast<nn::DenseOptimizerKind>(job.dense_optimizer);
  c.lr = job.dense_lr;
  c.beta1 = job.dense_beta1;
  c.beta2 = job.dense_beta2;
  c.eps = job.dense_eps;
  c.weight_decay = job.dense_weight_decay;
  c.momentum = job.dense_momentum;
  return c;
}

JobSpec job_with_dense_optimizer(JobSpec job, const nn::DenseOptimizerConfig& c) {
  job.dense_optimizer = static_cast<uint8_t>(c.kind);
  job.dense_lr = c.lr;
  job.dense_beta1 = c.beta1;
  job.dense_beta2 = c.beta2;
  job.dense_eps = c.eps;
  job.dense_weight_decay = c.weight_decay;
  job.dense_momentum = c.momentum;
  return job;
}

std::vector<NodeId> shard_nodes(const ClusterLayout& layout) {
  std::vector<NodeId> nodes(layout.shards());
  for (uint32_t s = 0; s < layout.shards(); ++s) nodes[s] = s;
  return nodes;
}

std::string dense_shape(const JobSpec& job) {
  const ModelSpec spec = model_spec(job);
  if (!spec.deep()) return {};
  return fmt::format("{} dim={} fields={} dense={} mlp={} bottom={} cross={} optimizer={}",
                     to_string(spec.kind), spec.dim, spec.fields, spec.dense,
                     layer_sizes_text(spec.mlp), layer_sizes_text(spec.bottom), spec.cross_layers,
                     nn::to_string(dense_optimizer_config(job).kind));
}

Status check_daemon_dense_state(const JobSpec& job, uint64_t rows_in_store) {
  const ModelSpec spec = model_spec(job);
  if (!spec.deep()) return Status();
  if (rows_in_store > 0)
    return Status::invalid_input(fmt::format(
        "--store holds {} rows of an earlier run, and the daemons keep the dense layers of "
        "--model {} only in their checkpoints: start from an empty store, or from a checkpoint "
        "(colony ps --resume-from)",
        rows_in_store, to_string(spec.kind)));
  return Status();
}

ShardConfig shard_config(const JobSpec& job, const ClusterLayout& layout, NodeId shard) {
  COLONY_ASSERT(shard < layout.shards(), "shard node {} of {} shards", shard, layout.shards());
  ShardConfig sc;
  sc.id = shard;
  sc.shard_index = shard;
  sc.width = model_spec(job).width();
  sc.optimizer = job.optimizer;
  sc.init = RowInit{job.seed, model_spec(job).linear(), job.factor_init_std};
  sc.consistency = job.consistency;
  sc.senders = layout.shard_senders();
  sc.map = layout.map();
  sc.admit_after = job.admit_after;
  sc.checkpoint_every = job.checkpoint_every;
  sc.evict_after = job.evict_after;
  sc.wire_format = job.formats.wire;
  return sc;
}

WorkerConfig worker_config(const JobSpec& job, const ClusterLayout& layout, NodeId replica) {
  const auto owner = layout.owner(replica);
  COLONY_ASSERT(owner && layout.role(replica) == NodeRole::replica,
                "node {} is not a worker replica", replica);
  const MemberInfo& m = layout.members()[*owner];
  WorkerConfig wc;
  wc.id = replica;
  wc.model = model_spec(job);
  wc.map = layout.map();
  wc.shard_nodes = shard_nodes(layout);
  if (m.has_aggregator) wc.aggregator = m.aggregator;
  wc.max_inflight = job.max_inflight;
  wc.read_ahead_batches = job.read_ahead_batches;
  wc.durable_shards = layout.durable_shards();
  wc.dense_optimizer = dense_optimizer_config(job);
  wc.seed = job.seed;
  wc.dense_sync_every = job.dense_sync_every;
  wc.skip_not_finite = job.skip_not_finite;
  wc.push_format = job.formats.push;
  wc.pull_format = job.formats.wire;
  wc.error_feedback_rows = job.formats.error_feedback_rows;
  wc.part_bytes = job.formats.part_bytes;
  uint32_t replicas = 0;
  for (const MemberInfo& w : layout.members())
    if (w.role == MemberRole::worker) replicas += w.count;
  wc.dense_alone = replicas == 1;
  return wc;
}

AggregatorConfig aggregator_config(const JobSpec& job, const ClusterLayout& layout,
                                   uint32_t member) {
  COLONY_ASSERT(member < layout.members().size() && layout.members()[member].has_aggregator,
                "member {} has no aggregator", member);
  const MemberInfo& m = layout.members()[member];
  AggregatorConfig ac;
  ac.id = m.aggregator;
  ac.width = model_spec(job).width();
  ac.map = layout.map();
  ac.shard_nodes = shard_nodes(layout);
  for (NodeId n = m.first_node; n < m.first_node + m.count; ++n) ac.replicas.push_back(n);
  ac.durable_shards = layout.durable_shards();
  ac.push_format = job.formats.push;
  ac.pull_format = job.formats.wire;
  ac.error_feedback_rows = job.formats.error_feedback_rows;
  ac.part_bytes = job.formats.part_bytes;
  if (auto model = Model::make(model_spec(job)); model && (*model)->dense_params() > 0) {
    ac.dense_params = (*model)->dense_params();
    const NodeId root = layout.dense_root().value();
    if (root != ac.id)
      ac.dense_root = root;
    else
      for (const MemberInfo& w : layout.members())
        if (w.has_aggregator && w.aggregator != root) ac.dense_peers.push_back(w.aggregator);
  }
  return ac;
}

}  // namespace colony
