// A fresh, empty folder under the system temp dir for one test, removed with everything in it
// when the test ends. Names carry the test's tag, the pid and a counter, so concurrent test
// processes and several folders in one test never collide.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace colony::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("colony-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
  std::string sub(const std::string& name) const { return (path / name).string(); }
};

}  // namespace colony::testing
