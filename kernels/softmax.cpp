// Row softmax: max-subtracted exponentials, one row per iteration.
#include "ringtrain/kernels/softmax.hpp"

#include "ringtrain/kernels/fastmath.hpp"

namespace rt::kernels {

void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols, float temperature) {
  const float inv_t = 1.0f / temperature;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = xr[0];
    for (int64_t j = 1; j < cols; ++j) m = xr[j] > m ? xr[j] : m;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < cols; ++j) {
      const float e = fast_exp((xr[j] - m) * inv_t);
      yr[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) yr[j] *= inv;
  }
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                      float temperature) {
  const float inv_t = 1.0f / temperature;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < cols; ++j) dot += dyr[j] * yr[j];
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) dxr[j] = (dyr[j] - dot) * yr[j] * inv_t;
  }
}

}  // namespace rt::kernels
