#include "common/status.h"

namespace colony {

void assert_failed(const char* expr, const char* file, int line, const std::string& detail) {
  std::fprintf(stderr, "colony: internal error: assertion `%s` failed at %s:%d%s%s\n", expr, file,
               line, detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace colony
