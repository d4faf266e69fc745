// The arithmetic of a ring collective, apart from what travels: which segment each step
// sends and receives, how segments split into chunks, and the pipeline's item numbering
// (ring_allreduce.cpp explains the algorithm). The same on every rank; the unit tests check
// it alone (every element reduced once by each rank, every rank's segment gathered once).
#pragma once
#include <algorithm>
#include <cstddef>
#include <span>

#include "block_codes.hpp"
#include "ringtrain/net/ring_order.hpp"
#include "ringtrain/net/communicator.hpp"

namespace rt::net {

enum class RingPhases { ReduceScatter, AllGather, Both };

class RingPlan {
 public:
  // bounds: world + 1 segment boundaries, or empty for even segments (shard_range; with a
  // block-coded wire rounded down to the grid of kBlockValues values, so that chunks are
  // whole blocks). Throws RuntimeError on bounds that do not cover [0, n) in order.
  // order: where each rank sits on the ring (ring_order.hpp); segments are named by rank.
  RingPlan(const RingOrder& order, size_t n, RingPhases phases, bool coded, size_t chunk_bytes,
           std::span<const size_t> bounds = {})
      : order_(order), N_(order.world()), p_(order.position()), n_(n), coded_(coded), bounds_(bounds) {
    if (!bounds.empty() && (bounds.size() != static_cast<size_t>(N_) + 1 || bounds[0] != 0 || bounds[N_] != n ||
                            !std::is_sorted(bounds.begin(), bounds.end())))
      throw RuntimeError("ring collective: segment bounds do not cover the buffer in rank order (internal error)");
    chunk_elems_ = std::max<size_t>(1, chunk_bytes / 4);
    if (coded) chunk_elems_ = (chunk_elems_ + kBlockValues - 1) / kBlockValues * kBlockValues;
    size_t largest = 0;
    for (int q = 0; q < N_; ++q) largest = std::max(largest, segment(q).size());
    C_ = std::max<size_t>(1, (largest + chunk_elems_ - 1) / chunk_elems_);
    first_step_ = phases == RingPhases::AllGather ? N_ - 1 : 0;
    end_step_ = phases == RingPhases::ReduceScatter ? N_ - 1 : 2 * (N_ - 1);
  }

  // The ring in rank order (0, 1, ..., world-1).
  RingPlan(int world, int rank, size_t n, RingPhases phases, bool coded, size_t chunk_bytes,
           std::span<const size_t> bounds = {})
      : RingPlan(RingOrder({}, world, rank), n, phases, coded, chunk_bytes, bounds) {}

  int world() const { return N_; }
  int to() const { return order_.next(); }
  int from() const { return order_.prev(); }
  // Chunks per step (of the largest segment; smaller segments have empty chunks at the end).
  size_t chunks_per_step() const { return C_; }
  // The pipeline's items: (steps) x C, sent and received alike.
  size_t items() const { return static_cast<size_t>(end_step_ - first_step_) * C_; }
  long first_step() const { return first_step_; }
  long step_of(size_t item) const { return first_step_ + static_cast<long>(item / C_); }
  // Steps 0..N-2 are the reduce-scatter, N-1..2N-3 the all-gather.
  bool reducing(long step) const { return step < N_ - 1; }
  // Segment s: [begin, end) of the buffer, owned by rank s after the reduce-scatter.
  ShardRange segment(int s) const {
    if (!bounds_.empty()) return ShardRange{bounds_[s], bounds_[s + 1]};
    return coded_ ? ShardRange{on_grid(s), on_grid(s + 1)} : shard_range(n_, N_, s);
  }
  // Step g sends the segment of the rank at position p-1-g (reduce-scatter) or p-(g-N+1)
  // (all-gather), p being this rank's position, and receives what it sends at step g+1.
  int send_segment(long g) const { return order_.rank_at(g < N_ - 1 ? p_ - 1 - g : p_ - (g - N_ + 1)); }
  int recv_segment(long g) const { return send_segment(g + 1); }
  // Elements [begin, end) of chunk c of a segment (empty past the segment's end).
  ShardRange chunk(int seg, size_t c) const {
    const ShardRange s = segment(seg);
    const size_t b = std::min(s.end, s.begin + c * chunk_elems_);
    return ShardRange{b, std::min(s.end, b + chunk_elems_)};
  }
  // What item i sends, what it receives, and the zero-copy region of a chunk.
  ShardRange sent_chunk(size_t i) const { return chunk(send_segment(step_of(i)), i % C_); }
  ShardRange received_chunk(size_t i) const { return chunk(recv_segment(step_of(i)), i % C_); }
  size_t region(int seg, size_t c) const { return static_cast<size_t>(seg) * C_ + c; }

 private:
  size_t on_grid(int s) const { return s == N_ ? n_ : shard_range(n_, N_, s).begin / kBlockValues * kBlockValues; }

  RingOrder order_;
  int N_, p_;
  size_t n_;
  bool coded_;
  std::span<const size_t> bounds_;
  size_t chunk_elems_ = 1, C_ = 1;
  long first_step_ = 0, end_step_ = 0;
};

}  // namespace rt::net
