// The trainer's side of the ring (who is in it and when it re-forms is ElasticRing's): the
// first ring, or joining a running job; and in a ring change (elastic training), what it
// holds on to when the old ring goes, going back to the last step every member completed
// (the snapshot before an update that was cut short), sharing the state with the new ring,
// and the new ring's sync mode, reports and metrics.
#include <algorithm>

#include "ring_state.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/io/state_file.hpp"
#include "sync/replica_check.hpp"
#include "trainer_class.hpp"

namespace rt::train {

void Trainer::connect() {
  ring_ = std::make_unique<ElasticRing>(
      o_, "data.train_docs=" + std::to_string(data_.train->num_docs()) + "\ndata.vocab=" + std::to_string(data_.vocab) + "\n",
      [this](const std::string& req) { return answer(req); }, status_);
  auto join = [&] {
    joining_ = true;
    logf("the job is running on these ports: joining it");
    if (o_.device_batch_auto) {
      // Timing needs every rank at once (build()); a rank joining a running job takes its even
      // share of the rows instead.
      o_.device_batch = std::max<int64_t>(1, o_.total_batch / o_.seq_len / o_.world());
      logf("--device-batch auto: joining a running job, this rank trains %lld rows per micro-step (its even share)",
           (long long)o_.device_batch);
    }
  };
  if (ring_->job_is_running()) join();
  RingBatch batch;
  try {
    batch = ring_->connect(joining_);
  } catch (const net::Aborted&) {
    throw;  // stopped (SIGTERM, SIGINT) while it waited: it stops
  } catch (const std::runtime_error& e) {
    // Restarted while the others re-formed the ring without it: its fresh start found no ring
    // running, and the ring refused it (it still held this rank's dead predecessor, or it
    // formed meanwhile without this rank). It bound this rank's port, so no other live
    // process holds the rank: it joins.
    if (joining_ || !o_.elastic() || !ring_->job_is_running()) throw;
    // The refusal's advice (e.g. "start every rank with the same --peers list") is for a
    // misconfigured start, not this race: only its first clause, the refusal itself, is logged.
    const std::string what = e.what();
    const std::string refusal = what.substr(0, what.find(';'));
    logf("a ring formed without this rank while it started afresh; it joins that ring (the start was refused: %s)",
         refusal.c_str());
    join();
    batch = ring_->connect(true);
  }
  rank_batch_ = batch.rank_batch;
  if (joining_) global_tokens_ = batch.global_tokens;
}

void Trainer::take_snapshot() {
  sync_->keep_state();
  snapshot_.take(model_->params(), *opt_, run_);
}

// The snapshot's sync state, from the copy the Sync kept when it was taken: written only
// when the ring goes back (while the Sync still exists).
void Trainer::settle_snapshot() {
  if (!snapshot_.sync_state_pending() || !sync_) return;
  io::StateWriter w;
  sync_->save_kept_state(w);
  snapshot_.set_sync_state(w.bytes());
}

std::string Trainer::sync_state_bytes() const {
  io::StateWriter w;
  sync_->save_state(w);
  return w.bytes();
}

void Trainer::load_sync_state(const std::string& bytes) {
  static const std::string none = io::StateWriter().bytes();
  if (bytes.empty() || bytes == none) return;  // begin() starts it from the parameters
  sync_->load_state(io::StateReader::parse(bytes, "the ring's sync state"));
}

void Trainer::leave_ring() {
  settle_snapshot();
  if (sync_) sync_->drop_in_flight(), run_.sync_state = sync_state_bytes();
  sync_.reset();
  reports_.reset();
  progress_->finish();
}

// Under grad one step may be undone; under avg/diloco back to the last average. A step
// whose reports were not exchanged is undone too: its metrics record was never written.
int64_t Trainer::newest_step() const {
  const int64_t newest = last_synced_ && exchanged_step_ == run_.step ? run_.step : snapshot_.step();
  return newest < 0 ? run_.step : newest;  // nothing happened since the ring formed
}

int64_t Trainer::oldest_step() const { return snapshot_.step() >= 0 ? snapshot_.step() : run_.step; }

void Trainer::roll_back_to(int64_t step) {
  if (snapshot_.step() == step) {  // the update after it may be half done: undo it
    settle_snapshot();
    snapshot_.restore(model_->params(), *opt_, run_);
    last_synced_ = true;
    state_whole_ = true;
  } else if (run_.step != step || !last_synced_) {
    throw RuntimeError("cannot go back to step " + std::to_string(step) + " from step " + std::to_string(run_.step) +
                       " (internal error)");
  }
  loader_->restore(run_.loader);
  if (run_.last_eval_step > run_.step) run_.last_eval_step = -1;
}

void Trainer::drop_state() {
  state_whole_ = false;  // nothing of it is worth a checkpoint now
  snapshot_.clear();
}

void Trainer::share_state(const net::Membership& ring, const RingBatch& batch) {
  rank_batch_ = batch.rank_batch;
  global_tokens_ = batch.global_tokens;
  split_rows();
  step_idx_.resize(size_t(global_tokens_));
  step_tgt_.resize(size_t(global_tokens_));
  // The new ring's sync mode, with the state that goes on (diloco's anchor) before it is shared.
  sync_ = new_sync();
  load_sync_state(run_.sync_state);
  run_.sync_state = sync_state_bytes();
  share_ring_state(*comm(), ring, o_.sync == SyncMode::Grad, o_.steps, model_->params(), *opt_, run_);
  // Survivors that all held the state keep their own parameters; under --sync-overlap, and
  // with --sync-fragments, those differ between averages (each holds its local progress),
  // so the replica check is for the parameters a member sent.
  replicas_identical_ = !(o_.sync_overlap || o_.sync_fragments > 1) || ring.stateful.size() != ring.members.size();
  loader_->restore(run_.loader);
  load_sync_state(run_.sync_state);
  sync_->begin();
  run_.sync_state.clear();
  state_whole_ = true;
  snapshot_.clear();
  last_synced_ = true;
  exchanged_step_ = run_.step;
}

void Trainer::start_ring(const std::vector<int>& before) {
  if (replicas_identical_) check_replicas(*comm(), model_->params(), run_.step);
  start_ring_duties();
  write_membership_events(before, ring_->members());
}

void Trainer::take_joined_state() {
  // The running job's state, from its live ranks (its checkpoints here are older). When no
  // member has state (every rank started afresh through the rendezvous) it keeps its own.
  const net::Membership& ring = ring_->joined_ring();
  run_.loader = loader_->state();
  share_ring_state(*comm(), ring, o_.sync == SyncMode::Grad, o_.steps, model_->params(), *opt_, run_);
  loader_->restore(run_.loader);
  load_sync_state(run_.sync_state);
  run_.sync_state.clear();
  ring_->hold_state_of(ring);
  check_replicas(*comm(), model_->params(), run_.step);
  logf("joined the running job at step %lld (ring of %zu ranks)", (long long)run_.step, ring_->members().size());
}

void Trainer::start_ring_duties() {
  ring_->show_membership();
  // The lowest live rank writes the metrics and draws the progress; the file loses the
  // records of steps that were undone.
  metrics_.close();
  if (ring_->index() == 0 && !o_.metrics_path.empty()) metrics_.open(o_.metrics_path, run_.step);
  report_setup_.rank = ring_->index();
  report_setup_.members = ring_->members();
  progress_ = std::make_unique<Progress>(o_.steps, o_.progress_bar && ring_->index() == 0);
  reports_ = std::make_unique<StepReports>(comm(), *opt_, metrics_, *progress_, status_, report_setup_);
}

void Trainer::write_membership_events(const std::vector<int>& before, const std::vector<int>& after) {
  const auto world = int64_t(after.size());
  for (int r : before)
    if (!std::binary_search(after.begin(), after.end(), r))
      metrics_.write({{"step", run_.step}, {"event", "rank_lost"}, {"rank", r}, {"world", world}});
  for (int r : after)
    if (!std::binary_search(before.begin(), before.end(), r))
      metrics_.write({{"step", run_.step}, {"event", "rank_joined"}, {"rank", r}, {"world", world}});
}

}  // namespace rt::train
