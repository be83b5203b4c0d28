// CUDA device discovery. Kept free of Cap'n Proto and CAF headers (they do not compile
// under nvcc).
#include <cuda_runtime.h>

#include <string>
#include <vector>

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

}  // namespace colony
