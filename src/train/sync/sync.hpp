// How the ranks of a job keep their models together: one implementation per --sync mode,
// each in its own file beside this one, behind one interface of four phases and a state.
// The step loop calls, whatever the mode:
//
//   for each micro-step: forward; backward(rows, last)    during backward: the mode runs
//                                                          it, and may send each range of
//                                                          gradients as soon as it is final
//   after_backward()         the gradients this rank's optimizer needs are complete
//   update(it)               the optimizer step (shared out between ranks where the mode can)
//   after_update(plan)       the step's end, first half: e.g. average the parameters every
//                            H steps; says whether the ranks are in step and exchange reports
//   [reports; evaluation; checkpoint]
//   step_end(stopping)       the step's end, last: may start background work that overlaps
//                            the next step
//
// Its state: begin() once the parameters hold the starting point, apply_arrived() before a
// checkpoint, save_state/load_state for checkpoints and for a ring that re-forms.
//
// A Sync is made for one membership of the job (make_sync): its communicator, ranks and
// batch split are fixed for its life. To change the membership, save its state, make a new
// one for the new communicator and load the state into it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ringtrain/io/state_file.hpp"
#include "ringtrain/model/gpt.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/optim/muon_adamw.hpp"
#include "ringtrain/train/options.hpp"

namespace rt::train {

// Everything a Sync works on; the references must outlive it.
struct SyncContext {
  net::Communicator* comm = nullptr;  // null: one process
  model::GPT* model = nullptr;
  optim::MuonAdamW* opt = nullptr;
  const TrainOptions* options = nullptr;
  std::vector<int64_t> rank_batch;  // --device-batch of every rank
  int64_t accum = 1;                // micro-steps per optimizer step
  int64_t global_tokens = 0;        // tokens per optimizer step over all ranks
  // Tokens per optimizer step of this rank (accum full micro-steps, unless an elastic ring
  // of fewer ranks gives it a last micro-step of fewer rows).
  int64_t rank_tokens = 0;
  // Multiplier of the mean loss of a full micro-step (--device-batch rows) for a gradient
  // that is the mean over `tokens` tokens.
  float full_micro_step_scale(int64_t tokens) const;
};

// Where a step stands once its update is done.
struct StepPlan {
  int64_t step = 0;   // steps done, this one included
  bool eval = false;  // this step evaluates
  bool save = false;  // this step checkpoints
  bool last = false;  // the run ends after this step
  // Evaluations, checkpoints and the end must see synchronised parameters.
  bool settle() const { return eval || save || last; }
};

// What a mode is, fixed for its life.
struct SyncTraits {
  // Every rank holds the same parameters after every step (then checked bit for bit at
  // each evaluation).
  bool replicas_identical = false;
  // Parameter-sized buffers the mode keeps, in bytes, for the memory check up front.
  double extra_bytes = 0;
};

// What a step is, once its update is done, as the mode sees it.
struct StepSync {
  // The replicas (parameters and this mode's state) are the same on every rank: every step
  // unless the ranks run free between averages. Elastic training goes back to such a step
  // when a rank is lost.
  bool synced = true;
  // The ranks exchange their step reports (a collective) after this step.
  bool report = true;
};

class Sync {
 public:
  virtual ~Sync() = default;

  // --- the phases of a step ---
  // During backward: runs the backward of a micro-step of `rows` rows (of --device-batch),
  // its mean loss scaled so that the gradient the optimizer sees is the mean over the tokens
  // it stands for. `last`: the step's last micro-step, after which the gradients are final.
  virtual void backward(int64_t rows, bool last) { model_.backward(loss_scale(rows), {}); }
  virtual void after_backward() {}
  virtual void update(int64_t it) = 0;
  virtual StepSync after_update(const StepPlan&) { return {}; }
  virtual void step_end(bool /*stopping*/) {}

  // --- its state ---
  // Called once the parameters hold the starting point (fresh, or loaded from a checkpoint
  // together with load_state).
  virtual void begin() {}
  // Applies what the mode has received but not yet applied (an overlapped average waits for
  // step_end to share a pass with the next one): called before every checkpoint, so that
  // one written on an error path between after_update and step_end holds the step's result.
  virtual void apply_arrived() {}
  // The ring broke (elastic training): what is in flight (an overlapped average) is dropped,
  // never applied, alike on every survivor; the ring goes back to the step it started at.
  virtual void drop_in_flight() {}
  // The mode's own state in a checkpoint (e.g. diloco's anchor); none by default.
  virtual void save_state(io::StateWriter&) const {}
  virtual void load_state(const io::StateReader&) {}
  // A copy of the state as it is now, for elastic training to go back to (taken at every
  // step it may go back to, so cheaply: no serialising), and that copy as save_state writes.
  virtual void keep_state() {}
  virtual void save_kept_state(io::StateWriter&) const {}

  const SyncTraits& traits() const { return traits_; }
  // Seconds blocked on the network since the last call (the time compute did not hide).
  double take_comm_seconds() {
    const double s = comm_s_;
    comm_s_ = 0;
    return s;
  }

 protected:
  // `full_scale`: the multiplier of the mean loss of a full micro-step (--device-batch rows).
  Sync(const SyncContext& ctx, float full_scale)
      : model_(*ctx.model), full_rows_(ctx.options->device_batch), full_scale_(full_scale) {}
  // A micro-step of fewer rows weighs less.
  float loss_scale(int64_t rows) const {
    return rows == full_rows_ ? full_scale_ : float(double(full_scale_) * double(rows) / double(full_rows_));
  }

  model::GPT& model_;
  SyncTraits traits_;
  double comm_s_ = 0;

 private:
  int64_t full_rows_;
  float full_scale_;
};

// The Sync of options.sync for ctx (a single-process one when ctx.comm is null).
std::unique_ptr<Sync> make_sync(const SyncContext& ctx);

}  // namespace rt::train
