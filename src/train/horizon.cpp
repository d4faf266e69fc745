// --total-batch auto and --steps auto: the batch and the horizon base_train picks for a model
// (optim/schedule.hpp has the rules), resolved once the data has said the vocabulary.
#include <cstdio>

#include "ringtrain/errors.hpp"
#include "ringtrain/optim/schedule.hpp"
#include "ringtrain/train/options.hpp"

namespace rt::train {
namespace {

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

}  // namespace

std::string TrainOptions::resolve_horizon(const model::ModelConfig& m) {
  const bool have_ratio = target_param_data_ratio > 0;
  const int64_t d_model = optim::scaling_param_count(m.n_layer, m.n_embd, m.n_head, m.n_kv_head, m.head_dim, m.vocab_size);
  const int64_t d_ref = optim::reference_scaling_param_count(m.vocab_size, aspect_ratio, m.head_dim);
  std::string batch_why = "given", steps_why = "given";
  if (total_batch == kAuto) {
    if (!have_ratio)
      throw UsageError("--total-batch auto sizes the batch from the horizon of --target-param-data-ratio; give a ratio above 0 or --total-batch");
    total_batch = optim::auto_total_batch(target_param_data_ratio, d_model, d_ref);
    batch_why = "auto";
  }
  if (steps == kAuto) {
    if (!have_ratio) throw UsageError("--steps auto needs --target-param-data-ratio above 0; give one of the two");
    // "one micro-step per rank" has no size before the ranks meet: the horizon needs tokens.
    if (total_batch == 0)
      throw UsageError("--steps auto needs the batch in tokens; give --total-batch TOKENS (or auto) with --total-batch 0, or --steps");
    steps = optim::horizon_steps(target_param_data_ratio, d_model, total_batch);
    if (steps < 1)
      throw UsageError("--target-param-data-ratio " + std::to_string(target_param_data_ratio) + " gives fewer tokens (" +
                       with_commas(optim::target_tokens(target_param_data_ratio, d_model)) + ") than one batch of " +
                       with_commas(total_batch) + "; raise the ratio, lower --total-batch, or give --steps");
    char why[160];
    std::snprintf(why, sizeof why, "%g tokens per scaling parameter, %s of them", target_param_data_ratio,
                  with_commas(d_model).c_str());
    steps_why = why;
  }
  if (stop_after >= steps)
    throw UsageError("--stop-after " + std::to_string(stop_after) + " must be smaller than the run's " + std::to_string(steps) +
                     " steps (it stops a run early; the schedule stays that long)");
  if (device_batch_auto && (total_batch <= 0 || total_batch % seq_len != 0 || total_batch / seq_len < world()))
    throw UsageError("--device-batch auto splits --total-batch between the ranks: give --total-batch as a multiple of --seq-len, "
                     "at least one row per rank");
  const double b = total_batch > 0 ? optim::batch_lr_scale(total_batch) : 0;
  const double d = optim::model_dim_lr_scale(m.n_embd);
  char line[640];
  if (total_batch > 0)
    std::snprintf(line, sizeof line,
                  "schedule: %s tokens a step (%s), %s steps (%s); learning rates matrix %.5g, embedding %.5g, "
                  "unembedding %.5g, scalar %.5g (b %.4g, d %.4g); Muon weight decay %.5g (D_model %s, D_ref %s)",
                  with_commas(total_batch).c_str(), batch_why.c_str(), with_commas(steps).c_str(), steps_why.c_str(),
                  hyper.matrix_lr * b, hyper.embedding_lr * b * d, hyper.unembedding_lr * b * d, hyper.scalar_lr * b, b, d,
                  optim::weight_decay_scaled(total_batch, d_model, d_ref, hyper.weight_decay), with_commas(d_model).c_str(),
                  with_commas(d_ref).c_str());
  else
    std::snprintf(line, sizeof line, "schedule: one micro-step per rank a step, %s steps (%s)", with_commas(steps).c_str(),
                  steps_why.c_str());
  return line;
}

}  // namespace rt::train
