// `colony bench wire`: parameter-server traffic between two processes over loopback TCP, two
// round trips in flight.
//
// A child process (fork) serves one shard core behind a ZmqServer, decoding and encoding
// every message with the Cap'n Proto codec; this process pulls and pushes through a
// ZmqClient. The baseline, measured in the same run against an echo child, sends the same
// number of bytes per round trip as raw ZeroMQ messages: what loopback TCP plus ZeroMQ can do
// without our codec and shard.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace colony {

struct WireFigure {
  size_t width = 0;             // floats per row
  size_t keys = 0;              // keys per request
  double rows_per_sec = 0.0;    // rows pulled plus rows pushed
  double bytes_per_sec = 0.0;   // encoded bytes of the four messages of a round trip
  double baseline_bytes_per_sec = 0.0;  // raw ZeroMQ echo of the same bytes
  double ratio = 0.0;  // the median over alternating rounds of ours / baseline
};

// Runs every (width, keys) pair; each figure moves about `bytes_per_figure` bytes in each of
// ours and the baseline, in alternating rounds (the figures are the medians).
Expected<std::vector<WireFigure>> run_wire_bench(const std::vector<size_t>& widths,
                                                 const std::vector<size_t>& keys_per_request,
                                                 uint64_t bytes_per_figure);

}  // namespace colony
