#include "elastic_ring.hpp"

#include <cctype>
#include <cstdlib>

#include <algorithm>
#include <exception>
#include <numeric>
#include <thread>

#include "ringtrain/errors.hpp"
#include "ringtrain/net/ring_order.hpp"
#include "ringtrain/train/log.hpp"
#include "peer_values.hpp"
#include "test_hooks.hpp"

namespace rt::train {
namespace {

// How long a process that finds no job answering waits before it starts one: peers that
// are not up yet do not answer at all.
constexpr double kJobProbeS = 1.5;
// Every membership change is tried this many times before the rank gives up on it.
constexpr int kAttempts = 5;

// For the test of a join request that reaches a rank between its ring's decision to re-form
// and its leaving that ring only: RINGTRAIN_TEST_LINGER_BEFORE_LEAVING=R:S makes rank R stay
// in its old ring S seconds after a join was decided, long enough (more than a --peer-timeout)
// for the joining rank, which asks every rank still running once a second, to be let in again.
void linger_before_leaving_for_test(int rank) {
  if (const char* s = test_hook_value("RINGTRAIN_TEST_LINGER_BEFORE_LEAVING", rank))
    std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(std::atof(s), 0.0, 60.0)));
}

// What the members of a new ring tell each other once it is up.
struct RingRecord {
  int64_t device_batch = 0;
  int64_t global_tokens = 0;  // tokens per step of the job; 0 from a member without state
};

// The one bounded retry of every membership change: attempt() until it returns true, at
// most kAttempts times; false when every attempt failed.
template <class Attempt>
bool with_retries(Attempt&& attempt) {
  for (int i = 0; i < kAttempts; ++i)
    if (attempt()) return true;
  return false;
}

}  // namespace

ElasticRing::ElasticRing(const TrainOptions& options, std::string data_config, Requests run_requests, JobStatus& status)
    : o_(options), data_config_(std::move(data_config)), run_requests_(std::move(run_requests)), status_(status) {
  members_.resize(size_t(o_.world()));
  std::iota(members_.begin(), members_.end(), 0);
  state_members_ = members_;
  index_ = o_.rank;
}

ElasticRing::~ElasticRing() { close(); }

net::ServiceHandler ElasticRing::service_handler() {
  return [this](const std::string& req) -> std::string {
    if (auto a = run_requests_(req)) return *a;
    auto is_member = [this](int rank) {
      std::lock_guard lk(members_mu_);
      return std::binary_search(members_.begin(), members_.end(), rank);
    };
    auto wants_to_join = [this](int rank) {
      // Each admitted join costs the live ranks a re-form: one rank is let in at most once a
      // --peer-timeout, however often it (or a broken process holding the key) asks. It asks
      // again every second, so a real rejoin only waits for the window to pass.
      {
        std::lock_guard lk(join_mu_);
        const double now = now_s();
        auto [it, first] = join_admitted_at_.try_emplace(rank, now);
        if (!first && now - it->second < o_.peer_timeout_s) return;
        it->second = now;
      }
      join_requested_ = true;
      status_.set_rank_state(rank, "joining");
    };
    // While the first ring still forms, a process that probes us must not take it for a
    // running job (it would try to join instead of starting with us); nor must a re-forming
    // ring wait for us. Once handed a ring, a ring that is not up yet is only "forming".
    if (!ring_up_ && req.rfind("elastic ", 0) == 0)
      return std::string(handed_a_ring_ ? "elastic forming" : "elastic starting");
    net::RunningRing ring;
    ring.epoch = epoch_, ring.lineage = lineage_, ring.step = step_, ring.world = o_.world();
    ring.is_member = is_member, ring.wants_to_join = wants_to_join;
    ring.this_ring_yields = [this](uint64_t other, int64_t their_step) { return this_ring_yields(other, their_step); };
    if (auto a = net::answer_while_running(req, ring, o_.steps)) return *a;
    return "error: unknown request '" + req + "'; use status or stop";
  };
}

// ", ring order by --sites: 0 2 (home) -> 1 3 (office)" for these members, or "".
std::string ElasticRing::site_order_text(const std::vector<int>& members) const {
  if (o_.sites.empty()) return "";
  std::vector<std::string> site;
  for (int r : members) site.push_back(o_.sites[size_t(r)]);
  std::string text = ", ring order by --sites:", last;
  for (int i : net::ring_order_by_site(site)) {
    const std::string& here = site[size_t(i)];
    if (!last.empty() && here != last) text += " (" + last + ") ->";
    text += " " + std::to_string(members[size_t(i)]);
    last = here;
  }
  return text + " (" + last + ")";
}

