// gpu/fm_pass.h's CUDA build (nvcc): the same source as the host build, on a device.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#define COLONY_FM_PASS FmPassCuda
#define COLONY_FM_PASS_ENTER()                                            \
  if (const cudaError_t err = cudaSetDevice(device_); err != cudaSuccess) \
  throw std::runtime_error(std::string("cudaSetDevice: ") + cudaGetErrorString(err))
#include "gpu/fm_pass_impl.h"

namespace colony::gpu {

std::unique_ptr<FmPass> make_fm_pass_cuda(int device) {
  return std::make_unique<FmPassCuda>(device);
}

}  // namespace colony::gpu
