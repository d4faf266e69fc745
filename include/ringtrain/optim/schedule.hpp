// nanochat's training schedules and optimizer scaling rules, as pure functions.
//
// `it` is the 0-based optimizer step, `num_iterations` (N) the planned total. The LR
// multiplier applies to every group (AdamW and Muon); momentum and weight decay only to Muon.
#pragma once
#include <cstdint>

namespace rt::optim {

inline constexpr int64_t kWarmupIters = 40;             // linear LR warm-up
inline constexpr int64_t kMomentumWarmupIters = 400;    // Muon momentum 0.85 -> 0.97
inline constexpr double kWarmdownRatio = 0.65;          // W = round(0.65 N)
inline constexpr double kFinalLrFrac = 0.05;            // LR multiplier at the very end
inline constexpr int64_t kReferenceBatchTokens = 524288;  // 2^19, where b = 1
inline constexpr int64_t kReferenceModelDim = 768;        // d12's n_embd, where d = 1

// W = round(0.65 N), rounding half to even like Python's round().
int64_t warmdown_iters(int64_t num_iterations);

// (it+1)/40 while it < 40; 1 until N - W; then p + (1-p)*0.05 with p = (N-it)/W.
double lr_multiplier(int64_t it, int64_t num_iterations);

// 0.85 -> 0.97 over the first 400 steps, 0.97, then 0.97 -> 0.90 over the last W steps.
// Where the two ramps overlap (N - W < 400) the warm-up wins, as it is checked first.
double muon_momentum(int64_t it, int64_t num_iterations);

// wd_s * 0.5 * (1 + cos(pi * it / N)).
double muon_weight_decay(int64_t it, int64_t num_iterations, double wd_scaled);

// b = sqrt(total_batch_tokens / 524288): every learning rate except the small scalars'.
double batch_lr_scale(int64_t total_batch_tokens);

// d = (C / 768)^-0.5: lm_head, wte and value_embeds only.
double model_dim_lr_scale(int64_t n_embd);

// Parameters that set the weight-decay scale: every matrix under transformer.h (ve_gate
// included) plus lm_head, for a nanochat model of this shape.
int64_t scaling_param_count(int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t n_kv_head,
                            int64_t head_dim, int64_t vocab_size);

// The same count for d12 (n_embd 768, 6 heads of 128, V 32768): 110,100,912.
int64_t reference_scaling_param_count();

// wd_s = 0.28 * b * (D_ref / D_model).
double weight_decay_scaled(int64_t total_batch_tokens, int64_t d_model, int64_t d_ref);

}  // namespace rt::optim
