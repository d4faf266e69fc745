// Transport: see transport.hpp for the socket layout and the threading rule.
#include "transport.hpp"

#include <malloc.h>
#include <netdb.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>

#include "handshake.hpp"
#include "open_files.hpp"
#include "port_holder.hpp"

namespace rt::net {
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

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The numeric address of `host`, bracketed if IPv6. Binding and connecting both use it
// (ZeroMQ binds only literals), with one rule on every host so that all ranks agree: a
// name means its IPv4 address when it has one, else its IPv6 address.
std::string numeric_host(const std::string& host) {
  for (int family : {AF_INET, AF_INET6}) {
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) continue;
    char buf[NI_MAXHOST];
    int rc = getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
    freeaddrinfo(res);
    if (rc == 0) return family == AF_INET6 ? "[" + std::string(buf) + "]" : std::string(buf);
  }
  throw UsageError("cannot resolve host '" + host + "' of --peers; use an IP address or a name every host resolves");
}

void set_common_options(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);  // never wait for a dead peer on close
  s.set(zmq::sockopt::ipv6, 1);
}

// A numeric host (as numeric_host returns it) on the loopback network.
bool is_loopback(const std::string& numeric) {
  return numeric.rfind("127.", 0) == 0 || numeric == "[::1]" || numeric.rfind("[::ffff:127.", 0) == 0;
}

void default_log(const std::string& line) { std::fprintf(stderr, "ringtrain: %s\n", line.c_str()); }

bool send_frame(zmq::socket_t& s, const void* data, size_t size, int flags) {
  zmq::message_t m(data, size);
  return zmq_msg_send(m.handle(), s.handle(), flags) >= 0;
}

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
  close_sockets(!failed_);
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
  if (router_) router_.set(zmq::sockopt::linger, clean ? 2000 : 0);
  for (auto& d : dealers_)
    if (d) d.close();
  if (router_) router_.close();
  gate_.reset();  // its sockets belong to the context too
  ctx_.close();
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
}

std::string Transport::describe(int r) const {
  return "rank " + std::to_string(r) + " (" + opt_.peers[r].text() + ")";
}

// ZeroMQ closes a connection when the process behind it is gone, and also when a frame
// breaks ZMQ_MAXMSGSIZE: from here the two look the same.
std::string Transport::connection_closed(int r) const {
  return "lost " + describe(r) + ": its connection closed (process died or was stopped, or it sent more than any message may hold)";
}

void Transport::check_security_policy() {
  if (opt_.key) return;
  std::string remote;
  for (const auto& p : opt_.peers)
    if (!is_loopback(numeric_host(p.host))) {
      remote = p.text();
      break;
    }
  if (remote.empty()) return;  // only processes on this host can reach loopback ports
  if (!opt_.insecure)
    throw UsageError("--peers lists " + remote +
                     ", which is not on loopback, and no --key was given: anyone who reaches the ports could join, read "
                     "or stop the job; make a key with 'ringtrain keygen --out job.key', copy it to every host and pass "
                     "--key job.key on every rank (or --insecure to run unprotected)");
  opt_.log("WARNING: --insecure: ranks talk in plaintext without authentication; anyone who can reach the ports in --peers "
           "can join, read, alter or stop this job; use --key instead");
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
  gate_->watch_listener(router_);

  std::random_device rd;
  const std::string identity =
      "rank" + std::to_string(rank()) + "-" + std::to_string(getpid()) + "-" + std::to_string(rd());
  dealers_.resize(world());
  for (int p = 0; p < world(); ++p) {
    if (p == rank()) continue;
    auto& d = dealers_[p];
    d = zmq::socket_t(ctx_, zmq::socket_type::dealer);
    set_common_options(d);
    d.set(zmq::sockopt::routing_id, identity);
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
      dealers_[p].connect("tcp://" + numeric_host(opt_.peers[p].host) + ":" + std::to_string(opt_.peers[p].port));
    } catch (const zmq::error_t& e) {
      throw UsageError("cannot use " + describe(p) + " as a peer address: " + e.what());
    }
    // Queued until the connection passed the security handshake: never sent to a process
    // that does not hold the job key.
    send_control(p, MsgKind::Hello, hello_text_);
  }
}

