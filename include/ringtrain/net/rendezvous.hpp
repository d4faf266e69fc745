// How the ranks of an elastic job agree on a new ring after a rank was lost or asked to
// join, on the same one port per rank.
//
// Every rank that leaves a ring (or starts while the job runs) opens a lobby on its port: a
// listen-only communicator (CommOptions::listen_only) that answers the requests below. It
// asks every other rank where it stands, repeatedly and in parallel:
//   - a rank whose port refuses connections is gone; one that does not answer at all is
//     gone once it has been silent for the peer timeout (a slow rank is never dropped
//     sooner, or two lobbies could each form a ring without the other);
//   - a rank running a ring of a newer epoch than ours means we were dropped: we ask it to
//     let us join (it leaves its ring at the end of its step and comes to the lobby);
//   - a rank still running our ring will notice the loss soon: we wait for it.
// The lowest rank in a lobby coordinates. The others check in with it, telling the epoch of
// their last ring, its ranks and the steps they can restore. Once every rank that answers
// is in a lobby and has checked in, it decides the new ring (epoch = newest seen + 1) and the
// step all of them go on from, hands the decision out, and everyone closes its lobby and
// makes the ring's communicator, with the epoch in the job id: the handshake refuses any
// process of another epoch, and messages of an old ring never match the new job hash.
//
// Lineages: every ring's state descends from a line of rings, named by a random 63-bit id
// (the lineage) carried in the ring's job id, the check-ins, the status answers and every
// checkpoint's meta.json. A ring that goes on without some ranks of the ring whose state it
// holds starts a new lineage: the two sides of a partition (possible with 2 ranks, whose
// default --min-ranks is 1) never share a job id, so no message or handshake crosses between
// them. When they meet again, in a lobby or running, the lineage with the most completed
// steps goes on (ties: the one of the lowest rank) and the other side's ranks receive its
// state; nothing of two lineages is ever mixed. Two running rings find each other by the
// heal probe (seek_other_lineage): the ring without the lowest rank asks the other, and the
// one asked decides which of the two rings yields, so that both never yield at once.
//
// Every request and answer is one line of text, parsed as hostile: counts, ranks, epochs,
// steps and lineages are checked before use.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/net/communicator.hpp"

