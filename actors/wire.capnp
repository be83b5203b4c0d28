@0xd6a1c3e0b8f4a921;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("colony::wire");
# Colony's wire format. Every message between processes is an Envelope: who sent it, for
# which cluster, under which protocol version, and what it carries: a parameter-server
# message (ps/protocol.h) or an opaque body of another kind.

struct Envelope {
  version @0 :UInt16;     # protocol version; a peer rejects versions it does not speak
  clusterId @1 :UInt64;   # messages for another cluster are dropped
  senderId @2 :UInt64;
  kind @3 :UInt16;        # which message the body holds (0: the ps field holds it)
  body @4 :Data;
  ps @5 :PsMessage;
  receiver @6 :UInt32;    # kind 0: the node the ps message is for
  control @7 :Control;    # kind 1: a control message (ps/cluster_protocol.h)
}

struct Header {
  sender @0 :UInt32;
  requestId @1 :UInt64;
  mapVersion @2 :UInt64;
}

# Floats travel as Data blobs of little-endian IEEE-754 float32, read in place and copied
# out in one piece (no per-element work).
struct PullRequest {
  header @0 :Header;
  clock @1 :UInt32;
  writer @2 :UInt32;
  keys @3 :List(UInt64);
}
struct PullReply {
  header @0 :Header;
  minClock @1 :UInt32;
  values @2 :Data;
  format @3 :UInt8;  # common/value_format.h ValueFormat of values: 0 fp32 (4 bytes), 1 bf16 (2 bytes), 2 int8 (1 byte), 3 fp16 (2 bytes)
  scales @4 :Data;   # int8: a float32 scale a row
}
struct PushRequest {
  header @0 :Header;
  clock @1 :UInt32;
  keys @2 :List(UInt64);
  grads @3 :Data;
  format @4 :UInt8;  # of grads, as PullReply's
  more @5 :Bool;     # more parts of this push follow
  scales @6 :Data;   # int8: a float32 scale a row
  keysOfPull @7 :UInt64;  # nonzero: keys is empty; they are those of this sender's pull with this request id (ps/protocol.h)
}
struct PushAck {
  header @0 :Header;
}
struct ClockAdvance {
  header @0 :Header;
  clock @1 :UInt32;
  resync @2 :Bool;
  ackedPush @3 :UInt32;  # with resync: the sender's last acknowledged push to the shard
}
struct ShardMapUpdate {
  header @0 :Header;
  version @1 :UInt64;
  shards @2 :UInt32;
  vnodesPerShard @3 :UInt32;
  seed @4 :UInt64;
}
struct PsError {
  header @0 :Header;
  code @1 :UInt8;
  message @2 :Text;
}
# The dense all-reduce of a deep model's replicas, up and down the aggregator tree.
struct DenseReduce {
  header @0 :Header;
  step @1 :UInt32;
  samples @2 :UInt64;
  values @3 :Data;
}
struct DenseBroadcast {
  header @0 :Header;
  step @1 :UInt32;
  samples @2 :UInt64;
  values @3 :Data;
}

# The keys a worker will pull a few steps from now (read-ahead; never answered).
struct PullHint {
  header @0 :Header;
  keys @1 :List(UInt64);
}

# Replication of a shard (ps/protocol.h ReplicaForward, ReplicaAck): from its primary to a
# backup, the push part or clock advance the primary took, numbered; and the backup's answer.
struct ReplicaForward {
  header @0 :Header;
  seq @1 :UInt64;
  committed @2 :UInt64;
  keysFilled @3 :Bool;   # the push names a pull (keysOfPull) and carries its keys
  union {
    push @4 :PushRequest;
    clock @5 :ClockAdvance;
  }
}
struct ReplicaAck {
  header @0 :Header;
  seq @1 :UInt64;
}

