// The cluster daemons behind `colony coordinator`, `colony ps` and `colony worker`: each runs
// the same core actors as the embedded cluster (actors/core_actors.h) in its own process, with
// a Bridge (actors/bridge.h) carrying messages to the others, and follows the control protocol
// of ps/cluster_protocol.h. The coordinator's decisions are ps/coordinator_core.h's.
//
// Start-up never hangs silently: a member logs every few seconds while it waits for the
// coordinator, and gives up after join_timeout_ms with a message saying what it was waiting
// for; the coordinator does the same for members that have not joined.
//
// Signals (see DaemonSignals): the first SIGTERM or SIGINT drains — a worker stops taking
// batches, lets its pushes in flight be acknowledged, reports and exits 0; a ps lets its
// shards handle what is queued, leaves and exits 0 (which ends the job: its rows are gone); the
// coordinator tells every member to stop and exits 0. A second SIGINT exits at once (the CLI
// installs that handler).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/reader.h"
#include "gpu/device.h"
#include "monitor/alerts.h"
#include "ps/cluster_protocol.h"
#include "ps/coordinator_core.h"
#include "storage/store_spec.h"

namespace colony {

namespace monitor {
class Registry;
class TimelineRecorder;
}  // namespace monitor

// How a daemon authenticates: CURVE keys from a `colony keygen` directory, or none.
struct DaemonSecurity {
  bool insecure = false;
  std::string keys_dir;  // with CURVE: holds <key_name>.key/.pub, server.pub, authorized_keys
  std::string key_name;  // this process's key pair in keys_dir ("server" for the coordinator)
};

// Signals received so far; the CLI's handlers bump them, the daemons poll them.
struct DaemonSignals {
  std::atomic<int> stop_requests{0};
};

using DaemonLog = std::function<void(const std::string&)>;

struct CoordinatorDaemonOptions {
  std::string listen;  // e.g. tcp://0.0.0.0:7100 or tcp://10.0.0.1:7100
  DaemonSecurity security;
  uint64_t cluster_id = 1;
  uint32_t shards = 1;
  uint32_t workers = 1;
  JobSpec job;
  std::string test;      // test file to evaluate at the end; empty = no evaluation
  ReaderOptions reader;  // for the test file
  uint64_t join_timeout_ms = 60'000;
  uint32_t heartbeat_ms = 1'000;
  uint32_t heartbeat_timeout_ms = 10'000;
  bool require_all_workers = false;
  // Live metrics (docs/monitoring.md): the job's progress and the bridge's totals; null: none.
  std::shared_ptr<monitor::Registry> metrics;
  // The load alerts (straggler, hot shard, a leak suspect per member) over the members'
  // heartbeats: their window (--alert-window).
  monitor::AlertConfig alerts;
};

struct CoordinatorResult {
  CoordinatorTotals totals;    // what the worker members reported, summed
  double train_logloss = 0.0;  // progressive, over the samples trained
  double train_seconds = 0.0;  // from Start to the last worker's report
  std::optional<double> test_logloss, test_auc;
  uint64_t test_samples = 0;
  uint32_t members = 0;
  uint64_t bad_messages = 0;
  uint64_t refused_peers = 0;
  std::string store;               // the ps members' row stores, each distinct one, "; " between
  bool stopped_by_signal = false;  // drained on SIGTERM before the job ended
  std::vector<monitor::Alert> alerts;  // the load alerts raised, in order
};

// Runs the coordinator until the job ends. Fails with invalid_input for bad options or keys,
// io_error when the socket cannot be bound, internal when the job fails (a member lost or
// failed, the join timeout passed): the Status says which and why.
Expected<CoordinatorResult> run_coordinator(const CoordinatorDaemonOptions& options,
                                            const DaemonLog& log, DaemonSignals& signals);
// The check of --listen that run_coordinator makes first (a tcp://HOST:PORT it can bind, IPv4),
// for a caller to make before it opens anything of its own (a metrics port): invalid_input
// naming the flag.
Status check_coordinator_listen(const CoordinatorDaemonOptions& options);

struct MemberDaemonOptions {
  MemberRole role = MemberRole::ps;
  std::string coordinator;                   // the coordinator's endpoint
  std::string listen = "tcp://127.0.0.1:*";  // this process's own socket
  std::string advertise;  // host (or IP) peers use to reach it; empty: the host of `listen`
  DaemonSecurity security;
  uint64_t cluster_id = 1;
  uint32_t count = 1;  // shards (ps) or worker replicas (worker) hosted
  StoreSpec store;     // ps: where shard i keeps its rows (rocksdb: DIR/shard-<i>)
  // ps: where its shards' checkpoints go when the job asks for them (--checkpoint-every);
  // empty: DIR/checkpoints for a rocksdb:DIR store (a memory store must be given one).
  std::string checkpoint_dir;
  // ps (`--resume-from`): a checkpoint step folder (storage/checkpoint.h checkpoint_step) of the
  // same job; each shard starts from its copy there (restore_shard_store) instead of its store.
  std::string resume_from;
  std::string data;      // worker: the training file
  ReaderOptions reader;  // worker: cache dir etc. (batch, skip-bad-lines come from the job)
  DeviceChoice device;   // worker: where its replicas' math runs (--device)
  // worker: threads sharing each batch of a deep model in each replica (--compute-threads;
  // ModelSpec::compute_threads)
  size_t compute_threads = 1;
  uint64_t join_timeout_ms = 60'000;
  size_t threads = 0;  // actor scheduler threads; 0 = one per core
  // Live metrics (docs/monitoring.md): the shards' or workers' and the bridge's; null: none.
  std::shared_ptr<monitor::Registry> metrics;
  // A timeline the process's actors and bridge record their spans into (`--timeline`); null:
  // none.
  std::shared_ptr<monitor::TimelineRecorder> timeline;
  // Faults for tests and drills: a worker's first replica sleeps this many milliseconds after
  // each of its steps (a straggler), or each of a ps's shards takes this many milliseconds more
  // to summarize itself when training ends (a slow disk); once training has begun here (a step
  // taken, a row served), the process allocates and keeps this many MiB more, 64 MiB at each
  // heartbeat (a leak).
  uint32_t fault_slow_ms = 0;
  uint32_t fault_leak_mb = 0;
};

// Runs a ps or worker member until the coordinator ends the job (OK when it ended well), the
// member drains after a signal (OK), or something fails (the Status says what: the
// coordinator unreachable after the join timeout, refused, lost, a core's error).
Status run_member(const MemberDaemonOptions& options, const DaemonLog& log, DaemonSignals& signals);
// The checks of the options that run_member makes first (the count, a worker's --data, and
// --coordinator, --listen and --advertise as docs/deploy.md says), for a caller to make before it
// opens anything of its own (a metrics port, a timeline): invalid_input naming the flag.
Status check_member_options(const MemberDaemonOptions& options);

}  // namespace colony
