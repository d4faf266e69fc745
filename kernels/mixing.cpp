// Smear, value-embedding mix, residual lambdas, backout: forward and backward.
#include "ringtrain/kernels/mixing.hpp"

#include "ringtrain/kernels/activations.hpp"

namespace rt::kernels {

void smear_forward(const float* x, const float* gate_w, float lambda, float* out, float* sig,
                   int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * T; ++r) {
    const float* xr = x + r * C;
    float* o = out + r * C;
    if (r % T == 0) {
      sig[r] = 0.0f;
      for (int64_t i = 0; i < C; ++i) o[i] = xr[i];
      continue;
    }
    float z = 0.0f;
    for (int64_t j = 0; j < kSmearDim; ++j) z += gate_w[j] * xr[j];
    const float s = sigmoid(z);
    sig[r] = s;
    const float g = lambda * s;
    const float* prev = xr - C;
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) o[i] = xr[i] + g * prev[i];
  }
}

void smear_backward(const float* x, const float* gate_w, float lambda, const float* sig,
                    const float* dout, float* dx, float* dgate_w, float* dlambda,
                    int64_t B, int64_t T, int64_t C) {
  double dl = 0.0;
  double dgw[kSmearDim] = {};
#pragma omp parallel for schedule(static) reduction(+ : dl, dgw[:kSmearDim])
  for (int64_t r = 0; r < B * T; ++r) {
    const int64_t t = r % T;
    const float* d = dout + r * C;
    float* o = dx + r * C;
    // Token t feeds token t+1 through the gate g_{t+1}.
    if (t + 1 < T) {
      const float g_next = lambda * sig[r + 1];
      const float* dn = d + C;
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) o[i] = d[i] + g_next * dn[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) o[i] = d[i];
    }
    if (t == 0) continue;
    const float* prev = x + (r - 1) * C;
    float dg = 0.0f;
#pragma omp simd reduction(+ : dg)
    for (int64_t i = 0; i < C; ++i) dg += d[i] * prev[i];
    const float s = sig[r];
    dl += double(dg) * s;
    const float dz = dg * lambda * s * (1.0f - s);
    const float* xr = x + r * C;
    for (int64_t j = 0; j < kSmearDim; ++j) {
      o[j] += dz * gate_w[j];
      dgw[j] += double(dz) * xr[j];
    }
  }
  *dlambda += float(dl);
  for (int64_t j = 0; j < kSmearDim; ++j) dgate_w[j] += float(dgw[j]);
}

void ve_mix_forward(float* v, const float* table, const int32_t* ids, const float* u,
                    int64_t ldu, const float* Wg, float* gate, int64_t N, int64_t KV, int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* un = u + n * ldu;
    const float* ve = table + int64_t(ids[n]) * KV * D;
    for (int64_t h = 0; h < KV; ++h) {
      float z = 0.0f;
      for (int64_t j = 0; j < kVeGateDim; ++j) z += un[j] * Wg[h * kVeGateDim + j];
      const float g = 3.0f * sigmoid(z);
      gate[n * KV + h] = g;
      float* vh = v + (n * KV + h) * D;
      const float* eh = ve + h * D;
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) vh[i] += g * eh[i];
    }
  }
}

void ve_mix_backward(const float* dv, const float* table, const int32_t* ids,
                     const TokenGroups& groups, const float* u, int64_t ldu, const float* Wg,
                     const float* gate, float* dtable, float* dWg, float* du, int64_t N,
                     int64_t KV, int64_t D) {
  // Gate path: dgate = dv . ve; dz = dgate * gate * (1 - gate / 3)  (gate = 3 sigmoid(z)).
  constexpr int64_t kMaxWg = 64 * kVeGateDim;
  double dw[kMaxWg] = {};
  const int64_t nw = KV * kVeGateDim;
#pragma omp parallel for schedule(static) reduction(+ : dw[:kMaxWg])
  for (int64_t n = 0; n < N; ++n) {
    const float* ve = table + int64_t(ids[n]) * KV * D;
    float* dun = du + n * ldu;
    const float* un = u + n * ldu;
    for (int64_t h = 0; h < KV; ++h) {
      const float* d = dv + (n * KV + h) * D;
      const float* e = ve + h * D;
      float dg = 0.0f;
#pragma omp simd reduction(+ : dg)
      for (int64_t i = 0; i < D; ++i) dg += d[i] * e[i];
      const float g = gate[n * KV + h];
      const float dz = dg * g * (1.0f - g / 3.0f);
      for (int64_t j = 0; j < kVeGateDim; ++j) {
        dun[j] += dz * Wg[h * kVeGateDim + j];
        dw[h * kVeGateDim + j] += double(dz) * un[j];
      }
    }
  }
  for (int64_t i = 0; i < nw; ++i) dWg[i] += float(dw[i]);
  // Table path, one token per iteration so rows never race.
  const int64_t ng = int64_t(groups.unique_ids.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t k = 0; k < ng; ++k) {
    float* row = dtable + int64_t(groups.unique_ids[k]) * KV * D;
    for (int64_t p = groups.start[k]; p < groups.start[k + 1]; ++p) {
      const int64_t n = groups.order[p];
      for (int64_t h = 0; h < KV; ++h) {
        const float g = gate[n * KV + h];
        const float* d = dv + (n * KV + h) * D;
        float* rh = row + h * D;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) rh[i] += g * d[i];
      }
    }
  }
}

void lambda_mix_forward(const float* x, const float* x0, float a, float b, float* out,
                        int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a * x[i] + b * x0[i];
}

void lambda_mix_backward(const float* dout, const float* x, const float* x0, float a, float b,
                         float* dx, float* dx0, float* da, float* db, int64_t n) {
  double sa = 0.0, sb = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : sa, sb)
  for (int64_t i = 0; i < n; ++i) {
    const float d = dout[i];
    sa += double(d * x[i]);
    sb += double(d * x0[i]);
    dx0[i] += b * d;
    dx[i] = a * d;
  }
  *da += float(sa);
  *db += float(sb);
}

void backout_forward(const float* x, const float* xb, float lambda, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - lambda * xb[i];
}

void backout_backward(const float* dout, const float* xb, float lambda, float* dxb,
                      float* dlambda, int64_t n) {
  double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    s += double(dout[i] * xb[i]);
    dxb[i] -= lambda * dout[i];
  }
  *dlambda -= float(s);
}

}  // namespace rt::kernels
