// The client side of service requests (`ringtrain status`, `ringtrain stop`): one DEALER
// connected to a rank's listed port, one request, one reply, a deadline.
#include <chrono>

#include <zmq.hpp>

#include "ringtrain/net/communicator.hpp"
#include "wire_format.hpp"

namespace rt::net {

std::string request(const std::string& host_port, const std::string& text, double timeout_s) {
  PeerAddress where = parse_peer(host_port);
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::ipv6, 1);
  s.connect(where.endpoint());
  Header h;
  h.kind = MsgKind::Request;
  s.send(zmq::const_buffer(&h, sizeof h), zmq::send_flags::sndmore);
  s.send(zmq::const_buffer(text.data(), text.size()), zmq::send_flags::none);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    zmq_pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, static_cast<long>(left)) <= 0) continue;
    zmq::message_t head, body;
    if (zmq_msg_recv(head.handle(), s.handle(), 0) < 0) continue;
    if (head.more()) (void)zmq_msg_recv(body.handle(), s.handle(), 0);
    Header r;
    if (decode_header(head.data(), head.size(), r) && r.kind == MsgKind::Reply) return body.to_string();
  }
  throw RuntimeError("no answer from " + where.text() + " within " + std::to_string(static_cast<int>(timeout_s)) +
                     " s; check that a ringtrain job runs there with that port in its --peers and that the port is reachable");
}

}  // namespace rt::net
