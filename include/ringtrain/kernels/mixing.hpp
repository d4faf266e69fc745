// The small mixing ops of the nanochat block structure: smear (previous-token mix),
// value-embedding mix, per-layer residual lambdas and backout. Each forward is paired
// with its backward; reductions into scalars run in double.
#pragma once
#include <cstdint>

#include "ringtrain/kernels/embedding.hpp"

namespace rt::kernels {

constexpr int64_t kSmearDim = 24;   // the smear gate reads x[t, 0:24]
constexpr int64_t kVeGateDim = 12;  // the value-embedding gate reads u[t, 0:12]

// Smear over rows of T tokens (x: [B, T, C]):
//   sig_t = sigmoid(gate_w . x[t, 0:24]),  out[t] = x[t] + lambda * sig_t * x[t-1]  (t >= 1)
//   out[0] = x[0];  sig[b, 0] = 0.  out must not alias x.
void smear_forward(const float* x, const float* gate_w, float lambda, float* out, float* sig,
                   int64_t B, int64_t T, int64_t C);
// dx is overwritten; dgate_w (24) and dlambda (1) are accumulated.
void smear_backward(const float* x, const float* gate_w, float lambda, const float* sig,
                    const float* dout, float* dx, float* dgate_w, float* dlambda,
                    int64_t B, int64_t T, int64_t C);

// Value-embedding mix, in place on v [N, KV, D]:
//   gate[n, h] = 3 * sigmoid(u[n, 0:12] . Wg[h, :]),  v[n, h, :] += gate[n, h] * table[ids[n], h*D:(h+1)*D]
// u has row stride ldu. gate [N, KV] is kept for backward.
void ve_mix_forward(float* v, const float* table, const int32_t* ids, const float* u,
                    int64_t ldu, const float* Wg, float* gate, int64_t N, int64_t KV, int64_t D);
// From dv (gradient of the mixed v, which is also that of the unmixed v):
//   dtable[ids[n]] += gate * dv (grouped by token, race-free), dWg += , du[:, 0:12] += .
void ve_mix_backward(const float* dv, const float* table, const int32_t* ids,
                     const TokenGroups& groups, const float* u, int64_t ldu, const float* Wg,
                     const float* gate, float* dtable, float* dWg, float* du, int64_t N,
                     int64_t KV, int64_t D);

// out = a * x + b * x0   (n elements)
void lambda_mix_forward(const float* x, const float* x0, float a, float b, float* out, int64_t n);
// dx = a * dout (overwrite; may alias dout), dx0 += b * dout,
// da += sum(dout * x), db += sum(dout * x0).
void lambda_mix_backward(const float* dout, const float* x, const float* x0, float a, float b,
                         float* dx, float* dx0, float* da, float* db, int64_t n);

// out = x - lambda * xb
void backout_forward(const float* x, const float* xb, float lambda, float* out, int64_t n);
// dxb += -lambda * dout,  dlambda += -sum(dout * xb)   (dx = dout, left to the caller)
void backout_backward(const float* dout, const float* xb, float lambda, float* dxb,
                      float* dlambda, int64_t n);

}  // namespace rt::kernels
