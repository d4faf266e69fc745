// The training run's state and steps, shared by the files that implement it: trainer.cpp
// (set up, resume, the step loop, evaluation, checkpoints) and elastic.cpp (a lost or
// restarted rank: re-forming the ring, undoing a step, handing the state over).
// Internal to the trainer; the entry point is run_training (trainer.hpp).
#pragma once
#include <atomic>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ringtrain/data/loader.hpp"
#include "ringtrain/model/gpt.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/rendezvous.hpp"
#include "ringtrain/optim/muon_adamw.hpp"
#include "dataset.hpp"
#include "ringtrain/train/log.hpp"
#include "metrics.hpp"
#include "ringtrain/train/options.hpp"
#include "row_split.hpp"
#include "step_reports.hpp"
#include "sync/sync.hpp"

namespace rt::train {


// The largest --device-batch another rank may announce (a sanity bound on a number from
// the network; far above anything that fits in memory).
constexpr int64_t kMaxDeviceBatch = int64_t(1) << 24;
// How long a process that finds no job answering waits before it starts one: peers that
// are not up yet do not answer at all.
constexpr double kJobProbeS = 1.5;

// What the members of a new ring tell each other once it is up.
struct RingRecord {
  int64_t device_batch = 0;
  int64_t global_tokens = 0;  // tokens per step of the job; 0 from a member without state
};

class Trainer {
 public:
  explicit Trainer(const TrainOptions& o) : o_(o) {}
  // Stops the ring's threads before the members they read are destroyed (trainer.cpp).
  ~Trainer();
  int run();

 private:
  void connect();
  void build();
  void resume_or_init();
  // The micro-steps of this rank in every step, for the ring's device batches.
  void split_rows();
  // Runs steps until last_step or a stop request; returns true if stopped on request.
  bool train(int64_t last_step);
  bool train_step(int64_t last_step);
  void evaluate_and_log();
  void save_checkpoint(const char* why);
  // The periodic save: a failed write (a full disk, no file descriptor left) costs this
  // checkpoint, not the run. It is logged, the previous checkpoint stays, the next periodic
  // save tries again; the final save still fails loudly.
  void save_periodic_checkpoint();
  // On the way out after a failure (a lost peer, a rendezvous that timed out, a socket
  // error, a NaN): saves the state after step_ steps if it is whole, else the elastic
  // snapshot before the update that was cut short; never a state with a NaN or an Inf.
  void save_last_good_state();
  bool optimizer_finite();  // the optimizer state holds no NaN and no Inf
  bool state_finite();      // nor do the parameters
  void poison_for_test();
  net::ServiceHandler service_handler();
  // The options of the communicator of the ring of `epoch` over `members`.
  net::CommOptions ring_options(int64_t epoch, const std::vector<int>& members);
  // `silent_for_s`: seconds each original rank had been silent when the ring broke.
  net::RendezvousOptions rendezvous_options(double timeout_s, std::vector<double> silent_for_s = {});
  // Elastic: meets the live ranks, forms the next ring with them and brings every member
  // to the same state. `lost` names what broke the old ring (empty: a rank joins).
  void reform(const std::string& lost);
  // Makes the ring's communicator and exchanges the ring records; false if it did not form.
  bool open_ring(const net::Membership& ring);
  // Back to the state after `step` steps (the live one, or the snapshot before an update).
  void roll_back_to(int64_t step);
  void take_snapshot();
  // After a ring change: the sync mode, reports, progress and metrics of the new ring.
  void start_ring_duties();
  std::unique_ptr<Sync> new_sync();
  std::string sync_state_bytes() const;
  // Loads a sync state into sync_, unless the mode it came from had none (e.g. a ring of one).
  void load_sync_state(const std::string& bytes);
  void write_membership_events(const std::vector<int>& before, const std::vector<int>& after);
  // For `ringtrain status`: every original rank as live or lost in the current ring.
  void show_membership();
  // Peer lost below --min-ranks: the checkpoint of the last completed step, then exit 1.
  [[noreturn]] void give_up(const std::string& why);

  TrainOptions o_;
  DataSet data_;
  std::string tokenizer_text_;  // read once at start: a save needs no file but its own
  model::ModelConfig cfg_;
  std::unique_ptr<net::Communicator> comm_;
  std::unique_ptr<model::GPT> model_;
  std::unique_ptr<optim::MuonAdamW> opt_;
  std::unique_ptr<data::PackingLoader> loader_;
  std::unique_ptr<Sync> sync_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<StepReports> reports_;
  MetricsWriter metrics_;
  JobStatus status_;
  std::atomic<bool> stop_requested_{false};

  std::vector<int64_t> rank_batch_;  // device batch of every rank of the ring, in ring order
  int64_t accum_ = 1;                // micro-steps per step of a full ring
  int64_t global_tokens_ = 0;        // tokens per optimizer step, all ranks
  std::vector<MicroStep> micro_;     // this rank's rows of each step
  std::vector<int32_t> step_idx_, step_tgt_;  // the rows of the whole step, every rank's
  ReportSetup report_setup_;

  // The ring: original ranks of its members, this rank's index in it, its epoch.
  std::vector<int> members_;  // written under members_mu_ (the service handler reads it)
  std::mutex members_mu_;
  int index_ = 0;
  std::atomic<int64_t> epoch_{0};
  // The ring whose state this rank holds (-1: none yet, it joins) and its members: what it
  // tells a rendezvous. Set once the state is complete, not when a ring merely forms.
  int64_t state_epoch_ = 0;
  std::vector<int> state_members_;
  bool giving_up_ = false;  // fewer than --min-ranks: the PeerLost ends the run
  std::atomic<bool> join_requested_{false};  // a restarted rank asked to join
  std::mutex join_mu_;                       // guards join_admitted_at_ (service threads)
  std::map<int, double> join_admitted_at_;   // when each rank's last join was let in (now_s)
  std::atomic<bool> ring_up_{false};         // a ring runs (its handshake is done)
  bool joining_ = false;                     // this process joins a running job
  net::Membership joined_ring_;              // the ring it joined
  // The state after snap_step_ steps, taken before the update that follows a synced step
  // (every step under grad, after each average under avg/diloco; elastic only).
  int64_t snap_step_ = -1;
  std::vector<float> snap_params_;
  optim::MuonAdamW::Snapshot snap_opt_;
  data::LoaderState snap_loader_;
  double snap_tokens_ = 0;
  std::string snap_sync_;     // the sync mode's state, as state-file bytes
  bool last_synced_ = true;   // the state after step_ steps is synced and not changed since
  // Parameters, optimizer, loader and counters are exactly the state after step_ steps: false
  // while an update or an average is applied, and while a joining rank receives the ring's
  // state. What a failure may save (save_last_good_state).
  bool state_whole_ = true;
  int64_t exchanged_step_ = 0;  // the last step whose reports every rank exchanged
  std::string sync_state_;    // while a ring re-forms: the sync state that goes on
  int64_t step_ = 0;                 // steps done
  double tokens_seen_ = 0;
  double run_start_s_ = 0;
  double last_val_bpb_ = -1;
  int64_t newest_checkpoint_step_ = -1;  // resumed from or saved since; named by the log of a failed save
  int64_t last_eval_step_ = -1;
  data::LoaderState step_start_loader_;  // loader position after step_ steps
};

}  // namespace rt::train
