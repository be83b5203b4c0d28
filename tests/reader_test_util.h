// Helpers shared by the reader and cache test suites.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/hash.h"
#include "common/status.h"
#include "data/batch.h"

namespace colony::test {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           fmt::format("colony_test_{}_{}_{}", ::getpid(), counter++,
                       SplitMix64(static_cast<uint64_t>(::time(nullptr))).next() % 100000);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& content) const {
    std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    return p;
  }
  // Names of the files directly in the directory.
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <class T>
std::string error_text(const Expected<T>& e) {
  return e.ok() ? std::string() : e.status().message();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same_bits(a[i].labels, b[i].labels) || a[i].offsets != b[i].offsets ||
        a[i].keys != b[i].keys || !same_bits(a[i].values, b[i].values) ||
        a[i].dense_dim != b[i].dense_dim || !same_bits(a[i].dense, b[i].dense)) {
      return false;
    }
  }
  return true;
}

}  // namespace colony::test