void Transport::on_link(const LinkEvent& e) {
  using K = LinkEvent::Kind;
  if (e.kind == K::Broken) {
    record_failure(FailKind::PeerLost, "the connection from " + describe(e.rank) + " was cut: " + e.why +
                                           "; nothing of that message was used. Check the network path (or who is on "
                                           "it), then restart every rank with --resume");
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
    return;
  }
  std::lock_guard lk(link_mu_);
  if (e.kind == K::HandshakeFailed) link_problem_[e.rank] = e.why;
  else if (e.kind == K::Up) link_problem_[e.rank].clear(), link_down_at_[e.rank] = Clock::time_point{};
  else if (e.kind == K::Down && handshake_done_) link_down_at_[e.rank] = Clock::now();
}

std::string Transport::link_problem(int p) {
  std::lock_guard lk(link_mu_);
  if (link_problem_[p].empty()) return "";
  return std::string("; the process at that address failed the security handshake, ") +
         (opt_.key ? "so it does not hold this job's key (" : "perhaps because it runs with --key and this rank does not (") +
         link_problem_[p] + ")";
}

void Transport::send_control(int to, MsgKind kind, const std::string& text) {
  Header h;
  h.kind = kind;
  h.sender = static_cast<uint16_t>(rank());
  h.job = job_hash_;
  h.seq = seq_;
  if (send_frame(dealers_[to], &h, sizeof h, ZMQ_SNDMORE | ZMQ_DONTWAIT))
    send_frame(dealers_[to], text.data(), text.size(), ZMQ_DONTWAIT);
}

void Transport::reply(const std::string& identity, MsgKind kind, const std::string& text) {
  Header h;
  h.kind = kind;
  h.sender = static_cast<uint16_t>(rank());
  h.job = 0;  // the job's hash is none of an unknown client's business
  if (send_frame(router_, identity.data(), identity.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) &&
      send_frame(router_, &h, sizeof h, ZMQ_SNDMORE | ZMQ_DONTWAIT))
    send_frame(router_, text.data(), text.size(), ZMQ_DONTWAIT);
}

