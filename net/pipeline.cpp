// The send/receive loop shared by all collectives (see pipeline.hpp).
#include "pipeline.hpp"

#include <algorithm>
#include <optional>

namespace rt::net {
namespace {

std::string describe_call(CollectiveKind kind, uint64_t seq, uint64_t count, int wire) {
  const char* name = wire <= static_cast<int>(Wire::Int4) ? wire_name(static_cast<Wire>(wire)) : "unknown";
  return std::string(collective_name(kind)) + " #" + std::to_string(seq) + " of " + std::to_string(count) +
         " elements, " + name + " wire";
}

}  // namespace

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::GatherBytes: return "all_gather_bytes";
    case CollectiveKind::BroadcastBytes: return "broadcast_record";
  }
  return "collective";
}

size_t byte_chunks(const Link& t, size_t bytes) {
  const size_t chunk = std::max<size_t>(1, t.options().chunk_bytes);
  return std::max<size_t>(1, (bytes + chunk - 1) / chunk);
}

uint64_t run_stream(Link& t, uint64_t seq, const Stream& s) {
  const int wire = static_cast<int>(s.wire);  // the header's wire field
  Header out;
  out.kind = MsgKind::Data;
  out.collective = static_cast<uint8_t>(s.kind);
  out.wire = static_cast<uint8_t>(wire);
  out.sender = static_cast<uint16_t>(t.rank());
  out.root = static_cast<uint16_t>(s.root);
  out.job = t.job_hash();
  out.seq = seq;
  out.count = s.count;

  const auto stall = std::chrono::duration<double>(t.options().stall_timeout_s);
  auto last_progress = Clock::now();
  std::optional<zmq::message_t> staged;  // encoded but refused by a full queue
  size_t sent = 0, received = 0;
  uint64_t bytes_sent = 0;
  // A full send queue frees up without notice (a ROUTER's POLLOUT is not per peer), so this
  // thread naps then and tries again. On a slow link a message takes milliseconds to leave
  // (66 KB of int8 at 100 Mbit/s: 5 ms), and 1 ms naps woke this thread about a thousand
  // times a second beside the compute on its core. So the nap adapts: doubled when one ends
  // with the queue still full (shorter than a message takes to leave), halved when several
  // messages could go after it, which keeps it within a few messages' time of the queue's
  // HWM (16 messages), so the link never runs dry.
  constexpr int kMaxNapMs = 16;
  int nap_ms = 1;
  bool napped = false;  // the last wait slept its whole nap on a full queue
  t.check_healthy();
  while (sent < s.send_items || received < s.recv_items) {
    bool progress = false, blocked = false;
    const size_t sent_before = sent;
    while (sent < s.send_items && sent < s.lead + received) {
      if (!staged) {
        staged.emplace();
        s.encode(sent, *staged);
      }
      out.item = sent;
      const size_t bytes = staged->size();
      if (!t.try_send(s.to, out, *staged)) {
        blocked = true;
        break;
      }
      staged.reset();
      ++sent;
      bytes_sent += bytes;
      progress = true;
    }
    Header h;
    zmq::message_t payload;
    // A late message of an earlier collective is never current data: dropped, and no
    // progress (so that a peer sending only those still meets the stall timeout).
    if (received < s.recv_items && t.try_recv(s.from, h, payload) && h.seq >= seq) {
      const bool same = h.seq == seq && h.collective == out.collective && h.count == s.count && h.wire == wire &&
                        h.root == out.root && h.sender == s.from;
      if (!same)
        t.fail(t.describe(s.from) + " sent " + describe_call(CollectiveKind(h.collective), h.seq, h.count, h.wire) +
                   " while this rank runs " + describe_call(s.kind, seq, s.count, wire) +
                   "; every rank must call the same collectives in the same order",
               true);
      const size_t want = s.expected_bytes(received);
      if (h.item != received || (want != SIZE_MAX && payload.size() != want))
        t.fail("protocol error: " + t.describe(s.from) + " sent chunk " + std::to_string(h.item) + " of " +
                   std::to_string(payload.size()) + " bytes where chunk " + std::to_string(received) +
                   " was due; use the same ringtrain build and --chunk-bytes on every rank",
               true);
      s.absorb(received, payload.data(), payload.size());
      ++received;
      progress = true;
    }
    if (napped) {
      const size_t went = sent - sent_before;
      if (went == 0 && blocked) nap_ms = std::min(2 * nap_ms, kMaxNapMs);
      else if (went >= 4) nap_ms = std::max(nap_ms / 2, 1);
      napped = false;
    }
    t.tick();
    const auto now = Clock::now();
    if (progress) {
      last_progress = now;
    } else {
      if (t.options().stall_timeout_s > 0 && now - last_progress > stall)
        t.fail(std::string(collective_name(s.kind)) + " #" + std::to_string(seq) + " made no progress for " +
                   std::to_string(static_cast<int>(t.options().stall_timeout_s)) + " s waiting for " +
                   t.describe(s.from) + ", which is alive but did not send; every rank must call the same collectives",
               true);
      // Nap on a full send queue (above); otherwise sleep until data or control traffic arrives.
      const bool woken = t.wait(s.from, received < s.recv_items, blocked ? nap_ms : 100);
      napped = blocked && !woken;
    }
  }
  return bytes_sent;
}

}  // namespace rt::net