net::CommOptions ElasticRing::ring_options(int64_t epoch, uint64_t lineage, const std::vector<int>& members) {
  net::CommOptions co;
  for (int r : members) co.peers.push_back(o_.peers[size_t(r)]);
  co.rank = int(std::find(members.begin(), members.end(), o_.rank) - members.begin());
  co.job_id = net::ring_job_id(o_.job_id, epoch, lineage);
  std::string shared = o_.shared_config_text();
  // A rank restarted to rejoin runs the job's command, with or without --resume.
  if (epoch > 0) shared.replace(shared.find("\n--resume="), std::string("\n--resume=0").size(), "");
  co.config_text = shared + data_config_;
  co.connect_timeout_s = epoch > 0 ? std::min(o_.connect_timeout_s, 30.0) : o_.connect_timeout_s;
  co.peer_timeout_s = o_.peer_timeout_s;
  co.stall_timeout_s = o_.stall_timeout_s;
  co.chunk_bytes = size_t(o_.chunk_bytes);
  co.streams = int(o_.streams);
  if (!o_.sites.empty()) {  // the members' sites, in the ring's index order
    std::vector<std::string> site;
    for (int r : members) site.push_back(o_.sites[size_t(r)]);
    co.ring_order = net::ring_order_by_site(site);
  }
  co.key = o_.key;
  co.insecure = o_.insecure;
  co.log = [](const std::string& line) { logf("%s", line.c_str()); };
  co.service_handler = service_handler();
  return co;
}

net::RendezvousOptions ElasticRing::rendezvous_options(double timeout_s, std::vector<double> silent_for_s) {
  net::RendezvousOptions ro;
  ro.rank = o_.rank;
  ro.peers = o_.peers;
  ro.job_id = o_.job_id;
  ro.key = o_.key;
  ro.insecure = o_.insecure;
  ro.timeout_s = timeout_s;
  ro.probe_timeout_s = std::clamp(o_.peer_timeout_s / 2, 1.0, 5.0);
  ro.silent_timeout_s = o_.peer_timeout_s;
  ro.max_step = o_.steps;
  ro.silent_for_s = std::move(silent_for_s);
  ro.log = [](const std::string& line) { logf("%s", line.c_str()); };
  ro.other_requests = service_handler();
  return ro;
}

void ElasticRing::tell_missing_ranks_done(int64_t step) {
  if (!o_.distributed() || !o_.elastic() || o_.done_linger_s <= 0) return;
  std::vector<int> missing;
  for (int r = 0; r < o_.world(); ++r)
    if (!std::binary_search(members_.begin(), members_.end(), r)) missing.push_back(r);
  if (missing.empty()) return;
  close();
  std::string ranks;
  for (int r : missing) ranks += (ranks.empty() ? "" : " ") + std::to_string(r);
  logf("rank(s) %s missed the end of the job: telling their restarts for up to %.0f s (--done-linger) that it is done",
       ranks.c_str(), o_.done_linger_s);
  net::tell_missing_ranks_the_job_is_done(rendezvous_options(0), epoch_, lineage_, step, missing, o_.done_linger_s);
}

bool ElasticRing::job_is_running() {
  if (!o_.distributed() || !o_.elastic()) return false;
  // For the test of a rank restarted while the others re-form only:
  // RINGTRAIN_TEST_MISS_RUNNING_JOB=1 makes the first probe find no job, as a probe does that
  // meets the others between their old ring and their lobby.
  static std::atomic<bool> missed{false};
  if (std::getenv("RINGTRAIN_TEST_MISS_RUNNING_JOB") && !missed.exchange(true)) return false;
  net::RendezvousOptions probe = rendezvous_options(0);
  probe.probe_timeout_s = kJobProbeS;
  return net::job_is_running(probe);
}