// Each rank decides whether the ranks match from the answers to its own hello: those come
// from the process at each peer's listed address (with a key: a holder of the job key).
// Hellos that arrive at our router only register who is who; a bad one is refused and
// logged, never fatal, since anyone who reaches the port could send one.
void Transport::handshake() {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(opt_.connect_timeout_s));
  Clock::time_point error_at{};
  std::string refusal;  // why a peer refused us, phrased from our side
  auto all = [](const std::vector<bool>& v) { return std::all_of(v.begin(), v.end(), [](bool b) { return b; }); };
  auto next_resend = start + std::chrono::seconds(1);
  while (true) {
    const auto now = Clock::now();
    // A hello can be lost: an elastic job's lobby (listen_only) takes it and says nothing,
    // then closes. Resend it to ranks that have not answered yet.
    if (now >= next_resend) {
      for (int p = 0; p < world(); ++p)
        if (!acked_[p]) send_control(p, MsgKind::Hello, hello_text_);
      next_resend = now + std::chrono::seconds(1);
    }
    if (all(heard_) && all(acked_)) break;
    // Refused: stay a little, so that every rank gets our answer to its hello and reports too.
    if (!refusal.empty() && (all(answered_) || now - error_at > std::chrono::seconds(2))) break;
    if (now > deadline) break;
    std::vector<zmq_pollitem_t> items{{router_.handle(), 0, ZMQ_POLLIN, 0}};
    std::vector<int> ranks{-1};
    for (int p = 0; p < world(); ++p)
      if (!acked_[p]) {
        items.push_back({dealers_[p].handle(), 0, ZMQ_POLLIN, 0});
        ranks.push_back(p);
      }
    if (zmq_poll(items.data(), static_cast<int>(items.size()), 100) < 0 && zmq_errno() != EINTR)
      throw RuntimeError(std::string("poll failed during the handshake: ") + zmq_strerror(zmq_errno()));
    serve_router();
    // A rank that already joined us gave up: report our own view of the handshake if it
    // comes soon (it names the mismatch from our side), else theirs.
    if (failed_ && refusal.empty()) {
      if (error_at == Clock::time_point{}) error_at = Clock::now();
      if (Clock::now() - error_at > std::chrono::seconds(2)) throw_failure();
    }
    for (size_t i = 1; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      const int p = ranks[i];
      Header h;
      zmq::message_t head, body;
      if (zmq_msg_recv(head.handle(), dealers_[p].handle(), ZMQ_DONTWAIT) < 0) continue;
      if (head.more()) (void)zmq_msg_recv(body.handle(), dealers_[p].handle(), ZMQ_DONTWAIT);
      if (!decode_header(head.data(), head.size(), h) || h.kind != MsgKind::HelloOk) continue;
      acked_[p] = true;
      std::string why = take_hello_answer(p, body.to_string());
      if (!why.empty() && refusal.empty()) {
        refusal = why;
        if (error_at == Clock::time_point{}) error_at = Clock::now();
      }
    }
  }
  if (!refusal.empty()) throw UsageError(refusal);
  if (!(all(heard_) && all(acked_))) {
    std::string missing, problems;
    int count = 0;
    for (int p = 0; p < world(); ++p)
      if (!heard_[p] || !acked_[p]) {
        missing += (count++ ? ", " : "") + describe(p);
        if (problems.empty()) problems = link_problem(p);
      }
    throw RuntimeError(std::string(count > 1 ? "ranks " : "") + missing + " never joined within " +
                       fmt_seconds(opt_.connect_timeout_s) +
                       "; start every rank with the same --peers and --key, and check that the listed addresses are "
                       "right and that firewalls let TCP through to the listed ports" + problems);
  }
  handshake_done_ = true;
  const auto now = Clock::now();
  std::fill(last_seen_.begin(), last_seen_.end(), now);
  next_heartbeat_ = now;
  next_tick_ = now;
}

std::string Transport::take_hello_answer(int p, const std::string& payload) {
  if (payload.empty()) return "";
  std::string reason, theirs_text;
  decode_refusal(payload, reason, theirs_text);
  // The refusing rank sent its hello (the fingerprint form without a key): name the
  // mismatch from our side.
  if (auto theirs = decode_hello(theirs_text)) {
    theirs->rank = p;  // the rank at that address, whatever the text claims
    std::string mismatch = compare_hello(wire_hello_, *theirs, opt_.peers[p].text());
    if (!mismatch.empty()) return mismatch;
  }
  return describe(p) + " refused this rank: " + reason;
}

void Transport::handle_hello(const std::string& identity, const std::string& text, const std::string& from) {
  auto hello = decode_hello(text);
  if (!hello) {
    hello_refusals_->refused(from, "not a ringtrain handshake of this version");
    reply(identity, MsgKind::HelloOk, encode_refusal("not a ringtrain handshake of this version; use the same ringtrain build on every host", ""));
    return;
  }
  if (opt_.listen_only) return;  // a lobby: the sender resends to the ring that comes next
  const int r = hello->rank;
  std::string reason, logged;
  if (r < 0 || r >= world() || r == rank()) {
    reason = "it claims a rank this job does not expect from it; give every process a different --rank from 0 to the number of --peers minus 1";
    logged = r == rank() ? "this rank's own" : "outside --peers";
  } else if (std::string m = compare_hello(wire_hello_, *hello, opt_.peers[r].text()); !m.empty()) {
    reason = "its job id, world size or config differ from this rank's";
    logged = m;
  } else if (!identity_of_rank_[r].empty() && identity_of_rank_[r] != identity) {
    reason = "another process already holds rank " + std::to_string(r) +
             " in this job; give every process a different --rank, and stop leftovers of earlier runs";
    logged = "another process holds that rank already";
  } else if (identity_of_rank_[r] == identity) {
    // A resent hello of a rank that joined already (see handshake): accepted again.
  } else if (handshake_done_) {
    reason = "the job is already running with every rank present; stop it before starting rank " + std::to_string(r) + " again";
    logged = "the job is running already";
  }
  if (r >= 0 && r < world()) answered_[r] = true;
  if (!reason.empty()) {
    hello_refusals_->refused(from, "it claims rank " + std::to_string(r) + ": " + logged);
    // Our hello as we send it anyway: whole only to holders of the key, else a fingerprint.
    reply(identity, MsgKind::HelloOk, encode_refusal(reason, hello_text_));
    return;
  }
  identity_of_rank_[r] = identity;
  rank_of_identity_[identity] = r;
  heard_[r] = true;
  last_seen_[r] = Clock::now();
  reply(identity, MsgKind::HelloOk, "");
}

