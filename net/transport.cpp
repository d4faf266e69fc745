// Transport: the sockets, sending and receiving data, waiting, and the background thread
// that keeps control traffic going between collectives (see transport.hpp for the socket
// layout and the threading rule).
#include "transport.hpp"

#include <malloc.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>

#include "addresses.hpp"
#include "open_files.hpp"
#include "port_holder.hpp"

namespace rt::net {

namespace transport_detail {

bool send_frame(zmq::socket_t& s, const void* data, size_t size, int flags) {
  zmq::message_t m(data, size);
  return zmq_msg_send(m.handle(), s.handle(), flags) >= 0;
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace transport_detail

using transport_detail::send_frame;

namespace {

// How long a connection to the listening port may take to pass the security handshake. It
// bounds what a stranger's silent connection costs (one descriptor, this long); 10 s let
// 200 connections a second hold 2,000 descriptors.
constexpr int kListenerHandshakeMs = 4000;

// Chunks queued per direction: bounds memory in flight (about 2 x this x chunk bytes).
// RINGTRAIN_NET_HWM and RINGTRAIN_NET_IO_THREADS override the defaults, for tuning runs.
int data_high_water_mark() {
  const char* e = std::getenv("RINGTRAIN_NET_HWM");
  return e ? std::atoi(e) : 16;
}
// Sending and receiving each get a ZeroMQ I/O thread when both directions are busy.
int io_threads() {
  const char* e = std::getenv("RINGTRAIN_NET_IO_THREADS");
  return e ? std::atoi(e) : 2;
}

// libzmq allocates every received chunk on its I/O thread and we free it on ours. With
// glibc's defaults (256 KiB chunks are above the 128 KiB mmap threshold, and the I/O
// thread's arena gives freed pages back at once) each chunk costs fresh pages: page faults
// and zeroing inside the kernel's receive copy, measured at ~5% of the profile and up to
// 1.5x loopback all-reduce time. Keep chunk-sized blocks on the heap and the heap's free
// top in place instead. Process-wide, so the bounds stay modest: blocks above 32 MiB are
// still mmapped, and at most 64 MiB of free heap top is kept.
void keep_chunk_memory(size_t chunk_bytes) {
  const size_t mmap_above = std::clamp<size_t>(2 * chunk_bytes + 4096, 128 << 10, 32 << 20);
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_above));
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

void set_common_options(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);  // never wait for a dead peer on close
  s.set(zmq::sockopt::ipv6, 1);
}

void default_log(const std::string& line) { std::fprintf(stderr, "ringtrain: %s\n", line.c_str()); }

// Raised before the first listen; said once per process (an elastic job makes a transport
// for every ring).
void note_open_file_limit(const std::function<void(const std::string&)>& log) {
  static std::once_flag once;
  std::call_once(once, [&] {
    const std::string warning = open_file_limit_warning(raise_open_file_limit());
    if (!warning.empty()) log(warning);
  });
}

}  // namespace

Transport::Transport(CommOptions options) : opt_(std::move(options)), ctx_(io_threads()) {
  const int n = world();
  if (n < 1) throw UsageError("--peers is empty; list HOST:PORT of every rank in rank order");
  if (opt_.rank < 0 || opt_.rank >= n)
    throw UsageError("--rank " + std::to_string(opt_.rank) + " is outside --peers, which lists " + std::to_string(n) +
                     " ranks; use a rank from 0 to " + std::to_string(n - 1));
  if (opt_.peer_timeout_s <= 0 || opt_.connect_timeout_s <= 0)
    throw UsageError("connect and peer timeouts must be positive");
  if (opt_.stall_timeout_s < 0) throw UsageError("--stall-timeout must be 0 (off) or a number of seconds");
  if (opt_.chunk_bytes < 4) throw UsageError("chunk bytes must be at least 4");
  if (opt_.streams < 1 || opt_.streams > kMaxStreams)
    throw UsageError("--streams " + std::to_string(opt_.streams) + " is not 1 to " + std::to_string(kMaxStreams) +
                     " (TCP connections per ring link)");
  streams_ = opt_.streams;
  data_sent_.assign(size_t(n), 0);
  data_received_.assign(size_t(n), 0);
  stream_identity_.assign(size_t(n), std::vector<std::string>(size_t(streams_ - 1)));
  stream_acked_.assign(size_t(n), std::vector<bool>(size_t(streams_ - 1), false));
  if (!opt_.log) opt_.log = default_log;
  note_open_file_limit(opt_.log);
  hello_refusals_ = std::make_unique<RefusalLog>(opt_.log, "handshake");
  job_hash_ = fnv1a(opt_.job_id);
  keep_chunk_memory(opt_.chunk_bytes);
  handler_ = opt_.service_handler;
  // Without a key anyone may be listening: send only a fingerprint of job id and config.
  const Hello full{opt_.job_id, n, opt_.rank, opt_.config_text, ""};
  wire_hello_ = opt_.key ? full : fingerprint_form(full);
  hello_text_ = encode_hello(wire_hello_);
  if (hello_text_.size() > kMaxControlBytes)
    throw UsageError("the job id and config are " + std::to_string(hello_text_.size()) + " bytes; at most " +
                     std::to_string(kMaxControlBytes) + " fit in a handshake");
  heartbeat_every_ = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::clamp(opt_.peer_timeout_s / 6, 0.02, 1.0)));
  identity_of_rank_.resize(n);
  last_seen_.assign(n, Clock::now());
  departed_at_.assign(n, Clock::time_point{});
  heard_.assign(n, false);
  acked_.assign(n, false);
  answered_.assign(n, false);
  heard_[opt_.rank] = acked_[opt_.rank] = answered_[opt_.rank] = true;
  link_problem_.assign(n, "");
  link_down_at_.assign(n, Clock::time_point{});
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw RuntimeError("eventfd failed; cannot create the communicator");

  try {
    check_security_policy();
    create_sockets();
    gate_->start([this](const LinkEvent& e) { on_link(e); });
    bind_router();
    connect_dealers();
    handshake();
  } catch (const std::exception& e) {
    record_failure(FailKind::Other, e.what());  // peers that joined hear why we leave
    close_sockets(false);
    throw;
  }
  background_ = std::thread([this] { background_loop(); });
}

