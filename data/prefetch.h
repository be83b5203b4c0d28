// Read-ahead: runs another reader's next() on a background thread.
#pragma once

#include <cstddef>
#include <memory>

#include "data/reader.h"

namespace colony {

// Wraps `inner` so that up to `queue_batches` (>= 1) batches are read ahead on one background
// thread, started here. Batches come out in order; an error comes out after the batches read
// before it, then again on every later call, like any reader. Batch objects circulate between
// the two threads (next() swaps its argument's buffers in), so once they have grown to their
// working size no batch is allocated. stats() describes the batches returned so far and may be
// called from any thread. The destructor stops the thread and joins it, at most one inner
// next() call later, whether or not the data was read to the end; `inner` is destroyed then.
std::unique_ptr<BatchReader> make_prefetch_reader(std::unique_ptr<BatchReader> inner,
                                                  size_t queue_batches);

}  // namespace colony
