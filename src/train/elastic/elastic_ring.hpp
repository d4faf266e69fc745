// The job's ring and who is in it: the first ring, a process that joins a running job, and
// the ring that re-forms when a rank is lost or asks to join (elastic training). It owns the
// communicator, the epochs, the membership and the bounded retries; what the run's state
// does around a change (undo a step, share the state, restart the sync) is the trainer's,
// behind RingChange. The step loop calls it at two points: after a completed step that left
// the ranks in step (after_step: a rank asks to join) and when a peer is lost (recover).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/rendezvous.hpp"
#include "ringtrain/train/options.hpp"
#include "step_reports.hpp"

namespace rt::train {

// The largest --device-batch another rank may announce (a sanity bound on a number from
// the network; far above anything that fits in memory).
constexpr int64_t kMaxDeviceBatch = int64_t(1) << 24;

// The batch split of a ring: every member's --device-batch in ring order, and the job's
// tokens per optimizer step (0: not known yet, the trainer works it out).
struct RingBatch {
  std::vector<int64_t> rank_batch;
  int64_t global_tokens = 0;
};

// What the trainer does while the ring changes (trainer_ring.cpp).
class RingChange {
 public:
  virtual ~RingChange() = default;
  // The old ring goes: everything that uses its communicator stops; the step in flight is
  // given up, the sync mode's state kept.
  virtual void leave_ring() = 0;
  // The newest step whose state this rank holds whole and in step with the others, and the
  // oldest it can still go back to.
  virtual int64_t newest_step() const = 0;
  virtual int64_t oldest_step() const = 0;
  virtual int64_t step() const = 0;  // the step its state is at now
  virtual void roll_back_to(int64_t step) = 0;
  // This rank's state is not the job's any more: the ring sends it.
  virtual void drop_state() = 0;
  virtual int64_t tokens_per_step() const = 0;  // 0: this rank holds no state
  // The new ring is up: every member ends with the ring's state (a collective).
  virtual void share_state(const net::Membership& ring, const RingBatch& batch) = 0;
  // Then its duties (reports, progress, metrics); `before`: the ranks of the last ring.
  virtual void start_ring(const std::vector<int>& before) = 0;
};

class ElasticRing {
 public:
  // `run_requests`: the run's own service requests (status, stop, metrics), answered before
  // the membership ones; `data_config`: what the data adds to the settings compared at the
  // handshake.
  using Requests = std::function<std::optional<std::string>(const std::string&)>;
  ElasticRing(const TrainOptions& options, std::string data_config, Requests run_requests, JobStatus& status);
  ~ElasticRing();

  // Whether this process joins a running job (elastic, and some rank answers that it runs).
  bool job_is_running();
  // The first ring: every --peers rank, or (after job_is_running) the running job's. Returns
  // the ring's batch split (tokens per step 0 for a fresh job).
  RingBatch connect(bool join);

  // --- the two points of the step loop ---
  // After a step that left the ranks in step: if a restarted rank asked to join, every member
  // learns it here, at the same step, and the ring re-forms with it.
  void after_step(RingChange& change);
  // A peer was lost (or a re-form was cut short): the live ranks meet again, a bounded number
  // of times. Rethrows when the job cannot go on (fewer than --min-ranks).
  void recover(const std::string& lost, RingChange& change);

  net::Communicator* comm() const { return comm_.get(); }
  const std::vector<int>& members() const { return members_; }  // original ranks, in ring order
  int index() const { return index_; }                           // this rank's place in the ring
  const net::Membership& joined_ring() const { return joined_ring_; }
  // The ring whose state this rank holds: set when the state is complete, not when a ring
  // merely forms.
  void hold_state_of(const net::Membership& ring);
  // The lineage of the state this rank holds (rendezvous.hpp): written in every checkpoint.
  uint64_t lineage() const { return state_lineage_; }
  // --resume: the ranks agreed on checkpoints of this lineage; the job goes on with it.
  void continue_lineage(uint64_t lineage) { state_lineage_ = lineage_ = lineage; }
  // Fewer than --min-ranks: the PeerLost that ends the run.
  bool giving_up() const { return giving_up_; }
  // For `ringtrain status`: every original rank as live or lost in the current ring.
  void show_membership();
  // The job reached its last step, `step`: when some ranks are not in the ring, the ring is
  // closed and this rank's port tells their restarts that the job is done, until each one
  // has been told or --done-linger passes (net::tell_missing_ranks_the_job_is_done).
  void tell_missing_ranks_done(int64_t step);
  // Stops the communicator (and its thread, which answers service requests).
  void close() {
    stop_heal_probe();
    comm_.reset();
  }

