// `colony bench wire`: parameter-server traffic between two processes over loopback TCP.
//
// A child process (fork) serves one shard core (SGD, ASP) behind a ZmqServer, decoding and
// encoding every message with the Cap'n Proto codec (segments sent as frames, float arrays
// read in place); this process runs `in_flight` workers, each with its own KvClient as a real
// worker has (requests over `part_bytes` in parts, replies copied into its rows, pushes copied
// out of its gradients), that pull and push through one ZmqClient, each with one round trip
// (pull, replies, push, acks) in flight: a shard answers a worker's pull only once that
// worker's previous push is in, so one worker's round trips follow one another. The baseline,
// measured in the same run against an echo child, keeps as many round trips of the same bytes
// in flight as raw ZeroMQ messages no larger than our parts, sent without copies both ways:
// what loopback TCP plus ZeroMQ can do without our codec, client and shard.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "ps/protocol.h"

namespace colony {

struct WireFigure {
  size_t width = 0;                     // floats per row
  size_t keys = 0;                      // keys per request
  double rows_per_sec = 0.0;            // rows pulled plus rows pushed
  double bytes_per_sec = 0.0;           // encoded bytes of the four messages of a round trip
  double baseline_bytes_per_sec = 0.0;  // raw ZeroMQ echo of the same bytes
  double ratio = 0.0;                   // the median over alternating rounds of ours / baseline
  size_t in_flight = 0;                 // round trips in flight, in ours and in the baseline
  size_t messages = 0;                  // messages of a round trip (4 a part)
};

inline constexpr size_t wire_bench_in_flight_max = 64;

// Runs every (width, keys) pair with `in_flight` (1..wire_bench_in_flight_max) round trips in
// flight; each figure moves about `bytes_per_figure` bytes in each of ours and the baseline,
// in alternating rounds (the figures are the medians). Rows and gradients travel in `format`
// (the shard rounds its replies, the pushes carry bf16-exact gradients), in messages of at most
// `part_bytes` (part_bytes_min..part_bytes_max). Fails with the transport's error, or internal
// when the shard refuses a request or a reply is missing.
Expected<std::vector<WireFigure>> run_wire_bench(const std::vector<size_t>& widths,
                                                 const std::vector<size_t>& keys_per_request,
                                                 uint64_t bytes_per_figure, size_t in_flight,
                                                 ValueFormat format, size_t part_bytes);

}  // namespace colony
