// The router's traffic (transport.hpp): service requests (status, stop, metrics, joins),
// hellos from ranks, goodbyes and failure notices; and the replies.
#include "transport.hpp"

namespace rt::net {

using transport_detail::send_frame;

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

void Transport::reply(const std::string& identity, MsgKind kind, const std::string& text) {
  Header h;
  h.kind = kind;
  h.sender = static_cast<uint16_t>(rank());
  h.job = 0;  // the job's hash is none of an unknown client's business
  if (send_frame(router_, identity.data(), identity.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) &&
      send_frame(router_, &h, sizeof h, ZMQ_SNDMORE | ZMQ_DONTWAIT))
    send_frame(router_, text.data(), text.size(), ZMQ_DONTWAIT);
}

}  // namespace rt::net