Transport::~Transport() {
  stop_ = true;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  want_cv_.notify_all();
  if (background_.joinable()) background_.join();
  close_sockets(!failures_.failed());
}

void Transport::close_sockets(bool clean) {
  // The gatekeeper's thread stops first: a connection attempt from now on waits for an
  // authenticator that no longer answers (and times out) instead of being let in.
  if (gate_) gate_->stop();
  if (!dealers_.empty()) {
    for (int p = 0; p < static_cast<int>(dealers_.size()); ++p) {
      if (p == rank() || !dealers_[p]) continue;
      if (clean) {
        send_control(p, MsgKind::Goodbye, "");
      } else {
        send_control(p, MsgKind::Failing, failure());
      }
      // Clean: give queued data and the goodbye a bounded time to leave. Failing: a short
      // chance for the notice, never a hang on a dead peer.
      dealers_[p].set(zmq::sockopt::linger, clean ? 2000 : 100);
    }
  }
  for (auto& streams : extra_dealers_)
    for (auto& d : streams)
      if (d) d.set(zmq::sockopt::linger, clean ? 2000 : 100), d.close();
  if (router_) router_.set(zmq::sockopt::linger, clean ? 2000 : 0);
  for (auto& d : dealers_)
    if (d) d.close();
  if (router_) router_.close();
  gate_.reset();  // its sockets belong to the context too
  ctx_.close();
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
}

