// The run's own state besides the weights and the optimizer: the counters and the loader's
// position that a checkpoint, a state transfer and an undo carry with the parameters. One
// value type, so that every place that moves it moves all of it.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/data/loader.hpp"
#include "ringtrain/model/params.hpp"
#include "ringtrain/optim/muon_adamw.hpp"

namespace rt::train {

struct RunState {
  int64_t step = 0;  // steps done
  double tokens_seen = 0;
  double val_bpb = -1;          // of the last evaluation; -1: none yet
  int64_t last_eval_step = -1;  // the step it was taken at
  data::LoaderState loader;     // the loader's position after `step` steps
  // The sync mode's state (e.g. diloco's anchor) as state-file bytes, while it travels: in
  // a state transfer, an undo or a ring that re-forms. Empty otherwise.
  std::string sync_state;

  // For a state transfer to another rank: the counters and the loader as a state file,
  // AdamW's step counts (they travel with the counters), then `sync_state`.
  std::string encode(const optim::MuonAdamW& opt) const { return to_bytes(opt.adamw_steps()); }
  // The inverse, checked as bytes from the network: counters within the job's `max_step`,
  // every number finite, every size within what arrived. `what` names the sender in errors.
  static RunState decode(const std::string& bytes, const std::string& what, int64_t max_step, optim::MuonAdamW& opt);

  // The two halves that touch no optimizer (the parser alone is fuzzed: fuzz_state_transfer).
  std::string to_bytes(const std::vector<int64_t>& adamw_steps) const;
  struct Received;
  static Received from_bytes(const std::string& bytes, const std::string& what, int64_t max_step);
};

struct RunState::Received {
  RunState run;
  std::vector<int64_t> adamw_steps;  // checked against the model by set_adamw_steps
};

inline RunState RunState::decode(const std::string& bytes, const std::string& what, int64_t max_step,
                                 optim::MuonAdamW& opt) {
  Received in = from_bytes(bytes, what, max_step);
  opt.set_adamw_steps(in.adamw_steps);
  return std::move(in.run);
}

// The state after some step, kept to undo the update that follows it when a lost rank cuts
// it short (elastic training): the parameters, the optimizer, and the run's step, tokens,
// loader position and sync state. The last evaluation's figures are not part of it.
class StateSnapshot {
 public:
  // The sync mode's state is not copied here (serialising GBs at every step the ring may go
  // back to cost seconds each): the Sync keeps its own copy (Sync::keep_state), and its bytes
  // are set with set_sync_state before the snapshot is restored.
  void take(const model::ParamSet& params, const optim::MuonAdamW& opt, const RunState& run);
  void set_sync_state(std::string bytes) { run_.sync_state = std::move(bytes), sync_pending_ = false; }
  bool sync_state_pending() const { return step_ >= 0 && sync_pending_; }
  // Back to the state of step(); the caller's run keeps its evaluation figures.
  void restore(model::ParamSet& params, optim::MuonAdamW& opt, RunState& run) const;
  int64_t step() const { return step_; }  // -1: none held
  void clear() { step_ = -1; }

 private:
  int64_t step_ = -1;
  bool sync_pending_ = false;
  std::vector<float> params_;
  optim::MuonAdamW::Snapshot opt_;
  RunState run_;
};

}  // namespace rt::train
