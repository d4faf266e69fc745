// nanochat's MuonAdamW over a ParamSet: AdamW for embeddings, lm_head and scalars, Muon for
// every matrix under transformer.h. Owns all optimizer state; reads gradients from the
// ParamSet's gradient arena and updates its parameter arena in place.
//
// Gradient accumulation is the caller's job (loss / micro-steps); step() just reads the
// arena. For a sharded distributed optimizer, step_adamw() and step_muon() over a subset of
// muon_matrices() let each rank update only its share before the parameters are gathered.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ringtrain/io/state_file.hpp"
#include "ringtrain/model/params.hpp"
#include "ringtrain/optim/muon.hpp"
#include "ringtrain/optim/schedule.hpp"

namespace rt::optim {

struct MuonAdamWOptions {
  int64_t total_batch_tokens = 524288;  // tokens per optimizer step, all ranks and micro-steps
  int64_t num_iterations = 0;           // N of the schedules; must be positive
  int64_t model_dim = 0;                // C (n_embd); must be positive
  int64_t scaling_params = 0;           // D_model; 0: Muon matrices + lm_head of the ParamSet
  int64_t scaling_params_ref = 0;       // D_ref; 0: d12 at this model's vocabulary (lm_head's rows)
  TrainingHyper hyper;                  // base_train's learning rates, decay and schedule shape
};

// Schedule values at one step, shared by every group.
struct ScheduleValues {
  double lr_multiplier = 1;
  double muon_momentum = 0;
  double muon_weight_decay = 0;
};

// One AdamW group of the spec's table.
struct AdamWGroup {
  std::string name;        // "lm_head", "wte", "value_embeds", "resid_lambdas", ...
  double lr = 0;           // before the schedule multiplier
  double beta1 = 0, beta2 = 0, weight_decay = 0;
  std::vector<int> params; // indices into ParamSet::all()
};

struct MuonMatrix {
  int param = 0;           // index into ParamSet::all()
  int64_t rows = 0, cols = 0;
};

class MuonAdamW {
 public:
  // Throws rt::UsageError for a parameter that fits no group or bad options.
  MuonAdamW(model::ParamSet& params, const MuonAdamWOptions& options);

  // A full update at step `it` (0-based): every AdamW group and every Muon matrix.
  void step(int64_t it);
  // Only the AdamW groups.
  void step_adamw(int64_t it);
  // Only the listed Muon matrices (indices into muon_matrices()), spread over the threads.
  void step_muon(int64_t it, const std::vector<int>& matrix_indices);

  const std::vector<MuonMatrix>& muon_matrices() const { return muon_; }
  const std::vector<AdamWGroup>& adamw_groups() const { return groups_; }
  double muon_lr() const { return muon_lr_; }
  double weight_decay_scaled() const { return wd_scaled_; }
  ScheduleValues schedule(int64_t it) const;

  // Checkpointing: every buffer and step counter, by parameter name, into the run's state
  // file (optim_state.cpp says which entries).
  void save_state(io::StateWriter& out) const;
  // Throws rt::UsageError if the state is incomplete or belongs to a model of another shape;
  // the optimizer is then unchanged.
  void load_state(const io::StateReader& in);
  // The same state alone, as the bytes of a state file.
  std::vector<char> save_state() const;
  void load_state(std::span<const char> bytes);

  // For elastic training (optim_state.cpp). A copy of every buffer and counter, taken
  // before an update so that a step cut short by a lost rank can be undone; its buffers are
  // reused from one step to the next.
  struct Snapshot;
  void take_snapshot(Snapshot& out) const;
  void restore_snapshot(const Snapshot& in);
  // Every state buffer, to send between ranks: muon is the index into muon_matrices() of
  // the buffer's matrix, or -1 for AdamW's.
  void for_each_buffer(const std::function<void(int muon, float* data, size_t count)>& f);
  // AdamW's step counters, one per AdamW tensor in ParamSet order.
  std::vector<int64_t> adamw_steps() const;
  // Throws rt::UsageError on a wrong count or a negative step.
  void set_adamw_steps(const std::vector<int64_t>& steps);

 private:
  struct AdamWState {
    std::vector<float> exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  struct MuonState {
    std::vector<float> momentum, variance;
  };

  model::ParamSet& params_;
  MuonAdamWOptions options_;
  double wd_scaled_ = 0;
  double muon_lr_ = 0;
  std::vector<AdamWGroup> groups_;
  std::vector<int> group_of_param_;       // AdamW group per ParamSet index, -1 for Muon
  std::vector<AdamWState> adamw_state_;   // per ParamSet index (empty for Muon matrices)
  std::vector<MuonMatrix> muon_;
  std::vector<MuonState> muon_state_;     // per muon_ entry
  std::vector<MuonWorkspace> workspaces_;  // one per OpenMP thread

 public:
  struct Snapshot {
    std::vector<AdamWState> adamw;
    std::vector<MuonState> muon;
  };
};

}  // namespace rt::optim
