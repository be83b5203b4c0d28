#include "gpu/cublas_lib.h"

#include <dlfcn.h>

#include <mutex>
#include <type_traits>

namespace colony::gpu {

namespace {

#define COLONY_STR2(x) #x
#define COLONY_STR(x) COLONY_STR2(x)
constexpr const char* cublas_soname = "libcublas.so." COLONY_STR(CUBLAS_VER_MAJOR);

struct Loaded {
  CublasLib lib;
  std::string error;  // empty once loaded
};

Loaded load() {
  Loaded out;
  void* handle = dlopen(cublas_soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    out.error = std::string("cannot open cuBLAS: ") + dlerror();
#ifdef COLONY_CUDA_LIB_DIR
    const std::string path = std::string(COLONY_CUDA_LIB_DIR) + "/" + cublas_soname;
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) out.error += std::string("; ") + dlerror();
#endif
    if (handle == nullptr) return out;
    out.error.clear();
  }
  auto symbol = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && out.error.empty())
      out.error = std::string(cublas_soname) + " has no " + name;
  };
  symbol(out.lib.create, "cublasCreate_v2");
  symbol(out.lib.destroy, "cublasDestroy_v2");
  symbol(out.lib.gemm_ex, "cublasGemmEx");
  symbol(out.lib.status_string, "cublasGetStatusString");
  return out;  // the library stays open for the life of the process
}

}  // namespace

const CublasLib* cublas_lib(std::string* error) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.error.empty()) {
    if (error) *error = loaded.error;
    return nullptr;
  }
  return &loaded.lib;
}

}  // namespace colony::gpu
