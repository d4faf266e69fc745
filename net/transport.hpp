// Transport: the Link (link.hpp) of ranks on several hosts, over ZeroMQ. It knows nothing
// about collectives beyond moving headed messages between ring neighbours. Its jobs, a file
// each:
//   transport.cpp            the sockets, sending and receiving data, waiting, the thread
//   transport_handshake.cpp  who may join (security policy) and the handshake with every rank
//   transport_liveness.cpp   heartbeats, lost and silent peers, what the gatekeeper saw
//   transport_service.cpp    the router's traffic: service requests, hellos, goodbyes
//
// Sockets, all on the one listed port per rank:
//   - one ROUTER bound to this rank's port. It receives control traffic (hello, heartbeat,
//     goodbye, service requests) and SENDS data to the other ranks' dealers;
//   - one DEALER per other rank, connected to that rank's port. It sends our control
//     traffic to that rank and RECEIVES the data that rank sends us;
//   - with CommOptions::streams S > 1, S-1 more DEALERs per other rank (identity
//     "<the first's>/<k>"), which only say hello and then receive data too: the sender's
//     router sends its data messages to the S dealers in turn and the receiver reads them
//     in the same turn, so that they stay in order without sequence numbers (each
//     connection is FIFO, and both sides count the data messages between them).
// So data and control never share a queue: the background thread can drain control
// between collectives without ever touching data, and data is flow-controlled by the
// ZeroMQ high-water marks (bounded memory in flight) instead of piling up somewhere.
//
// The sockets are used by one thread at a time: the background thread while no collective
// runs, the collective's thread (via Hold) while one does. Hold wakes the background
// thread through an eventfd and takes the socket mutex from it.
//
// With a job key every socket speaks CurveZMQ with the job's keypair: the router is a CURVE
// server whose clients the gatekeeper (gatekeeper.hpp, its own thread) checks, the dealers
// are CURVE clients that only complete a connection to a server holding the same key. The
// router is pinned to one ZeroMQ I/O thread and the dealers to the other, so encrypting
// what we send and decrypting what we receive run on two cores.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "failure_state.hpp"
#include "gatekeeper.hpp"
#include "hello_wire.hpp"
#include "link.hpp"
#include "ringtrain/net/communicator.hpp"
#include "wire_format.hpp"

namespace rt::net {

class Transport final : public Link {
 public:
  explicit Transport(CommOptions options);
  ~Transport() override;

  int rank() const override { return opt_.rank; }
  int world() const override { return static_cast<int>(opt_.peers.size()); }
  const CommOptions& options() const override { return opt_; }
  uint64_t job_hash() const override { return job_hash_; }
  // "lost rank 2 (10.0.0.3:29500): its connection closed (...)"
  std::string connection_closed(int rank) const;

  // The Link (link.hpp); the sockets are the collective's while it holds the link.
  void check_healthy() override;
  bool try_send(int to, const Header& h, zmq::message_t& payload) override;
  bool try_recv(int from, Header& h, zmq::message_t& payload) override;
  bool wait(int from, bool want_recv, int timeout_ms) override;
  // Every few ms: answers control traffic, sends due heartbeats, checks peers' liveness.
  void tick() override;
  // Closes the data socket, so that libzmq drops (and releases) every queued message.
  // Service requests are no longer answered afterwards; the link is broken anyway.
  void drop_outgoing_data() override;
  [[noreturn]] void fail(const std::string& message, bool peer_lost) override;
  void set_service_handler(ServiceHandler h) override;
  void abort(const std::string& reason) override;
  std::string failure() const override;
  std::vector<double> silence_seconds() override;

 private:
  using FailKind = FailureState::Kind;

  // Hold: the background thread hands the sockets over (woken through an eventfd).
  void acquire() override;
  void release() override;