namespace rt::net {

// Where a process stands when it enters a rendezvous.
struct MemberState {
  int64_t epoch = -1;        // the epoch of the ring it was in; -1: none (it has no state)
  uint64_t lineage = 0;      // that ring's lineage
  std::vector<int> members;  // the ranks of that ring, ascending
  int64_t step = 0;          // steps it has completed
  int64_t oldest_step = 0;   // the oldest step it can go back to (step or step - 1)
};

// The coordinator's decision.
struct Membership {
  int64_t epoch = 0;
  std::vector<int> members;        // the new ring's ranks (original numbers), ascending
  int64_t state_epoch = -1;        // the ring whose state goes on (-1: none, a fresh start)
  std::vector<int> state_members;  // that ring's ranks
  std::vector<int> stateful;       // members that hold that state at target_step
  int64_t target_step = 0;         // the step every member goes on from
  uint64_t lineage = 0;            // the new ring's lineage
  // The index of original rank r in members, or -1.
  int index_of(int rank) const;
};

struct RendezvousOptions {
  int rank = 0;
  std::vector<PeerAddress> peers;  // every original rank's address
  std::string job_id;
  std::optional<JobKey> key;
  bool insecure = false;
  double timeout_s = 120;       // no decision within this: RuntimeError
  double probe_timeout_s = 2;   // how long one status request waits for its answer
  // A rank that answers nothing for this long is gone (one whose port refuses connections
  // is gone at once): the job's --peer-timeout.
  double silent_timeout_s = 30;
  // Seconds each original rank had been silent when the ring broke (empty: unknown). A rank
  // silent for the peer timeout already, that still answers nothing, is gone at the first
  // try: a silent host costs the job one peer timeout, not two.
  std::vector<double> silent_for_s;
  // The job's --steps: a check-in that claims more steps is refused (nothing a real member
  // can have done), as is an epoch so large the next ring's could not be numbered.
  int64_t max_step = int64_t(1) << 50;
  // Never decide a ring in which no member holds state (a fresh start): the ranks of a ring
  // that yielded to another lineage dropped theirs to receive the winner's.
  bool require_state = false;
  std::function<void(const std::string&)> log;
  // Answers the requests that are not about membership (status, stop) while in the lobby.
  ServiceHandler other_requests;
};

// A new random lineage (63 bits, never 0); its text (16 hex digits) and back.
uint64_t new_lineage();
std::string lineage_text(uint64_t lineage);
std::optional<uint64_t> parse_lineage(const std::string& text);

// The job id of the ring of `epoch` in `lineage` (epoch 0, the first ring, is the job id itself).
std::string ring_job_id(const std::string& job_id, int64_t epoch, uint64_t lineage);

// Runs a rendezvous from `mine`; returns the decision, which includes this rank.
Membership rendezvous(const RendezvousOptions& options, const MemberState& mine);

// A running ring, as the membership requests see it.
struct RunningRing {
  int64_t epoch = 0;
  uint64_t lineage = 0;
  int64_t step = 0;  // steps completed
  int world = 1;     // ranks of the job
  std::function<bool(int rank)> is_member;
  // A rank that is not a member asks to join: the ring leaves for the lobby at the end of its step.
  std::function<void(int rank)> wants_to_join;
  // Another lineage's ring, at `step`, asks which of the two yields: true when this ring
  // yields (it leaves, drops its state and joins the other), false when the asker must.
  std::function<bool(uint64_t lineage, int64_t step)> this_ring_yields;
};

// What a running ring answers to membership requests; nullopt for requests that are not
// about membership. `max_step`: the job's --steps (a claim beyond it is refused).
std::optional<std::string> answer_while_running(const std::string& request, const RunningRing& ring, int64_t max_step);

// The heal probe of a running ring without some of the job's ranks: asks them where they
// stand. When one runs a ring of another lineage and that ring holds a rank lower than any
// of `members`, asks it which ring yields. Yield: this ring must; Stay: the other one does
// (or will be asked by us again); None: nothing to do (no other ring, or it is the other
// ring's to ask).
enum class MergeVerdict { None, Yield, Stay };
// Each request waits at most options.probe_timeout_s; `stop` is asked before each one.
MergeVerdict seek_other_lineage(const RendezvousOptions& options, const std::vector<int>& members, uint64_t lineage,
                                int64_t step, const std::function<bool()>& stop);

// Another rank answered that the job reached its last step without this one (see
// tell_missing_ranks_the_job_is_done): thrown by job_is_running and rendezvous, so that a
// rank restarted too late exits instead of waiting for a ring that will never run again.
struct JobFinished : RuntimeError {
  JobFinished(int rank, int64_t step)
      : RuntimeError("ring member " + std::to_string(rank) + " says the job finished at step " + std::to_string(step)),
        rank(rank), step(step) {}
  int rank;
  int64_t step;
};

// Asks every other rank whether the job runs (a restarted process uses it to rejoin
// instead of starting a new job). True when some rank answers that it runs a ring or is in
// a lobby; JobFinished when one answers that the job is done.
bool job_is_running(const RendezvousOptions& options);

// The job reached its last step, `step`, in a ring of `epoch` and `lineage` without the
// ranks `missing`. For up to `seconds`, this rank's port answers their probes and requests
// that the job is done (a rank restarted by its supervisor would otherwise wait for a ring
// that never runs again, time out and be restarted, over and over); other requests go to
// options.other_requests. Returns once every one of `missing` has been told, or the time is
// up; false when the port could not be listened on.
bool tell_missing_ranks_the_job_is_done(const RendezvousOptions& options, int64_t epoch, uint64_t lineage, int64_t step,
                                        const std::vector<int>& missing, double seconds);

}  // namespace rt::net
