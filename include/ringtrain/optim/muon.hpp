// One Muon update of one matrix, every step of nanochat's MuonAdamW for it in one place:
// Nesterov momentum, row equilibration, scaling, Polar Express, renormalisation, variance
// reduction, cautious weight decay.
#pragma once
#include <cstdint>
#include <vector>

#include "ringtrain/optim/polar_express.hpp"

namespace rt::optim {

struct MuonHyper {
  double lr = 0;            // group LR times the schedule; the shape factor is applied inside
  double momentum = 0.95;   // Nesterov beta
  double weight_decay = 0;  // cautious, decoupled
  double beta2 = 0.9;       // variance-reduction EMA
};

struct MuonWorkspace {
  std::vector<float> g;        // the update being built, m x n
  std::vector<double> scale;   // per row or per column factors
  std::vector<float> v;        // per row or per column mean squares
  PolarExpressWorkspace polar;
};

// Length of the variance buffer of an m x n matrix: m if m >= n (reduce over columns), else n.
inline int64_t muon_variance_len(int64_t m, int64_t n) { return m >= n ? m : n; }

// The effective LR multiplier for the shape: sqrt(max(1, m/n)).
double muon_shape_lr_factor(int64_t m, int64_t n);

// param, grad, momentum_buf: m x n row-major. variance_buf: muon_variance_len(m, n).
// Both buffers start at zero and are updated in place.
void muon_update(float* param, const float* grad, float* momentum_buf, float* variance_buf,
                 int64_t m, int64_t n, const MuonHyper& h, MuonWorkspace& ws);

}  // namespace rt::optim