 private:
  net::ServiceHandler service_handler();
  // The options of the communicator of the ring of `epoch` in `lineage` over `members`.
  std::string site_order_text(const std::vector<int>& members) const;
  net::CommOptions ring_options(int64_t epoch, uint64_t lineage, const std::vector<int>& members);
  // `silent_for_s`: seconds each original rank had been silent when the ring broke.
  net::RendezvousOptions rendezvous_options(double timeout_s, std::vector<double> silent_for_s = {});
  // Makes the ring's communicator and exchanges the members' batch; nullopt if it did not form.
  std::optional<RingBatch> open_ring(const net::Membership& ring, int64_t tokens_per_step);
  // Meets the live ranks, forms the next ring with them and brings every member to the same
  // state. `lost` names what broke the old ring (empty: a rank joins). `yielding`: this ring
  // yields to a ring of another lineage (after a partition): its ranks come without state.
  void reform(const std::string& lost, RingChange& change, bool yielding = false);
  // While the ring lacks some of the job's ranks, a thread looks for a ring of another
  // lineage on their ports (net::seek_other_lineage) and sets yield_requested_ when this one
  // must join it; after_step acts on it at the same step on every member.
  void start_heal_probe();
  void stop_heal_probe();
  // A ring of another lineage asks which one yields (the service thread): the one with more
  // completed steps goes on, ties to this one (it holds the lower rank). Decided once per lineage.
  bool this_ring_yields(uint64_t other, int64_t their_step);
  [[noreturn]] void give_up(const std::string& why);
  // The watchdog (--max-reforms): called as a re-form starts; gives up when the ring has
  // re-formed that many times since a step was last completed.
  void count_reform(const std::string& lost, int64_t newest_step, RingChange& change);
  // Which rank each re-form since the last completed step involved: named last in what broke
  // the ring (the origin of a failure passed on), or lost or joined by it.
  void blame(int rank);
  int named_rank(const std::string& text) const;

  const TrainOptions& o_;
  const std::string data_config_;
  const Requests run_requests_;
  JobStatus& status_;
  std::unique_ptr<net::Communicator> comm_;

  std::vector<int> members_;  // written under members_mu_ (the service handler reads it)
  std::mutex members_mu_;
  int index_ = 0;
  std::atomic<int64_t> epoch_{0};
  int64_t state_epoch_ = 0;  // the ring whose state this rank holds, and its members
  std::vector<int> state_members_;
  bool giving_up_ = false;
  std::atomic<bool> join_requested_{false};  // a restarted rank asked to join
  std::atomic<uint64_t> lineage_{0};         // the lineage of the ring this process is in
  uint64_t state_lineage_ = 0;               // the lineage of the state it holds
  std::atomic<int64_t> step_{0};             // steps completed, as the ring last agreed
  std::atomic<bool> yield_requested_{false}; // this ring yields to a ring of another lineage
  std::mutex merge_mu_;                      // guards merge_verdicts_ (service threads)
  std::map<uint64_t, bool> merge_verdicts_;  // per other lineage: whether this ring yields to it
  std::thread heal_probe_;
  std::mutex heal_mu_;
  std::condition_variable heal_cv_;
  bool heal_stop_ = false;
  std::mutex join_mu_;                       // guards join_admitted_at_ (service threads)
  std::map<int, double> join_admitted_at_;   // when each rank's last join was let in (now_s)
  std::atomic<bool> ring_up_{false};         // a ring runs (its handshake is done)
  std::atomic<bool> handed_a_ring_{false};   // a rendezvous gave this process a ring (or its first ring formed)
  net::Membership joined_ring_;              // the ring this process joined
  // The watchdog's count: re-forms since a step was completed after the last one, the step
  // the last ring went on from, and how often each original rank was involved.
  int reforms_without_step_ = 0;
  int64_t went_on_from_ = -1;
  std::map<int, int> blamed_;
};

}  // namespace rt::train
