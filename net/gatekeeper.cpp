// The gatekeeper: see gatekeeper.hpp.
#include "gatekeeper.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "ringtrain/errors.hpp"

namespace rt::net {

struct Gatekeeper::Watch {
  zmq::socket_t pair;  // receives the monitor's events
  int rank = -1;       // -1: the listening socket
  bool up = false;     // a link's handshake is done and it has not closed since
  // Listening socket: source address and accept time of each open connection (by file
  // descriptor), and the handshake failures not yet matched with the disconnect that
  // follows each of them.
  struct Accepted {
    std::string address;
    std::chrono::steady_clock::time_point at;
  };
  std::unordered_map<uint32_t, Accepted> accepted;
  std::deque<std::string> failures;
  int port = 0;                                // the listening port
  std::chrono::milliseconds handshake{4000};  // its handshake deadline
  long shed = 0;                               // connections shut down for the bound
  size_t max_waiting = 8192;                   // the bound (max_waiting_handshakes())
};

namespace {

constexpr int kListenerEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
constexpr int kLinkEvents = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
                            ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                            ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

// True when fd is a TCP connection accepted on `port` (a check against a descriptor that
// ZeroMQ closed and reused since the event was sent: only such a one is shut down).
bool accepted_on_port(int fd, int port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (port <= 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port) == port;
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port) == port;
  return false;
}
constexpr char kUnknownAddress[] = "an address that was gone before it could be read";

// "10.0.0.3:51234" or "[fe80::1]:51234" for a connected socket, "" if it is closed already.
std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char ip[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    return std::string(ip) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    std::string s = ip;
    if (s.rfind("::ffff:", 0) == 0 && s.find('.') != std::string::npos)  // IPv4 on an IPv6 socket
      return s.substr(7) + ":" + std::to_string(ntohs(a->sin6_port));
    return "[" + s + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  return "";
}

// Receives all parts of one message (without waiting); false when there is none.
bool recv_parts(zmq::socket_t& s, std::vector<zmq::message_t>& parts) {
  parts.clear();
  do {
    parts.emplace_back();
    if (zmq_msg_recv(parts.back().handle(), s.handle(), ZMQ_DONTWAIT) < 0) {
      parts.pop_back();
      return !parts.empty();
    }
  } while (parts.back().more());
  return true;
}

}  // namespace

bool next_monitor_event(zmq::socket_t& pair, uint16_t& event, uint32_t& value) {
  std::vector<zmq::message_t> parts;
  while (recv_parts(pair, parts)) {
    if (parts.size() != 2 || parts[0].size() != 6) continue;  // event id (2 bytes) + value (4 bytes), address
    std::memcpy(&event, parts[0].data(), 2);
    std::memcpy(&value, static_cast<const char*>(parts[0].data()) + 2, 4);
    return true;
  }
  return false;
}

std::string handshake_failure_text(uint16_t event, uint32_t value) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return "its key was refused";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    return "the connection closed or timed out during the security handshake";
  switch (value) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return "one side uses a job key and the other does not";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
    case ZMQ_PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE:
      return "a cryptographic check failed (another job key, or bytes altered on the way)";
    default: {
      char buf[96];
      std::snprintf(buf, sizeof buf, "it broke the protocol (ZeroMQ error 0x%08x)", value);
      return buf;
    }
  }
}

Gatekeeper::Gatekeeper(zmq::context_t& ctx, const std::optional<JobKey>& key, Log log)
    : ctx_(ctx), key_(key), refusals_(std::move(log), "connection") {
  if (!key_) return;
  zap_ = zmq::socket_t(ctx_, zmq::socket_type::rep);
  zap_.set(zmq::sockopt::linger, 0);
  try {
    zap_.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    throw RuntimeError(std::string("cannot start the connection authenticator: ") + e.what());
  }
}

Gatekeeper::~Gatekeeper() {
  stop();
  watches_.clear();
  if (zap_) zap_.close();
}

zmq::socket_t& Gatekeeper::monitor(zmq::socket_t& watched, int events) {
  auto w = std::make_unique<Watch>();
  const std::string endpoint = "inproc://ringtrain-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
                               std::to_string(watches_.size());
  if (zmq_socket_monitor(watched.handle(), endpoint.c_str(), events) != 0)
    throw RuntimeError(std::string("cannot monitor a socket: ") + zmq_strerror(zmq_errno()));
  w->pair = zmq::socket_t(ctx_, zmq::socket_type::pair);
  w->pair.set(zmq::sockopt::linger, 0);
  w->pair.connect(endpoint);
  watches_.push_back(std::move(w));
  return watches_.back()->pair;
}

size_t max_waiting_handshakes() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 8192;
  return std::clamp<size_t>(size_t(r.rlim_cur / 2), 64, 8192);
}

void Gatekeeper::watch_listener(zmq::socket_t& router, int port, int handshake_ms) {
  monitor(router, kListenerEvents);
  watches_.back()->port = port;
  watches_.back()->handshake = std::chrono::milliseconds(handshake_ms);
  watches_.back()->max_waiting = max_waiting_handshakes();
}

void Gatekeeper::watch_link(zmq::socket_t& dealer, int rank) {
  monitor(dealer, kLinkEvents);
  watches_.back()->rank = rank;
}

