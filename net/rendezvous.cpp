// The rendezvous of an elastic job: see rendezvous.hpp for the protocol.
#include "ringtrain/net/rendezvous.hpp"

#include "rendezvous_wire.hpp"

#include <algorithm>
#include <atomic>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace rt::net {
namespace {

using wire::words;

using Clock = std::chrono::steady_clock;
// How long the coordinator keeps its lobby open for members to fetch the decision.
constexpr double kHandOutS = 5;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The new ring from what every rank in the lobby said (the coordinator's own state included).
// Of the lineages the members hold state of, the one with the most completed steps goes on
// (ties: the lowest rank's); members of any other lineage count as members without state.
// Within it, the state that goes on is the newest ring's, at the step the most of its
// members can be at: each can be at any step from its oldest to its newest, and the ring
// goes on from the latest step that the largest number of them share. Members of one ring
// are never more than an update apart, so they all share one step and that is the earliest
// of their newest steps; a claim that shares no step with the others (a member that lies,
// or one that is broken) is outvoted, and the lower of two equal groups never drags the
// ring back. Members that cannot be at that step receive the state. The new ring keeps
// the lineage when it holds every rank of the ring whose state goes on, and starts a new
// one (`fresh`) when it does not, or when nobody has state.
Membership decide(const std::map<int, MemberState>& states, uint64_t fresh) {
  Membership m;
  uint64_t lineage = 0;
  int64_t most_steps = -1, newest = -1, newest_any = -1;
  for (const auto& [r, s] : states) {
    m.members.push_back(r);
    newest_any = std::max(newest_any, s.epoch);
    if (s.epoch >= 0 && s.step > most_steps) most_steps = s.step, lineage = s.lineage;
  }
  auto holds = [&](const MemberState& s) { return s.epoch >= 0 && s.lineage == lineage; };
  for (const auto& [r, s] : states)
    if (holds(s)) newest = std::max(newest, s.epoch);
  // Epochs of every lineage stay below the new one: a ring's job id is never reused.
  m.epoch = std::max<int64_t>(newest_any, 0) + 1;
  m.state_epoch = newest;
  m.lineage = fresh;
  if (newest < 0) return m;  // nobody has state: a fresh start
  size_t most = 0;
  int64_t target = 0;
  for (const auto& [r, candidate] : states) {  // the best step is some claimant's newest
    if (!holds(candidate) || candidate.epoch != newest) continue;
    size_t holders = 0;
    for (const auto& [q, s] : states)
      holders += holds(s) && s.epoch == newest && s.oldest_step <= candidate.step && candidate.step <= s.step;
    if (holders > most || (holders == most && candidate.step > target)) most = holders, target = candidate.step;
  }
  m.target_step = target;
  for (const auto& [r, s] : states)
    if (holds(s) && s.epoch == newest && s.oldest_step <= target && target <= s.step) {
      m.stateful.push_back(r);
      if (m.state_members.empty()) m.state_members = s.members;
    }
  const bool whole = std::includes(m.members.begin(), m.members.end(), m.state_members.begin(), m.state_members.end());
  if (whole) m.lineage = lineage;
  return m;
}

// How long one request waits for its answer after `unanswered` requests in a row went
// unanswered. A request that reaches a rank just as it swaps its ring for a lobby (or back)
// is lost with the closing socket and never answered: the first try gives up soon and asks
// again. Later tries wait the whole probe timeout, so a rank that is merely slow to answer
// still gets it (and is never taken for a gone one any sooner).
double attempt_timeout(const RendezvousOptions& o, int unanswered) {
  return unanswered == 0 ? std::min(0.5, o.probe_timeout_s) : o.probe_timeout_s;
}

// What this process knows of another rank, from its answers to "elastic status". A rank
// that does not answer is Unsure until it is certainly gone: nothing listens on its port
// (twice in a row), or it has been silent for the peer timeout. A slow rank is never taken
// for a gone one sooner: two lobbies that each thought the other gone would form two rings.
struct PeerView {
  enum Seen { Unsure, Absent, Other, Running, Lobby, Starting, Done } seen = Unsure;
  int64_t epoch = -1;
  uint64_t lineage = 0;
  int64_t step = -1;
};

// True when a TCP connection to the address is refused: no process listens there.
bool nothing_listens(const PeerAddress& a) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(a.host.c_str(), std::to_string(a.port).c_str(), &hints, &res) != 0 || !res) return false;
  bool refused = false;
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int rc = connect(fd, res->ai_addr, res->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 500) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        refused = err == ECONNREFUSED;
      }
    } else if (rc != 0) {
      refused = errno == ECONNREFUSED;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return refused;
}

