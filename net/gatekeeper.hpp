// The gatekeeper: who may connect to this rank, and what became of every connection. It
// runs on a thread of its own, so that it answers and notices things promptly whatever the
// rest of the communicator is doing (a collective may hold the data sockets for minutes).
//
//   - With a job key, it is the ZAP handler of the context (inproc://zeromq.zap.01): a CURVE
//     server asks it about every client that completed the key exchange, and it accepts only
//     clients presenting the job's own public key (all ranks share one keypair). Without a
//     ZAP handler, a CURVE server would accept any client that knows its public key.
//   - It watches the listening socket through a ZeroMQ monitor: a connection that fails the
//     security handshake (no key, another key, garbage, a timeout) is logged with its source
//     address, read when the monitor reports the accepted connection (ZeroMQ 4.3 reports a
//     descriptor, not an address: a connection closed or reset before that read is logged as
//     from "an address that was gone"), bounded by RefusalLog. At most
//     max_waiting_handshakes() connections wait to authenticate at once: one accepted beyond
//     that is shut down at once, so a stranger's flood never takes the descriptors that the
//     rank's checkpoints need, however many connections it holds.
//   - It watches each connection to another rank: the handshake succeeding or failing (a
//     process at that address without the job's key), a message failing its integrity check
//     after the handshake (CURVE then drops the connection), and the connection closing.
//     These are handed to the transport through a callback.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "refusal_log.hpp"
#include "ringtrain/net/job_key.hpp"

namespace rt::net {

// How many connections accepted within one handshake deadline may still be authenticating:
// half the open-file limit, at most 8192 and at least 64 (a job's ranks and clients are a
// few dozen). Shedding makes a flooder that reconnects at once open connections as fast as
// it can (on a 2-core machine shared with it, a bound of 256 under 5,000 held connections
// cost the job 45% of its speed, mostly the flooder's own CPU): the bound is for the limit,
// not for ordinary floods, which the handshake deadline and the firewall's per-source
// limits handle.
size_t max_waiting_handshakes();

struct LinkEvent {
  enum class Kind {
    Up,               // handshake done (with a key: the peer proved it holds the job key)
    HandshakeFailed,  // the process at the peer's address did not complete the handshake
    Broken,           // after the handshake: a message failed its integrity check, connection dropped
    Down,             // an established connection closed
  };
  int rank = -1;
  Kind kind = Kind::Up;
  std::string why;  // for HandshakeFailed and Broken: what went wrong, in words
};

class Gatekeeper {
 public:
  using Log = std::function<void(const std::string&)>;
  // `key` empty: plaintext, no ZAP handler (connections are still watched).
  Gatekeeper(zmq::context_t& ctx, const std::optional<JobKey>& key, Log log);
  ~Gatekeeper();
  Gatekeeper(const Gatekeeper&) = delete;
  Gatekeeper& operator=(const Gatekeeper&) = delete;

  // Call before the socket binds / connects, and before start().
  // `port`: the one it listens on; `handshake_ms`: its handshake deadline (see on_listener_event).
  void watch_listener(zmq::socket_t& router, int port, int handshake_ms);
  void watch_link(zmq::socket_t& dealer, int rank);
  // Starts the thread. `on_link` runs on it: keep it short and thread-safe.
  void start(std::function<void(const LinkEvent&)> on_link);
  // Stops the thread (also done by the destructor). The watched sockets may be closed after.
  void stop();

 private:
  struct Watch;
  void loop();
  void answer_zap();
  void on_listener_event(Watch& w, uint16_t event, uint32_t value);
  void on_link_event(Watch& w, uint16_t event, uint32_t value);
  zmq::socket_t& monitor(zmq::socket_t& watched, int events);

  zmq::context_t& ctx_;
  std::optional<JobKey> key_;
  RefusalLog refusals_;
  zmq::socket_t zap_;
  std::vector<std::unique_ptr<Watch>> watches_;
  std::function<void(const LinkEvent&)> on_link_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Readable words for a ZeroMQ handshake failure code (ZMQ_PROTOCOL_ERROR_* or an errno).
std::string handshake_failure_text(uint16_t event, uint32_t value);

// Takes the next event from a monitor's PAIR socket without waiting; false when none.
bool next_monitor_event(zmq::socket_t& pair, uint16_t& event, uint32_t& value);

}  // namespace rt::net
