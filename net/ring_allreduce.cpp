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
#include "zero_copy.hpp"

namespace rt::net {

uint64_t ring_collective(Transport& t, uint64_t seq, RingPhases phases, float* data, size_t n, ReduceOp op, Wire wire,
                         std::span<const size_t> bounds, float* residual) {
  const int N = t.world(), r = t.rank();
  const bool coded = block_coded(wire);
  if (coded && phases != RingPhases::Both)
    throw RuntimeError(std::string(wire_name(wire)) + " on the wire is for all-reduce only (internal error)");
  if (N == 1) {  // a sum or average over one rank is the input
    if (residual) std::fill(residual, residual + n, 0.0f);
    return 0;
  }
  if (!bounds.empty() && (bounds.size() != static_cast<size_t>(N) + 1 || bounds[0] != 0 || bounds[N] != n ||
                          !std::is_sorted(bounds.begin(), bounds.end())))
    throw RuntimeError("ring collective: segment bounds do not cover the buffer in rank order (internal error)");
  // Coded blocks lie on the buffer's grid of kBlockValues values (data[64k, 64k + 64) share a
  // scale), so that a caller can give each group of values blocks of its own: even segments
  // start on the grid, and chunks are whole blocks.
  auto on_grid = [&](int segment) {
    return segment == N ? n : shard_range(n, N, segment).begin / kBlockValues * kBlockValues;
  };
  auto segment_range = [&](int segment) {
    if (!bounds.empty()) return ShardRange{bounds[segment], bounds[segment + 1]};
    return coded ? ShardRange{on_grid(segment), on_grid(segment + 1)} : shard_range(n, N, segment);
  };
  const bool bf16 = wire == Wire::Bf16;
  const size_t elem_bytes = bf16 ? 2 : 4;
  auto wire_bytes = [&](size_t elems) { return coded ? coded_bytes(wire, elems) : elems * elem_bytes; };
  size_t chunk_elems = std::max<size_t>(1, t.options().chunk_bytes / 4);
  if (coded) chunk_elems = (chunk_elems + kBlockValues - 1) / kBlockValues * kBlockValues;
  size_t largest_segment = 0;
  for (int q = 0; q < N; ++q) largest_segment = std::max(largest_segment, segment_range(q).size());
  const size_t C = std::max<size_t>(1, (largest_segment + chunk_elems - 1) / chunk_elems);  // chunks per step

  auto mod = [N](long s) { return static_cast<int>(((s % N) + N) % N); };
  auto send_segment = [&](long g) { return g < N - 1 ? mod(r - 1 - g) : mod(r - (g - N + 1)); };
  auto recv_segment = [&](long g) { return send_segment(g + 1); };
  // Elements [begin, end) of chunk c of a segment (empty past the segment's end).
  auto chunk = [&](int segment, size_t c) {
    ShardRange s = segment_range(segment);
    size_t b = std::min(s.end, s.begin + c * chunk_elems);
    return ShardRange{b, std::min(s.end, b + chunk_elems)};
  };

  const long first_step = phases == RingPhases::AllGather ? N - 1 : 0;
  const long end_step = phases == RingPhases::ReduceScatter ? N - 1 : 2 * (N - 1);
  const size_t items = static_cast<size_t>(end_step - first_step) * C;
  auto step_of = [&](size_t i) { return first_step + static_cast<long>(i / C); };

  if (phases == RingPhases::AllGather && bf16) {
    ShardRange own = segment_range(r);
    round_bf16_inplace(data + own.begin, own.size());
  }

  Stream s;
  s.kind = phases == RingPhases::Both            ? CollectiveKind::AllReduce
           : phases == RingPhases::ReduceScatter ? CollectiveKind::ReduceScatter
                                                 : CollectiveKind::AllGather;
  s.count = n;
  s.wire = wire;
  s.to = mod(r + 1);
  s.from = mod(r - 1);
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
    const long g = step_of(i);
    const int segment = send_segment(g);
    ShardRange c = chunk(segment, i % C);
    // The first values this rank sends are its own; later ones were checked as they were summed.
    if (g == first_step && !all_finite(data + c.begin, c.size())) own_non_finite(i);
    if (coded && g >= N - 1) {  // all-gather: bytes already encoded
      out.rebuild(coded_forward[i].data(), coded_forward[i].size());
      std::string().swap(coded_forward[i]);
    } else if (coded) {  // reduce-scatter: our partial sum, encoded once, its error kept
      out.rebuild(coded_bytes(wire, c.size()));
      encode_blocks(wire, data + c.begin, c.size(), out.data(), nullptr, residual ? residual + c.begin : nullptr);
    } else if (bf16) {
      out.rebuild(c.size() * elem_bytes);
      encode_bf16(data + c.begin, static_cast<uint16_t*>(out.data()), c.size());
    } else {
      out = in_flight.borrow(data + c.begin, c.size() * 4, static_cast<size_t>(segment) * C + i % C);
    }
  };
  s.expected_bytes = [&](size_t i) { return wire_bytes(chunk(recv_segment(step_of(i)), i % C).size()); };
  auto bytes_of = [&](size_t i) { return s.expected_bytes(i); };
  s.absorb = [&](size_t i, const void* payload, size_t) {
    const long g = step_of(i);
    const int segment = recv_segment(g);
    ShardRange c = chunk(segment, i % C);
    float* dst = data + c.begin;
    in_flight.wait_region(static_cast<size_t>(segment) * C + i % C);
    if (g < N - 1) {  // reduce-scatter: add the partial sum of the ranks before us
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
          std::string& bytes = coded_forward[i + C];
          bytes.resize(coded_bytes(wire, c.size()));
          encode_blocks(wire, dst, c.size(), bytes.data(), dst, residual ? residual + c.begin : nullptr);
        }
      }
    } else if (coded) {  // all-gather: decode, and keep the bytes for the next rank
      if (!decode_blocks(wire, payload, c.size(), dst)) bad_code(i);
      if (!all_finite(dst, c.size())) received_non_finite(i, payload, c.size(), false);
      if (i + C < items) coded_forward[i + C].assign(static_cast<const char*>(payload), bytes_of(i));
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
