// Elastic training (several ranks, no --sync-overlap): a lost rank makes the others meet in
// a rendezvous (net/rendezvous.hpp), go back to the last synced step every one of them
// completed, re-form the ring and share the state (ring_state.hpp), and go on; a restarted
// rank finds the running job and joins the same way. The step loop (trainer.cpp) calls
// reform() when a peer is lost or asks to join, and take_snapshot() before each update
// that follows a synced step, so that an update cut short can be undone.
#include <algorithm>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/state_file.hpp"
#include "ringtrain/train/log.hpp"
#include "peer_values.hpp"
#include "sync/replica_check.hpp"
#include "ring_state.hpp"
#include "trainer_class.hpp"

namespace rt::train {

void Trainer::take_snapshot() {
  const auto& p = model_->params();
  snap_params_.assign(p.data(), p.data() + p.size());
  opt_->take_snapshot(snap_opt_);
  snap_loader_ = step_start_loader_;
  snap_tokens_ = tokens_seen_;
  snap_sync_ = sync_state_bytes();
  snap_step_ = step_;
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

void Trainer::roll_back_to(int64_t step) {
  if (snap_step_ == step) {  // the update after it may be half done: undo it
    auto& p = model_->params();
    std::copy(snap_params_.begin(), snap_params_.end(), p.data());
    opt_->restore_snapshot(snap_opt_);
    step_start_loader_ = snap_loader_;
    tokens_seen_ = snap_tokens_;
    sync_state_ = snap_sync_;
    step_ = step;
    last_synced_ = true;
    state_whole_ = true;
  } else if (step_ != step || !last_synced_) {
    throw RuntimeError("cannot go back to step " + std::to_string(step) + " from step " + std::to_string(step_) +
                       " (internal error)");
  }
  loader_->restore(step_start_loader_);
  if (last_eval_step_ > step_) last_eval_step_ = -1;
}

bool Trainer::open_ring(const net::Membership& ring) {
  {
    std::lock_guard lk(members_mu_);
    members_ = ring.members;
  }
  index_ = ring.index_of(o_.rank);
  epoch_ = ring.epoch;
  try {
    ring_up_ = false;
    comm_ = std::make_unique<net::Communicator>(ring_options(ring.epoch, ring.members));
    ring_up_ = true;
    const bool stateful = std::binary_search(ring.stateful.begin(), ring.stateful.end(), o_.rank);
    const auto records = comm_->all_gather_record(RingRecord{o_.device_batch, stateful ? global_tokens_ : 0});
    int64_t tokens = 0;
    rank_batch_.clear();
    for (size_t i = 0; i < records.size(); ++i) {
      const RingRecord& r = records[i];
      if (r.device_batch < 1 || r.device_batch > kMaxDeviceBatch)
        bad_peer_value(*comm_, int(i), "--device-batch " + std::to_string(r.device_batch));
      // The job's tokens per step: --total-batch when given (the same on every rank, checked at
      // the handshake), else the device batches of the full ring.
      const int64_t most = o_.total_batch != 0 ? o_.total_batch : int64_t(o_.world()) * kMaxDeviceBatch * o_.seq_len;
      if (r.global_tokens < 0 || r.global_tokens % o_.seq_len != 0 || r.global_tokens > most ||
          (o_.total_batch != 0 && r.global_tokens != 0 && r.global_tokens != o_.total_batch) ||
          (tokens != 0 && r.global_tokens != 0 && r.global_tokens != tokens))
        bad_peer_value(*comm_, int(i), "tokens per step " + std::to_string(r.global_tokens));
      if (r.global_tokens != 0) tokens = r.global_tokens;
      rank_batch_.push_back(r.device_batch);
    }
    if (tokens == 0) {  // nobody has state: the batch of a fresh start, from the full ring
      if (!ring.stateful.empty()) throw RuntimeError("the ring's state holders sent no batch size (internal error)");
      tokens = o_.total_batch != 0 ? o_.total_batch : o_.device_batch * int64_t(o_.world()) * o_.seq_len;
    }
    global_tokens_ = tokens;
    return true;
  } catch (const UsageError&) {
    throw;  // a mismatch of flags: retrying cannot help
  } catch (const RuntimeError& e) {
    logf("the ring of epoch %lld did not form (%s); meeting the other ranks again", (long long)ring.epoch, e.what());
    comm_.reset();
    return false;
  }
}

// run() checkpoints what was rolled back to, then exits 1.
void Trainer::give_up(const std::string& why) {
  giving_up_ = true;
  throw net::PeerLost(why);
}

void Trainer::reform(const std::string& lost) {
  const double t0 = now_s();
  const std::vector<int> before = state_members_;  // the last ring that fully formed
  // The step in flight is given up: leave the ring (our peers hear that we leave), and hold
  // on to what can be restored.
  if (sync_) sync_state_ = sync_state_bytes();
  // How long each member had been silent: the rendezvous does not wait a peer timeout again
  // for a rank the ring already waited that long for.
  std::vector<double> silent_for(size_t(o_.world()), 0.0);
  if (comm_ && ring_up_) {
    const auto s = comm_->silence_seconds();
    for (size_t i = 0; i < s.size() && i < members_.size(); ++i) silent_for[size_t(members_[i])] = s[i];
  }
  sync_.reset();
  reports_.reset();
  comm_.reset();
  progress_->finish();
  // Under grad one step may be undone; under avg/diloco back to the last average. A step
  // whose reports were not exchanged is undone too: its metrics record was never written.
  int64_t newest = last_synced_ && exchanged_step_ == step_ ? step_ : snap_step_;
  if (newest < 0) newest = step_;  // nothing happened since the ring formed
  if (!lost.empty() && int(members_.size()) - 1 < o_.min_ranks) {
    roll_back_to(newest);  // undoes an update cut short
    give_up(lost);
  }
  if (!lost.empty()) logf("%s; the live ranks re-form the ring", lost.c_str());
  else logf("a rank asks to join; the ring re-forms at step %lld", (long long)step_);
  net::MemberState me;
  me.epoch = state_epoch_;
  me.members = state_members_;
  me.step = newest;
  me.oldest_step = snap_step_ >= 0 ? snap_step_ : step_;
  net::Membership ring;
  for (int attempt = 0;; ++attempt) {
    // However short --connect-timeout is, a re-forming ring waits long enough to tell a
    // silent rank from a gone one (one peer timeout) and to hand the decision out.
    ring = net::rendezvous(rendezvous_options(std::max(o_.connect_timeout_s, 2 * o_.peer_timeout_s + 10), silent_for), me);
    if (!std::binary_search(ring.stateful.begin(), ring.stateful.end(), o_.rank)) {
      logf("this rank's state is not the job's any more; the ring sends it");
      state_whole_ = false, snap_step_ = -1;  // nothing of it is worth a checkpoint now
    } else {
      roll_back_to(ring.target_step);
    }
    me.step = me.oldest_step = step_;  // from here on, what holds is exactly step_
    if (!std::binary_search(ring.stateful.begin(), ring.stateful.end(), o_.rank)) me.epoch = -1, me.members.clear();
    if (int(ring.members.size()) < o_.min_ranks) {
      give_up("only " + std::to_string(ring.members.size()) + " ranks are left, fewer than --min-ranks " +
              std::to_string(o_.min_ranks));
    }
    if (open_ring(ring)) break;
    if (attempt == 4) throw net::PeerLost("the ranks could not form a new ring after 5 attempts; restart every rank with --resume");
  }
  const double formed_s = now_s() - t0;
  split_rows();
  step_idx_.resize(size_t(global_tokens_));
  step_tgt_.resize(size_t(global_tokens_));
  // The new ring's sync mode, with the state that goes on (diloco's anchor) before it is shared.
  sync_ = new_sync();
  load_sync_state(sync_state_);
  RunCounters c{step_, tokens_seen_, last_val_bpb_, last_eval_step_, step_start_loader_, sync_state_bytes()};
  share_ring_state(*comm_, ring, o_.sync == SyncMode::Grad, o_.steps, model_->params(), *opt_, c);
  step_ = c.step, tokens_seen_ = c.tokens_seen, last_val_bpb_ = c.val_bpb, last_eval_step_ = c.last_eval_step;
  step_start_loader_ = c.loader;
  loader_->restore(step_start_loader_);
  load_sync_state(c.sync_state);
  sync_->begin();
  sync_state_.clear();
  state_whole_ = true;
  snap_step_ = -1;
  last_synced_ = true;
  exchanged_step_ = step_;
  state_epoch_ = ring.epoch, state_members_ = ring.members;
  check_replicas(*comm_, model_->params(), step_);
  start_ring_duties();
  write_membership_events(before, members_);
  logf("ring of epoch %lld: %zu ranks (rank %d is member %d), going on from step %lld; formed in %.1f s, state shared in %.1f s",
       (long long)ring.epoch, members_.size(), o_.rank, index_, (long long)step_, formed_s, now_s() - t0 - formed_s);
}

void Trainer::show_membership() {
  std::vector<std::string> states(size_t(o_.world()), "lost");
  for (int r : members_) states[size_t(r)] = "live";
  status_.set_membership(epoch_, states);
}

void Trainer::start_ring_duties() {
  show_membership();
  // The lowest live rank writes the metrics and draws the progress; the file loses the
  // records of steps that were undone.
  metrics_.close();
  if (index_ == 0 && !o_.metrics_path.empty()) metrics_.open(o_.metrics_path, step_);
  report_setup_.rank = index_;
  report_setup_.members = members_;
  progress_ = std::make_unique<Progress>(o_.steps, o_.progress_bar && index_ == 0);
  reports_ = std::make_unique<StepReports>(comm_.get(), *opt_, metrics_, *progress_, status_, report_setup_);
}

void Trainer::write_membership_events(const std::vector<int>& before, const std::vector<int>& after) {
  const auto world = int64_t(after.size());
  for (int r : before)
    if (!std::binary_search(after.begin(), after.end(), r))
      metrics_.write({{"step", step_}, {"event", "rank_lost"}, {"rank", r}, {"world", world}});
  for (int r : after)
    if (!std::binary_search(before.begin(), before.end(), r))
      metrics_.write({{"step", step_}, {"event", "rank_joined"}, {"rank", r}, {"world", world}});
}


}  // namespace rt::train