void Transport::create_sockets() {
  gate_ = std::make_unique<Gatekeeper>(ctx_, opt_.key, opt_.log);
  const bool pin = io_threads() >= 2;
  // What a dealer may receive: a data chunk (no collective sends a larger message; bf16
  // chunks are half as large) or a handshake answer.
  const size_t chunk = std::max<size_t>(4, opt_.chunk_bytes / 4 * 4);
  const int64_t max_in = static_cast<int64_t>(std::max(chunk, kMaxControlBytes) + kFrameOverheadBytes);

  router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
  set_common_options(router_);
  router_.set(zmq::sockopt::router_mandatory, 1);  // a full or missing peer is an error, not a silent drop
  router_.set(zmq::sockopt::sndhwm, data_high_water_mark());
  // The router receives only control traffic and service requests, from anyone who passes
  // the security handshake: small frames, short queues, and a handshake deadline.
  router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxControlBytes + kFrameOverheadBytes));
  router_.set(zmq::sockopt::rcvhwm, 64);
  // A rank's handshake takes a few round trips (milliseconds, a second on a lossy far link);
  // a stranger that connects and says nothing holds a descriptor until this deadline.
  router_.set(zmq::sockopt::handshake_ivl, kListenerHandshakeMs);
  if (pin) router_.set(zmq::sockopt::affinity, uint64_t{1});  // I/O thread 0: everything we send
  if (opt_.key) {
    router_.set(zmq::sockopt::curve_server, true);
    router_.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(opt_.key->secret_key.data(), 32));
  }
  gate_->watch_listener(router_, opt_.peers[size_t(opt_.rank)].port, kListenerHandshakeMs);

  std::random_device rd;
  identity_ = "rank" + std::to_string(rank()) + "-" + std::to_string(getpid()) + "-" + std::to_string(rd());
  dealers_.resize(world());
  extra_dealers_.resize(size_t(world()));
  for (int p = 0; p < world(); ++p)
    if (p != rank())
      for (int k = 1; k < streams_; ++k) extra_dealers_[size_t(p)].emplace_back();
  for (int p = 0; p < world(); ++p)
    for (int k = 0; k < streams_ && p != rank(); ++k) {
      auto& d = dealer(p, k);
      d = zmq::socket_t(ctx_, zmq::socket_type::dealer);
      set_common_options(d);
      d.set(zmq::sockopt::routing_id, k == 0 ? identity_ : identity_ + "/" + std::to_string(k));
      d.set(zmq::sockopt::rcvhwm, data_high_water_mark());
      d.set(zmq::sockopt::sndhwm, 64);
      d.set(zmq::sockopt::maxmsgsize, max_in);
      d.set(zmq::sockopt::reconnect_ivl, 100);
      d.set(zmq::sockopt::reconnect_ivl_max, 1000);
      if (pin) d.set(zmq::sockopt::affinity, uint64_t{2});  // I/O thread 1: everything we receive
      if (opt_.key) {
        // Every rank has the same keypair: the server must hold it too, or no connection.
        d.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(opt_.key->public_key.data(), 32));
        d.set(zmq::sockopt::curve_publickey, zmq::const_buffer(opt_.key->public_key.data(), 32));
        d.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(opt_.key->secret_key.data(), 32));
      }
      gate_->watch_link(d, p);
    }
}

void Transport::bind_router() {
  const PeerAddress& me = opt_.peers[rank()];
  const std::string host = numeric_host(me.host);
  router_.set(zmq::sockopt::ipv6, host[0] == '[' ? 1 : 0);  // an IPv4 address binds an IPv4 socket
  std::string endpoint = "tcp://" + host + ":" + std::to_string(me.port);
  if (zmq_bind(router_.handle(), endpoint.c_str()) != 0) {
    int err = zmq_errno();
    std::string port = std::to_string(me.port);
    if (err == EADDRINUSE) {
      std::string holder = describe_port_holder(me.port);
      throw RuntimeError("port " + port + " (" + me.text() + ", rank " + std::to_string(rank()) + ") is already in use" +
                         (holder.empty() ? "" : " by " + holder) +
                         "; stop that process or give this rank another port in --peers");
    }
    if (err == EADDRNOTAVAIL)
      throw UsageError("cannot bind " + me.text() + ": that address is not on this host; rank " +
                       std::to_string(rank()) + "'s --peers entry must be an address of the host it runs on");
    if (err == EACCES)
      throw RuntimeError("binding port " + port + " needs privileges; use a port above 1023 in --peers");
    throw RuntimeError("cannot bind " + me.text() + ": " + zmq_strerror(err));
  }
}

