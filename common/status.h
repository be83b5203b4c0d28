// Operating errors as values (RocksDB's Status, KJ's split between bugs and errors).
//
// A Status is what a function returns when something outside our control can go
// wrong: bad input, a missing file, an I/O error. Bugs in our own code are not
// Statuses: they are COLONY_ASSERT failures, on in release builds too.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace colony {

class [[nodiscard]] Status {
 public:
  enum class Code {
    ok = 0,
    invalid_input,  // the caller's input (a file, a flag, wire bytes) is malformed
    not_found,      // a file or key that must exist does not
    io_error,       // the operating system failed a read or write
    internal,       // a library we call failed in a way the input does not explain
  };

  Status() = default;
  static Status invalid_input(std::string msg) { return {Code::invalid_input, std::move(msg)}; }
  static Status not_found(std::string msg) { return {Code::not_found, std::move(msg)}; }
  static Status io_error(std::string msg) { return {Code::io_error, std::move(msg)}; }
  static Status internal(std::string msg) { return {Code::internal, std::move(msg)}; }

  bool ok() const { return code_ == Code::ok; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // True for errors the user can fix by changing their input (exit code 2 in the CLI).
  bool is_user_error() const { return code_ == Code::invalid_input || code_ == Code::not_found; }
  // The same error with "`context`: " before its message (ok stays ok).
  Status with_context(const std::string& context) const {
    return ok() ? Status() : Status(code_, context + ": " + message_);
  }

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::ok;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : v_(std::move(status)) {
    if (std::get<Status>(v_).ok()) std::abort();  // an Expected error must be an error
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  // Precondition: ok(). Reading the value of an error is a bug (asserted).
  T& value() & {
    check();
    return std::get<T>(v_);
  }
  const T& value() const& {
    check();
    return std::get<T>(v_);
  }
  T&& value() && {
    check();
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const Status& status() const { return std::get<Status>(v_); }

 private:
  void check() const {
    if (!ok()) {
      std::fprintf(stderr, "colony: internal error: value() of an error: %s\n",
                   status().message().c_str());
      std::abort();
    }
  }
  std::variant<T, Status> v_;
};

[[noreturn]] void assert_failed(const char* expr, const char* file, int line,
                                const std::string& detail);

// The optional message of COLONY_ASSERT: a fmt format string and its arguments.
inline std::string detail_message() {
  return {};
}
template <class... A>
std::string detail_message(const char* f, A&&... args) {
  return fmt::format(fmt::runtime(f), std::forward<A>(args)...);
}

}  // namespace colony

// An invariant of our own code. Stays on in release builds; prints the values involved.
#define COLONY_ASSERT(cond, ...)                                                                 \
  do {                                                                                           \
    if (!(cond)) [[unlikely]]                                                                    \
      ::colony::assert_failed(#cond, __FILE__, __LINE__, ::colony::detail_message(__VA_ARGS__)); \
  } while (0)