# ps/protocol.h ReplicaCopy: a part of the copy a new backup in another process starts from.
struct ReplicaCopy {
  header @0 :Header;
  keys @1 :List(UInt64);
  rows @2 :Data;                  # float32 blob: a row of the shard's row floats a key
  last @3 :Bool;
  applied @4 :UInt64;             # the last part: the forwards the copy holds
  kept @5 :List(ReplicaForward);  # any part, continued: forwards the backup keeps for a promotion
  clockNodes @6 :List(UInt32);    # the last part: each sender's clock (ReplicaState)
  clockValues @7 :List(UInt32);
  parts @8 :List(PushRequest);    # any part, continued: kept parts of unfinished pushes
  droppedNodes @9 :List(UInt32);  # the last part: pushes refused for keys left out
  droppedClocks @10 :List(UInt32);
  lastCheckpoint @11 :UInt32;
}

struct PsMessage {
  union {
    none @0 :Void;
    pullRequest @1 :PullRequest;
    pullReply @2 :PullReply;
    pushRequest @3 :PushRequest;
    pushAck @4 :PushAck;
    clockAdvance @5 :ClockAdvance;
    shardMapUpdate @6 :ShardMapUpdate;
    psError @7 :PsError;
    denseReduce @8 :DenseReduce;
    denseBroadcast @9 :DenseBroadcast;
    pullHint @10 :PullHint;
    replicaForward @11 :ReplicaForward;
    replicaAck @12 :ReplicaAck;
    replicaCopy @13 :ReplicaCopy;
  }
}

