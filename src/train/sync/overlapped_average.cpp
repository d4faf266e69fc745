// --sync avg/diloco --sync-overlap: the average of step S runs in the background while step
// S+1 computes (and, with --overlap-steps K, the K-1 steps after it), and is applied at the
// end of step S+K with the local progress of those steps added (delayed averaging,
// param_sync.hpp): a slow link gets K steps of compute to hide behind instead of one. Steps
// that evaluate, checkpoint or end average in place: those must see the average, so a
// pending one is applied first. The background average starts only at step_end, after the
// step's own report exchange, and no collective runs until it is applied (the ranks run
// free between averages), so that the communicator is free.
#include "average.hpp"

namespace rt::train {
namespace {

class OverlappedAverageSync final : public AverageSync {
 public:
  explicit OverlappedAverageSync(const SyncContext& ctx) : AverageSync(ctx), delay_(ctx.options->overlap_steps) {
    traits_.extra_bytes += param_bytes_;  // the snapshot of the parameters being averaged
    if (net::block_coded(ctx.options->wire)) traits_.extra_bytes += param_bytes_;  // the error feedback in flight
  }

  StepSync after_update(const StepPlan& plan) override {
    // The average started `delay_` steps ago, if any (sooner when this step must settle or
    // the next average is due).
    const bool due = average_.in_flight() && (plan.step - started_at_ >= delay_ || plan.settle() || averages_at(plan));
    const bool next = averages_at(plan) && !plan.settle();
    // When the next average starts at the end of this step, applying this one waits until
    // then, so that one pass over the parameters does both (finish_and_start); the network
    // is done now, as the step's report exchange needs the communicator.
    if (due && next) timed([&] { average_.finish_network(); });
    else if (due) timed([&] { average_.finish(); });
    if (averages_at(plan)) {
      if (plan.settle()) average_in_place(plan);
      else start_at_end_ = true, started_at_ = plan.step;
    }
    return step_sync(plan);
  }

  void step_end(bool stopping) override {
    if (!start_at_end_) return;
    start_at_end_ = false;
    if (stopping) {  // the stop checkpoint holds the average
      average_.finish();
      average_.sync();
    } else {
      average_.finish_and_start();
    }
  }
  void apply_arrived() override { average_.apply_arrived(); }
  void drop_in_flight() override { average_.drop_in_flight(); }
  void begin() override { average_.begin(/*overlapped=*/true); }

 private:
  const int64_t delay_;     // --overlap-steps
  int64_t started_at_ = 0;  // the step whose average is in flight
  bool start_at_end_ = false;
};

}  // namespace

std::unique_ptr<Sync> make_overlapped_average_sync(const SyncContext& ctx) {
  return std::make_unique<OverlappedAverageSync>(ctx);
}

}  // namespace rt::train