RingBatch ElasticRing::connect(bool join) {
  RingBatch batch;
  batch.rank_batch.assign(size_t(o_.world()), o_.device_batch);
  if (!o_.distributed()) {
    continue_lineage(net::new_lineage());
    return batch;
  }
  if (join) {
    std::optional<RingBatch> joined;
    if (!with_retries([&] {
          joined_ring_ = net::rendezvous(rendezvous_options(o_.connect_timeout_s), net::MemberState{});
          return (joined = open_ring(joined_ring_, 0)).has_value();
        }))
      throw RuntimeError("could not join the running job after " + std::to_string(kAttempts) + " attempts; restart this rank");
    return *joined;
  }
  logf("waiting for %d ranks (connect timeout %.0f s)", o_.world(), o_.connect_timeout_s);
  comm_ = std::make_unique<net::Communicator>(ring_options(0, 0, members_));
  handed_a_ring_ = true;
  ring_up_ = true;
  batch.rank_batch = comm_->all_gather_record<int64_t>(o_.device_batch);  // all 0 with auto (the trainer measures)
  // The job's first lineage: one random id for all (a --resume continues the checkpoints' instead).
  int64_t lineage[1] = {int64_t(net::new_lineage())};
  comm_->all_reduce_values(lineage, net::ValueOp::Max);
  // (The max is at least ours, so it is a valid id whatever another rank sent.)
  continue_lineage(uint64_t(lineage[0]));
  for (size_t r = 0; r < batch.rank_batch.size(); ++r) {
    const int64_t b = batch.rank_batch[r];
    if (o_.device_batch_auto ? b != 0 : b < 1 || b > kMaxDeviceBatch)
      bad_peer_value(*comm_, int(r), "--device-batch " + std::to_string(b));
  }
  logf("ring of %d ranks is up%s", o_.world(), site_order_text(members_).c_str());
  return batch;
}

std::optional<RingBatch> ElasticRing::open_ring(const net::Membership& ring, int64_t tokens_per_step) {
  {
    std::lock_guard lk(members_mu_);
    members_ = ring.members;
  }
  index_ = ring.index_of(o_.rank);
  epoch_ = ring.epoch;
  lineage_ = ring.lineage;
  {
    std::lock_guard lk(merge_mu_);
    merge_verdicts_.clear();
  }
  handed_a_ring_ = true;
  try {
    ring_up_ = false;
    comm_ = std::make_unique<net::Communicator>(ring_options(ring.epoch, ring.lineage, ring.members));
    ring_up_ = true;
    const bool stateful = std::binary_search(ring.stateful.begin(), ring.stateful.end(), o_.rank);
    const auto records = comm_->all_gather_record(RingRecord{o_.device_batch, stateful ? tokens_per_step : 0});
    RingBatch batch;
    int64_t tokens = 0;
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
      batch.rank_batch.push_back(r.device_batch);
    }
    if (tokens == 0) {  // nobody has state: the batch of a fresh start, from the full ring
      if (!ring.stateful.empty()) throw RuntimeError("the ring's state holders sent no batch size (internal error)");
      tokens = o_.total_batch != 0 ? o_.total_batch : o_.device_batch * int64_t(o_.world()) * o_.seq_len;
    }
    batch.global_tokens = tokens;
    return batch;
  } catch (const UsageError&) {
    throw;  // a mismatch of flags: retrying cannot help
  } catch (const RuntimeError& e) {
    logf("the ring of epoch %lld did not form (%s); meeting the other ranks again", (long long)ring.epoch, e.what());
    comm_.reset();
    return std::nullopt;
  }
}

void ElasticRing::hold_state_of(const net::Membership& ring) {
  state_epoch_ = ring.epoch, state_members_ = ring.members, state_lineage_ = ring.lineage;
  start_heal_probe();
}

void ElasticRing::start_heal_probe() {
  stop_heal_probe();
  if (!o_.elastic() || int(members_.size()) >= o_.world()) return;
  heal_stop_ = false;
  heal_probe_ = std::thread([this, members = members_, lineage = uint64_t(lineage_)] {
    net::RendezvousOptions ro = rendezvous_options(0);
    // A silent (cut off) rank answers nothing: each try gives up within a second, so that a
    // re-form, which stops this thread first, never waits long for it.
    ro.probe_timeout_s = 1;
    auto stopping = [this] {
      std::lock_guard g(heal_mu_);
      return heal_stop_;
    };
    std::unique_lock lk(heal_mu_);
    while (!heal_cv_.wait_for(lk, std::chrono::seconds(3), [&] { return heal_stop_; })) {
      lk.unlock();
      const auto verdict = net::seek_other_lineage(ro, members, lineage, step_, stopping);
      lk.lock();
      if (verdict == net::MergeVerdict::Yield && !heal_stop_) {
        logf("a ring of another lineage runs on the missing ranks' ports and has completed more steps: this ring yields to it");
        yield_requested_ = true;
      }
    }
  });
}

