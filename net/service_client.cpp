// The client side of service requests (`ringtrain status`, `ringtrain stop`): one DEALER
// connected to a rank's listed port, one request, one reply, a deadline. With the job key
// it is a CURVE client with the job's keypair (what the ranks' gatekeepers let in); a
// refused key ends the wait at once, with the reason.
#include <chrono>

#include <zmq.hpp>

#include "gatekeeper.hpp"
#include "ringtrain/net/communicator.hpp"
#include "wire_format.hpp"

namespace rt::net {
namespace {

std::string refusal_message(const std::string& where, bool have_key, uint16_t event, uint32_t value) {
  const std::string pass = "pass the key file its ranks were started with (--key FILE)";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return where + " refused this key: it is not the job's; " + pass;
  // Without a key, which of the two a refusal gives is a race: the side that reads the
  // other's greeting first names the mismatch, the other sees the connection close. Both
  // mean the same to the user, so they say the same.
  const bool mismatch = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH;
  if (!have_key && (mismatch || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL))
    return where + " refused the connection: the job runs with a key; " + pass;
  if (mismatch) return where + " refused the connection: that job runs without a key; leave out --key";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    return where + " refused this key (it closed the connection during the key check); " + pass;
  return where + " refused the connection (" + handshake_failure_text(event, value) + "); " + pass;
}

}  // namespace

std::string request(const std::string& host_port, const std::string& text, double timeout_s,
                    const std::optional<JobKey>& key) {
  PeerAddress where = parse_peer(host_port);
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::ipv6, 1);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxControlBytes + kFrameOverheadBytes));
  if (key) {
    s.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(key->public_key.data(), 32));
    s.set(zmq::sockopt::curve_publickey, zmq::const_buffer(key->public_key.data(), 32));
    s.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(key->secret_key.data(), 32));
  }
  const char* monitor_endpoint = "inproc://ringtrain-request-monitor";
  zmq_socket_monitor(s.handle(), monitor_endpoint,
                     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                         ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
  zmq::socket_t monitor(ctx, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect(monitor_endpoint);
  s.connect(where.endpoint());
  Header h;
  h.kind = MsgKind::Request;
  s.send(zmq::const_buffer(&h, sizeof h), zmq::send_flags::sndmore);
  s.send(zmq::const_buffer(text.data(), text.size()), zmq::send_flags::none);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    zmq_pollitem_t items[2] = {{s.handle(), 0, ZMQ_POLLIN, 0}, {monitor.handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq_poll(items, 2, static_cast<long>(left)) <= 0) continue;
    uint16_t event;
    uint32_t value;
    if ((items[1].revents & ZMQ_POLLIN) && next_monitor_event(monitor, event, value))
      throw RuntimeError(refusal_message(where.text(), key.has_value(), event, value));
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
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