void Transport::serve_router() {
  if (!router_) return;  // closed by drop_outgoing_data
  for (int budget = 0; budget < 256; ++budget) {
    zmq::message_t id, head, body;
    if (zmq_msg_recv(id.handle(), router_.handle(), ZMQ_DONTWAIT) < 0) return;
    bool has_head = id.more() && zmq_msg_recv(head.handle(), router_.handle(), ZMQ_DONTWAIT) >= 0;
    bool has_body = has_head && head.more() && zmq_msg_recv(body.handle(), router_.handle(), ZMQ_DONTWAIT) >= 0;
    for (zmq::message_t* last = has_body ? &body : has_head ? &head : &id; last->more();) {
      zmq::message_t extra;  // drop extra frames of a malformed message
      if (zmq_msg_recv(extra.handle(), router_.handle(), ZMQ_DONTWAIT) < 0 || !extra.more()) break;
    }
    Header h;
    if (!has_head || !decode_header(head.data(), head.size(), h)) continue;
    std::string identity = id.to_string();
    std::string text = has_body ? body.to_string() : "";
    if (h.kind == MsgKind::Request) {
      ServiceHandler handler;
      {
        std::lock_guard lk(handler_mu_);
        handler = handler_;
      }
      std::string answer;
      try {
        answer = handler ? handler(text) : "error: this job has no service handler";
      } catch (const std::exception& e) {
        answer = std::string("error: ") + e.what();
      }
      if (answer.size() > kMaxControlBytes) answer = "error: the answer is too large to send";
      reply(identity, MsgKind::Reply, answer);
      continue;
    }
    if (h.kind == MsgKind::Hello) {
      const char* from = zmq_msg_gets(head.handle(), "Peer-Address");
      handle_hello(identity, text, from ? from : "an unknown address");
      continue;
    }
    if (h.job != job_hash_) continue;  // another job's stray message
    auto it = rank_of_identity_.find(identity);
    if (it == rank_of_identity_.end() || it->second != h.sender) continue;
    const int p = it->second;
    last_seen_[p] = Clock::now();
    if (h.kind == MsgKind::Goodbye) {
      departed_at_[p] = Clock::now();
    } else if (h.kind == MsgKind::Failing) {
      record_failure(FailKind::PeerLost, describe(p) + " failed: " + (text.empty() ? "unknown error" : text.substr(0, 1000)));
    }
  }
}

