// The training run's state and steps, shared by the files that implement it: trainer.cpp
// (set up, resume, the step loop, evaluation), trainer_checkpoints.cpp (what it reads from
// and writes to its checkpoints) and trainer_ring.cpp (its side of a ring change: undo a
// step, share the state, restart the sync). Who is in the ring is elastic/elastic_ring.hpp.
// The entry point is run_training (ringtrain/train/trainer.hpp).
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "elastic/elastic_ring.hpp"
#include "metrics.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/model/gpt.hpp"
#include "ringtrain/optim/muon_adamw.hpp"
#include "ringtrain/train/log.hpp"
#include "ringtrain/train/options.hpp"
#include "row_split.hpp"
#include "run_state.hpp"
#include "step_reports.hpp"
#include "sync/sync.hpp"

namespace rt::train {

class Trainer final : private RingChange {
 public:
  explicit Trainer(const TrainOptions& o) : o_(o) {}
  // Stops the ring's threads before the members they read are destroyed.
  ~Trainer() override;
  int run();

 private:
  // --- trainer.cpp ---
  void build();
  void resume_or_init();
  // The micro-steps of this rank in every step, for the ring's device batches.
  void split_rows();
  // Runs steps until last_step or a stop request; returns true if stopped on request.
  bool train(int64_t last_step);
  bool train_step(int64_t last_step);
  void evaluate_and_log();
  std::unique_ptr<Sync> new_sync();
  // status, stop and `metrics after N`; nullopt for the others (membership requests).
  std::optional<std::string> answer(const std::string& request);
  net::Communicator* comm() const { return ring_ ? ring_->comm() : nullptr; }

  // --- trainer_checkpoints.cpp ---
  // --resume: the checkpoint every rank agrees on, into the model, optimizer, loader and sync.
  void resume_from_checkpoint();
  // --resume of a job whose --steps this rank's checkpoints reached already: says so (exit 0).
  bool job_already_done() const;
  // A rank asked said the job reached its last step without this one (net::JobFinished):
  // logged; exits 0.
  int finished_without_this_rank(const net::JobFinished& e);
  // The resumed checkpoints' lineage, the same on every rank (else a UsageError), goes on.
  void agree_lineage(uint64_t lineage);
  void save_checkpoint(const char* why);
  // The periodic save: a failed write (a full disk, no file descriptor left) costs this
  // checkpoint, not the run. It is logged, the previous checkpoint stays, the next periodic
  // save tries again; the final save still fails loudly.
  void save_periodic_checkpoint();
  // On the way out after a failure (a lost peer, a rendezvous that timed out, a socket
  // error, a NaN): saves the state after run_.step steps if it is whole, else the elastic
  // snapshot before the update that was cut short; never a state with a NaN or an Inf.
  void save_last_good_state();
  bool optimizer_finite();  // the optimizer state holds no NaN and no Inf
  bool state_finite();      // nor do the parameters
  void poison_for_test();
  void break_ring_for_test();

  // --- trainer_ring.cpp: the first ring, RingChange, and the state a change needs ---
  void connect();
  void leave_ring() override;
  int64_t newest_step() const override;
  int64_t oldest_step() const override;
  int64_t step() const override { return run_.step; }
  // Back to the state after `step` steps (the live one, or the snapshot before an update).
  void roll_back_to(int64_t step) override;
  void drop_state() override;
  int64_t tokens_per_step() const override { return global_tokens_; }
  void share_state(const net::Membership& ring, const RingBatch& batch) override;
  void start_ring(const std::vector<int>& before) override;
  // A process that joined a running job: the job's state, from its live ranks.
  void take_joined_state();
  void take_snapshot();
  void settle_snapshot();
  // After a ring change: reports, progress and metrics of the new ring.
  void start_ring_duties();
  std::string sync_state_bytes() const;
  // Loads a sync state into sync_, unless the mode it came from had none (e.g. a ring of one).
  void load_sync_state(const std::string& bytes);
  void write_membership_events(const std::vector<int>& before, const std::vector<int>& after);

  TrainOptions o_;
  DataSet data_;
  std::string tokenizer_text_;  // read once at start: a save needs no file but its own
  model::ModelConfig cfg_;
  std::unique_ptr<model::GPT> model_;
  std::unique_ptr<optim::MuonAdamW> opt_;
  std::unique_ptr<data::PackingLoader> loader_;
  std::unique_ptr<Sync> sync_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<StepReports> reports_;
  MetricsWriter metrics_;
  JobStatus status_;
  std::atomic<bool> stop_requested_{false};
  // The ring and its communicator (null in one process); after status_ and metrics_, which
  // its service thread reads, and destroyed first (~Trainer).
  std::unique_ptr<ElasticRing> ring_;
  bool joining_ = false;  // this process joins a running job

  std::vector<int64_t> rank_batch_;  // device batch of every rank of the ring, in ring order
  int64_t accum_ = 1;                // micro-steps per step of a full ring
  int64_t global_tokens_ = 0;        // tokens per optimizer step, all ranks
  std::vector<MicroStep> micro_;     // this rank's rows of each step
  std::vector<int32_t> step_idx_, step_tgt_;  // the rows of the whole step, every rank's
  ReportSetup report_setup_;

  RunState run_;  // the counters and the loader position after run_.step steps
  // The state taken before the update that follows a synced step (every step under grad,
  // after each average under avg/diloco; elastic only).
  StateSnapshot snapshot_;
  bool replicas_identical_ = true;  // after share_state: every member holds the same parameters
  bool last_synced_ = true;  // the state after run_.step steps is synced and not changed since
  // Parameters, optimizer, loader and counters are exactly the state after run_.step steps:
  // false while an update or an average is applied, and while a joining rank receives the
  // ring's state. What a failure may save (save_last_good_state).
  bool state_whole_ = true;
  int64_t exchanged_step_ = 0;  // the last step whose reports every rank exchanged
  double run_start_s_ = 0;
  int64_t newest_checkpoint_step_ = -1;  // resumed from or saved since; named by the log of a failed save
};

}  // namespace rt::train
