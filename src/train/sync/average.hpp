// --sync avg and --sync diloco: every rank takes --sync-every (H) steps on its own, with its
// own optimizer state, then the parameters are averaged (param_sync.hpp has the formulas;
// diloco adds the outer Nesterov step, avg is diloco with outer lr 1 and momentum 0). The
// ranks run free between averages: their step reports travel together at each average,
// evaluation or the end, so that no rank waits for the slowest one every step.
//
// With --sync-fragments F (fragments.hpp) each average is one fragment's, F of them in
// every H steps at offsets i*H/F, so that the bytes of a sync are spread over the steps; the
// last step, and the step at which the job stops, average every fragment, so that the run
// (and a stop checkpoint) ends with one model.
#pragma once
#include "modes.hpp"
#include "ringtrain/train/log.hpp"
#include "sync/param_sync.hpp"

namespace rt::train {

class AverageSync : public Sync {
 public:
  explicit AverageSync(const SyncContext& ctx);

  void update(int64_t it) override { opt_.step(it); }
  StepSync after_update(const StepPlan& plan) override;
  void step_end(bool stopping) override;
  void save_state(io::StateWriter& out) const override { average_.save_state(out, kComponent); }
  void load_state(const io::StateReader& in) override { average_.load_state(in, kComponent); }
  void keep_state() override { average_.keep_state(); }
  void save_kept_state(io::StateWriter& out) const override { average_.save_kept_state(out, kComponent); }
  // Called once the parameters hold the starting point: diloco's anchor starts there
  // unless a checkpoint brought one.
  void begin() override { average_.begin(/*overlapped=*/false); }

 protected:
  static constexpr const char* kComponent = "sync";
  // The fragment that averages at this step, or -1 (with one fragment: every H steps).
  int64_t fragment_at(const StepPlan& plan) const { return fragment_due(plan.step, every_, fragments_); }
  bool averages_at(const StepPlan& plan) const { return fragment_at(plan) >= 0; }
  // With fragments, the last step averages those not due at it, too.
  bool averages_all_at(const StepPlan& plan) const { return plan.last && fragments_ > 1; }
  // Synced right after an average (a point elastic training may go back to: every rank's
  // average state is the one of this step); the reports travel with it, an evaluation or
  // the end.
  StepSync step_sync(const StepPlan& plan, bool applied = false) const {
    return {averages_at(plan) || applied, averages_at(plan) || plan.eval || plan.last};
  }
  // Averages fragment f now (the step waits for it), then checks that fragment's replicas
  // if the step evaluates.
  void average_in_place(const StepPlan& plan, int64_t f);
  // Every fragment not averaged at step `step` (the last, or a stop), now: `done` is the
  // one that was (or -1).
  void average_the_rest(int64_t step, int64_t done);
  // Runs f and counts its time as network time.
  template <class F>
  void timed(F&& f) {
    const double t0 = now_s();
    f();
    comm_s_ += now_s() - t0;
  }

  optim::MuonAdamW& opt_;
  ParamSync average_;
  int64_t every_;
  int64_t fragments_;  // --sync-fragments
  int64_t step_ = 0, averaged_ = -1;  // the step after_update saw, and its fragment (or -1)
  double param_bytes_;
  net::Communicator& comm_;
  model::ParamSet& params_;
};

}  // namespace rt::train