void ElasticRing::stop_heal_probe() {
  if (!heal_probe_.joinable()) return;
  {
    std::lock_guard lk(heal_mu_);
    heal_stop_ = true;
  }
  heal_cv_.notify_all();
  heal_probe_.join();
}

bool ElasticRing::this_ring_yields(uint64_t other, int64_t their_step) {
  std::lock_guard lk(merge_mu_);
  auto [it, first] = merge_verdicts_.try_emplace(other, their_step > step_);
  if (first)
    logf("the ring of lineage %s (step %lld) asks which ring yields: %s (this ring is at step %lld)",
         net::lineage_text(other).c_str(), (long long)their_step, it->second ? "this one" : "that one",
         (long long)step_.load());
  if (it->second) yield_requested_ = true;
  return it->second;
}

// The trainer checkpoints what was rolled back to, then exits 1.
void ElasticRing::give_up(const std::string& why) {
  giving_up_ = true;
  throw net::PeerLost(why);
}

void ElasticRing::after_step(RingChange& change) {
  step_ = change.step();
  int64_t wants[2] = {join_requested_.exchange(false) ? 1 : 0, yield_requested_.exchange(false) ? 1 : 0};
  comm_->all_reduce_values(wants, net::ValueOp::Max);
  if (wants[1] != 0) {
    reform("", change, /*yielding=*/true);
  } else if (wants[0] != 0) {
    linger_before_leaving_for_test(o_.rank);
    reform("", change);
  }
}

void ElasticRing::recover(const std::string& lost, RingChange& change) {
  // A rank lost while the ring re-forms or sends the state: meet again (bounded).
  std::string why = lost;
  std::exception_ptr last;
  const bool formed = with_retries([&] {
    try {
      reform(why, change);
      return true;
    } catch (const net::PeerLost& again) {
      if (giving_up_) throw;
      why = again.what();
      last = std::current_exception();
      return false;
    }
  });
  if (!formed) std::rethrow_exception(last);
}

// The rank a failure message names last ("... rank 2 (10.0.0.3:29500) ..."), or -1. A failure
// passed on names its origin last: "rank 1 (...) failed: rank 2 (...) left the job ...".
int ElasticRing::named_rank(const std::string& text) const {
  int named = -1;
  for (size_t at = text.find("rank "); at != std::string::npos; at = text.find("rank ", at + 5)) {
    size_t end = at + 5;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == at + 5 || end - at - 5 > 6 || text.compare(end, 2, " (") != 0) continue;
    const int r = std::stoi(text.substr(at + 5, end - at - 5));
    if (r >= 0 && r < o_.world()) named = r;
  }
  return named;
}

void ElasticRing::blame(int rank) {
  if (rank >= 0 && rank != o_.rank) ++blamed_[rank];
}

void ElasticRing::count_reform(const std::string& lost, int64_t newest_step, RingChange& change) {
  if (newest_step > went_on_from_) reforms_without_step_ = 0, blamed_.clear();  // a step was completed
  blame(named_rank(lost));
  if (o_.max_reforms == 0 || ++reforms_without_step_ <= o_.max_reforms) return;
  int culprit = -1;
  for (auto [rank, n] : blamed_)
    if (culprit < 0 || n > blamed_[culprit]) culprit = rank;
  std::string who = "no one rank was named";
  if (culprit >= 0)
    who = "rank " + std::to_string(culprit) + " (" + o_.peers[size_t(culprit)].text() + ") was in " +
          std::to_string(blamed_[culprit]) + " of them: check that host and its log, or start the job without it";
  change.roll_back_to(newest_step);  // undoes an update cut short
  give_up("the ring re-formed " + std::to_string(reforms_without_step_ - 1) + " times without completing a step (--max-reforms " +
          std::to_string(o_.max_reforms) + "); " + who + ". Last: " + lost);
}

