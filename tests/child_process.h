// A `colony` process started by a test, its stdout and stderr going to a log the test can wait
// on. Waits are bounded (wait_bound) so a hung process fails its test instead of hanging CI;
// nothing here asserts on time.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli_fixture.h"

extern char** environ;

namespace colony::testing {

using namespace std::chrono_literals;

// The longest any single wait here may take before the test fails (not a timing assertion: a
// bound so that a hung daemon fails the test instead of hanging CI).
inline constexpr auto wait_bound = 180s;

// The colony binary under test (ctest sets COLONY_BIN).
inline std::string bin() {
  const char* b = std::getenv("COLONY_BIN");
  BOOST_REQUIRE_MESSAGE(b != nullptr, "COLONY_BIN must name the colony binary (ctest sets it)");
  return b;
}

// A child process whose stdout and stderr go to `log`.
class Child {
 public:
  Child(std::vector<std::string> argv, fs::path log) : log_(std::move(log)) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const int rc = posix_spawnp(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    BOOST_REQUIRE_MESSAGE(rc == 0, "cannot start " << argv[0]);
  }
  ~Child() {
    if (pid_ > 0 && !code_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // The exit code (128 + signal when killed); fails the test if it does not end within the bound.
  int wait() {
    if (code_) return *code_;
    const auto deadline = std::chrono::steady_clock::now() + wait_bound;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        BOOST_FAIL("process did not exit; its log:\n" << slurp(log_));
      }
      std::this_thread::sleep_for(20ms);
    }
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return *code_;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  std::string log() const { return slurp(log_); }
  // Waits until the log holds `pattern` (a regex) and returns the first match's first group
  // (or the whole match). Fails the test when the process exits first or the bound passes.
  std::string await(const std::string& pattern) {
    const std::regex re(pattern);
    const auto deadline = std::chrono::steady_clock::now() + wait_bound;
    for (;;) {
      const std::string text = slurp(log_);
      std::smatch m;
      if (std::regex_search(text, m, re)) return m.size() > 1 ? m[1].str() : m[0].str();
      int status = 0;
      if (!code_ && ::waitpid(pid_, &status, WNOHANG) == pid_)
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      const std::string after = slurp(log_);
      if (code_ && !std::regex_search(after, m, re))
        BOOST_FAIL("process exited (" << *code_ << ") before logging /" << pattern
                                      << "/; its log:\n"
                                      << slurp(log_));
      if (std::chrono::steady_clock::now() > deadline)
        BOOST_FAIL("no /" << pattern << "/ in the log in time; the log:\n" << slurp(log_));
      std::this_thread::sleep_for(20ms);
    }
  }

 private:
  pid_t pid_ = -1;
  fs::path log_;
  std::optional<int> code_;
};

}  // namespace colony::testing
