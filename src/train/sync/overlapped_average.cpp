// --sync avg/diloco --sync-overlap: the average of step S runs in the background while step
// S+1 computes, and is applied at the end of S+1 with that step's local progress added
// (one-step delayed averaging, param_sync.hpp). Steps that evaluate, checkpoint or end
// average in place: those must see the average. The background average starts only at
// step_end, after the step's own report exchange, so that the communicator is free.
#include "average.hpp"

namespace rt::train {
namespace {

class OverlappedAverageSync final : public AverageSync {
 public:
  using AverageSync::AverageSync;

  void step_done(const StepPlan& plan) override {
    timed([&] { average_.finish(); });  // the average started one step ago, if any
    if (!averages_at(plan)) return;
    if (plan.settle()) average_in_place(plan);
    else start_at_end_ = true;
  }
  void step_end(bool stopping) override {
    if (!start_at_end_) return;
    start_at_end_ = false;
    if (stopping) average_.sync();  // the stop checkpoint holds the average
    else average_.start();
  }
  // Plus the snapshot of the parameters being averaged.
  double extra_bytes() const override { return AverageSync::extra_bytes() + param_bytes_; }

 private:
  bool start_at_end_ = false;
};

}  // namespace

std::unique_ptr<Sync> make_overlapped_average_sync(const SyncContext& ctx) {
  return std::make_unique<OverlappedAverageSync>(ctx);
}

}  // namespace rt::train
