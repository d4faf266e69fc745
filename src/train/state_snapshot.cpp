// StateSnapshot (run_state.hpp): the state after a step, kept to undo the next update.
#include <algorithm>

#include "ringtrain/errors.hpp"
#include "run_state.hpp"

namespace rt::train {

void StateSnapshot::take(const model::ParamSet& params, const optim::MuonAdamW& opt, const RunState& run) {
  params_.assign(params.data(), params.data() + params.size());
  opt.take_snapshot(opt_);
  run_.loader = run.loader;
  run_.tokens_seen = run.tokens_seen;
  run_.sync_state.clear();
  sync_pending_ = true;
  run_.step = step_ = run.step;
}

void StateSnapshot::restore(model::ParamSet& params, optim::MuonAdamW& opt, RunState& run) const {
  if (step_ < 0) throw RuntimeError("no snapshot to go back to (internal error)");
  if (sync_pending_) throw RuntimeError("the snapshot's sync state was never set (internal error)");
  std::copy(params_.begin(), params_.end(), params.data());
  opt.restore_snapshot(opt_);
  run.loader = run_.loader;
  run.tokens_seen = run_.tokens_seen;
  run.sync_state = run_.sync_state;
  run.step = run_.step;
}

}  // namespace rt::train
