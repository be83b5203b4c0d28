#include "bench/train_bench.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include <fmt/format.h>

namespace colony {

double sgemm_gflops(size_t n, int repeats, int threads) {
  openblas_set_num_threads(threads);
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i % 7) * 0.25f;
    b[i] = float(i % 5) * 0.5f;
  }
  const int m = static_cast<int>(n);
  double best = 1e300;
  for (int r = 0; r <= repeats; ++r) {  // r = 0 warms up
    const auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.0f, a.data(), m, b.data(), m,
                0.0f, c.data(), m);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) best = std::min(best, s);
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}

namespace {

// Single-quoted for /bin/sh.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Expected<nlohmann::json> run_torch_peer(const TorchPeerOptions& o) {
  namespace fs = std::filesystem;
  if (!fs::exists(o.script)) return Status::not_found(o.script + ": the PyTorch peer is missing");
  if (!fs::exists(o.python)) return Status::not_found(o.python + ": no python3 to run the peer");
  std::string cmd = fmt::format(
      "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE {} {} --model {} --train {} --test {} "
      "--threads {} --sparse-optimizer {} --sparse-lr {} --lr {} --dim {} --batch {}",
      quoted(o.python), quoted(o.script), quoted(o.model), quoted(o.train), quoted(o.test),
      o.threads, quoted(o.sparse_optimizer), o.sparse_lr, o.dense_lr, o.dim, o.batch);
  if (!o.mlp.empty()) cmd += " --mlp " + quoted(o.mlp);
  if (!o.bottom.empty()) cmd += " --bottom " + quoted(o.bottom);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd.c_str(), "r"), &::pclose);
  if (!pipe) return Status::io_error("cannot start the PyTorch peer: " + cmd);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  const int rc = ::pclose(pipe.release());
  if (rc != 0)
    return Status::io_error(
        fmt::format("the PyTorch peer failed (exit status {}); it needs Debian's python3-torch and "
                    "libopenblas0-pthread (apt-get install python3-torch libopenblas0-pthread)",
                    rc));
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const std::string last =
      out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  nlohmann::json j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("samples_per_sec") || !j.contains("test_auc"))
    return Status::io_error("the PyTorch peer printed no result line: " + last);
  return j;
}

}  // namespace colony
