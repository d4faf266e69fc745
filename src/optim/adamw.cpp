// AdamW on one tensor (see adamw.hpp).
#include "ringtrain/optim/adamw.hpp"

#include <cmath>

#include "lerp.hpp"

namespace rt::optim {

void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWHyper& h, int64_t step) {
  const float decay = float(1.0 - h.lr * h.weight_decay);
  const float w1 = float(1.0 - h.beta1), w2 = float(1.0 - h.beta2);
  const double bias1 = 1.0 - std::pow(h.beta1, double(step));
  const double bias2 = 1.0 - std::pow(h.beta2, double(step));
  const float inv_bias2 = float(1.0 / bias2);
  const float step_size = float(h.lr / bias1);
  const float eps = float(h.eps);
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    float p = param[i] * decay;
    const float m = exp_avg[i] = lerp(exp_avg[i], g, w1);
    const float v = exp_avg_sq[i] = lerp(exp_avg_sq[i], g * g, w2);
    const float denom = std::sqrt(v * inv_bias2) + eps;
    param[i] = p - step_size * (m / denom);
  }
}

}  // namespace rt::optim
