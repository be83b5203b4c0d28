// CUDA device discovery. Kept free of Cap'n Proto and CAF headers (they do not compile
// under nvcc).
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "gpu/cublas_lib.h"
#include "gpu/device.h"

namespace colony {

std::vector<DeviceInfo> cuda_devices_impl(std::string* why_none) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  std::vector<DeviceInfo> out;
  if (err != cudaSuccess) {
    // No driver (cudaErrorInsufficientDriver) or no device: the CPU backend runs everything.
    if (why_none) {
      *why_none = err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice
                      ? std::string("built, no device")
                      : std::string("built, unusable: ") + cudaGetErrorString(err);
    }
    cudaGetLastError();  // clear the sticky error
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back(DeviceInfo{i, prop.name, prop.totalGlobalMem});
  }
  if (out.empty() && why_none) *why_none = "built, no device";
  return out;
}

// Bytes per second of cudaMemcpy from pageable host memory to device `device` (256 MiB, best of
// four); negative with `error` set when CUDA fails.
double cuda_copy_bandwidth_impl(int device, std::string& error) {
  const size_t bytes = size_t{256} << 20;
  std::vector<char> host(bytes, 1);
  void* dst = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double best = -1.0;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMalloc(&dst, bytes);
  if (err == cudaSuccess) err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&stop);
  for (int i = 0; i < 4 && err == cudaSuccess; ++i) {
    float ms = 0.0f;
    err = cudaEventRecord(start);
    if (err == cudaSuccess) err = cudaMemcpy(dst, host.data(), bytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) err = cudaEventRecord(stop);
    if (err == cudaSuccess) err = cudaEventSynchronize(stop);
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
    if (err == cudaSuccess && ms > 0.0f) {
      const double bps = double(bytes) / (double(ms) / 1e3);
      if (bps > best) best = bps;
    }
  }
  if (err != cudaSuccess) {
    error = cudaGetErrorString(err);
    best = -1.0;
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (dst) cudaFree(dst);
  return best;
}

// FLOP/s of cublasGemmEx on n x n matrices (best of four after one untimed); negative with
// `error` set when CUDA or cuBLAS fails.
double cuda_gemm_flops_impl(int device, size_t n, bool bf16, std::string& error) {
  const gpu::CublasLib* lib = gpu::cublas_lib(&error);
  if (lib == nullptr) return -1.0;
  const size_t bytes = n * n * sizeof(float);
  float *a = nullptr, *b = nullptr, *c = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  cublasHandle_t handle = nullptr;
  double best = -1.0;
  cudaError_t err = cudaSetDevice(device);
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  for (float** p : {&a, &b, &c})
    if (err == cudaSuccess) err = cudaMalloc(p, bytes);
  for (float* p : {a, b, c})
    if (err == cudaSuccess) err = cudaMemset(p, 0, bytes);
  if (err == cudaSuccess) err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&stop);
  if (err == cudaSuccess) status = lib->create(&handle);
  const float one = 1.0f, zero = 0.0f;
  const int m = static_cast<int>(n);
  for (int i = 0; i < 5 && err == cudaSuccess && status == CUBLAS_STATUS_SUCCESS; ++i) {
    float ms = 0.0f;
    err = cudaEventRecord(start);
    if (err == cudaSuccess)
      status = lib->gemm_ex(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, a, CUDA_R_32F, m, b,
                            CUDA_R_32F, m, &zero, c, CUDA_R_32F, m,
                            bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT);
    if (err == cudaSuccess && status == CUBLAS_STATUS_SUCCESS) err = cudaEventRecord(stop);
    if (err == cudaSuccess && status == CUBLAS_STATUS_SUCCESS) err = cudaEventSynchronize(stop);
    if (err == cudaSuccess && status == CUBLAS_STATUS_SUCCESS)
      err = cudaEventElapsedTime(&ms, start, stop);
    if (i > 0 && err == cudaSuccess && status == CUBLAS_STATUS_SUCCESS && ms > 0.0f) {
      const double flops = 2.0 * double(n) * double(n) * double(n) / (double(ms) / 1e3);
      if (flops > best) best = flops;
    }
  }
  if (err != cudaSuccess || status != CUBLAS_STATUS_SUCCESS) {
    error = err != cudaSuccess ? cudaGetErrorString(err) : lib->status_string(status);
    best = -1.0;
  }
  if (handle) lib->destroy(handle);
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  for (float* p : {a, b, c})
    if (p) cudaFree(p);
  return best;
}

}  // namespace colony
