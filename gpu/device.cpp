#include "gpu/device.h"

#include <fmt/format.h>

#include <charconv>

namespace colony {

#ifdef COLONY_HAVE_CUDA
std::vector<DeviceInfo> cuda_devices_impl(std::string* why_none);                  // cuda_device.cu
double cuda_copy_bandwidth_impl(int device, std::string& error);                   // cuda_device.cu
double cuda_gemm_flops_impl(int device, size_t n, bool bf16, std::string& error);  // cuda_device.cu
bool cuda_compiled() {
  return true;
}
std::vector<DeviceInfo> cuda_devices(std::string* why_none) {
  return cuda_devices_impl(why_none);
}
Expected<double> cuda_copy_bandwidth(int index) {
  std::string error;
  const double bps = cuda_copy_bandwidth_impl(index, error);
  if (bps < 0) return Status::internal(fmt::format("copying to cuda:{}: {}", index, error));
  return bps;
}
Expected<double> cuda_gemm_flops(int index, size_t n, bool bf16) {
  std::string error;
  const double flops = cuda_gemm_flops_impl(index, n, bf16, error);
  if (flops < 0)
    return Status::internal(fmt::format("a {}^3 product on cuda:{}: {}", n, index, error));
  return flops;
}
#else
bool cuda_compiled() {
  return false;
}
std::vector<DeviceInfo> cuda_devices(std::string* why_none) {
  if (why_none) *why_none = "built without CUDA";
  return {};
}
Expected<double> cuda_copy_bandwidth(int) {
  return Status::not_found("built without CUDA");
}
Expected<double> cuda_gemm_flops(int, size_t, bool) {
  return Status::not_found("built without CUDA");
}
#endif

Expected<DeviceChoice> parse_device(const std::string& text) {
  if (text == "cpu") return DeviceChoice{};
  if (text == "cuda") return DeviceChoice{Backend::cuda, 0};
  if (text.rfind("cuda:", 0) == 0) {
    const std::string n = text.substr(5);
    int index = -1;
    auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (!n.empty() && ec == std::errc() && ptr == n.data() + n.size() && index >= 0)
      return DeviceChoice{Backend::cuda, index};
  }
  return Status::invalid_input(
      fmt::format("--device \"{}\": expected cpu, cuda or cuda:N (N a device number)", text));
}

std::string device_text(const DeviceChoice& device) {
  switch (device.backend) {
    case Backend::cpu:
      return "cpu";
    case Backend::device_host:
      return "device-host";
    case Backend::cuda:
      return fmt::format("cuda:{}", device.index);
  }
  return "?";
}

Status check_device(const DeviceChoice& device) {
  if (device.backend != Backend::cuda) return Status();
  if (!cuda_compiled())
    return Status::invalid_input(fmt::format(
        "--device {}: this colony was built without CUDA (build where nvcc is found, or with "
        "-DCOLONY_CUDA=ON); --device cpu runs everything",
        device_text(device)));
  std::string why;
  const auto devices = cuda_devices(&why);
  if (devices.empty()) {
    // why: "built, no device" or "built, unusable: <CUDA's error>" (cuda_devices).
    const std::string unusable = "built, unusable: ";
    return Status::invalid_input(fmt::format(
        "--device {}: {}; --device cpu runs everything", device_text(device),
        why.rfind(unusable, 0) == 0 ? "CUDA is unusable here: " + why.substr(unusable.size())
                                    : std::string("this machine has no CUDA device")));
  }
  if (static_cast<size_t>(device.index) >= devices.size())
    return Status::invalid_input(
        fmt::format("--device {}: this machine has {} CUDA device{} (cuda:0{})",
                    device_text(device), devices.size(), devices.size() == 1 ? "" : "s",
                    devices.size() == 1 ? "" : fmt::format("..cuda:{}", devices.size() - 1)));
  return Status();
}

std::string describe_backends() {
  std::string why;
  const auto devices = cuda_devices(&why);
  if (devices.empty()) return fmt::format("cpu (cuda: {})", why);
  return fmt::format("cpu (cuda: {} device{}, {})", devices.size(), devices.size() == 1 ? "" : "s",
                     devices.front().name);
}

}  // namespace colony
