// MuonAdamW: parameter groups, schedules and the per-step loop (see muon_adamw.hpp).
// The math of each update lives in adamw.cpp and muon.cpp.
#include "ringtrain/optim/muon_adamw.hpp"

#include <omp.h>

#include <algorithm>

#include "ringtrain/errors.hpp"
#include "ringtrain/model/layout.hpp"
#include "ringtrain/optim/adamw.hpp"
#include "ringtrain/optim/schedule.hpp"

namespace rt::optim {
MuonAdamW::MuonAdamW(model::ParamSet& params, const MuonAdamWOptions& options)
    : params_(params), options_(options) {
  if (options.num_iterations <= 0)
    throw UsageError("the optimizer needs a positive number of iterations (--steps of ringtrain train)");
  const double b = batch_lr_scale(options.total_batch_tokens);
  const double d = model_dim_lr_scale(options.model_dim);

  // The spec's AdamW table, in the order of model::OptimGroup.
  using model::OptimGroup;
  auto group = [](OptimGroup g, double lr, double beta1, double beta2, double wd) {
    return AdamWGroup{model::optim_group_name(g), lr, beta1, beta2, wd, {}};
  };
  const TrainingHyper& h = options.hyper;
  groups_ = {
      group(OptimGroup::lm_head, h.unembedding_lr * b * d, 0.8, 0.96, 0.01),
      group(OptimGroup::wte, h.embedding_lr * b * d, 0.8, 0.995, 0.001),
      group(OptimGroup::value_embeds, h.embedding_lr * 0.5 * b * d, 0.8, 0.995, 0.01),
      group(OptimGroup::resid_lambdas, h.scalar_lr * 0.01 * b, 0.8, 0.95, 0.05),
      group(OptimGroup::x0_lambdas, h.scalar_lr * b, 0.96, 0.95, 0.0),
      group(OptimGroup::scalars, 0.2, 0.8, 0.95, 0.0),  // smear and backout: not tunable in base_train
  };
  static_assert(model::kNumAdamWGroups == 6, "one entry per AdamW group");
  muon_lr_ = h.matrix_lr * b;

  auto& all = params_.all();
  group_of_param_.assign(all.size(), -1);
  adamw_state_.resize(all.size());
  int64_t scaling_params = 0, vocab_rows = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const model::Param& p = all[i];
    const model::OptimGroup g = model::classify_param(p.name).optim;
    if (g == model::OptimGroup::muon) {
      if (p.shape.size() != 2)
        throw UsageError("parameter " + p.name + " is not a matrix, but Muon updates only matrices; " +
                         "only nanochat's parameters are supported");
      muon_.push_back({int(i), p.shape[0], p.shape[1]});
      muon_state_.push_back({std::vector<float>(size_t(p.numel), 0.0f),
                             std::vector<float>(size_t(muon_variance_len(p.shape[0], p.shape[1])),
                                                0.0f)});
      scaling_params += p.numel;
      continue;
    }
    if (g == model::OptimGroup::lm_head) scaling_params += p.numel, vocab_rows = p.shape.empty() ? 0 : p.shape[0];
    groups_[size_t(g)].params.push_back(int(i));
    group_of_param_[i] = int(g);
    adamw_state_[i].exp_avg.assign(size_t(p.numel), 0.0f);
    adamw_state_[i].exp_avg_sq.assign(size_t(p.numel), 0.0f);
  }
  if (options_.scaling_params <= 0) options_.scaling_params = scaling_params;
  if (options_.scaling_params_ref <= 0)
    options_.scaling_params_ref = reference_scaling_param_count(vocab_rows > 0 ? vocab_rows : 32768);
  wd_scaled_ = rt::optim::weight_decay_scaled(options_.total_batch_tokens, options_.scaling_params,
                                              options_.scaling_params_ref, h.weight_decay);
}

ScheduleValues MuonAdamW::schedule(int64_t it) const {
  const int64_t N = options_.num_iterations;
  return {lr_multiplier(it, N, options_.hyper), muon_momentum(it, N, options_.hyper), muon_weight_decay(it, N, wd_scaled_)};
}

void MuonAdamW::step(int64_t it) {
  step_adamw(it);
  std::vector<int> all(muon_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = int(i);
  step_muon(it, all);
}

void MuonAdamW::step_adamw(int64_t it) {
  const double lrm = lr_multiplier(it, options_.num_iterations, options_.hyper);
  auto& all = params_.all();
  for (const AdamWGroup& g : groups_) {
    const AdamWHyper h{g.lr * lrm, g.beta1, g.beta2, 1e-10, g.weight_decay};
    for (int i : g.params) {
      AdamWState& s = adamw_state_[i];
      ++s.step;
      adamw_update(all[i].data, all[i].grad, s.exp_avg.data(), s.exp_avg_sq.data(), all[i].numel,
                   h, s.step);
    }
  }
}

void MuonAdamW::step_muon(int64_t it, const std::vector<int>& matrix_indices) {
  const ScheduleValues sv = schedule(it);
  const MuonHyper h{muon_lr_ * sv.lr_multiplier, sv.muon_momentum, sv.muon_weight_decay, 0.9};
  for (int k : matrix_indices)
    if (k < 0 || size_t(k) >= muon_.size())
      throw RuntimeError("step_muon: matrix index " + std::to_string(k) + " out of range 0.." +
                         std::to_string(muon_.size()) + "; use indices of muon_matrices()");
  auto& all = params_.all();
  // Matrices in parallel, one thread each (gemm and the elementwise loops run single-threaded
  // inside this region): far fewer fork-joins than splitting every small product over all
  // threads, and each matrix's result does not depend on the thread count or the subset.
  const int threads = std::max(1, std::min(omp_get_max_threads(), int(matrix_indices.size())));
  if (int(workspaces_.size()) < threads) workspaces_.resize(size_t(threads));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (size_t j = 0; j < matrix_indices.size(); ++j) {
    const int k = matrix_indices[j];
    const MuonMatrix& mm = muon_[k];
    model::Param& p = all[mm.param];
    muon_update(p.data, p.grad, muon_state_[k].momentum.data(), muon_state_[k].variance.data(),
                mm.rows, mm.cols, h, workspaces_[size_t(omp_get_thread_num())]);
  }
}

}  // namespace rt::optim
