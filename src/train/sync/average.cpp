#include "average.hpp"

#include "sync/replica_check.hpp"

namespace rt::train {

namespace {
// This rank's share of the average: its tokens per step over all ranks' (uneven
// --device-batch counts as one big batch).
double token_weight(const SyncContext& ctx) { return double(ctx.rank_tokens) / double(ctx.global_tokens); }
bool diloco(const SyncContext& ctx) { return ctx.options->sync == SyncMode::Diloco; }
// Parameter-sized buffers of ParamSync: the all-reduce buffer, diloco's anchor and outer
// momentum, and with int8 the common point (diloco's anchor doubles as it) and the error.
int parameter_buffers(const SyncContext& ctx) {
  const bool int8 = net::block_coded(ctx.options->wire);
  return diloco(ctx) ? 3 + int8 : 1 + 2 * int8;
}
}  // namespace

AverageSync::AverageSync(const SyncContext& ctx)
    : Sync(ctx, ctx.full_micro_step_scale(ctx.rank_tokens)),
      opt_(*ctx.opt),
      average_(*ctx.comm, ctx.options->wire, ctx.model->params(), token_weight(ctx),
               diloco(ctx) ? ctx.options->outer_lr : 1.0f, diloco(ctx) ? ctx.options->outer_momentum : 0.0f,
               split_into_fragments(ctx.model->params(), ctx.options->sync_fragments)),
      every_(ctx.options->sync_every), fragments_(ctx.options->sync_fragments),
      param_bytes_(double(ctx.model->params().size()) * sizeof(float)),
      comm_(*ctx.comm), params_(ctx.model->params()) {
  traits_.extra_bytes = param_bytes_ * parameter_buffers(ctx);
}

StepSync AverageSync::after_update(const StepPlan& plan) {
  const int64_t f = fragment_at(plan);
  step_ = plan.step, averaged_ = f;
  if (f >= 0) average_in_place(plan, f);
  if (averages_all_at(plan)) average_the_rest(plan.step, f);
  return step_sync(plan);
}

void AverageSync::step_end(bool stopping) {
  if (stopping && fragments_ > 1) average_the_rest(step_, averaged_);
}

void AverageSync::average_in_place(const StepPlan& plan, int64_t f) {
  timed([&] { average_.sync(size_t(f)); });
  // Right after an average every rank holds the same bits of it (whatever the wire):
  // checked when the step evaluates, as --sync grad checks every evaluation.
  if (plan.eval) {
    const auto [begin, end] = average_.fragment_range(size_t(f));
    check_replicas(comm_, params_, plan.step, begin, end - begin);
  }
}

void AverageSync::average_the_rest(int64_t step, int64_t done) {
  for (int64_t f = 0; f < fragments_; ++f)
    if (f != done) timed([&] { average_.sync(size_t(f)); });
  // The whole model is one now: the run ends with the same bits on every rank.
  check_replicas(comm_, params_, step);
}

std::unique_ptr<Sync> make_average_sync(const SyncContext& ctx) { return std::make_unique<AverageSync>(ctx); }

}  // namespace rt::train