void Gatekeeper::start(std::function<void(const LinkEvent&)> on_link) {
  on_link_ = std::move(on_link);
  thread_ = std::thread([this] { loop(); });
}

void Gatekeeper::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Gatekeeper::loop() {
  std::vector<zmq_pollitem_t> items;
  if (zap_) items.push_back({zap_.handle(), 0, ZMQ_POLLIN, 0});
  const size_t first_watch = items.size();
  for (auto& w : watches_) items.push_back({w->pair.handle(), 0, ZMQ_POLLIN, 0});
  while (!stop_) {
    if (zmq_poll(items.data(), static_cast<int>(items.size()), 100) <= 0) continue;
    if (zap_ && (items[0].revents & ZMQ_POLLIN)) answer_zap();
    for (size_t i = first_watch; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      Watch& w = *watches_[i - first_watch];
      uint16_t event;
      uint32_t value;
      for (int budget = 0; budget < 64 && next_monitor_event(w.pair, event, value); ++budget) {
        if (w.rank < 0) on_listener_event(w, event, value);
        else on_link_event(w, event, value);
      }
    }
  }
}

// ZAP (RFC 27) request: version, request id, domain, address, identity, mechanism, then the
// mechanism's credentials (CURVE: the client's 32-byte public key).
void Gatekeeper::answer_zap() {
  std::vector<zmq::message_t> req;
  for (int budget = 0; budget < 64 && recv_parts(zap_, req); ++budget) {
    bool ok = false;
    std::string address = "unknown address";
    if (req.size() >= 7) {
      address = req[3].to_string();
      ok = req[0].to_string() == "1.0" && req[5].to_string() == "CURVE" && req[6].size() == key_->public_key.size() &&
           std::memcmp(req[6].data(), key_->public_key.data(), key_->public_key.size()) == 0;
    }
    if (!ok) refusals_.refused(address, "it presented a key other than this job's");
    const std::string request_id = req.size() >= 2 ? req[1].to_string() : "";
    const std::string frames[] = {"1.0", request_id, ok ? "200" : "400", ok ? "OK" : "not this job's key", "", ""};
    for (size_t i = 0; i < 6; ++i) {
      zmq::message_t m(frames[i].data(), frames[i].size());
      (void)zmq_msg_send(m.handle(), zap_.handle(), i < 5 ? ZMQ_SNDMORE : 0);
    }
  }
}

// Every router event comes from the one I/O thread the router is pinned to, and a failing
// handshake's failure event is followed by the disconnect of the same connection: that
// pairs a failure with the address recorded when the connection was accepted.
void Gatekeeper::on_listener_event(Watch& w, uint16_t event, uint32_t value) {
  if (event == ZMQ_EVENT_ACCEPTED) {
    if (w.accepted.size() > 4096) w.accepted.clear();  // bounded, whatever happens
    std::string a = peer_address(static_cast<int>(value));
    const auto now = std::chrono::steady_clock::now();
    // Connections accepted within the handshake deadline that are still open: authenticating
    // (older ones have authenticated, or ZeroMQ closed them at the deadline).
    size_t waiting = 0;
    for (const auto& [fd, c] : w.accepted) waiting += now - c.at < w.handshake;
    w.accepted[value] = {a.empty() ? kUnknownAddress : a, now};
    if (waiting >= w.max_waiting && accepted_on_port(static_cast<int>(value), w.port)) {
      // shutdown(), not close(): ZeroMQ's I/O thread sees the end of the stream and closes the
      // descriptor itself (closing it here could close one it has reused meanwhile).
      ::shutdown(static_cast<int>(value), SHUT_RDWR);
      if (++w.shed % 1000 == 1)
        refusals_.refused(a.empty() ? kUnknownAddress : a,
                          "more than " + std::to_string(w.max_waiting) +
                              " connections were waiting to authenticate at once (a flood?); " + std::to_string(w.shed) +
                              " shut down so far");
    }
  } else if (event == ZMQ_EVENT_DISCONNECTED) {
    auto it = w.accepted.find(value);
    const std::string address = it == w.accepted.end() ? kUnknownAddress : it->second.address;
    if (it != w.accepted.end()) w.accepted.erase(it);
    if (w.failures.empty()) return;
    const std::string why = w.failures.front();
    w.failures.pop_front();
    if (!why.empty()) refusals_.refused(address, why);
  } else {  // a handshake failed
    if (w.failures.size() > 1024) w.failures.pop_front();
    // A refusal by the ZAP handler was logged there, with the address ZeroMQ gave it.
    w.failures.push_back(event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "" : handshake_failure_text(event, value));
  }
}

void Gatekeeper::on_link_event(Watch& w, uint16_t event, uint32_t value) {
  LinkEvent e;
  e.rank = w.rank;
  if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
    w.up = true;
    e.kind = LinkEvent::Kind::Up;
  } else if (event == ZMQ_EVENT_DISCONNECTED) {
    if (!w.up) return;
    w.up = false;
    e.kind = LinkEvent::Kind::Down;
  } else {
    e.kind = w.up ? LinkEvent::Kind::Broken : LinkEvent::Kind::HandshakeFailed;
    e.why = w.up ? "a message failed its integrity check (bytes altered on the way, or corrupted)"
                 : handshake_failure_text(event, value);
  }
  if (on_link_) on_link_(e);
}

}  // namespace rt::net
