#include "worker/wiring.h"

namespace colony {

ModelSpec model_spec(const JobSpec& job) {
  ModelSpec spec;
  spec.kind = static_cast<ModelKind>(job.model);
  spec.dim = job.dim;
  return spec;
}

JobSpec job_with_model(JobSpec job, const ModelSpec& model) {
  job.model = static_cast<uint8_t>(model.kind);
  job.dim = static_cast<uint32_t>(model.dim);
  return job;
}

std::vector<NodeId> shard_nodes(const ClusterLayout& layout) {
  std::vector<NodeId> nodes(layout.shards());
  for (uint32_t s = 0; s < layout.shards(); ++s) nodes[s] = s;
  return nodes;
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
  wc.durable_shards = layout.durable_shards();
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
  return ac;
}

}  // namespace colony
