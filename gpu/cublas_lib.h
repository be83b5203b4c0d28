// cuBLAS, opened at its first use rather than linked (CUDA builds only; nvcc compiles this).
//
// cuBLAS's libraries (libcublas and the libcublasLt it loads, over 500 MB) run static
// initialisers that take about a third of a second and 200 MB of memory at load. Linked, they
// made every colony process pay that at its start, on any machine, GPU or not: a ps restarted
// after a crash, each CLI command, each test's child process. Only the deep models' products on
// a device (gpu/deep_pass_cuda.cu) and `colony bench device` (gpu/cuda_device.cu) call cuBLAS, so
// they reach it through cublas_lib(), which opens it once, on the first call.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace colony::gpu {

// The cuBLAS functions Colony calls.
struct CublasLib {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  // The C function (the header also declares a C++ overload taking cudaDataType compute types).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// cuBLAS of the CUDA major version Colony was built with (libcublas.so.<major>), opened on the
// first call (from the library path, else the toolkit's library directory of the build) and kept
// open; later calls return the same. Thread-safe. Returns nullptr with `error` (if given) set
// to why, naming the library, when it cannot be opened or lacks a function.
const CublasLib* cublas_lib(std::string* error = nullptr);

}  // namespace colony::gpu
