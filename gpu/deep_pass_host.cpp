// gpu/deep_pass.h's host build: Thrust's CPP system (THRUST_DEVICE_SYSTEM set for this file
// alone by gpu/CMakeLists.txt), so device_vector is host memory, the functors run here, and the
// products are OpenBLAS's sgemm, called as models/layers.cpp calls it.
#include <cblas.h>

#include "gpu/deep_pass.h"

namespace colony::gpu {
namespace {

class HostProducts {
 public:
  HostProducts(int, DeviceProducts) {}
  void gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, const float* a, size_t lda,
            const float* b, size_t ldb, float beta, float* c, size_t ldc) {
    // Every dimension fits an int: models/layers.h bounds them by dim_max.
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
                c, static_cast<int>(ldc));
  }
};

}  // namespace
}  // namespace colony::gpu

#define COLONY_DEEP_PASS DeepPassHost
#define COLONY_DEEP_PASS_ENTER() (void)device_
#define COLONY_DEEP_PRODUCTS HostProducts
#include "gpu/deep_pass_impl.h"

namespace colony::gpu {

std::unique_ptr<DeepPass> make_deep_pass_host(const DeepShape& shape) {
  return std::make_unique<DeepPassHost>(shape, 0, DeviceProducts::fp32);
}

#ifndef COLONY_HAVE_CUDA
std::unique_ptr<DeepPass> make_deep_pass_cuda(const DeepShape&, int, DeviceProducts) {
  return nullptr;
}
#endif

}  // namespace colony::gpu
