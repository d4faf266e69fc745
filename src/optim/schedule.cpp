// Schedules and scaling rules of nanochat's base training (see schedule.hpp).
#include "ringtrain/optim/schedule.hpp"

#include <cmath>
#include <numbers>

#include "ringtrain/errors.hpp"
#include "ringtrain/model/config.hpp"

namespace rt::optim {

int64_t warmdown_iters(int64_t num_iterations, double warmdown_ratio) {
  // std::nearbyint uses the default rounding mode, half to even, as Python's round().
  return int64_t(std::nearbyint(warmdown_ratio * double(num_iterations)));
}

double lr_multiplier(int64_t it, int64_t num_iterations, const TrainingHyper& h) {
  const int64_t W = warmdown_iters(num_iterations, h.warmdown_ratio);
  if (it < h.warmup_steps) return double(it + 1) / double(h.warmup_steps);
  if (it <= num_iterations - W) return 1.0;
  const double p = double(num_iterations - it) / double(W);
  return p * 1.0 + (1.0 - p) * h.final_lr_frac;
}

double muon_momentum(int64_t it, int64_t num_iterations, const TrainingHyper& h) {
  const int64_t W = warmdown_iters(num_iterations, h.warmdown_ratio);
  const int64_t warmdown_start = num_iterations - W;
  if (it < kMomentumWarmupIters) {
    const double frac = double(it) / double(kMomentumWarmupIters);
    return (1.0 - frac) * 0.85 + frac * 0.97;
  }
  if (W > 0 && it >= warmdown_start) {
    const double frac = double(it - warmdown_start) / double(W);
    return (1.0 - frac) * 0.97 + frac * 0.90;
  }
  return 0.97;
}

double muon_weight_decay(int64_t it, int64_t num_iterations, double wd_scaled) {
  return wd_scaled * 0.5 * (1.0 + std::cos(std::numbers::pi * double(it) / double(num_iterations)));
}

double batch_lr_scale(int64_t total_batch_tokens) {
  if (total_batch_tokens <= 0)
    throw UsageError("total batch must be a positive number of tokens; pass --total-batch");
  return std::sqrt(double(total_batch_tokens) / double(kReferenceBatchTokens));
}

double model_dim_lr_scale(int64_t n_embd) {
  if (n_embd <= 0) throw UsageError("n_embd must be positive; fix the model config");
  return std::pow(double(n_embd) / double(kReferenceModelDim), -0.5);
}

int64_t scaling_param_count(int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t n_kv_head,
                            int64_t head_dim, int64_t vocab_size) {
  const int64_t C = n_embd, q = n_head * head_dim, kv = n_kv_head * head_dim;
  // c_q, c_k, c_v, attn.c_proj, mlp.c_fc, mlp.c_proj.
  const int64_t per_layer = q * C + 2 * kv * C + C * q + 4 * C * C + C * 4 * C;
  const int64_t n_ve = (n_layer + 1) / 2;  // layers with i % 2 == (L-1) % 2
  const int64_t ve_gates = n_ve * n_kv_head * 12;
  return n_layer * per_layer + ve_gates + vocab_size * C;
}

int64_t reference_scaling_param_count(int64_t vocab_size, int64_t aspect_ratio, int64_t head_dim) {
  const auto c = model::ModelConfig::from_depth(kReferenceDepth, 1024, vocab_size, aspect_ratio, head_dim);
  return scaling_param_count(c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.vocab_size);
}

double weight_decay_scaled(int64_t total_batch_tokens, int64_t d_model, int64_t d_ref, double weight_decay) {
  if (d_model <= 0) throw UsageError("the model has no Muon matrices or lm_head; fix the model");
  return weight_decay * batch_lr_scale(total_batch_tokens) * (double(d_ref) / double(d_model));
}

int64_t target_tokens(double ratio, int64_t d_model) {
  if (!(ratio > 0) || !std::isfinite(ratio))
    throw UsageError("--target-param-data-ratio must be a positive number of tokens per parameter");
  return int64_t(ratio * double(d_model));  // Python's int(): toward zero
}

int64_t auto_total_batch(double ratio, int64_t d_model, int64_t d_ref) {
  const double ratio_of_horizons = double(target_tokens(ratio, d_model)) / (ratio * double(d_ref));
  const double predicted = double(kReferenceBatchTokens) * std::pow(ratio_of_horizons, kBatchSizeExponent);
  // 2 ** round(log2(predicted)), Python's round (half to even)
  return int64_t(1) << int(std::nearbyint(std::log2(predicted)));
}

int64_t horizon_steps(double ratio, int64_t d_model, int64_t total_batch) {
  if (total_batch <= 0) throw UsageError("total batch must be a positive number of tokens; pass --total-batch");
  return target_tokens(ratio, d_model) / total_batch;
}

}  // namespace rt::optim
