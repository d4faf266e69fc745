// --sync avg/diloco --sync-overlap: the average of step S runs in the background while step
// S+1 computes (and, with --overlap-steps K, the K-1 steps after it), and is applied at the
// end of step S+K with the local progress of those steps added (delayed averaging,
// param_sync.hpp): a slow link gets K steps of compute to hide behind instead of one. Steps
// that evaluate, checkpoint or end average in place: those must see the average, so a
// pending one is applied first. The background average starts only at step_end, after the
// step's own report exchange, and no collective runs until it is applied (the ranks run
// free between averages), so that the communicator is free. With --sync-fragments, each
// fragment's average is overlapped alike, one in flight at a time: it is applied at the
// latest when the next fragment's starts.
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
    const int64_t f = fragment_at(plan);
    step_ = plan.step, averaged_ = f;
    // The average started `delay_` steps ago, if any (sooner when this step must settle or
    // the next average, of any fragment, is due).
    const bool due = average_.in_flight() && (plan.step - started_at_ >= delay_ || plan.settle() || f >= 0);
    const bool next = f >= 0 && !plan.settle();
    // When the next average starts at the end of this step, applying this one waits until
    // then, so that one pass over the parameters does both (finish_and_start); the network
    // is done now, as the step's report exchange needs the communicator.
    if (due && next) timed([&] { average_.finish_network(); });
    else if (due) timed([&] { average_.finish(); });
    if (f >= 0) {
      if (plan.settle()) average_in_place(plan, f);
      else start_at_end_ = true, started_at_ = plan.step, starting_ = f;
    }
    if (averages_all_at(plan)) average_the_rest(plan.step, f);
    // A step that applied an average is one elastic training may go back to (with nothing
    // in flight, its parameters and its average state belong together). With fragments it
    // is not: a fragment starts every H/F steps anyway, and each point costs a snapshot (a
    // copy of the model and the sync state, ~0.7 s of the rank's one core at d8) that with
    // one step of overlap would be paid at every step. Going back past an applied fragment to
    // the step it started at is consistent: the sync state is kept at the snapshot, and the
    // average in flight there is dropped alike on every survivor.
    return step_sync(plan, due && fragments_ == 1);
  }

  void step_end(bool stopping) override {
    if (stopping) {  // the stop checkpoint holds the average (with fragments, all of them)
      average_.finish();
      if (start_at_end_) average_.sync(size_t(starting_));
      start_at_end_ = false;
      if (fragments_ > 1) average_the_rest(step_, averaged_);
      return;
    }
    if (!start_at_end_) return;
    start_at_end_ = false;
    average_.finish_and_start(size_t(starting_));
  }
  void apply_arrived() override { average_.apply_arrived(); }
  void drop_in_flight() override { average_.drop_in_flight(); }
  void begin() override { average_.begin(/*overlapped=*/true); }

 private:
  const int64_t delay_;     // --overlap-steps
  int64_t started_at_ = 0;  // the step whose average is in flight
  int64_t starting_ = 0;    // the fragment whose average starts at step_end
  bool start_at_end_ = false;
};

}  // namespace

std::unique_ptr<Sync> make_overlapped_average_sync(const SyncContext& ctx) {
  return std::make_unique<OverlappedAverageSync>(ctx);
}

}  // namespace rt::train
