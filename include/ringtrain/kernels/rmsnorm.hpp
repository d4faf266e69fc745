// RMSNorm without a learnable weight: y = scale * x / sqrt(mean(x^2) + eps), eps = FLT_EPSILON.
// Used for the residual-stream norms (scale 1) and for QK norm (per head, scale 1.2).
#pragma once
#include <cstdint>

namespace rt::kernels {

constexpr float kNormEps = 1.1920928955078125e-07f;  // float32 machine epsilon, as nanochat

// rows x dim, contiguous. rstd[r] = 1/sqrt(mean(x_r^2) + eps) is kept for backward.
// y may alias x.
void rmsnorm_forward(const float* x, float* y, float* rstd, int64_t rows, int64_t dim,
                     float scale = 1.0f);

// Backward from the forward's OUTPUT y (not its input): with xh = y / scale,
//   dx = scale * rstd * (dy - xh * mean(dy * xh)).
// accumulate=true adds into dx. dx may alias dy when accumulate is false.
void rmsnorm_backward(const float* y, const float* rstd, const float* dy, float* dx,
                      int64_t rows, int64_t dim, float scale = 1.0f, bool accumulate = false);

}  // namespace rt::kernels
