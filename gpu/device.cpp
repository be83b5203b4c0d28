#include "gpu/device.h"

#include <fmt/format.h>

namespace colony {

#ifdef COLONY_HAVE_CUDA
std::vector<DeviceInfo> cuda_devices_impl(std::string* why_none);  // cuda_device.cu
bool cuda_compiled() {
  return true;
}
std::vector<DeviceInfo> cuda_devices(std::string* why_none) {
  return cuda_devices_impl(why_none);
}
#else
bool cuda_compiled() {
  return false;
}
std::vector<DeviceInfo> cuda_devices(std::string* why_none) {
  if (why_none) *why_none = "built without CUDA";
  return {};
}
#endif

std::string describe_backends() {
  std::string why;
  const auto devices = cuda_devices(&why);
  if (devices.empty()) return fmt::format("cpu (cuda: {})", why);
  return fmt::format("cpu (cuda: {} device{}, {})", devices.size(), devices.size() == 1 ? "" : "s",
                     devices.front().name);
}

}  // namespace colony
