// RMSNorm forward/backward, one row per iteration, rows split over the OpenMP threads.
#include "ringtrain/kernels/rmsnorm.hpp"

#include <cmath>

namespace rt::kernels {

void rmsnorm_forward(const float* x, float* y, float* rstd, int64_t rows, int64_t dim,
                     float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float rs = 1.0f / std::sqrt(ss / float(dim) + kNormEps);
    rstd[r] = rs;
    const float m = rs * scale;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * m;
  }
}

void rmsnorm_backward(const float* y, const float* rstd, const float* dy, float* dx,
                      int64_t rows, int64_t dim, float scale, bool accumulate) {
  const float inv_scale = 1.0f / scale;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t i = 0; i < dim; ++i) dot += dyr[i] * yr[i];
    // xh = y / scale;  mean(dy * xh) = dot / (scale * dim)
    const float c = dot * inv_scale / float(dim);
    const float m = rstd[r] * scale;
    if (accumulate) {
#pragma omp simd
      for (int64_t i = 0; i < dim; ++i) dxr[i] += m * (dyr[i] - yr[i] * inv_scale * c);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < dim; ++i) dxr[i] = m * (dyr[i] - yr[i] * inv_scale * c);
    }
  }
}

}  // namespace rt::kernels
