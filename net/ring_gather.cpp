// The all-gather of bytes: every rank's part, of sizes every rank knows beforehand, passed
// round the ring chunk by chunk (what arrives at step k leaves at step k+1).
#include <algorithm>
#include <cstring>

#include "pipeline.hpp"
#include "ring.hpp"

#include "ringtrain/net/ring_order.hpp"

namespace rt::net {
namespace {
std::string_view chunk_of(std::string_view part, size_t c, size_t chunk) {
  const size_t b = std::min(part.size(), c * chunk);
  return part.substr(b, std::min(part.size() - b, chunk));
}
}  // namespace

uint64_t ring_gather_parts(Link& t, uint64_t seq, CollectiveKind kind, std::string_view mine,
                           std::span<const size_t> part_bytes, std::vector<std::string>& parts) {
  const int N = t.world(), r = t.rank();
  parts.assign(static_cast<size_t>(N), std::string());
  parts[static_cast<size_t>(r)] = std::string(mine);
  if (N == 1) return 0;
  const RingOrder ring(t.options().ring_order, N, r);
  const int at = ring.position();
  size_t largest = 0, total = 0;
  for (size_t b : part_bytes) largest = std::max(largest, b), total += b;
  for (int q = 0; q < N; ++q)
    if (q != r) parts[static_cast<size_t>(q)].resize(part_bytes[static_cast<size_t>(q)]);
  const size_t chunk = std::max<size_t>(1, t.options().chunk_bytes), C = byte_chunks(t, largest);
  // Step k: send the piece of the rank k positions back on the ring, receive the one of the
  // rank k+1 back; chunk by chunk, so what arrives at step k leaves at step k+1 as soon as
  // it is here.
  auto piece_of_send = [&](size_t i) { return ring.rank_at(at - static_cast<long>(i / C)); };
  auto piece_of_recv = [&](size_t i) { return ring.rank_at(at - 1 - static_cast<long>(i / C)); };
  Stream s;
  s.kind = kind;
  s.count = total;  // the same on every rank; a rank with other sizes fails the header check
  s.to = ring.next();
  s.from = ring.prev();
  s.send_items = s.recv_items = static_cast<size_t>(N - 1) * C;
  s.lead = C;
  s.encode = [&](size_t i, zmq::message_t& out) {
    const std::string_view c = chunk_of(parts[static_cast<size_t>(piece_of_send(i))], i % C, chunk);
    out.rebuild(c.data(), c.size());
  };
  s.expected_bytes = [&](size_t i) {
    return chunk_of(parts[static_cast<size_t>(piece_of_recv(i))], i % C, chunk).size();
  };
  s.absorb = [&](size_t i, const void* payload, size_t bytes) {
    std::string& p = parts[static_cast<size_t>(piece_of_recv(i))];
    if (bytes) std::memcpy(p.data() + std::min(p.size(), (i % C) * chunk), payload, bytes);
  };
  return run_stream(t, seq, s);
}

}  // namespace rt::net
