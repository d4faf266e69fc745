// nanochat's training schedules and optimizer scaling rules, as pure functions.
//
// `it` is the 0-based optimizer step, `num_iterations` (N) the planned total. The LR
// multiplier applies to every group (AdamW and Muon); momentum and weight decay only to Muon.
#pragma once
#include <cstdint>

namespace rt::optim {

inline constexpr int64_t kMomentumWarmupIters = 400;    // Muon momentum 0.85 -> 0.97
inline constexpr int64_t kReferenceBatchTokens = 524288;  // 2^19, where b = 1
inline constexpr int64_t kReferenceModelDim = 768;        // d12's n_embd, where d = 1
inline constexpr int64_t kReferenceDepth = 12;            // where the rates and decay were tuned
inline constexpr double kBatchSizeExponent = 0.383;       // B_opt grows as D^0.383 ("Power Lines")

// What base_train lets a user tune, with its defaults (each a flag of `ringtrain train` of
// the same name). The learning rates are those at the reference batch; every one but the
// small scalars' is scaled by b, and the embeddings' and lm_head's by d too.
struct TrainingHyper {
  double matrix_lr = 0.02;        // Muon
  double embedding_lr = 0.3;      // wte (value_embeds take half of it)
  double unembedding_lr = 0.008;  // lm_head
  double scalar_lr = 0.5;         // x0_lambdas (resid_lambdas take a hundredth of it)
  double weight_decay = 0.28;     // Muon's, at d12 and the reference batch
  int64_t warmup_steps = 40;      // linear LR warm-up
  double warmdown_ratio = 0.65;   // the last round(ratio N) steps decay the LR
  double final_lr_frac = 0.05;    // LR multiplier at the very end
};

// W = round(0.65 N) (the ratio: --warmdown-ratio), rounding half to even like Python's round().
int64_t warmdown_iters(int64_t num_iterations, double warmdown_ratio = TrainingHyper{}.warmdown_ratio);

// (it+1)/40 while it < 40; 1 until N - W; then p + (1-p)*0.05 with p = (N-it)/W
// (40, W and 0.05: h's warm-up steps, warm-down ratio and final fraction).
double lr_multiplier(int64_t it, int64_t num_iterations, const TrainingHyper& h = {});

// 0.85 -> 0.97 over the first 400 steps, 0.97, then 0.97 -> 0.90 over the last W steps.
// Where the two ramps overlap (N - W < 400) the warm-up wins, as it is checked first.
double muon_momentum(int64_t it, int64_t num_iterations, const TrainingHyper& h = {});

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

// The same count for d12 built as the run builds its model (base_train's reference model:
// the run's vocabulary, aspect ratio and head size). d12 at V 32768: 110,100,912.
int64_t reference_scaling_param_count(int64_t vocab_size = 32768, int64_t aspect_ratio = 64, int64_t head_dim = 128);

// wd_s = weight_decay * b * (D_ref / D_model), weight_decay 0.28 by default.
double weight_decay_scaled(int64_t total_batch_tokens, int64_t d_model, int64_t d_ref,
                           double weight_decay = TrainingHyper{}.weight_decay);

// base_train's training horizon and batch from --target-param-data-ratio R:
// the tokens to train on, int(R * D_model);
int64_t target_tokens(double ratio, int64_t d_model);
// the batch (--total-batch auto): 2^19 tokens at d12, times (D / D_d12)^0.383 with D the
// target tokens of each, rounded to the nearest power of two (d8 at V 32768: 262,144);
int64_t auto_total_batch(double ratio, int64_t d_model, int64_t d_ref);
// and the steps: the target tokens over the batch, rounded down (d8: 1,920 of 262,144).
int64_t horizon_steps(double ratio, int64_t d_model, int64_t total_batch);

}  // namespace rt::optim
