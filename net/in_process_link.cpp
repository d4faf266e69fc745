// The in-process ring: see in_process_link.hpp.
#include "in_process_link.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "failure_state.hpp"

namespace rt::net {

namespace {
struct Message {
  Header header;
  zmq::message_t payload;
};
}  // namespace

// What the ranks share: a queue per ordered pair, who died or failed, one lock and one
// condition for all (a test ring is small).
struct InProcessRing::Hub {
  Options opt;
  CommOptions comm;  // every link's options but the rank
  uint64_t job_hash = 0;
  std::mutex mu;
  std::condition_variable changed;
  std::vector<std::deque<Message>> queues;  // [from * world + to]
  std::vector<std::string> gone;            // why rank r is gone; empty while it lives
  std::vector<bool> handed_out;

  std::deque<Message>& queue(int from, int to) { return queues[size_t(from) * size_t(opt.world) + size_t(to)]; }
  void mark_gone(int r, const std::string& why) {
    {
      std::lock_guard lk(mu);
      if (gone[size_t(r)].empty()) gone[size_t(r)] = why.empty() ? "gone" : why;
    }
    changed.notify_all();
  }
};

namespace {

class InProcessLink final : public Link {
 public:
  InProcessLink(std::shared_ptr<InProcessRing::Hub> hub, int rank) : hub_(std::move(hub)), opt_(hub_->comm) {
    opt_.rank = rank;
  }
  // What this rank sent stays queued for its receivers, as a clean close delivers it.
  ~InProcessLink() override = default;

  int rank() const override { return opt_.rank; }
  int world() const override { return hub_->opt.world; }
  const CommOptions& options() const override { return opt_; }
  uint64_t job_hash() const override { return hub_->job_hash; }

  void check_healthy() override { failures_.throw_if_failed(); }

  bool try_send(int to, const Header& h, zmq::message_t& payload) override {
    std::optional<Message> discarded;  // destroyed after the lock (it releases a zero-copy buffer)
    {
      std::lock_guard lk(hub_->mu);
      if (!hub_->gone[size_t(to)].empty()) {
        // As a socket takes what is sent to a peer that died until it notices: accepted, and
        // lost; tick() reports the peer once what it sent us is read.
        discarded.emplace(Message{h, std::move(payload)});
        return true;
      }
      auto& q = hub_->queue(rank(), to);
      if (q.size() >= hub_->opt.queue_messages) return false;
      // A copy goes on the "wire", and the sender's message is released now: libzmq too
      // releases a zero-copy message once its I/O thread has written it out, whether or not
      // the receiver has read it (else every rank of a ring could wait for its successor).
      q.push_back(Message{h, zmq::message_t(payload.data(), payload.size())});
      discarded.emplace(Message{h, std::move(payload)});
    }
    hub_->changed.notify_all();
    return true;
  }

  bool try_recv(int from, Header& h, zmq::message_t& payload) override {
    std::vector<Message> dropped;  // destroyed after the lock (each may release a sender's buffer)
    std::lock_guard lk(hub_->mu);
    auto& q = hub_->queue(from, rank());
    for (int skipped = 0; skipped < 256 && !q.empty(); ++skipped) {
      Message m = std::move(q.front());
      q.pop_front();
      if (m.header.kind == MsgKind::Data && m.header.job == hub_->job_hash) {
        h = m.header;
        payload = std::move(m.payload);
        hub_->changed.notify_all();  // the sender may wait for room
        return true;
      }
      dropped.push_back(std::move(m));  // not data of this job: skipped, as the transport skips it
    }
    return false;
  }

  bool wait(int from, bool want_recv, int timeout_ms) override {
    bool woken;
    {
      std::unique_lock lk(hub_->mu);
      woken = hub_->changed.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] {
        return failures_.failed() || (want_recv && !hub_->queue(from, rank()).empty()) || !lost_peer_locked().empty();
      });
    }
    tick();
    return woken;
  }