void Transport::housekeeping(bool in_collective) {
  const auto now = Clock::now();
  if (now >= next_heartbeat_) {
    for (int p = 0; p < world(); ++p)
      if (p != rank() && departed_at_[p] == Clock::time_point{}) send_control(p, MsgKind::Heartbeat, "");
    next_heartbeat_ = now + heartbeat_every_;
  }
  const auto timeout = std::chrono::duration<double>(opt_.peer_timeout_s);
  for (int p = 0; p < world(); ++p) {
    if (p == rank()) continue;
    if (departed_at_[p] != Clock::time_point{}) {
      // A rank that left cleanly is only an error if we still wait for it; give its last
      // data (sent before its goodbye, on another connection) time to arrive.
      if (in_collective && now - departed_at_[p] > std::chrono::seconds(2))
        record_failure(FailKind::PeerLost, describe(p) + " left the job while this rank still needed it; every rank must call the same collectives");
      continue;
    }
    Clock::time_point down;
    {
      std::lock_guard lk(link_mu_);
      down = link_down_at_[p];
    }
    // Its connection closed and no goodbye came (which would have arrived first): what it
    // sent last is gone with the connection.
    if (down != Clock::time_point{} && now - down > std::chrono::seconds(2))
      record_failure(FailKind::PeerLost, connection_closed(p));
    if (now - last_seen_[p] > timeout)
      record_failure(FailKind::PeerLost, "lost " + describe(p) + ": nothing heard from it for " +
                                             fmt_seconds(seconds(now - last_seen_[p])) +
                                             " (process died, host down or network cut)");
  }
}

void Transport::record_failure(FailKind kind, const std::string& message) {
  std::lock_guard lk(fail_mu_);
  if (failed_) return;
  fail_kind_ = kind;
  failure_ = message;
  failed_ = true;
}

void Transport::throw_failure() {
  FailKind kind;
  std::string message;
  {
    std::lock_guard lk(fail_mu_);
    kind = fail_kind_;
    message = failure_;
  }
  if (kind == FailKind::PeerLost) throw PeerLost(message);
  if (kind == FailKind::Aborted) throw Aborted(message);
  throw RuntimeError(message);
}

void Transport::fail(const std::string& message, bool peer_lost) {
  record_failure(peer_lost ? FailKind::PeerLost : FailKind::Other, message);
  throw_failure();
}

std::vector<double> Transport::silence_seconds() {
  Hold hold(*this);
  std::vector<double> s(last_seen_.size(), 0.0);
  const auto now = Clock::now();
  for (size_t p = 0; p < s.size(); ++p)
    if (int(p) != rank()) s[p] = std::chrono::duration<double>(now - last_seen_[p]).count();
  return s;
}

void Transport::check_healthy() {
  if (failed_) throw_failure();
}

std::string Transport::failure() const {
  std::lock_guard lk(fail_mu_);
  return failure_;
}

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
  const std::string& id = identity_of_rank_[to];
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
  return true;
}

bool Transport::try_recv(int from, Header& h, zmq::message_t& payload) {
  for (int skipped = 0; skipped < 256; ++skipped) {  // bounded: a stream of junk cannot hold us here
    zmq::message_t head, body;
    if (zmq_msg_recv(head.handle(), dealers_[from].handle(), ZMQ_DONTWAIT) < 0) return false;
    last_seen_[from] = Clock::now();
    // Parts of a message arrive together; data is exactly header + payload.
    const bool two = head.more() && zmq_msg_recv(body.handle(), dealers_[from].handle(), ZMQ_DONTWAIT) >= 0 && !body.more();
    for (bool more = body.more(); more;) {
      zmq::message_t extra;
      more = zmq_msg_recv(extra.handle(), dealers_[from].handle(), ZMQ_DONTWAIT) >= 0 && extra.more();
    }
    if (two && decode_header(head.data(), head.size(), h) && h.kind == MsgKind::Data && h.job == job_hash_) {
      payload = std::move(body);
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
  const bool woken = poll_for(want_recv ? &dealers_[from] : nullptr, ms);
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
  if (failed_) throw_failure();
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

Transport::Hold::Hold(Transport& t) : t_(t) {
  t_.want_.fetch_add(1);
  uint64_t one = 1;
  (void)!write(t_.wake_fd_, &one, sizeof one);
  t_.sock_mu_.lock();
}

Transport::Hold::~Hold() {
  t_.sock_mu_.unlock();
  {
    std::lock_guard lk(t_.want_mu_);
    t_.want_.fetch_sub(1);
  }
  t_.want_cv_.notify_all();
}

}  // namespace rt::net
