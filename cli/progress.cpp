#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace colony::cli {

std::string human_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}G", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e4) return fmt::format("{:.0f}k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

std::string human_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

Progress::Progress(FILE* out, double log_every_seconds)
    : out_(out),
      tty_(isatty(fileno(out)) == 1),
      log_every_(log_every_seconds),
      start_(Clock::now()),
      last_(start_) {}

void Progress::update(double fraction, double units_done, const char* unit,
                      const std::string& status) {
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  fraction = std::clamp(fraction, 0.0, 1.0);
  const double rate = elapsed > 0 ? units_done / elapsed : 0.0;
  const double eta = fraction > 0 ? elapsed * (1.0 - fraction) / fraction : NAN;
  if (tty_) {
    if (since_last < 0.1 && drawn_) return;
    constexpr int width = 30;
    const int filled = static_cast<int>(fraction * width);
    std::string bar(filled, '=');
    if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
    fmt::print(out_, "\r[{}] {:3.0f}% {} {} {}/s {} ETA {}\x1b[K", bar, fraction * 100,
               human_count(units_done), unit, human_count(rate), status, human_duration(eta));
    std::fflush(out_);
    drawn_ = true;
  } else {
    if (since_last < log_every_) return;
    fmt::print(out_, "progress {:.1f}% {} {} {}/s {} elapsed {} eta {}\n", fraction * 100,
               human_count(units_done), unit, human_count(rate), status, human_duration(elapsed),
               human_duration(eta));
    std::fflush(out_);
  }
  last_ = now;
}

void Progress::restart() {
  start_ = last_ = Clock::now();
}

void Progress::finish() {
  if (tty_ && drawn_) {
    fmt::print(out_, "\n");
    std::fflush(out_);
  }
  drawn_ = false;
}

}  // namespace colony::cli