void Transport::connect_dealers() {
  for (int p = 0; p < world(); ++p) {
    if (p == rank()) continue;
    try {
        for (int k = 0; k < streams_; ++k)
        dealer(p, k).connect("tcp://" + numeric_host(opt_.peers[p].host) + ":" + std::to_string(opt_.peers[p].port));
    } catch (const zmq::error_t& e) {
      throw UsageError("cannot use " + describe(p) + " as a peer address: " + e.what());
    }
    // Queued until the connection passed the security handshake: never sent to a process
    // that does not hold the job key.
    send_control(p, MsgKind::Hello, hello_text_);
    for (int k = 1; k < streams_; ++k) send_stream_hello(p, k);
  }
}

void Transport::send_stream_hello(int p, int k) {
  Header h;
  h.kind = MsgKind::Hello;
  h.sender = static_cast<uint16_t>(rank());
  h.job = job_hash_;
  if (send_frame(dealer(p, k), &h, sizeof h, ZMQ_SNDMORE | ZMQ_DONTWAIT))
    send_frame(dealer(p, k), hello_text_.data(), hello_text_.size(), ZMQ_DONTWAIT);
}

bool Transport::streams_joined(int p) const {
  for (int k = 1; k < streams_ && p != rank(); ++k)
    if (stream_identity_[size_t(p)][size_t(k - 1)].empty() || !stream_acked_[size_t(p)][size_t(k - 1)]) return false;
  return true;
}

bool Transport::streams_joined() const {
  for (int p = 0; p < world(); ++p)
    if (!streams_joined(p)) return false;
  return true;
}

void Transport::send_control(int to, MsgKind kind, const std::string& text) {
  Header h;
  h.kind = kind;
  h.sender = static_cast<uint16_t>(rank());
  h.job = job_hash_;
  h.seq = current_collective();
  if (send_frame(dealers_[to], &h, sizeof h, ZMQ_SNDMORE | ZMQ_DONTWAIT))
    send_frame(dealers_[to], text.data(), text.size(), ZMQ_DONTWAIT);
}

void Transport::fail(const std::string& message, bool peer_lost) {
  record_failure(peer_lost ? FailKind::PeerLost : FailKind::Other, message);
  failures_.throw_it();
}

void Transport::check_healthy() { failures_.throw_if_failed(); }

std::string Transport::failure() const { return failures_.message(); }

