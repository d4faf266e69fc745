// InProcessRing: the ranks of a ring as threads of one process, each with a Link (link.hpp)
// to bounded queues between them instead of sockets. The collectives run over it exactly as
// over the ZeroMQ transport, so every collective, every wire and every hostile chunk can be
// tested in milliseconds; the real-socket tests stay for what only sockets do (handshake,
// keys, liveness, firewalls).
//
// What it keeps of a network: a queue per direction bounded like the transport's high-water
// mark (a full one says "not now"), messages of a rank that died still delivered before its
// death is noticed (as TCP delivers what was sent before the connection closed), a rank that
// fails telling the others (as the transport's Failing notice does), and each link's own
// failure state. Payloads travel as zmq::message_t; a sent one is copied onto the queue and
// released at once, as libzmq releases a zero-copy message once it has written it out.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "link.hpp"

namespace rt::net {

class InProcessRing {
 public:
  struct Options {
    int world = 2;
    size_t chunk_bytes = kDefaultChunkBytes;
    double stall_timeout_s = 30;
    size_t queue_messages = 16;  // per direction, as the transport's data high-water mark
    std::string job_id = "in-process";
    std::vector<int> ring_order;  // CommOptions::ring_order
  };
  explicit InProcessRing(Options options);
  ~InProcessRing();

  // Rank r's link, once each (a Communicator takes it). Links and ring may go in any order.
  std::unique_ptr<Link> link(int r);
  // As if rank r's process died: once what it sent has been taken, every other rank's link
  // fails with PeerLost naming it and `why`.
  void kill(int r, const std::string& why);
  // Queues a message from `from` to `to` past the queue bound: a test's hostile rank, which
  // writes its whole script at once.
  void post(int from, int to, const Header& h, zmq::message_t payload);
  // The header a well-behaved `from` puts on data (job hash filled in).
  Header data_header(int from) const;

  struct Hub;

 private:
  std::shared_ptr<Hub> hub_;
};

}  // namespace rt::net
