// What the products alone would allow a DeepFM step shared among threads (--compute-threads):
// THREADS threads, each running the products of the default DeepFM MLP (221-256-128-1: 26 fields
// x dim 8 plus 13 dense features in) on a share of ROWS samples with one BLAS thread: the
// forward products, then dW = x^T dy and dx = dy W^T layer by layer, for SECONDS. Prints the
// FLOP rate of all threads together (three times the forward FLOPs, as `colony bench train`
// counts them) and the samples a second the products alone would take.
//
// Standalone, not part of the CMake build:
//   gcc -O2 bench/mlp_shares.c -o /tmp/mlp_shares -lopenblas -lpthread
//   env -u OPENBLAS_CORETYPE /tmp/mlp_shares 256 2      # ROWS THREADS [SECONDS, default 3]
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const int layers[4] = {221, 256, 128, 1};
static int rows;
static double seconds = 3.0;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static float* filled(size_t count, int mod) {
  float* p = malloc(count * sizeof(float));
  if (!p) exit(1);
  for (size_t j = 0; j < count; ++j) p[j] = (float)(j % mod) * 0.01f;
  return p;
}

static void* share(void* out) {
  const int n = rows;
  float *x[4], *dx[4], *w[3], *dw[3];
  for (int i = 0; i < 4; ++i) {
    x[i] = filled((size_t)n * layers[i], 11);
    dx[i] = filled((size_t)n * layers[i], 7);
  }
  for (int i = 0; i < 3; ++i) {
    w[i] = filled((size_t)layers[i] * layers[i + 1], 5);
    dw[i] = filled((size_t)layers[i] * layers[i + 1], 3);
  }
  long steps = 0;
  const double start = now();
  while (now() - start < seconds) {
    for (int i = 0; i < 3; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, layers[i + 1], layers[i], 1.0f,
                  x[i], layers[i], w[i], layers[i + 1], 1.0f, x[i + 1], layers[i + 1]);
    for (int i = 2; i >= 0; --i) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, layers[i], layers[i + 1], n, 1.0f, x[i],
                  layers[i], dx[i + 1], layers[i + 1], 1.0f, dw[i], layers[i + 1]);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, layers[i], layers[i + 1], 1.0f,
                  dx[i + 1], layers[i + 1], w[i], layers[i + 1], 0.0f, dx[i], layers[i]);
    }
    ++steps;
  }
  *(long*)out = steps;
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s ROWS THREADS [SECONDS]\n", argv[0]);
    return 2;
  }
  rows = atoi(argv[1]);
  const int threads = atoi(argv[2]);
  if (argc > 3) seconds = atof(argv[3]);
  if (rows < 1 || threads < 1 || threads > 64 || !(seconds > 0)) {
    fprintf(stderr, "ROWS and THREADS (1..64) must be positive, SECONDS > 0\n");
    return 2;
  }
  openblas_set_num_threads(1);
  pthread_t t[64];
  long steps[64];
  const double start = now();
  for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, share, &steps[i]);
  for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  const double elapsed = now() - start;
  long total = 0;
  for (int i = 0; i < threads; ++i) total += steps[i];
  const double forward = 2.0 * (221 * 256 + 256 * 128 + 128 * 1);
  const double samples = (double)total * rows / elapsed;
  printf("%d threads x %d rows (%s): %.1f GFLOP/s, %.0f samples/s of products alone\n", threads,
         rows, openblas_get_corename(), 3.0 * forward * samples / 1e9, samples);
  return 0;
}
