// Rotary embedding on [B*T, heads, D] tensors, half-split layout.
#include "ringtrain/kernels/rotary.hpp"

#include <cmath>

namespace rt::kernels {

RotaryTable RotaryTable::build(int64_t len, int64_t head_dim, double base) {
  RotaryTable t;
  t.len = len;
  t.half = head_dim / 2;
  t.cos.resize(len * t.half);
  t.sin.resize(len * t.half);
  for (int64_t j = 0; j < t.half; ++j) {
    // inv_freq in double, rounded once to float32; angle = float32(pos) * inv_freq in
    // float32 (the PyTorch reference does the same).
    const float inv_freq = float(std::pow(base, -double(2 * j) / double(head_dim)));
    for (int64_t p = 0; p < len; ++p) {
      const float angle = float(p) * inv_freq;
      t.cos[p * t.half + j] = float(std::cos(double(angle)));
      t.sin[p * t.half + j] = float(std::sin(double(angle)));
    }
  }
  return t;
}

namespace {

// sign = +1: forward rotation; -1: its transpose (rotation by -angle).
void rotate(float* x, int64_t B, int64_t T, int64_t heads, int64_t D, const RotaryTable& table,
            float sign) {
  const int64_t half = D / 2;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * T; ++r) {
    const float* c = table.cos.data() + (r % T) * half;
    const float* s = table.sin.data() + (r % T) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* x1 = x + (r * heads + h) * D;
      float* x2 = x1 + half;
#pragma omp simd
      for (int64_t j = 0; j < half; ++j) {
        const float a = x1[j], b = x2[j], sj = sign * s[j];
        x1[j] = a * c[j] + b * sj;
        x2[j] = -a * sj + b * c[j];
      }
    }
  }
}

}  // namespace

void rotary_forward(float* x, int64_t B, int64_t T, int64_t heads, int64_t D,
                    const RotaryTable& table) {
  rotate(x, B, T, heads, D, table, 1.0f);
}

void rotary_backward(float* dx, int64_t B, int64_t T, int64_t heads, int64_t D,
                     const RotaryTable& table) {
  rotate(dx, B, T, heads, D, table, -1.0f);
}

}  // namespace rt::kernels