void ElasticRing::reform(const std::string& lost, RingChange& change, bool yielding) {
  const double t0 = now_s();
  const std::vector<int> held_before = state_members_;  // the last ring that fully formed
  // How long each member had been silent: the rendezvous does not wait a peer timeout again
  // for a rank the ring already waited that long for.
  std::vector<double> silent_for(size_t(o_.world()), 0.0);
  if (comm_ && ring_up_) {
    const auto s = comm_->silence_seconds();
    for (size_t i = 0; i < s.size() && i < members_.size(); ++i) silent_for[size_t(members_[i])] = s[i];
  }
  // The step in flight is given up: leave the ring (our peers hear that we leave), and hold
  // on to what can be restored.
  stop_heal_probe();
  change.leave_ring();
  comm_.reset();
  // What the old ring's service handler took in since this step's exchange (it answered on
  // the transport's thread until the reset above) is about the old ring: a rank that asked to
  // join meanwhile is in this re-form's lobby (or asks the new ring, which lets it in), and a
  // yield verdict is this re-form or is asked for again. Kept, a join request re-formed the
  // new ring at its first exchange for nothing, while a stop could be on its way.
  join_requested_ = false;
  yield_requested_ = false;
  if (yielding) {  // nothing of this lineage's steps since the partition goes on
    change.drop_state();
    state_epoch_ = -1, state_members_.clear(), state_lineage_ = 0;
  }
  const int64_t newest = change.newest_step();
  if (!lost.empty() && int(members_.size()) - 1 < o_.min_ranks) {
    change.roll_back_to(newest);  // undoes an update cut short
    give_up(lost);
  }
  count_reform(yielding ? "a ring of another lineage took this one in" : lost.empty() ? "a rank asked to join" : lost, newest,
               change);
  if (yielding) logf("this ring's ranks join the other lineage's ring and receive its state; the steps since the partition are dropped");
  else if (!lost.empty()) logf("%s; the live ranks re-form the ring", lost.c_str());
  else logf("a rank asks to join; the ring re-forms at step %lld", (long long)change.step());
  net::MemberState me;
  if (!yielding) {
    me.epoch = state_epoch_;
    me.lineage = state_lineage_;
    me.members = state_members_;
    me.step = newest;
    me.oldest_step = change.oldest_step();
  }
  net::Membership ring;
  std::optional<RingBatch> batch;
  const bool formed = with_retries([&] {
    // However short --connect-timeout is, a re-forming ring waits long enough to tell a
    // silent rank from a gone one (one peer timeout) and to hand the decision out.
    net::RendezvousOptions ro = rendezvous_options(std::max(o_.connect_timeout_s, 2 * o_.peer_timeout_s + 10), silent_for);
    ro.require_state = yielding;
    ring = net::rendezvous(ro, me);
    const bool stateful = std::binary_search(ring.stateful.begin(), ring.stateful.end(), o_.rank);
    if (!stateful) {
      logf("this rank's state is not the job's any more; the ring sends it");
      change.drop_state();
    } else {
      change.roll_back_to(ring.target_step);
    }
    me.step = me.oldest_step = change.step();  // from here on, what holds is exactly that step
    if (!stateful) me.epoch = -1, me.members.clear(), me.lineage = 0;
    if (int(ring.members.size()) < o_.min_ranks)
      give_up("only " + std::to_string(ring.members.size()) + " ranks are left, fewer than --min-ranks " +
              std::to_string(o_.min_ranks));
    return (batch = open_ring(ring, change.tokens_per_step())).has_value();
  });
  if (!formed)
    throw net::PeerLost("the ranks could not form a new ring after " + std::to_string(kAttempts) +
                        " attempts; restart every rank with --resume");
  const double formed_s = now_s() - t0;
  // Lost and joined are counted from the ring whose state goes on (after a yield, the other
  // lineage's; else the last ring that fully formed).
  const std::vector<int> before = ring.state_members.empty() ? held_before : ring.state_members;
  for (int r : before)  // the ranks this re-form lost, and those it let in
    if (!std::binary_search(ring.members.begin(), ring.members.end(), r)) blame(r);
  for (int r : ring.members)
    if (std::find(before.begin(), before.end(), r) == before.end()) blame(r);
  change.share_state(ring, *batch);
  went_on_from_ = change.step();
  hold_state_of(ring);
  change.start_ring(before);
  step_ = change.step();
  logf("ring of epoch %lld (lineage %s): %zu ranks (rank %d is member %d), going on from step %lld; formed in %.1f s, state shared in %.1f s",
       (long long)ring.epoch, net::lineage_text(ring.lineage).c_str(), members_.size(), o_.rank, index_,
       (long long)change.step(), formed_s, now_s() - t0 - formed_s);
}

void ElasticRing::show_membership() {
  std::vector<std::string> states(size_t(o_.world()), "lost");
  for (int r : members_) states[size_t(r)] = "live";
  status_.set_membership(epoch_, states);
}

}  // namespace rt::train
