// An alert a worker raises on its own gradients (WorkerCore, WorkerConfig::gradient_alert_ratio).
#pragma once

#include <string>

namespace colony {

struct GradientAlert {
  std::string kind;     // exploding_gradient or vanishing_gradient
  std::string message;  // naming the worker, the step and the norms
};

}  // namespace colony
