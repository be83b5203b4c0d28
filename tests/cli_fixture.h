// Running the `colony` binary from a test: its path comes from COLONY_BIN (ctest sets it), each
// run's stdout and stderr are captured, and files go to a fresh folder removed at the end.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace colony::testing {

namespace fs = std::filesystem;

struct Run {
  int code;
  std::string out, err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CliFixture {
  fs::path dir;
  std::string bin;
  explicit CliFixture(const std::string& name) {
    const char* b = std::getenv("COLONY_BIN");
    BOOST_REQUIRE_MESSAGE(b != nullptr, "COLONY_BIN must name the colony binary (ctest sets it)");
    bin = b;
    dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~CliFixture() { fs::remove_all(dir); }
  // Runs `colony ARGS` (a shell command line) and waits for it; `env`: NAME=VALUE words the
  // child's environment adds.
  Run run(const std::string& args, const std::string& env = "") {
    const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
    const std::string cmd =
        env + " " + bin + " " + args + " >" + out.string() + " 2>" + err.string() + " </dev/null";
    const int status = std::system(cmd.c_str());
    BOOST_REQUIRE(WIFEXITED(status));
    return Run{WEXITSTATUS(status), slurp(out), slurp(err)};
  }
  fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = dir / name;
    std::ofstream(p) << text;
    return p;
  }
};

}  // namespace colony::testing
