// Broadcast along the ring: the root's data travels as a pipelined chain, root -> root+1 ->
// ... -> root-1, each rank forwarding a chunk as soon as it arrived. Floats (f32 or bf16 on
// the wire) and raw records.
#include <algorithm>
#include <cstring>

#include "bf16.hpp"
#include "pipeline.hpp"
#include "ringtrain/net/finite_values.hpp"
#include "ring.hpp"
#include "zero_copy.hpp"

#include "ringtrain/net/ring_order.hpp"

namespace rt::net {

namespace {
// A broadcast's stream of C items from root along the ring: the root sends, the ranks
// after it forward each item once it arrived, the last one only receives.
Stream chain_stream(const Link& t, CollectiveKind kind, uint64_t count, int root, size_t C) {
  const int N = t.world();
  const RingOrder ring(t.options().ring_order, N, t.rank());
  const int position = (ring.position() - ring.position_of(root) + N) % N;  // 0 at the root, N-1 at the chain's end
  Stream s;
  s.kind = kind;
  s.count = count;
  s.root = root;
  s.to = ring.next();
  s.from = ring.prev();
  s.send_items = position == N - 1 ? 0 : C;
  s.recv_items = position == 0 ? 0 : C;
  s.lead = position == 0 ? C : 0;
  return s;
}
}  // namespace

uint64_t chain_broadcast(Link& t, uint64_t seq, float* data, size_t n, int root, Wire wire) {
  const int N = t.world();
  if (N == 1) return 0;
  const bool bf16 = wire == Wire::Bf16;
  const size_t elem_bytes = bf16 ? 2 : 4;
  const size_t chunk_elems = std::max<size_t>(1, t.options().chunk_bytes / 4);
  const size_t C = std::max<size_t>(1, (n + chunk_elems - 1) / chunk_elems);
  auto chunk = [&](size_t c) {
    size_t b = std::min(n, c * chunk_elems);
    return ShardRange{b, std::min(n, b + chunk_elems)};
  };
  if (t.rank() == root && bf16) round_bf16_inplace(data, n);  // the root keeps what others get

  Stream s = chain_stream(t, CollectiveKind::Broadcast, n, root, C);
  s.wire = wire;
  // f32 chunks go out straight from data (zero copy); each is written at most once, before
  // it is sent, so only the return has to wait for their release.
  ZeroCopySends in_flight(t, 1);
  // NaN and infinity never travel (finite_values.hpp): the root checks what it sends, every
  // other rank what it received, before it is used or forwarded.
  s.encode = [&](size_t i, zmq::message_t& out) {
    ShardRange c = chunk(i);
    if (t.rank() == root && !all_finite(data + c.begin, c.size()))
      t.fail("this rank's own values in chunk " + std::to_string(i) + " of broadcast #" + std::to_string(seq) +
                 " hold a NaN or an infinity",
             false);
    if (bf16) {
      out.rebuild(c.size() * elem_bytes);
      encode_bf16(data + c.begin, static_cast<uint16_t*>(out.data()), c.size());
    } else {
      out = in_flight.borrow(data + c.begin, c.size() * 4, 0);
    }
  };
  s.expected_bytes = [&](size_t i) { return chunk(i).size() * elem_bytes; };
  s.absorb = [&](size_t i, const void* payload, size_t) {
    ShardRange c = chunk(i);
    if (bf16) decode_bf16(payload, data + c.begin, c.size());
    else if (c.size()) std::memcpy(data + c.begin, payload, c.size() * 4);
    if (!all_finite(data + c.begin, c.size()))
      t.fail(t.describe(s.from) + " sent chunk " + std::to_string(i) + " of broadcast #" + std::to_string(seq) +
                 " holding a NaN or an infinity; it runs a modified or broken ringtrain",
             true);
  };
  const uint64_t sent = run_stream(t, seq, s);
  in_flight.wait_all();  // the caller may change data once we return
  return sent;
}

uint64_t chain_broadcast_bytes(Link& t, uint64_t seq, void* record, size_t bytes, int root) {
  const int N = t.world();
  if (N == 1) return 0;
  const size_t chunk = std::max<size_t>(1, t.options().chunk_bytes);
  char* data = static_cast<char*>(record);
  auto piece = [&](size_t c) {
    const size_t b = std::min(bytes, c * chunk);
    return std::pair<size_t, size_t>{b, std::min(bytes - b, chunk)};
  };
  Stream s = chain_stream(t, CollectiveKind::BroadcastBytes, bytes, root, byte_chunks(t, bytes));
  s.encode = [&](size_t i, zmq::message_t& out) {
    const auto [b, len] = piece(i);
    out.rebuild(data + b, len);
  };
  s.expected_bytes = [&](size_t i) { return piece(i).second; };
  s.absorb = [&](size_t i, const void* payload, size_t len) {
    if (len) std::memcpy(data + piece(i).first, payload, len);
  };
  return run_stream(t, seq, s);
}

}  // namespace rt::net
