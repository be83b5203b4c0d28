// Progress for long runs: a redrawn bar on a terminal, plain log lines elsewhere.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace colony::cli {

class Progress {
 public:
  // Draws a bar when `out` is a terminal; otherwise prints a line every `log_every_seconds`.
  explicit Progress(FILE* out, double log_every_seconds = 5.0);
  // `fraction` of the work done (0..1), `done` units so far and a short status text.
  void update(double fraction, double units_done, const char* unit, const std::string& status);
  // Starts the clock again (rates and ETA count from here), e.g. when a new phase begins.
  void restart();
  // Ends the bar (newline) so later output starts on a fresh line.
  void finish();
  bool is_tty() const { return tty_; }

 private:
  using Clock = std::chrono::steady_clock;
  FILE* out_;
  bool tty_;
  double log_every_;
  Clock::time_point start_, last_;
  bool drawn_ = false;
};

// "1.23M", "456k", "789".
std::string human_count(double n);
// "1:02:03" or "2:03".
std::string human_duration(double seconds);

}  // namespace colony::cli
