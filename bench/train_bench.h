// What `colony bench train --model deepfm|dlrm` measures besides the trainer itself: the
// machine's sgemm speed (the ceiling of the dense layers) and the PyTorch peer
// (scripts/torch_ctr.py), run on the same files in the same run.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace colony {

// GFLOP/s of C = A B with n x n float matrices through the BLAS the dense layers use, on
// `threads` BLAS threads (the process's BLAS keeps that setting); the best of `repeats`
// products after one warm-up.
double sgemm_gflops(size_t n, int repeats, int threads);

struct TorchPeerOptions {
  std::string script;  // scripts/torch_ctr.py
  std::string python = "/usr/bin/python3";
  std::string model;  // deepfm or dlrm
  std::string train, test;
  int threads = 2;
  std::string sparse_optimizer = "adagrad";
  double sparse_lr = 0.02, dense_lr = 0.001;
  size_t dim = 8;
  std::string mlp, bottom;  // layer lists as Colony writes them
  size_t batch = 512;
};

// Runs the peer with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (OpenBLAS picks its own
// kernels) and returns the JSON object of its last stdout line (samples_per_sec, test_auc,
// test_logloss, torch, blas, ...). Its progress goes to this process's stderr. Fails with
// not_found when the script or python is missing, io_error when it exits non-zero (PyTorch
// not installed: the message says what to install) or prints no JSON.
Expected<nlohmann::json> run_torch_peer(const TorchPeerOptions& options);

}  // namespace colony
