// One process: the gradient is the mean over its own micro-steps, and the whole optimizer
// runs here.
#include "modes.hpp"

namespace rt::train {
namespace {

class SingleProcessSync final : public Sync {
 public:
  explicit SingleProcessSync(const SyncContext& ctx)
      : Sync(ctx, ctx.full_micro_step_scale(ctx.rank_tokens)), opt_(*ctx.opt) {
    traits_.replicas_identical = true;
  }
  void update(int64_t it) override { opt_.step(it); }

 private:
  optim::MuonAdamW& opt_;
};

}  // namespace

std::unique_ptr<Sync> make_single_process_sync(const SyncContext& ctx) {
  return std::make_unique<SingleProcessSync>(ctx);
}

}  // namespace rt::train
