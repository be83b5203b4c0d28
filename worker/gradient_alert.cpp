#include "worker/gradient_alert.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace colony {

double gradient_squares(std::span<const float> row_grads, std::span<const float> dense_grads) {
  double squares = 0.0;
  for (float g : row_grads) squares += double(g) * g;
  for (float g : dense_grads) squares += double(g) * g;
  return squares;
}

double gradient_norm_from_squares(double squares, size_t samples) {
  return std::sqrt(squares) / double(std::max<size_t>(samples, 1));
}

double gradient_norm_per_sample(std::span<const float> row_grads,
                                std::span<const float> dense_grads, size_t samples) {
  return gradient_norm_from_squares(gradient_squares(row_grads, dense_grads), samples);
}

std::optional<GradientWatch::Excursion> GradientWatch::observe(double norm) {
  std::optional<Excursion> out;
  if (ratio_ > 0 && recent_.size() >= gradient_window_min) {
    std::vector<double> sorted(recent_.begin(), recent_.end());
    const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
    std::nth_element(sorted.begin(), mid, sorted.end());
    const double median = *mid;
    const bool up = median > 0 && norm > ratio_ * median;
    const bool down = median > 0 && norm * ratio_ < median;
    if ((up && !exploding_) || (down && !vanishing_))
      out = Excursion{up ? "exploding_gradient" : "vanishing_gradient", median, recent_.size()};
    exploding_ = up;
    vanishing_ = down;
  }
  recent_.push_back(norm);
  if (recent_.size() > gradient_window_steps) recent_.pop_front();
  return out;
}

}  // namespace colony
