// Liveness: heartbeats, peers lost or silent, and what the gatekeeper saw of each
// connection (transport.hpp).
#include <unistd.h>

#include "transport.hpp"

namespace rt::net {

using transport_detail::fmt_seconds;

namespace {
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

// ZeroMQ closes a connection when the process behind it is gone, and also when a frame
// breaks ZMQ_MAXMSGSIZE: from here the two look the same.
std::string Transport::connection_closed(int r) const {
  return "lost " + describe(r) + ": its connection closed (process died or was stopped, or it sent more than any message may hold)";
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

std::vector<double> Transport::silence_seconds() {
  Hold hold(*this);
  std::vector<double> s(last_seen_.size(), 0.0);
  const auto now = Clock::now();
  for (size_t p = 0; p < s.size(); ++p)
    if (int(p) != rank()) s[p] = std::chrono::duration<double>(now - last_seen_[p]).count();
  return s;
}

}  // namespace rt::net