  void tick() override {
    std::string lost;
    {
      std::lock_guard lk(hub_->mu);
      lost = lost_peer_locked();
    }
    if (!lost.empty()) failures_.record(FailureState::Kind::PeerLost, lost);
    failures_.throw_if_failed();
  }

  void drop_outgoing_data() override {
    std::vector<Message> dropped;  // destroyed outside the lock
    {
      std::lock_guard lk(hub_->mu);
      for (int to = 0; to < world(); ++to)
        for (auto& m : hub_->queue(rank(), to)) dropped.push_back(std::move(m));
      for (int to = 0; to < world(); ++to) hub_->queue(rank(), to).clear();
    }
    hub_->changed.notify_all();
  }

  [[noreturn]] void fail(const std::string& message, bool peer_lost) override {
    if (failures_.record(peer_lost ? FailureState::Kind::PeerLost : FailureState::Kind::Other, message))
      hub_->mark_gone(rank(), "it failed: " + message);  // the transport's Failing notice
    failures_.throw_it();
  }

  void set_service_handler(ServiceHandler) override {}  // no service traffic in-process
  void abort(const std::string& reason) override {
    failures_.record(FailureState::Kind::Aborted, reason);
    hub_->changed.notify_all();
  }
  std::string failure() const override { return failures_.message(); }
  std::vector<double> silence_seconds() override { return std::vector<double>(size_t(world()), 0.0); }

 protected:
  void acquire() override { hold_mu_.lock(); }
  void release() override { hold_mu_.unlock(); }

 private:
  // "lost rank P (...): why" for the first rank that is gone and whose messages to us have all
  // been read, or "" (the caller holds the hub's lock).
  std::string lost_peer_locked() {
    for (int p = 0; p < world(); ++p)
      if (p != rank() && !hub_->gone[size_t(p)].empty() && hub_->queue(p, rank()).empty())
        return "lost " + describe(p) + ": " + hub_->gone[size_t(p)];
    return "";
  }

  std::shared_ptr<InProcessRing::Hub> hub_;
  CommOptions opt_;
  FailureState failures_;
  std::mutex hold_mu_;
};

}  // namespace

InProcessRing::InProcessRing(Options options) : hub_(std::make_shared<Hub>()) {
  if (options.world < 1) throw RuntimeError("an in-process ring needs at least one rank");
  if (options.queue_messages < 1) throw RuntimeError("an in-process ring needs room for one message per direction");
  hub_->opt = options;
  hub_->comm.job_id = options.job_id;
  hub_->comm.chunk_bytes = options.chunk_bytes;
  hub_->comm.ring_order = options.ring_order;
  hub_->comm.stall_timeout_s = options.stall_timeout_s;
  for (int r = 0; r < options.world; ++r) hub_->comm.peers.push_back(PeerAddress{"in-process", r});
  hub_->job_hash = fnv1a(options.job_id);
  hub_->queues.resize(size_t(options.world) * size_t(options.world));
  hub_->gone.assign(size_t(options.world), "");
  hub_->handed_out.assign(size_t(options.world), false);
}

InProcessRing::~InProcessRing() = default;

std::unique_ptr<Link> InProcessRing::link(int r) {
  std::lock_guard lk(hub_->mu);
  if (r < 0 || r >= hub_->opt.world || hub_->handed_out[size_t(r)])
    throw RuntimeError("in-process ring: rank " + std::to_string(r) + " is not there to hand out");
  hub_->handed_out[size_t(r)] = true;
  return std::make_unique<InProcessLink>(hub_, r);
}

void InProcessRing::kill(int r, const std::string& why) { hub_->mark_gone(r, why); }

void InProcessRing::post(int from, int to, const Header& h, zmq::message_t payload) {
  {
    std::lock_guard lk(hub_->mu);
    hub_->queue(from, to).push_back(Message{h, std::move(payload)});
  }
  hub_->changed.notify_all();
}

Header InProcessRing::data_header(int from) const {
  Header h;
  h.kind = MsgKind::Data;
  h.sender = static_cast<uint16_t>(from);
  h.job = hub_->job_hash;
  return h;
}

}  // namespace rt::net
