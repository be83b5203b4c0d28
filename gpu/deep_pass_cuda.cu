// gpu/deep_pass.h's CUDA build (nvcc): the same source as the host build, on a device, with
// cuBLAS's products (cuBLAS opened at the first product: gpu/cublas_lib.h).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/cublas_lib.h"
#include "gpu/deep_pass.h"

namespace colony::gpu {
namespace {

class CublasProducts {
 public:
  CublasProducts(int, DeviceProducts products) : products_(products) {}
  ~CublasProducts() {
    if (handle_ != nullptr) lib_->destroy(handle_);
  }
  CublasProducts(const CublasProducts&) = delete;
  CublasProducts& operator=(const CublasProducts&) = delete;

  // Row-major c = op(a) op(b) + beta c is column-major c^T = op(b)^T op(a)^T + beta c^T.
  void gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, const float* a, size_t lda,
            const float* b, size_t ldb, float beta, float* c, size_t ldc) {
    // Made on first use, on the device the pass made current.
    if (handle_ == nullptr) {
      std::string error;
      lib_ = cublas_lib(&error);
      if (lib_ == nullptr) throw std::runtime_error(error);
      check(lib_->create(&handle_), "cublasCreate");
    }
    const float one = 1.0f;
    const cublasComputeType_t compute =
        products_ == DeviceProducts::bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
    check(lib_->gemm_ex(handle_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                        static_cast<int>(m), static_cast<int>(k), &one, b, CUDA_R_32F,
                        static_cast<int>(ldb), a, CUDA_R_32F, static_cast<int>(lda), &beta, c,
                        CUDA_R_32F, static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  }

 private:
  void check(cublasStatus_t s, const char* what) const {
    if (s != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error(std::string(what) + ": " + lib_->status_string(s));
  }
  DeviceProducts products_;
  const CublasLib* lib_ = nullptr;
  cublasHandle_t handle_ = nullptr;
};

}  // namespace
}  // namespace colony::gpu

#define COLONY_DEEP_PASS DeepPassCuda
#define COLONY_DEEP_PASS_ENTER()                                          \
  if (const cudaError_t err = cudaSetDevice(device_); err != cudaSuccess) \
  throw std::runtime_error(std::string("cudaSetDevice: ") + cudaGetErrorString(err))
#define COLONY_DEEP_PRODUCTS CublasProducts
#include "gpu/deep_pass_impl.h"

namespace colony::gpu {

std::unique_ptr<DeepPass> make_deep_pass_cuda(const DeepShape& shape, int device,
                                              DeviceProducts products) {
  return std::make_unique<DeepPassCuda>(shape, device, products);
}

}  // namespace colony::gpu