  // Refuses plaintext unless every peer is on loopback or --insecure; logs the warning.
  void check_security_policy();
  void create_sockets();
  void bind_router();
  void connect_dealers();
  void handshake();
  // The gatekeeper's news about the connection to one rank (runs on its thread).
  void on_link(const LinkEvent& e);
  // The reason a missing rank never joined, as far as the connection to it tells.
  std::string link_problem(int rank);
  void background_loop();
  // Poll router (+ one dealer) + wake fd for up to timeout_ms; true if any was ready.
  bool poll_for(zmq::socket_t* dealer, int timeout_ms);
  // Drains the router: heartbeats, goodbyes, service requests, late hellos.
  void serve_router();
  void handle_hello(const std::string& identity, const std::string& text, const std::string& from);
  // The hello of stream k of the rank whose first dealer is `first` (see the socket layout).
  void handle_stream_hello(const std::string& first, int k, const Hello& hello, const std::string& identity,
                           const std::string& from);
  // Our dealer of stream k to rank p (k = 0: the first one).
  zmq::socket_t& dealer(int p, int k) { return k == 0 ? dealers_[size_t(p)] : extra_dealers_[size_t(p)][size_t(k - 1)]; }
  // Which stream the next data message to or from rank p takes.
  int send_stream(int p) const { return int(data_sent_[size_t(p)] % uint64_t(streams_)); }
  int recv_stream(int p) const { return int(data_received_[size_t(p)] % uint64_t(streams_)); }
  // Every extra stream to rank p (to every rank) answered our hello and said its own.
  bool streams_joined(int p) const;
  bool streams_joined() const;
  void send_stream_hello(int p, int k);
  // Handles a HelloOk that rank p sent back to our hello; returns the refusal message, if any.
  std::string take_hello_answer(int p, const std::string& payload);
  void reply(const std::string& identity, MsgKind kind, const std::string& text);
  void send_control(int to, MsgKind kind, const std::string& text);
  // Heartbeats when due, liveness of every peer.
  void housekeeping(bool in_collective);
  void record_failure(FailKind kind, const std::string& message) { failures_.record(kind, message); }
  void close_sockets(bool clean);

  CommOptions opt_;
  uint64_t job_hash_;
  Hello wire_hello_;        // ours as we send it: whole with a key, the fingerprint form without
  std::string hello_text_;  // encoded

  zmq::context_t ctx_;
  std::unique_ptr<Gatekeeper> gate_;
  std::unique_ptr<RefusalLog> hello_refusals_;  // bounded log of refused hellos
  zmq::socket_t router_;
  std::vector<zmq::socket_t> dealers_;  // index = rank; empty socket at our own rank
  int streams_ = 1;                     // CommOptions::streams
  std::string identity_;                // our first dealers' routing id
  std::vector<std::vector<zmq::socket_t>> extra_dealers_;  // [rank][k - 1]: our streams 1..S-1 to it
  // [rank][k - 1]: the routing id of that rank's stream k at our router ("" until its hello),
  // and whether our own stream k to it was answered. Guarded by sock_mu_.
  std::vector<std::vector<std::string>> stream_identity_;
  std::vector<std::vector<bool>> stream_acked_;
  std::vector<uint64_t> data_sent_, data_received_;  // data messages, per rank
  int wake_fd_ = -1;

  // Peer state, guarded by sock_mu_ (only the holder of the sockets touches it).
  std::unordered_map<std::string, int> rank_of_identity_;
  std::vector<std::string> identity_of_rank_;
  std::vector<Clock::time_point> last_seen_;
  std::vector<Clock::time_point> departed_at_;  // time_point{} while present
  std::vector<bool> heard_, acked_;
  std::vector<bool> answered_;  // we answered a hello claiming this rank (accepted or not)
  std::atomic<bool> handshake_done_{false};
  Clock::time_point next_heartbeat_, next_tick_;

  // What the gatekeeper saw of the connection to each rank (guarded by link_mu_).
  std::mutex link_mu_;
  std::vector<std::string> link_problem_;        // last handshake failure, for "never joined"
  std::vector<Clock::time_point> link_down_at_;  // time_point{} while connected
  Clock::duration heartbeat_every_;

  std::mutex handler_mu_;
  ServiceHandler handler_;

  FailureState failures_;

  std::mutex sock_mu_;
  std::atomic<int> want_{0};
  std::mutex want_mu_;
  std::condition_variable want_cv_;
  std::atomic<bool> stop_{false};
  std::thread background_;
};

// Shared by the transport's files.
namespace transport_detail {
// One frame, copied; false when the socket would block or is closed.
bool send_frame(zmq::socket_t& s, const void* data, size_t size, int flags);
// "12.5 s"
std::string fmt_seconds(double s);
}  // namespace transport_detail

}  // namespace rt::net