# The control protocol between the coordinator and member processes (ps/cluster_protocol.h).
struct OptimizerSpec {
  kind @0 :UInt8;
  lr @1 :Float32;
  l1 @2 :Float32;
  l2 @3 :Float32;
  adagradInit @4 :Float32;
  ftrlBeta @5 :Float32;
  adamBeta1 @6 :Float32;
  adamBeta2 @7 :Float32;
  adamEps @8 :Float32;
}
struct JobSpec {
  model @0 :UInt8;
  dim @1 :UInt32;
  optimizer @2 :OptimizerSpec;
  seed @3 :UInt64;
  factorInitStd @4 :Float32;
  batch @5 :UInt32;
  epochs @6 :UInt32;
  consistency @7 :UInt8;
  staleness @8 :UInt32;
  hierarchical @9 :Bool;
  maxInflight @10 :UInt32;
  skipBadLines @11 :UInt64;
  useCache @12 :Bool;
  admitAfter @13 :UInt32;
  evictAfter @14 :UInt32;
  checkpointEvery @15 :UInt32;
  # A deep model's shape and dense optimizer. The defaults are JobSpec's, so a message written
  # before these fields existed reads as an LR or FM job always did.
  fields @16 :UInt32 = 1;
  dense @17 :UInt32;
  mlp @18 :List(UInt32);
  bottom @19 :List(UInt32);
  crossLayers @20 :UInt32 = 3;
  denseOptimizer @21 :UInt8;
  denseLr @22 :Float32 = 0.001;
  denseBeta1 @23 :Float32 = 0.9;
  denseBeta2 @24 :Float32 = 0.999;
  denseEps @25 :Float32 = 1e-8;
  denseWeightDecay @26 :Float32;
  denseMomentum @27 :Float32 = 0.9;
  denseSyncEvery @28 :UInt32 = 1;
  durability @29 :UInt8;  # 0: each ps store's default; 1 none, 2 log, 3 fsync
  skipNotFinite @30 :Bool;  # --on-nan skip
  wireFormat @31 :UInt8;    # common/value_format.h ValueFormat: 0 fp32, 1 bf16, 2 int8, 3 fp16
  partBytes @32 :UInt64 = 4194304;  # the largest part of a pull or push message
  rowFormat @33 :UInt8;     # ValueFormat of the shards' rows (--row-format)
  stateFormat @34 :UInt8;   # ValueFormat of their optimizer state (--state-format)
  pushFormat @35 :UInt8;    # ValueFormat of pushes (--push-format; wireFormat is the replies')
  errorFeedbackRows @36 :UInt64;  # rows per pusher under --error-feedback (0: none)
  readAheadBatches @37 :UInt32;   # batches a worker hints ahead of its pulls (--read-ahead-batches)
  replicas @38 :UInt32 = 1;       # replicas of each shard (--durability replicated:K)
}
struct MemberInfo {
  role @0 :UInt8;
  endpoint @1 :Text;
  publicKey @2 :Text;
  count @3 :UInt32;
  data @4 :Text;
  firstNode @5 :UInt32;
  hasAggregator @6 :Bool;
  aggregator @7 :UInt32;
  durable @8 :Bool;
  incarnation @9 :UInt64;
  store @10 :Text;
  resumedFrom @11 :UInt32;   # a ps's --resume-from checkpoint step (0: none)
}
struct Welcome {
  you @0 :UInt32;
  members @1 :List(MemberInfo);
  job @2 :JobSpec;
  mapVersion @3 :UInt64;
  mapShards @4 :UInt32;
  mapVnodesPerShard @5 :UInt32;
  mapSeed @6 :UInt64;
  coordinatorNode @7 :UInt32;
  workersTotal @8 :UInt32;
  splitData @9 :Bool;
  heartbeatMs @10 :UInt32;
  heartbeatTimeoutMs @11 :UInt32;
  resume @12 :Bool;
  backupsOnly @13 :Bool;          # a ps rejoining a replicated job: it holds backups only
  placed @14 :Placements;         # every move of a node since the layout was placed, in order
}
# ps/cluster_protocol.h NodePlacement lists: node i is served by member i.
struct Placements {
  nodes @0 :List(UInt32);
  members @1 :List(UInt32);
}
struct MemberDone {
  error @0 :Text;
  drained @1 :Bool;
  samples @2 :UInt64;
  lossSum @3 :Float64;
  steps @4 :UInt64;
  pullMessages @5 :UInt64;
  pushMessages @6 :UInt64;
  pushBytes @7 :UInt64;
  badLinesSkipped @8 :UInt64;
  pushesResent @9 :UInt64;
  repliesDropped @10 :UInt64;
  badMessages @11 :UInt64;
  cpuSeconds @12 :Float64;
  readFromCache @13 :Bool;
  dense @14 :Data;          # float32 blob: a deep model's final dense parameters
  denseSteps @15 :UInt64;   # the dense all-reduces those parameters have taken in
  stepsSkipped @16 :UInt64; # steps skipped for a gradient that was not finite (--on-nan skip)
  pullBytes @17 :UInt64;    # keys pulled and rows received, as wire bytes
}
struct Control {
  from @0 :UInt32;
  union {
    none @1 :Void;
    join @2 :MemberInfo;
    welcome @3 :Welcome;
    ready @4 :Void;
    start @5 :Void;
    heartbeat @6 :UInt64;     # samples trained so far
    done @7 :MemberDone;
    nodesLost @8 :NodesLost;
    leave @9 :Text;           # reason
    shutdown @10 :Text;       # error; empty = success
    refuse @11 :Text;         # reason
    joined @12 :Text;         # who the coordinator still waits for
    shardsRestarted @13 :List(UInt32);
    shardSummaryRequest @14 :Void;
    shardSummary @15 :ShardSummary;
    shardsCheckpointed @16 :Checkpointed;
    checkpointComplete @17 :Checkpointed;
    denseCheckpointed @19 :DenseState;
    denseStart @20 :DenseState;
    shardsMoved @22 :ShardsMoved;
    promoted @23 :List(UInt32);  # shard nodes a ps member promoted its backups of
    reportApplied @26 :List(UInt32);  # backup nodes whose applied forwards the coordinator asks
    applied @27 :Applied;
    backupsPlaced @28 :Placements;   # backup nodes placed on a ps that rejoined
    backupsCopied @29 :List(UInt32); # backup nodes that have their copies
  }
  epoch @18 :UInt64;          # nodesLost, shardsRestarted, shardsMoved, backupsPlaced: the
                              # coordinator's count;
                              # applied: the last of them the member took
  load @21 :MemberLoad;       # heartbeat from a member daemon: its load (unset: none)
  drained @24 :Bool;          # leave: a ps that drained its shards and wrote them to its store
  incarnation @25 :UInt64;    # from a member: the sending process's incarnation (0: not stated)
}
# ps/cluster_protocol.h MemberLoad: totals since the member process started.
struct MemberLoad {
  rssBytes @0 :UInt64;
  rowsMemoryBytes @1 :UInt64;
  busyNs @2 :List(UInt64);      # a worker: by replica
  steps @3 :List(UInt64);       # a worker: by replica
  rowsServed @4 :List(UInt64);  # a ps: by shard
  staleness @5 :LoadHistogram;  # a worker: its replicas' reads
  pullLatency @6 :LoadHistogram;
  pushLatency @7 :LoadHistogram;
  rowsPulled @8 :List(UInt64);  # a ps: by shard
  hotKeys @9 :List(LoadHotKey);  # a ps: its shards' most-pulled keys
  shards @10 :List(UInt32);      # a ps: the shard nodes the by-shard lists describe
}
# ps/cluster_protocol.h LoadHistogram: per-bucket counts (the last +Inf's) and their sum.
struct LoadHistogram {
  counts @0 :List(UInt64);
  sum @1 :Float64;
}
struct LoadHotKey {
  shard @0 :UInt32;  # position in MemberLoad.shards
  key @1 :UInt64;
  pulls @2 :UInt64;
}
# A deep model's dense layers and their optimizer's state (storage/dense_file.h DenseState).
struct DenseState {
  shape @0 :Text;
  step @1 :UInt32;
  params @2 :Data;          # float32 blob
  optimizerState @3 :Data;  # float32 blob
  optimizerSteps @4 :UInt64;
}
# ps/cluster_protocol.h ShardsMoved: failover of `shards` to ps member `member`.
struct ShardsMoved {
  shards @0 :List(UInt32);
  member @1 :UInt32;
  backups @2 :List(UInt32);  # to the member promoting: the shards' other live backup nodes
}
# ps/cluster_protocol.h Applied: how far each backup node applied its primary's forwards.
struct Applied {
  backups @0 :List(UInt32);
  applied @1 :List(UInt64);
}
struct ShardSummary {
  tableRows @0 :UInt64;
  tableBytes @1 :UInt64;
  pullsDeferred @2 :UInt64;
  rowsNotAdmitted @3 :UInt64;
  updatesDropped @4 :UInt64;
  rowsEvicted @5 :UInt64;
  badMessages @6 :UInt64;
  memoryBytes @7 :UInt64;
  cpuSeconds @8 :Float64;
  pushesLost @9 :UInt64;
  updatesNotFinite @10 :UInt64;
  backupRows @11 :UInt64;     # replication: rows the member's backups hold
  rowsDigest @12 :UInt64;     # of its primaries' rows (ps/cluster_protocol.h ShardSummary)
  backupDigest @13 :UInt64;   # of its backups' rows
  replicatedRows @14 :UInt64; # rows of its primaries whose backups are all live
}
struct ShardCheckpoint {
  shard @0 :UInt32;
  dir @1 :Text;
  rows @2 :UInt64;
  senderNodes @3 :List(UInt64);
  senderClocks @4 :List(UInt32);
}
struct Checkpointed {
  step @0 :UInt32;
  shards @1 :List(ShardCheckpoint);
  hasDense @2 :Bool;        # checkpointComplete of a deep model: `dense` holds its dense layers
  dense @3 :DenseState;
}
struct NodesLost {
  nodes @0 :List(UInt32);
  reason @1 :Text;
}
