// Muon on one matrix: nanochat's MuonAdamW matrix update, steps 1-7 of the spec in order.
#include "ringtrain/optim/muon.hpp"

#include <algorithm>
#include <cmath>

#include "lerp.hpp"

namespace rt::optim {
namespace {

double sum_squares(const float* x, int64_t n) {
  double acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) acc += double(x[i]) * double(x[i]);
  return acc;
}

void scale_all(float* x, int64_t n, float s) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace

double muon_shape_lr_factor(int64_t m, int64_t n) {
  return std::sqrt(std::max(1.0, double(m) / double(n)));
}

void muon_update(float* param, const float* grad, float* momentum_buf, float* variance_buf,
                 int64_t m, int64_t n, const MuonHyper& h, MuonWorkspace& ws) {
  const int64_t numel = m * n;
  ws.g.resize(size_t(numel));
  float* g = ws.g.data();
  const bool big = numel > 32768;

  // 1. Nesterov momentum: buf = lerp(buf, grad, 1-beta); g = lerp(grad, buf, beta).
  const float beta = float(h.momentum), one_minus_beta = float(1.0 - h.momentum);
#pragma omp parallel for schedule(static) if (big)
  for (int64_t i = 0; i < numel; ++i) {
    const float buf = momentum_buf[i] = lerp(momentum_buf[i], grad[i], one_minus_beta);
    g[i] = lerp(grad[i], buf, beta);
  }

  // 2. Row equilibration: every row gets norm ||X||_F / sqrt(m) (row norms clamped >= 1e-6).
  {
    const double target = std::sqrt(sum_squares(g, numel)) / std::sqrt(double(m));
#pragma omp parallel for schedule(static) if (big)
    for (int64_t r = 0; r < m; ++r) {
      float* row = g + r * n;
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += double(row[j]) * double(row[j]);
      const float s = float(target / std::max(std::sqrt(ss), 1e-6));
      for (int64_t j = 0; j < n; ++j) row[j] *= s;
    }
  }

  // 3. Scale into Polar Express's domain: X / (1.01 ||X||_F + 1e-6).
  scale_all(g, numel, float(1.0 / (1.01 * std::sqrt(sum_squares(g, numel)) + 1e-6)));

  // 4. Polar Express (five iterations).
  polar_express(g, m, n, ws.polar);

  // 5. Renormalise to Frobenius norm sqrt(min(m, n)).
  scale_all(g, numel,
            float(std::sqrt(double(std::min(m, n))) /
                  std::max(std::sqrt(sum_squares(g, numel)), 1e-6)));

  // 6. Variance reduction: per-row (m >= n) or per-column second moments, EMA'd across steps,
  //    rescale each row/column by 1/sqrt(EMA) while keeping the overall norm.
  const bool per_row = m >= n;
  const int64_t len = per_row ? m : n;        // number of rows or columns
  const int64_t reduced = per_row ? n : m;    // N_r: the size of the reduced dimension
  ws.v.assign(size_t(len), 0.0f);
  ws.scale.assign(size_t(len), 0.0);
  if (per_row) {
#pragma omp parallel for schedule(static) if (big)
    for (int64_t r = 0; r < m; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += double(g[r * n + j]) * double(g[r * n + j]);
      ws.v[r] = float(ss / double(n));
    }
  } else {
    std::vector<double> col(size_t(n), 0.0);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) col[j] += double(g[r * n + j]) * double(g[r * n + j]);
    for (int64_t j = 0; j < n; ++j) ws.v[j] = float(col[j] / double(m));
  }
  double v_sum = 0, scaled_sum = 0;
  const float w2 = float(1.0 - h.beta2);
  for (int64_t k = 0; k < len; ++k) {
    v_sum += ws.v[k];
    variance_buf[k] = lerp(variance_buf[k], ws.v[k], w2);
    const float s = 1.0f / std::sqrt(std::max(variance_buf[k], 1e-10f));
    ws.scale[k] = s;
    scaled_sum += double(ws.v[k]) * double(reduced) * double(s) * double(s);
  }
  const double norm = std::sqrt(v_sum * double(reduced));
  const double ratio = norm / std::max(std::sqrt(scaled_sum), 1e-10);
  for (int64_t k = 0; k < len; ++k) ws.scale[k] *= ratio;

  // 7. Cautious weight decay and the step: decay only where the update agrees in sign
  //    with the parameter. p -= lr*g + lr*wd*p*[g*p >= 0].
  const float lr = float(h.lr * muon_shape_lr_factor(m, n));
  const float lr_wd = float(h.lr * muon_shape_lr_factor(m, n) * h.weight_decay);
  const double* scale = ws.scale.data();
#pragma omp parallel for schedule(static) if (big)
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = r * n + j;
      const float u = g[i] * float(scale[per_row ? r : j]);
      const float p = param[i];
      const float decay = (u * p >= 0.0f) ? lr_wd * p : 0.0f;
      param[i] = p - (lr * u + decay);
    }
  }
}

}  // namespace rt::optim
