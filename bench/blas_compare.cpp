// The sgemm workload of an MLP training step, against one BLAS library chosen at compile time:
// -DCOLONY_BLAS_OPENBLAS (cblas), -DCOLONY_BLAS_BLIS (BLIS's cblas interface) or
// -DCOLONY_BLAS_EIGEN (header-only). Standalone, not part of the CMake build:
// scripts/compare-blas.sh compiles it three times and runs each at 1 and 2 threads.
//
// Usage: blas_compare THREADS. Prints one line per measurement:
//   lib threads n shape gemm GFLOP/s
// where shape is a layer's in x out, gemm is fwd (y = x W), dw (dW = x^T dy), dx
// (dx = dy W^T) or step (the three together: total flops over total time); a line per n for
// the whole MLP's step; and a line for the 2048^3 product (n = 2048) as the machine's peak.
// Each number is the best of several timed batches of at least min_batch_s seconds (the
// best, not the mean: other work on the machine only ever slows a batch down).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if defined(COLONY_BLAS_OPENBLAS)
#include <cblas.h>
constexpr const char* lib_name = "openblas";
#elif defined(COLONY_BLAS_BLIS)
#include <blis.h>
constexpr const char* lib_name = "blis";
#elif defined(COLONY_BLAS_EIGEN)
#include <Eigen/Core>
constexpr const char* lib_name = "eigen";
#else
#error "define one of COLONY_BLAS_OPENBLAS, COLONY_BLAS_BLIS, COLONY_BLAS_EIGEN"
#endif

namespace {

constexpr double min_batch_s = 0.05;
constexpr int batches = 7;

void set_threads(int threads) {
#if defined(COLONY_BLAS_OPENBLAS)
  openblas_set_num_threads(threads);
#elif defined(COLONY_BLAS_BLIS)
  bli_thread_set_num_threads(threads);
#else
  Eigen::setNbThreads(threads);
#endif
}

// C (m x n) = op(A) op(B) + beta C, all row-major; op(A) is m x k, op(B) is k x n.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, const float* b,
          float beta, float* c) {
#if defined(COLONY_BLAS_EIGEN)
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const Mat> ma(a, trans_a ? k : m, trans_a ? m : k);
  Eigen::Map<const Mat> mb(b, trans_b ? n : k, trans_b ? k : n);
  Eigen::Map<Mat> mc(c, m, n);
  if (beta == 0.0f) {
    if (trans_a) {
      mc.noalias() = ma.transpose() * mb;
    } else if (trans_b) {
      mc.noalias() = ma * mb.transpose();
    } else {
      mc.noalias() = ma * mb;
    }
  } else {
    if (trans_a) {
      mc.noalias() += ma.transpose() * mb;
    } else if (trans_b) {
      mc.noalias() += ma * mb.transpose();
    } else {
      mc.noalias() += ma * mb;
    }
  }
#else
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, trans_a ? m : k, b,
              trans_b ? k : n, beta, c, n);
#endif
}

// Seconds per call of f: the best of `batches` batches, each repeating f for >= min_batch_s.
template <class F>
double time_call(F&& f) {
  f();  // warm-up: thread pools, packing buffers, page faults
  int reps = 1;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= min_batch_s || reps >= (1 << 20)) break;
    reps *= 2;
  }
  double best = 1e30;
  for (int b = 0; b < batches; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s / reps);
  }
  return best;
}

std::vector<float> filled(size_t count, float v) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = v * static_cast<float>(1 + i % 7) / 7.0f;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s THREADS\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  set_threads(threads);

  struct Layer {
    int in, out;
  };
  const Layer layers[] = {{429, 256}, {256, 128}, {128, 1}};
  for (int n : {512, 4096}) {
    double all_flops = 0.0, all_s = 0.0;  // the whole 429-256-128-1 MLP
    for (const Layer& l : layers) {
      auto x = filled(size_t(n) * l.in, 0.5f), w = filled(size_t(l.in) * l.out, 0.1f);
      auto y = filled(size_t(n) * l.out, 0.0f), dy = filled(size_t(n) * l.out, 0.2f);
      auto dw = filled(size_t(l.in) * l.out, 0.0f), dx = filled(size_t(n) * l.in, 0.0f);
      // As models/layers.cpp calls them: y = x W + y (y holds the bias), dW += x^T dy,
      // dx = dy W^T.
      const double fwd = time_call(
          [&] { gemm(false, false, n, l.out, l.in, x.data(), w.data(), 1.0f, y.data()); });
      const double dws = time_call(
          [&] { gemm(true, false, l.in, l.out, n, x.data(), dy.data(), 1.0f, dw.data()); });
      const double dxs = time_call(
          [&] { gemm(false, true, n, l.in, l.out, dy.data(), w.data(), 0.0f, dx.data()); });
      const double flops = 2.0 * n * l.in * l.out;
      auto report = [&](const char* gemm_name, double gflops) {
        std::printf("%s %d %d %dx%d %s %.2f\n", lib_name, threads, n, l.in, l.out, gemm_name,
                    gflops);
      };
      report("fwd", flops / fwd / 1e9);
      report("dw", flops / dws / 1e9);
      report("dx", flops / dxs / 1e9);
      report("step", 3 * flops / (fwd + dws + dxs) / 1e9);
      all_flops += 3 * flops;
      all_s += fwd + dws + dxs;
    }
    std::printf("%s %d %d mlp-429-256-128-1 step %.2f\n", lib_name, threads, n,
                all_flops / all_s / 1e9);
  }
  const int big = 2048;
  auto a = filled(size_t(big) * big, 0.5f), b = filled(size_t(big) * big, 0.1f);
  auto c = filled(size_t(big) * big, 0.0f);
  const double s =
      time_call([&] { gemm(false, false, big, big, big, a.data(), b.data(), 0.0f, c.data()); });
  std::printf("%s %d %d %dx%d peak %.2f\n", lib_name, threads, big, big, big,
              2.0 * big * big * big / s / 1e9);
  return 0;
}
