// Parameter-server shards as actors in this process, with blocking clients for model code
// that wants ps-lite's Pull / Push / Wait instead of a worker core.
//
//   auto ps = PsService::make({.shards = 4, .width = 9, .clients = 1}).value();
//   auto kv = ps->client(0).value();
//   auto t = kv->pull(keys, /*clock=*/0, values);   // keys unique; values keys.size() x width
//   if (Status s = kv->wait(t); !s.ok()) ...         // values now hold the rows
//   kv->wait(kv->push(keys, grads, /*clock=*/1));    // step 0 done: the client's clock is 1
//
// The shards apply pushes with the configured optimizer and gate pulls by the consistency
// model, counting each client as one sender (see ps/shard_core.h); a client that is done
// calls finish() so that it stops holding the others back.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "ps/optimizer.h"
#include "ps/protocol.h"
#include "ps/row_init.h"

namespace colony {

struct PsServiceOptions {
  uint32_t shards = 1;
  size_t width = 1;
  OptimizerConfig optimizer;
  RowInit init;
  Consistency consistency;
  uint32_t clients = 1;  // clients 0..clients-1 are the shards' senders
  size_t threads = 0;    // actor scheduler threads; 0 = one per core
  uint64_t map_seed = 0;
  // CAF's default idle polling (threads spin a while before sleeping): lower latency per
  // message, more CPU when idle. Off by default, as in the embedded cluster.
  bool eager_polling = false;
};

class PsClient {
 public:
  using Ticket = uint64_t;
  virtual ~PsClient() = default;
  // See worker/kv_client.h for the contract of pull and push. Both return at once.
  virtual Ticket pull(std::span<const uint64_t> keys, uint32_t clock, std::span<float> values) = 0;
  virtual Ticket push(std::span<const uint64_t> keys, std::span<const float> grads,
                      uint32_t clock) = 0;
  // Blocks until `ticket` is done. Fails (internal) when a shard refused a request; the
  // client is then unusable.
  virtual Status wait(Ticket ticket) = 0;
  // Tells every shard this client will send nothing more.
  virtual void finish() = 0;
};

class PsService {
 public:
  // Fails with invalid_input for 0 shards or clients, or a bad optimizer setting.
  static Expected<std::unique_ptr<PsService>> make(const PsServiceOptions& options);
  virtual ~PsService() = default;
  // Client `index` (< clients). Each client may be made once and used by one thread at a
  // time; the service must outlive it.
  virtual Expected<std::unique_ptr<PsClient>> client(uint32_t index) = 0;
};

}  // namespace colony