PeerView parse_status(const std::string& answer) {
  const wire::StatusAnswer a = wire::parse_status(answer);
  PeerView v;
  v.seen = a.kind == wire::StatusAnswer::Running    ? PeerView::Running
           : a.kind == wire::StatusAnswer::Lobby    ? PeerView::Lobby
           : a.kind == wire::StatusAnswer::Starting ? PeerView::Starting
           : a.kind == wire::StatusAnswer::Done     ? PeerView::Done
                                                    : PeerView::Other;
  v.epoch = a.epoch, v.lineage = a.lineage, v.step = a.step;
  return v;
}

// The lobby's shared state: the handler runs on the lobby communicator's thread.
class Lobby {
 public:
  Lobby(int me, int world, int64_t max_step, const MemberState& mine, bool require_state, ServiceHandler other)
      : me_(me), world_(world), max_step_(max_step), mine_(mine), require_state_(require_state), other_(std::move(other)) {}

  std::string answer(const std::string& request) {
    const auto w = words(request);
    if (w.empty() || w[0] != "elastic") {
      if (other_) return other_(request);
      return "error: the job is re-forming its ring; ask again in a few seconds";
    }
    if (wire::is_status_request(w, world_))
      return "elastic lobby " + std::to_string(mine_.epoch) + " " + lineage_text(mine_.lineage);
    if (w.size() == 3 && w[1] == "join") return "elastic wait";
    if (w.size() == 8 && w[1] == "checkin") return checkin(w);
    return "error: unknown elastic request";
  }

  // Called by the coordinator: decides once every rank in `present` has checked in.
  bool try_decide(const std::vector<int>& present) {
    std::lock_guard lk(mu_);
    if (decision_) return true;
    std::map<int, MemberState> states{{me_, mine_}};
    bool state = mine_.epoch >= 0;
    for (int p : present) {
      if (p == me_) continue;
      auto it = checkins_.find(p);
      if (it == checkins_.end()) return false;
      states[p] = it->second;
      state = state || it->second.epoch >= 0;
    }
    if (require_state_ && !state) return false;
    decision_ = decide(states, new_lineage());
    decided_at_ = Clock::now();
    fetched_.assign(size_t(world_), false);
    fetched_[size_t(me_)] = true;
    return true;
  }
  // The decision once every member fetched it (or the hand-out time passed).
  std::optional<Membership> handed_out() {
    std::lock_guard lk(mu_);
    if (!decision_) return std::nullopt;
    bool all = true;
    for (int r : decision_->members) all = all && fetched_[size_t(r)];
    if (all || seconds_since(decided_at_) > kHandOutS) return decision_;
    return std::nullopt;
  }

 private:
  std::string checkin(const std::vector<std::string>& w) {
    const auto c = wire::decode_checkin(w, world_, me_, max_step_);
    if (!c) return "error: malformed checkin";
    const auto& [rank, state] = *c;
    std::lock_guard lk(mu_);
    if (decision_) {
      if (decision_->index_of(rank) < 0) return "elastic later";
      fetched_[size_t(rank)] = true;
      return wire::encode_go(*decision_);
    }
    checkins_[rank] = state;
    return "elastic wait";
  }

