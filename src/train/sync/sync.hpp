// How the ranks of a job keep their models together: one implementation per --sync mode,
// each in its own file under src/train/sync/, behind one interface. The step loop calls
// the hooks in this order, whatever the mode:
//
//   for each micro-step: forward; backward(loss_scale(), on the last one gradient_ready());
//                        micro_step_done()
//   backward_done()          the gradients this rank's optimizer needs are complete
//   optimizer_step(it)       the update (shared out between ranks where the mode can)
//   step_done(plan)          after the update: e.g. average the parameters every H steps
//   [reports exchanged when report_now(plan); evaluation; checkpoint]
//   step_end(stopping)       last: may start background work that overlaps the next step
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

class Sync {
 public:
  virtual ~Sync() = default;

  // Called once the parameters hold the starting point (fresh, or loaded from a checkpoint
  // together with load_state).
  virtual void begin() {}
  // Multiplier of each micro-step's mean loss in backward, so that the gradient the
  // optimizer sees is the mean over the tokens it stands for.
  virtual float loss_scale() const = 0;
  // Called by backward with each range of the gradient arena once it is final, on the
  // last micro-step; empty when the mode does not send gradients.
  virtual model::GPT::GradReady gradient_ready() { return {}; }
  // After each micro-step's backward (the model's per-micro-step state, such as the
  // embedding rows it touched, is still there).
  virtual void micro_step_done() {}
  virtual void backward_done() {}
  virtual void optimizer_step(int64_t it) = 0;
  virtual void step_done(const StepPlan&) {}
  // Whether the ranks exchange their step reports (a collective) after this step.
  virtual bool report_now(const StepPlan&) const { return true; }
  virtual void step_end(bool stopping) {}
  // Whether every rank holds the same parameters after every step (then checked bit for
  // bit at each evaluation).
  virtual bool replicas_identical() const { return false; }
  // Whether the replicas (parameters and this mode's state) are the same on every rank after
  // this step: every step unless the ranks run free between averages. Elastic training goes
  // back to such a step when a rank is lost.
  virtual bool synced_after(const StepPlan&) const { return true; }

  // Applies what the mode has received but not yet applied (an overlapped average waits for
  // step_end to share a pass with the next one): called before every checkpoint, so that
  // one written on an error path between step_done and step_end holds the step's result.
  virtual void apply_arrived() {}
  // The mode's own state in a checkpoint (e.g. diloco's anchor); none by default.
  virtual void save_state(io::StateWriter&) const {}
  virtual void load_state(const io::StateReader&) {}
  // Parameter-sized buffers the mode keeps, for the memory check up front.
  virtual double extra_bytes() const { return 0; }

  // Seconds blocked on the network since the last call (the time compute did not hide).
  double take_comm_seconds() {
    const double s = comm_s_;
    comm_s_ = 0;
    return s;
  }

 protected:
  double comm_s_ = 0;
};

// The Sync of options.sync for ctx (a single-process one when ctx.comm is null).
std::unique_ptr<Sync> make_sync(const SyncContext& ctx);

}  // namespace rt::train
