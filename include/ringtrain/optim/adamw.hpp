// One AdamW update of one tensor, as nanochat's MuonAdamW does it for its AdamW groups:
// decoupled weight decay first (p *= 1 - lr*wd), then Adam with bias correction.
#pragma once
#include <cstdint>

namespace rt::optim {

struct AdamWHyper {
  double lr = 0;            // already multiplied by the schedule
  double beta1 = 0.8;
  double beta2 = 0.95;
  double eps = 1e-10;
  double weight_decay = 0;
};

// `step` counts this tensor's updates including this one (1 on the first), for bias correction.
// exp_avg and exp_avg_sq start at zero and are updated in place.
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWHyper& h, int64_t step);

}  // namespace rt::optim
