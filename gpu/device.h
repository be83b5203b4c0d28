// Device backends. The CPU backend is always there and runs everything; CUDA devices are
// used when Colony was built with CUDA (-DCOLONY_CUDA=AUTO finding nvcc, or ON) and a
// device is present at run time.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

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

// Where a model's math runs (--device).
enum class Backend {
  cpu,          // the CPU backend (models/)
  device_host,  // the CUDA backend's device code built for the host (Thrust's CPP system):
                // what CI runs of the device code; not a --device value
  cuda,         // a CUDA device
};
struct DeviceChoice {
  Backend backend = Backend::cpu;
  int index = 0;  // the CUDA device (cuda:N)
};
// "cpu", "cuda" (cuda:0) or "cuda:N". invalid_input naming --device and the accepted forms
// otherwise.
Expected<DeviceChoice> parse_device(const std::string& text);
// "cpu", "cuda:N" or "device-host".
std::string device_text(const DeviceChoice& device);
// Ok when `device` can run here: the CPU and the host build always; cuda:N when this binary was
// built with CUDA and device N is present. invalid_input naming --device and what is missing
// otherwise (a build without CUDA, no device and why, or the devices there are).
Status check_device(const DeviceChoice& device);

// Bytes per second of copies from pageable host memory to CUDA device `index` (256 MiB, best of
// four): the baseline of `colony bench device`. not_found in a build without CUDA; internal
// with CUDA's message when a CUDA call fails.
Expected<double> cuda_copy_bandwidth(int index);

// FLOP/s of cuBLAS's n x n x n product on CUDA device `index`, fp32 in and out (with `bf16`,
// bf16 inputs on tensor cores: DeviceProducts::bf16 of gpu/deep_pass.h), best of four after
// one untimed: the peak `colony bench device` sets the deep models' products against.
// not_found in a build without CUDA; internal with CUDA's or cuBLAS's message when a call fails.
Expected<double> cuda_gemm_flops(int index, size_t n, bool bf16);

// One line for logs and reports: "cpu" or "cpu (cuda: 1 device, NVIDIA H200)".
std::string describe_backends();

}  // namespace colony
