// Device backends. The CPU backend is always there and runs everything; CUDA devices are
// used when Colony was built with CUDA (-DCOLONY_CUDA=AUTO finding nvcc, or ON) and a
// device is present at run time.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace colony {

struct DeviceInfo {
  int index = 0;
  std::string name;
  size_t memory_bytes = 0;
};

// True when this binary was built with the CUDA backend.
bool cuda_compiled();

// The CUDA devices visible now. Empty when built without CUDA, or when no driver or device
// is present (a machine without a GPU is not an error). `why_none` (if given) receives the
// reason when the list is empty.
std::vector<DeviceInfo> cuda_devices(std::string* why_none = nullptr);

// One line for logs and reports: "cpu" or "cpu (cuda: 1 device, NVIDIA H200)".
std::string describe_backends();

}  // namespace colony
