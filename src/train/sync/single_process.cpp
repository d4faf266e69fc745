// One process: the gradient is the mean over its own micro-steps, and the whole optimizer
// runs here.
#include "modes.hpp"

namespace rt::train {
namespace {

class SingleProcessSync final : public Sync {
 public:
  explicit SingleProcessSync(const SyncContext& ctx)
      : opt_(*ctx.opt), scale_(ctx.full_micro_step_scale(ctx.rank_tokens)) {}
  float loss_scale() const override { return scale_; }
  void optimizer_step(int64_t it) override { opt_.step(it); }
  bool replicas_identical() const override { return true; }

 private:
  optim::MuonAdamW& opt_;
  float scale_;
};

}  // namespace

std::unique_ptr<Sync> make_single_process_sync(const SyncContext& ctx) {
  return std::make_unique<SingleProcessSync>(ctx);
}

}  // namespace rt::train
