// Vectorisable exp and tanh for the hot pointwise loops (the LM head runs them on
// B*T*V elements each step; libm's scalar calls would cost more than the matmul).
// exp: range reduction to 2^n * e^r, |r| <= ln2/2, degree-7 Taylor: about 1 ulp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace rt::kernels {

// e^r for |r| <= ln2/2 by its Taylor series to r^7 (shared by the exps below).
inline float exp_taylor7(float r) {
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p;
}

// 2^n as a float, for -127 <= n <= 128 (n = -127 gives exactly 0).
inline float exp2_int(int32_t n) {
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return scale;
}

inline float fast_exp(float x) {
  // Plain comparisons, not fmin/fmax: those are library calls unless NaNs are ruled out.
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693145751953125f;  // ln2 split in a high and a low part
  r = r - n * 1.428606765330187e-06f;
  return exp_taylor7(r) * exp2_int(int32_t(n));
}

// exp(x) for x <= 0, where masked scores (-inf) and very negative ones must give exactly 0
// (softmax in attention). No std::floor and no float compares, so that GCC vectorises it
// inside `omp simd` loops without -ffast-math: n = round(x / ln2) by a truncating conversion. x is clamped to >= -88 with an unsigned compare of its bits (for
// negative floats the bit pattern grows with the magnitude); there n = -127 makes 2^n 0.
inline float exp_nonpositive(float x) {
  uint32_t bits, floor_bits;
  const float floor_value = -88.0f;
  std::memcpy(&bits, &x, sizeof bits);
  std::memcpy(&floor_bits, &floor_value, sizeof floor_bits);
  bits = bits < floor_bits ? bits : floor_bits;
  float xc;
  std::memcpy(&xc, &bits, sizeof xc);
  const int32_t n = static_cast<int32_t>(xc * 1.44269504f - 0.5f);
  const float nf = static_cast<float>(n);
  const float r = (xc - nf * 0.693145752f) - nf * 1.42860677e-6f;  // ln2 split hi + lo
  return exp_taylor7(r) * exp2_int(n);
}

// tanh(y) = sign(y) * (1 - 2 / (exp(2|y|) + 1)); absolute error about 1e-7.
inline float fast_tanh(float y) {
  const float a = std::fabs(y);
  const float t = 1.0f - 2.0f / (fast_exp(2.0f * a) + 1.0f);
  return std::copysign(t, y);
}

}  // namespace rt::kernels
