// Who may join, and the handshake: every rank's hello answered by the process at each
// listed address (transport.hpp).
#include <algorithm>

#include "addresses.hpp"
#include "transport.hpp"

namespace rt::net {

using transport_detail::fmt_seconds;

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
      for (int p = 0; p < world(); ++p) {
        if (!acked_[p]) send_control(p, MsgKind::Hello, hello_text_);
        for (int k = 1; k < streams_ && p != rank(); ++k)
          if (!stream_acked_[size_t(p)][size_t(k - 1)]) send_stream_hello(p, k);
      }
      next_resend = now + std::chrono::seconds(1);
    }
    if (all(heard_) && all(acked_) && streams_joined()) break;
    // Refused: stay a little, so that every rank gets our answer to its hello and reports too.
    if (!refusal.empty() && (all(answered_) || now - error_at > std::chrono::seconds(2))) break;
    if (now > deadline) break;
    std::vector<zmq_pollitem_t> items{{router_.handle(), 0, ZMQ_POLLIN, 0}};
    std::vector<std::pair<int, int>> streams{{-1, 0}};  // (rank, stream) of each dealer polled
    for (int p = 0; p < world(); ++p)
      for (int k = 0; k < streams_ && p != rank(); ++k)
        if (k == 0 ? !acked_[p] : !stream_acked_[size_t(p)][size_t(k - 1)]) {
          items.push_back({dealer(p, k).handle(), 0, ZMQ_POLLIN, 0});
          streams.push_back({p, k});
        }
    if (zmq_poll(items.data(), static_cast<int>(items.size()), 100) < 0 && zmq_errno() != EINTR)
      throw RuntimeError(std::string("poll failed during the handshake: ") + zmq_strerror(zmq_errno()));
    serve_router();
    // A rank that already joined us gave up: report our own view of the handshake if it
    // comes soon (it names the mismatch from our side), else theirs.
    if (failures_.failed() && refusal.empty()) {
      if (error_at == Clock::time_point{}) error_at = Clock::now();
      if (Clock::now() - error_at > std::chrono::seconds(2)) failures_.throw_it();
    }
    for (size_t i = 1; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      const auto [p, k] = streams[i];
      Header h;
      zmq::message_t head, body;
      if (zmq_msg_recv(head.handle(), dealer(p, k).handle(), ZMQ_DONTWAIT) < 0) continue;
      if (head.more()) (void)zmq_msg_recv(body.handle(), dealer(p, k).handle(), ZMQ_DONTWAIT);
      if (!decode_header(head.data(), head.size(), h) || h.kind != MsgKind::HelloOk) continue;
      if (k == 0) acked_[p] = true;
      else stream_acked_[size_t(p)][size_t(k - 1)] = true;
      std::string why = take_hello_answer(p, body.to_string());
      if (!why.empty() && refusal.empty()) {
        refusal = why;
        if (error_at == Clock::time_point{}) error_at = Clock::now();
      }
    }
  }
  if (!refusal.empty()) throw UsageError(refusal);
  if (!(all(heard_) && all(acked_) && streams_joined())) {
    std::string missing, problems;
    int count = 0;
    for (int p = 0; p < world(); ++p)
      if (!heard_[p] || !acked_[p] || !streams_joined(p)) {
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
  // An extra stream of a rank (transport.hpp): "<its first dealer's id>/<k>".
  if (const size_t slash = identity.rfind('/'); slash != std::string::npos) {
    const std::string k = identity.substr(slash + 1);
    const bool number = !k.empty() && k.size() <= 2 && std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; });
    return handle_stream_hello(identity.substr(0, slash), number ? std::stoi(k) : -1, *hello, identity, from);
  }
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

void Transport::handle_stream_hello(const std::string& first, int k, const Hello& hello, const std::string& identity,
                                    const std::string& from) {
  const int r = hello.rank;
  std::string reason, logged;
  if (k < 1 || k >= streams_) {
    reason = "it opens more connections than --streams allows; give every rank the same --streams";
    logged = "stream " + std::to_string(k) + " of at most " + std::to_string(streams_);
  } else if (r < 0 || r >= world() || r == rank()) {
    reason = "it claims a rank this job does not expect from it";
    logged = "outside --peers";
  } else if (std::string m = compare_hello(wire_hello_, hello, opt_.peers[r].text()); !m.empty()) {
    reason = "its job id, world size or config differ from this rank's";
    logged = m;
  } else if (identity_of_rank_[r].empty()) {
    return;  // its first connection's hello has not come yet: the sender resends this one
  } else if (identity_of_rank_[r] != first) {
    reason = "another process holds rank " + std::to_string(r) + " in this job";
    logged = "a stream of another process than rank " + std::to_string(r) + "'s";
  }
  if (!reason.empty()) {
    hello_refusals_->refused(from, "it claims a stream of rank " + std::to_string(r) + ": " + logged);
    reply(identity, MsgKind::HelloOk, encode_refusal(reason, hello_text_));
    return;
  }
  // identity is "<rank r's first id>/<k>": one id per stream for the life of this ring.
  stream_identity_[size_t(r)][size_t(k - 1)] = identity;
  reply(identity, MsgKind::HelloOk, "");
}

std::string Transport::link_problem(int p) {
  std::lock_guard lk(link_mu_);
  if (link_problem_[p].empty()) return "";
  return std::string("; the process at that address failed the security handshake, ") +
         (opt_.key ? "so it does not hold this job's key (" : "perhaps because it runs with --key and this rank does not (") +
         link_problem_[p] + ")";
}

}  // namespace rt::net
