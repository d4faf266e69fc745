// Softcap + cross entropy over rows, and the chunked LM head (logits never held whole).
#include "ringtrain/kernels/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ringtrain/kernels/fastmath.hpp"
#include "ringtrain/kernels/matmul.hpp"

namespace rt::kernels {

double softcap_xent_rows(float* logits, int64_t rows, int64_t V, const int32_t* tgt, float cap,
                         float* losses, float grad_scale, bool want_grad) {
  double total = 0.0;
  const float inv_cap = 1.0f / cap;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int64_t r = 0; r < rows; ++r) {
    float* z = logits + r * V;
    const int32_t y = tgt[r];
    if (y < 0) {
      if (losses) losses[r] = 0.0f;
      if (want_grad) std::fill(z, z + V, 0.0f);
      continue;
    }
    // Pass 1: t = tanh(l / cap) into the logits, e = exp(cap * t - cap) into a row
    // buffer (|cap * t| <= cap, so no running max is needed and nothing overflows).
    thread_local std::vector<float> ebuf;
    if (int64_t(ebuf.size()) < V) ebuf.resize(V);
    float* e = ebuf.data();
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) {
      const float t = fast_tanh(z[j] * inv_cap);
      z[j] = t;
      const float ej = fast_exp(cap * t - cap);
      e[j] = ej;
      sum += ej;
    }
    const float lse = cap + std::log(sum);
    const float loss = lse - cap * z[y];
    if (losses) losses[r] = loss;
    total += loss;
    if (!want_grad) {
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) z[j] *= cap;
      continue;
    }
    // Pass 2: d/dl = (softmax - onehot) * (1 - t^2) * grad_scale; softmax = e / sum.
    const float ty = z[y];
    const float w = grad_scale / sum;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) z[j] = w * e[j] * (1.0f - z[j] * z[j]);
    z[y] -= grad_scale * (1.0f - ty * ty);
  }
  return total;
}

double lm_head_xent(const float* x, const float* W, const int32_t* tgt, int64_t N, int64_t C,
                    int64_t V, float cap, float grad_scale, float* losses, float* dx, float* dW,
                    float* scratch, int64_t chunk) {
  const bool want_grad = dx || dW;
  double total = 0.0;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    // Skip the whole chunk when every target in it is ignored.
    bool any = false;
    for (int64_t r = 0; r < rows && !any; ++r) any = tgt[r0 + r] >= 0;
    if (!any) {
      if (losses) std::fill(losses + r0, losses + r0 + rows, 0.0f);
      if (dx) std::fill(dx + r0 * C, dx + (r0 + rows) * C, 0.0f);
      continue;
    }
    const float* xc = x + r0 * C;
    linear_forward(xc, W, scratch, rows, C, V);
    total += softcap_xent_rows(scratch, rows, V, tgt + r0, cap, losses ? losses + r0 : nullptr,
                               grad_scale, want_grad);
    if (!want_grad) continue;
    linear_backward(scratch, xc, W, dx ? dx + r0 * C : nullptr, dW, rows, C, V, false, true);
  }
  return total;
}

}  // namespace rt::kernels
