// The bandwidth-optimal ring all-reduce, and its two halves on their own.
//
// The buffer is cut into `world` segments (segment s is what rank s owns after the
// reduce-scatter) and each segment into chunks of `chunk_bytes`. With N ranks, rank r runs
// 2(N-1) steps; in each it sends one segment to rank r+1 and receives one from rank r-1:
//
//   reduce-scatter, step g = 0..N-2:  send segment r-1-g, receive segment r-2-g and add it
//                                      into ours; after the last step segment r is complete
//   all-gather,     step g = N-1..2N-3 (t = g-N+1): send segment r-t, receive segment
//                                      r-1-t and store it
//
// What arrives at step g is exactly what leaves at step g+1, so chunk c of step g+1 can be
// sent as soon as chunk c of step g has been received and reduced: sending, receiving
// and reducing overlap chunk by chunk (the pipeline, pipeline.cpp). Each rank sends and
// receives 2(N-1)/N of the buffer, the minimum for an all-reduce.
//
// With f32 on the wire, chunks are sent straight out of `data` (zero copy): a chunk is
// overwritten later (the all-gather stores into the segments the reduce-scatter sent), so
// every write into a chunk first waits until libzmq has released that chunk's earlier
// sends, and the collective returns only once every send was released (zero_copy.hpp).
//
// The segments are even (shard_range) unless the caller gives their boundaries: then
// segment s is [bounds[s], bounds[s+1]), e.g. whole matrices for the rank that owns them.
// Rank r sends all segments but its own, so a reduce-scatter costs the slowest link
// n - (smallest segment) values; even segments are the cheapest.
//
// With bf16 on the wire, sums stay float32 in the buffer; only the messages are rounded.
// The owner rounds its finished segment before sending it in the all-gather, so every
// rank ends with the same bits.
//
// With int8 or int4 on the wire (all-reduce only; block_codes.hpp), every rank encodes each
// element exactly once: the partial sum it forwards in the reduce-scatter, or, for its own
// segment, the finished sum, which it encodes once, keeps decoded and sends; the all-gather
// forwards the received bytes unchanged. So every rank decodes the same bytes (identical
// results), and the result is sum(data) - sum over ranks of the error each rank made, which
// it gets back in `residual` (error feedback: add it to the next call's data and nothing is
// lost).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bf16.hpp"
#include "block_codes.hpp"
#include "ringtrain/net/finite_values.hpp"
#include "pipeline.hpp"
#include "ring.hpp"
#include "ring_plan.hpp"
#include "zero_copy.hpp"

