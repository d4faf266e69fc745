// Vectorisable exp and tanh for the hot pointwise loops (the LM head runs them on
// B*T*V elements each step; libm's scalar calls would cost more than the matmul).
// exp: range reduction to 2^n * e^r, |r| <= ln2/2, degree-7 Taylor: about 1 ulp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace rt::kernels {

inline float fast_exp(float x) {
  // Plain comparisons, not fmin/fmax: those are library calls unless NaNs are ruled out.
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693145751953125f;  // ln2 split in a high and a low part
  r = r - n * 1.428606765330187e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// tanh(y) = sign(y) * (1 - 2 / (exp(2|y|) + 1)); absolute error about 1e-7.
inline float fast_tanh(float y) {
  const float a = std::fabs(y);
  const float t = 1.0f - 2.0f / (fast_exp(2.0f * a) + 1.0f);
  return std::copysign(t, y);
}

}  // namespace rt::kernels