void Transport::abort(const std::string& reason) {
  record_failure(FailKind::Aborted, reason);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void Transport::drop_outgoing_data() {
  if (router_) router_.close();  // linger 0: queued messages are dropped, not sent
}

void Transport::set_service_handler(ServiceHandler h) {
  std::lock_guard lk(handler_mu_);
  handler_ = std::move(h);
}

bool Transport::try_send(int to, const Header& h, zmq::message_t& payload) {
  const int k = send_stream(to);
  const std::string& id = k == 0 ? identity_of_rank_[to] : stream_identity_[size_t(to)][size_t(k - 1)];
  if (zmq_send(router_.handle(), id.data(), id.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
    int err = zmq_errno();
    if (err == EAGAIN || err == EINTR) return false;
    if (err == EHOSTUNREACH)
      fail(connection_closed(to), true);
    fail("sending to " + describe(to) + " failed: " + zmq_strerror(err), false);
  }
  // After the routing frame was accepted, the rest of the message is accepted too.
  zmq_send(router_.handle(), &h, sizeof h, ZMQ_SNDMORE);
  zmq_msg_send(payload.handle(), router_.handle(), 0);
  ++data_sent_[size_t(to)];
  return true;
}

bool Transport::try_recv(int from, Header& h, zmq::message_t& payload) {
  zmq::socket_t& d = dealer(from, recv_stream(from));  // the stream the next data message comes on
  for (int skipped = 0; skipped < 256; ++skipped) {  // bounded: a stream of junk cannot hold us here
    zmq::message_t head, body;
    if (zmq_msg_recv(head.handle(), d.handle(), ZMQ_DONTWAIT) < 0) return false;
    last_seen_[from] = Clock::now();
    // Parts of a message arrive together; data is exactly header + payload.
    const bool two = head.more() && zmq_msg_recv(body.handle(), d.handle(), ZMQ_DONTWAIT) >= 0 && !body.more();
    for (bool more = body.more(); more;) {
      zmq::message_t extra;
      more = zmq_msg_recv(extra.handle(), d.handle(), ZMQ_DONTWAIT) >= 0 && extra.more();
    }
    if (two && decode_header(head.data(), head.size(), h) && h.kind == MsgKind::Data && h.job == job_hash_) {
      payload = std::move(body);
      ++data_received_[size_t(from)];
      return true;
    }
    // A late handshake reply or a stray message: not data, skip it.
  }
  return false;
}

bool Transport::poll_for(zmq::socket_t* dealer, int timeout_ms) {
  zmq_pollitem_t items[3] = {{nullptr, wake_fd_, ZMQ_POLLIN, 0}, {router_.handle(), 0, ZMQ_POLLIN, 0}, {}};
  int n = router_ ? 2 : 1;  // the router is gone after drop_outgoing_data
  if (dealer) items[n++] = {dealer->handle(), 0, ZMQ_POLLIN, 0};
  const int ready = zmq_poll(items, n, timeout_ms);
  if (ready < 0 && zmq_errno() != EINTR)
    record_failure(FailKind::Other, std::string("poll failed: ") + zmq_strerror(zmq_errno()));
  if (items[0].revents & ZMQ_POLLIN) {
    uint64_t v;
    (void)!read(wake_fd_, &v, sizeof v);
  }
  return ready > 0;
}

bool Transport::wait(int from, bool want_recv, int timeout_ms) {
  auto until_heartbeat = std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat_ - Clock::now()).count();
  int ms = static_cast<int>(std::clamp<long long>(until_heartbeat, 0, timeout_ms));
  const bool woken = poll_for(want_recv ? &dealer(from, recv_stream(from)) : nullptr, ms);
  next_tick_ = Clock::time_point{};
  tick();
  return woken;
}

void Transport::tick() {
  const auto now = Clock::now();
  if (now >= next_tick_) {
    serve_router();
    housekeeping(true);
    next_tick_ = now + std::chrono::milliseconds(5);
  }
  failures_.throw_if_failed();
}

void Transport::background_loop() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);  // signals belong to the application's threads
  while (!stop_) {
    {
      std::unique_lock lk(sock_mu_);
      while (!stop_ && want_ == 0) {
        auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat_ - Clock::now()).count();
        poll_for(nullptr, static_cast<int>(std::clamp<long long>(until, 0, 200)));
        if (want_ != 0 || stop_) break;
        serve_router();
        housekeeping(false);
      }
    }
    std::unique_lock lk(want_mu_);
    want_cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return stop_ || want_ == 0; });
  }
}

void Transport::acquire() {
  want_.fetch_add(1);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  sock_mu_.lock();
}

void Transport::release() {
  sock_mu_.unlock();
  {
    std::lock_guard lk(want_mu_);
    want_.fetch_sub(1);
  }
  want_cv_.notify_all();
}

}  // namespace rt::net
