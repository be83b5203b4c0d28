// Alerts a trainer raises on its own gradients: a step whose gradient norm (per sample) leaves
// the band around the median of its recent steps. WorkerCore (each replica of the cluster
// engine and the worker daemons) and LocalTrainer (`--engine local`) both watch with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>

namespace colony {

struct GradientAlert {
  std::string kind;     // exploding_gradient or vanishing_gradient
  std::string message;  // naming the trainer, the step and the norms
};

inline constexpr size_t gradient_window_steps = 32;
inline constexpr size_t gradient_window_min = 4;

// The L2 norm of a step's gradients (rows' and dense together) divided by its samples (a
// batch of 0 samples divides by 1).
double gradient_norm_per_sample(std::span<const float> row_grads,
                                std::span<const float> dense_grads, size_t samples);
// The same in two steps, for gradients summed in parts: the sum of the squares of some
// gradients, then the norm per sample from the sum of all of them.
double gradient_squares(std::span<const float> row_grads, std::span<const float> dense_grads);
double gradient_norm_from_squares(double squares, size_t samples);

// Watches the gradient norms of one trainer's steps. Sans-I/O; deterministic.
class GradientWatch {
 public:
  // `ratio` > 1: a norm more than ratio times the median of the last gradient_window_steps
  // steps is exploding, less than 1/ratio of it vanishing. 0: never alerts.
  explicit GradientWatch(double ratio) : ratio_(ratio) {}

  struct Excursion {
    const char* kind;  // exploding_gradient or vanishing_gradient
    double median;     // of the window it was compared with
    size_t window;     // steps in that window
  };
  // Adds a trained step's norm. Returns an excursion when this step leaves the band and the
  // one before it was inside (once per excursion); nothing before gradient_window_min steps,
  // nor while the median is 0.
  std::optional<Excursion> observe(double norm);

 private:
  double ratio_;
  std::deque<double> recent_;
  bool exploding_ = false, vanishing_ = false;
};

}  // namespace colony