  const int me_, world_;
  const int64_t max_step_;
  const MemberState mine_;
  const bool require_state_;
  const ServiceHandler other_;
  std::mutex mu_;
  std::map<int, MemberState> checkins_;
  std::optional<Membership> decision_;
  Clock::time_point decided_at_;
  std::vector<bool> fetched_;
};

// Asks every other rank "elastic status" again and again on its own thread.
class Probes {
 public:
  explicit Probes(const RendezvousOptions& o) : o_(o), views_(o.peers.size()), start_(Clock::now()) {
    for (int p = 0; p < int(o.peers.size()); ++p)
      if (p != o.rank) threads_.emplace_back([this, p] { run(p); });
  }
  ~Probes() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  std::vector<PeerView> views() {
    std::lock_guard lk(mu_);
    return views_;
  }

 private:
  void run(int p) {
    const double silent_s = size_t(p) < o_.silent_for_s.size() ? std::clamp(o_.silent_for_s[size_t(p)], 0.0, 1e6) : 0.0;
    auto last_answer = start_ - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(silent_s));
    int refusals = 0, unanswered = 0;
    const PeerAddress& peer = o_.peers[size_t(p)];
    while (!stop_) {
      PeerView v;
      bool answered = false;
      // Once nothing listened on the port, look there first: a dead rank's port refuses at
      // once, while a request to it waits the whole probe timeout (a process that died leaves
      // a refusing port; one that is starting again soon answers the request).
      if (refusals > 0 && nothing_listens(peer)) {
        ++refusals;
      } else {
        try {
          v = parse_status(request(peer.text(), wire::status_request(o_.rank), attempt_timeout(o_, unanswered), o_.key));
          answered = true, last_answer = Clock::now(), refusals = 0, unanswered = 0;
        } catch (const std::exception&) {
          ++unanswered;
          refusals = nothing_listens(peer) ? refusals + 1 : 0;
        }
      }
      // Refused twice in a row (nothing listens: the process is gone), or silent too long.
      if (!answered && (refusals >= 2 || seconds_since(last_answer) >= o_.silent_timeout_s)) v.seen = PeerView::Absent;
      {
        std::lock_guard lk(mu_);
        views_[size_t(p)] = v;
      }
      for (int i = 0; i < 4 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  const RendezvousOptions& o_;
  std::mutex mu_;
  std::vector<PeerView> views_;
  const Clock::time_point start_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// A communicator that only listens on this rank's own port and answers requests with
// `handler` (the lobby, or a finished rank telling the missing ones): the ranks reach it at
// the one listed port, with the job's key.
CommOptions port_listener(const RendezvousOptions& o, const std::string& suffix, ServiceHandler handler) {
  CommOptions co;
  co.rank = 0;
  co.peers = {o.peers[size_t(o.rank)]};
  co.job_id = o.job_id + suffix;
  co.key = o.key;
  co.insecure = o.insecure;
  co.log = o.log;
  co.listen_only = true;
  co.service_handler = std::move(handler);
  return co;
}

std::optional<std::string> ask(const RendezvousOptions& o, int p, const std::string& text, int unanswered = 1) {
  try {
    return request(o.peers[size_t(p)].text(), text, attempt_timeout(o, unanswered), o.key);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

int Membership::index_of(int rank) const {
  auto it = std::lower_bound(members.begin(), members.end(), rank);
  return it != members.end() && *it == rank ? int(it - members.begin()) : -1;
}

std::string ring_job_id(const std::string& job_id, int64_t epoch, uint64_t lineage) {
  return epoch == 0 ? job_id : job_id + "#ring" + std::to_string(epoch) + "." + lineage_text(lineage);
}

Membership rendezvous(const RendezvousOptions& o, const MemberState& mine) {
  const int world = int(o.peers.size());
  Lobby lobby(o.rank, world, std::min(o.max_step, wire::kMaxStep), mine, o.require_state, o.other_requests);
  Communicator listener(port_listener(o, "#lobby", [&lobby](const std::string& req) { return lobby.answer(req); }));
  Probes probes(o);
  const auto start = Clock::now();
  auto last_join_ask = Clock::time_point{};
  int checkins_unanswered = 0;
  while (true) {
    if (seconds_since(start) > o.timeout_s)
      throw RuntimeError("the ranks did not agree on a new ring within " + std::to_string(int(o.timeout_s)) +
                         " s; check that every live rank can reach the others' ports");
    const auto views = probes.views();
    for (int p = 0; p < world; ++p)
      if (views[size_t(p)].seen == PeerView::Done) throw JobFinished(p, views[size_t(p)].step);
    bool unsure = false, newer_running = false, running = false;
    std::vector<int> present{o.rank};
    for (int p = 0; p < world; ++p) {
      if (p == o.rank) continue;
      const auto& v = views[size_t(p)];
      // Other: it answers, but is neither in a ring nor in a lobby (e.g. it is making a ring's
      // communicator): wait until it says where it stands. Starting: a process restarted since
      // the ring broke, still trying to start the job afresh; it is not waited for (it would
      // wait for us in turn until both time out): once a ring runs, it finds it and joins.
      // Running: a newer ring than ours (of any lineage) ran on without us: we join it. One of
      // our ring's lineage not newer will notice the loss soon: we wait for it. One of
      // another lineage not newer (the other side of a partition) is not waited for: once
      // both run, the heal probe merges them.
      unsure = unsure || v.seen == PeerView::Unsure || v.seen == PeerView::Other;
      if (v.seen == PeerView::Running && v.epoch > mine.epoch) newer_running = true;
      else if (v.seen == PeerView::Running && v.lineage == mine.lineage) running = true;
      if (v.seen == PeerView::Lobby) present.push_back(p);
    }
    std::sort(present.begin(), present.end());
    if (newer_running) {
      // A ring runs without us: ask it (once a second) to take us in; it comes to the lobby.
      if (seconds_since(last_join_ask) > 1) {
        for (int p = 0; p < world; ++p)
          if (views[size_t(p)].seen == PeerView::Running) ask(o, p, "elastic join " + std::to_string(o.rank));
        last_join_ask = Clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (present.front() != o.rank) {
      if (auto reply = ask(o, present.front(), wire::encode_checkin(o.rank, mine), checkins_unanswered)) {
        checkins_unanswered = 0;
        auto m = wire::decode_go(words(*reply), world);
        if (m && m->index_of(o.rank) >= 0) return *m;
      } else {
        ++checkins_unanswered;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    // The coordinator: decide once every rank is in a lobby or certainly gone (nobody still
    // runs our old ring, nobody is merely slow to answer), then hand the decision out.
    if (!running && !unsure) lobby.try_decide(present);
    if (auto m = lobby.handed_out()) return *m;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::optional<std::string> answer_while_running(const std::string& request, const RunningRing& ring, int64_t max_step) {
  const auto w = words(request);
  if (w.empty() || w[0] != "elastic") return std::nullopt;
  if (wire::is_status_request(w, ring.world))
    return "elastic running " + std::to_string(ring.epoch) + " " + lineage_text(ring.lineage) + " " + std::to_string(ring.step);
  int64_t rank;
  if (w.size() == 3 && w[1] == "join" && wire::parse_int(w[2], 0, ring.world - 1, rank)) {
    // A member's request arrived late (it asked again while the ring formed): nothing to do.
    if (!ring.is_member(int(rank))) ring.wants_to_join(int(rank));
    return "elastic ok";
  }
  if (auto merge = wire::decode_merge(w)) {
    const auto [lineage, step] = *merge;
    if (lineage == ring.lineage || step > std::min(max_step, wire::kMaxStep)) return "error: malformed merge";
    return ring.this_ring_yields(lineage, step) ? "elastic stay" : "elastic yield";
  }
  return "elastic notcoord";
}

bool job_is_running(const RendezvousOptions& o) {
  std::vector<std::thread> threads;
  std::vector<PeerView> views(o.peers.size());
  for (int p = 0; p < int(o.peers.size()); ++p)
    if (p != o.rank)
      threads.emplace_back([&, p] {
        if (auto reply = ask(o, p, wire::status_request(o.rank))) views[size_t(p)] = parse_status(*reply);
      });
  for (auto& t : threads) t.join();
  for (int p = 0; p < int(views.size()); ++p)
    if (views[size_t(p)].seen == PeerView::Done) throw JobFinished(p, views[size_t(p)].step);
  return std::any_of(views.begin(), views.end(), [](const PeerView& v) { return v.seen == PeerView::Running || v.seen == PeerView::Lobby; });
}

bool tell_missing_ranks_the_job_is_done(const RendezvousOptions& o, int64_t epoch, uint64_t lineage, int64_t step,
                                        const std::vector<int>& missing, double seconds) {
  const int world = int(o.peers.size());
  std::mutex mu;
  std::condition_variable told_all;
  std::vector<int> waiting = missing;  // not yet told
  const std::string done = wire::encode_done(epoch, lineage, step);
  // Whatever a missing rank asks about membership (where we stand, to join, a check-in) is
  // answered "done"; a status request names its asker, who is then told.
  ServiceHandler answer = [&](const std::string& req) -> std::string {
    const auto w = words(req);
    if (w.empty() || w[0] != "elastic") return o.other_requests ? o.other_requests(req) : "error: the job is done";
    int asker = -1;
    if (wire::is_status_request(w, world, &asker) && asker >= 0) {
      std::lock_guard lk(mu);
      std::erase(waiting, asker);
      if (waiting.empty()) told_all.notify_all();
    }
    return done;
  };
  try {
    Communicator listener(port_listener(o, "#done", std::move(answer)));
    std::unique_lock lk(mu);
    told_all.wait_for(lk, std::chrono::duration<double>(std::max(0.0, seconds)), [&] { return waiting.empty(); });
    const std::vector<int> untold = waiting;
    lk.unlock();
    if (untold.empty()) {
      // The last one told may still be reading the answer: a moment before the port closes.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (o.log) o.log("every rank that missed the end was told that the job is done");
    } else if (o.log) {
      o.log("no restart of rank(s) " + wire::list_text(untold) + " asked within " + std::to_string(int(seconds)) +
            " s; a later one waits for the others and fails (the job's final checkpoints are on the other ranks)");
    }
    return true;
  } catch (const std::exception& e) {
    if (o.log) o.log(std::string("could not keep answering on this rank's port that the job is done: ") + e.what());
    return false;
  }
}

MergeVerdict seek_other_lineage(const RendezvousOptions& o, const std::vector<int>& members, uint64_t lineage,
                                int64_t step, const std::function<bool()>& stop) {
  for (int p = 0; p < int(o.peers.size()); ++p) {
    if (p == o.rank || std::binary_search(members.begin(), members.end(), p)) continue;
    if (stop()) return MergeVerdict::None;
    const auto reply = ask(o, p, "elastic status");
    if (!reply) continue;  // gone, or still cut off
    const PeerView v = parse_status(*reply);
    if (v.seen != PeerView::Running || v.lineage == lineage) continue;
    // The first such rank is the lowest of the other ring's we can see: when it is below all
    // of ours, its ring is the one asked.
    if (members.empty() || p > members.front()) return MergeVerdict::None;
    const auto answer = ask(o, p, wire::encode_merge(lineage, step));
    if (answer == "elastic yield") return MergeVerdict::Yield;
    if (answer == "elastic stay") return MergeVerdict::Stay;
    return MergeVerdict::None;
  }
  return MergeVerdict::None;
}

}  // namespace rt::net
