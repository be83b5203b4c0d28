// gpu/fm_pass.h's host build: Thrust's CPP system (THRUST_DEVICE_SYSTEM set for this file alone by
// gpu/CMakeLists.txt), so device_vector is host memory and the functors run here.
#define COLONY_FM_PASS FmPassHost
#define COLONY_FM_PASS_ENTER() (void)device_
#include "gpu/fm_pass_impl.h"

namespace colony::gpu {

std::unique_ptr<FmPass> make_fm_pass_host() {
  return std::make_unique<FmPassHost>(0);
}

#ifndef COLONY_HAVE_CUDA
std::unique_ptr<FmPass> make_fm_pass_cuda(int) {
  return nullptr;
}
#endif

}  // namespace colony::gpu
