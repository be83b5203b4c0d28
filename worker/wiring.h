// How a cluster is wired: the configuration of every core, computed from the job and the
// layout (ps/cluster_layout.h). The one place the daemons, the embedded cluster, the
// simulator and the benchmarks build their cores from, so that they cannot drift apart.
//
// It lives in worker/ rather than ps/ because a row's width comes from the model (worker/):
// ps/ knows JobSpec's model only as a number.
#pragma once

#include "models/dense_optimizer.h"
#include "models/model.h"
#include "ps/cluster_layout.h"
#include "ps/shard_core.h"
#include "storage/store_spec.h"
#include "worker/aggregator_core.h"
#include "worker/worker_core.h"

namespace colony {

// The model a job trains (JobSpec::model is ModelKind's number).
ModelSpec model_spec(const JobSpec& job);
// A job training `model` (the rest of the job left as it was).
JobSpec job_with_model(JobSpec job, const ModelSpec& model);
// The optimizer of a deep model's dense parameters, and a job using `config` for it.
nn::DenseOptimizerConfig dense_optimizer_config(const JobSpec& job);
JobSpec job_with_dense_optimizer(JobSpec job, const nn::DenseOptimizerConfig& config);

// What a deep model's saved dense layers are (DenseState::shape, storage/dense_file.h): the
// model, its dimensions and layer sizes, and the kind of its dense optimizer (whose state is
// saved with them). Saved layers are continued only by a job of the same shape. Empty for LR
// and FM.
std::string dense_shape(const JobSpec& job);

// What the daemons cannot do with a deep model in this version, as invalid_input naming the
// flag: its dense layers are saved in the daemons' checkpoints but not in a ps's store, so
// continuing a store that holds rows (`rows_in_store` > 0; the driver passes 0 for rows of a
// checkpoint or of this job) is refused rather than pairing trained rows with fresh dense
// layers (colony train saves them with its store). Ok for LR and FM.
Status check_daemon_dense_state(const JobSpec& job, uint64_t rows_in_store);

// The shard at node `shard` (a shard node of `layout`): its optimizer, row initialisation,
// consistency, senders (every aggregator under hierarchical push, else every replica), map,
// admission, eviction and checkpoint policies, all from `job`.
ShardConfig shard_config(const JobSpec& job, const ClusterLayout& layout, NodeId shard);
// The worker replica at node `replica`: its aggregator when its member has one; a deep model's
// dense optimizer, seed and sync interval.
WorkerConfig worker_config(const JobSpec& job, const ClusterLayout& layout, NodeId replica);
// The node aggregator of worker member `member` (which has one): the member's replicas; for a
// deep model, its place in the dense all-reduce (the first worker member's aggregator is the
// root; the others send it their nodes' sums).
AggregatorConfig aggregator_config(const JobSpec& job, const ClusterLayout& layout,
                                   uint32_t member);
// The shard nodes in map order (shard s is node s).
std::vector<NodeId> shard_nodes(const ClusterLayout& layout);

}  // namespace colony
