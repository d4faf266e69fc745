#include "average.hpp"

namespace rt::train {

namespace {
// This rank's share of the average: its tokens per step over all ranks' (uneven
// --device-batch counts as one big batch).
double token_weight(const SyncContext& ctx) { return double(ctx.rank_tokens) / double(ctx.global_tokens); }
bool diloco(const SyncContext& ctx) { return ctx.options->sync == SyncMode::Diloco; }
}  // namespace

AverageSync::AverageSync(const SyncContext& ctx)
    : opt_(*ctx.opt),
      average_(*ctx.comm, ctx.options->wire, ctx.model->params(), token_weight(ctx),
               diloco(ctx) ? ctx.options->outer_lr : 1.0f, diloco(ctx) ? ctx.options->outer_momentum : 0.0f),
      every_(ctx.options->sync_every), loss_scale_(ctx.full_micro_step_scale(ctx.rank_tokens)),
      param_bytes_(double(ctx.model->params().size()) * sizeof(float)), outer_(diloco(ctx)) {}

void AverageSync::step_done(const StepPlan& plan) {
  if (averages_at(plan)) timed([&] { average_.sync(); });
}

// The all-reduce buffer, plus diloco's anchor and outer momentum.
double AverageSync::extra_bytes() const { return param_bytes_ * (outer_ ? 3 : 1); }

std::unique_ptr<Sync> make_average_sync(const SyncContext& ctx) { return std::make_unique<AverageSync>(ctx); }

}  // namespace rt::train