namespace rt::net {

uint64_t ring_collective(Link& t, uint64_t seq, RingPhases phases, float* data, size_t n, ReduceOp op, Wire wire,
                         std::span<const size_t> bounds, float* residual) {
  const int N = t.world();
  const bool coded = block_coded(wire);
  if (coded && phases != RingPhases::Both)
    throw RuntimeError(std::string(wire_name(wire)) + " on the wire is for all-reduce only (internal error)");
  if (N == 1) {  // a sum or average over one rank is the input
    if (residual) std::fill(residual, residual + n, 0.0f);
    return 0;
  }
  // Coded blocks lie on the buffer's grid of kBlockValues values (data[64k, 64k + 64) share a
  // scale), so that a caller can give each group of values blocks of its own: even segments
  // start on the grid, and chunks are whole blocks (ring_plan.hpp).
  const RingPlan plan(RingOrder(t.options().ring_order, N, t.rank()), n, phases, coded, t.options().chunk_bytes, bounds);
  const size_t C = plan.chunks_per_step(), items = plan.items();
  const bool bf16 = wire == Wire::Bf16;
  const size_t elem_bytes = bf16 ? 2 : 4;
  auto wire_bytes = [&](size_t elems) { return coded ? coded_bytes(wire, elems) : elems * elem_bytes; };

  if (phases == RingPhases::AllGather && bf16) {
    ShardRange own = plan.segment(t.rank());
    round_bf16_inplace(data + own.begin, own.size());
  }

  Stream s;
  s.kind = phases == RingPhases::Both            ? CollectiveKind::AllReduce
           : phases == RingPhases::ReduceScatter ? CollectiveKind::ReduceScatter
                                                 : CollectiveKind::AllGather;
  s.count = n;
  s.wire = wire;
  s.to = plan.to();
  s.from = plan.from();
  s.send_items = s.recv_items = items;
  s.lead = C;

  // int8/int4: the bytes of all-gather item i, stored when they are known (the owner's encoded
  // chunk, or the chunk received one step earlier, item i - C) until item i is sent.
  std::vector<std::string> coded_forward(coded ? items : 0);
  auto bad_code = [&](size_t i) {
    t.fail(t.describe(s.from) + " sent chunk " + std::to_string(i) + " of " + collective_name(s.kind) + " #" +
               std::to_string(seq) + " with an " + wire_name(wire) + " scale or value out of range; it runs a modified or broken ringtrain",
           true);
  };

  // NaN and infinity never travel (finite_values.hpp): a rank checks its own values before
  // they first leave, and every chunk after it is summed or stored, so the first rank to
  // see one names where it came from, itself or the sender.
  auto own_non_finite = [&](size_t i) {
    t.fail("this rank's own values in chunk " + std::to_string(i) + " of " + collective_name(s.kind) + " #" +
               std::to_string(seq) + " hold a NaN or an infinity: its gradients or parameters diverged (lower the "
               "learning rate, or resume from an earlier checkpoint)",
           false);
  };
  auto received_non_finite = [&](size_t i, const void* payload, size_t elems, bool summed) {
    const bool sent_finite = coded ? true
                             : bf16 ? all_finite_bf16_bytes(payload, elems)
                                    : all_finite_f32_bytes(payload, elems);
    if (!sent_finite || !summed)
      t.fail(t.describe(s.from) + " sent chunk " + std::to_string(i) + " of " + collective_name(s.kind) + " #" +
                 std::to_string(seq) + " holding a NaN or an infinity; it runs a modified or broken ringtrain",
             true);
    t.fail("chunk " + std::to_string(i) + " of " + collective_name(s.kind) + " #" + std::to_string(seq) +
               " holds a NaN or an infinity after adding what " + t.describe(s.from) +
               " sent: this rank's own values diverged or the sum overflowed float32 (lower the learning rate, or "
               "resume from an earlier checkpoint)",
           false);
  };

  // Chunk c of segment `segment` is region segment * C + c of the zero-copy sends.
  ZeroCopySends in_flight(t, static_cast<size_t>(N) * C);
  s.encode = [&](size_t i, zmq::message_t& out) {
    const long g = plan.step_of(i);
    const int segment = plan.send_segment(g);
    const ShardRange c = plan.sent_chunk(i);
    // The first values this rank sends are its own; later ones were checked as they were summed.
    if (g == plan.first_step() && !all_finite(data + c.begin, c.size())) own_non_finite(i);
    if (coded && !plan.reducing(g)) {  // all-gather: bytes already encoded
      out.rebuild(coded_forward[i].data(), coded_forward[i].size());
      std::string().swap(coded_forward[i]);
    } else if (coded) {  // reduce-scatter: our partial sum, encoded once, its error kept
      out.rebuild(coded_bytes(wire, c.size()));
      encode_blocks(wire, data + c.begin, c.size(), out.data(), nullptr, residual ? residual + c.begin : nullptr);
    } else if (bf16) {
      out.rebuild(c.size() * elem_bytes);
      encode_bf16(data + c.begin, static_cast<uint16_t*>(out.data()), c.size());
    } else {
      out = in_flight.borrow(data + c.begin, c.size() * 4, plan.region(segment, i % C));
    }
  };
  s.expected_bytes = [&](size_t i) { return wire_bytes(plan.received_chunk(i).size()); };
  s.absorb = [&](size_t i, const void* payload, size_t bytes) {
    const long g = plan.step_of(i);
    const int segment = plan.recv_segment(g);
    const ShardRange c = plan.received_chunk(i);
    float* dst = data + c.begin;
    in_flight.wait_region(plan.region(segment, i % C));
    if (plan.reducing(g)) {  // reduce-scatter: add the partial sum of the ranks before us
      if (coded) {
        if (!add_blocks(wire, dst, payload, c.size())) bad_code(i);
      } else if (bf16) {
        add_bf16(dst, payload, c.size());
      } else {
        add_f32(dst, payload, c.size());
      }
      if (!all_finite(dst, c.size())) received_non_finite(i, payload, c.size(), true);
      if (g == N - 2) {  // this chunk of our own segment is now complete
        if (op == ReduceOp::Avg)
          for (size_t k = 0; k < c.size(); ++k) dst[k] /= static_cast<float>(N);
        if (bf16 && phases == RingPhases::Both) round_bf16_inplace(dst, c.size());
        if (coded) {  // encoded once for the all-gather; we keep what the others will decode
          std::string& out = coded_forward[i + C];
          out.resize(coded_bytes(wire, c.size()));
          encode_blocks(wire, dst, c.size(), out.data(), dst, residual ? residual + c.begin : nullptr);
        }
      }
    } else if (coded) {  // all-gather: decode, and keep the bytes for the next rank
      if (!decode_blocks(wire, payload, c.size(), dst)) bad_code(i);
      if (!all_finite(dst, c.size())) received_non_finite(i, payload, c.size(), false);
      if (i + C < items) coded_forward[i + C].assign(static_cast<const char*>(payload), bytes);
    } else {  // all-gather: store the finished chunk
      if (bf16) decode_bf16(payload, dst, c.size());
      else if (c.size()) std::memcpy(dst, payload, c.size() * 4);
      if (!all_finite(dst, c.size())) received_non_finite(i, payload, c.size(), false);
    }
  };
  const uint64_t sent = run_stream(t, seq, s);
  in_flight.wait_all();  // the caller may change data once we return
  return sent;
}

}  // namespace rt::net
