// ReLU^2 forward and backward.
#include "ringtrain/kernels/activations.hpp"

#include <cmath>

namespace rt::kernels {

void relu2_forward(const float* h, float* a, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float r = (h[i] > 0.0f ? h[i] : 0.0f);
    a[i] = r * r;
  }
}

void relu2_backward(const float* h, const float* da, float* dh, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dh[i] = 2.0f * (h[i] > 0.0f ? h[i] : 0.0f) * da[i];
}

}  // namespace rt::kernels
