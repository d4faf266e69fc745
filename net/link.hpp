// Link: what the collectives need of the connections between the ranks of a ring, and
// nothing more. Gloo runs its algorithms over an abstract pair; the ring algorithms here
// (pipeline.cpp, ring_allreduce.cpp, chain_broadcast.cpp, ring_gather.cpp) run over a Link:
//   - headed messages to and from any other rank, never blocking: a full queue says "not
//     now" (try_send), an empty one "nothing yet" (try_recv);
//   - a wait for data or news, and a tick that notices lost peers;
//   - one failure state: the first failure is kept, thrown from then on, and breaks the
//     link for good (a collective half done leaves the ranks out of step).
// Two implementations: Transport (transport.hpp), the ranks' ZeroMQ sockets on their one
// listed port each, and InProcessRing (in_process_link.hpp), threads of one process with
// bounded queues between them, for tests of every collective, wire and hostile chunk
// without sockets.
//
// Threading: the collective's thread uses the link while it holds it (Hold); abort(),
// failure() and the service handler may be used from any thread.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "ringtrain/net/communicator.hpp"
#include "wire_format.hpp"

namespace rt::net {

using Clock = std::chrono::steady_clock;

class Link {
 public:
  virtual ~Link() = default;

  virtual int rank() const = 0;
  virtual int world() const = 0;
  // chunk_bytes and stall_timeout_s are what the collectives read; peers names the ranks.
  virtual const CommOptions& options() const = 0;
  // The job's hash, in every data header.
  virtual uint64_t job_hash() const = 0;
  // "rank 2 (10.0.0.3:29500)": how messages name a rank.
  std::string describe(int r) const { return "rank " + std::to_string(r) + " (" + options().peers[r].text() + ")"; }

  // Exclusive use of the link for one collective.
  class Hold {
   public:
    explicit Hold(Link& l) : l_(l) { l_.acquire(); }
    ~Hold() { l_.release(); }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    Link& l_;
  };

  // --- the following only while holding ---
  // The sequence number of a new collective (the same on every rank).
  uint64_t begin_collective() { return ++seq_; }
  uint64_t current_collective() const { return seq_; }
  // Throws the recorded failure, if any.
  virtual void check_healthy() = 0;
  // Sends header + payload to rank `to`. False when its queue is full (try again later);
  // the payload is consumed only on success. Throws PeerLost if `to` is gone.
  virtual bool try_send(int to, const Header& h, zmq::message_t& payload) = 0;
  // Takes the next data message of this job that rank `from` sent us, if there is one
  // (anything else is dropped, a bounded number per call).
  virtual bool try_recv(int from, Header& h, zmq::message_t& payload) = 0;
  // Sleeps until data from `from` arrives (when want_recv), other traffic arrives, or
  // timeout_ms passes; then does tick(). False when it slept the whole time. Throws on
  // failure or abort.
  virtual bool wait(int from, bool want_recv, int timeout_ms) = 0;
  // Cheap; call often: answers other traffic, keeps liveness, throws on failure or abort.
  virtual void tick() = 0;
  // After a failure: drops (and so releases) every message this rank queued to send, e.g.
  // zero-copy chunks a silent peer will never take.
  virtual void drop_outgoing_data() = 0;
  // Records the first failure (later ones are ignored) and throws it: PeerLost when
  // `peer_lost`, else RuntimeError.
  [[noreturn]] virtual void fail(const std::string& message, bool peer_lost) = 0;

  // --- any thread ---
  virtual void set_service_handler(ServiceHandler h) = 0;
  virtual void abort(const std::string& reason) = 0;
  virtual std::string failure() const = 0;
  // Seconds since each rank was last heard from (0 for this rank). Takes the link.
  virtual std::vector<double> silence_seconds() = 0;

 protected:
  virtual void acquire() = 0;
  virtual void release() = 0;

 private:
  uint64_t seq_ = 0;
};

}  // namespace rt::net
