// Ring collectives on float32 buffers (ring_allreduce.cpp) and the small ones built on the
// same pipeline (chain_broadcast.cpp, ring_gather.cpp), over any Link. All run while the
// caller holds the link, and return the payload bytes this rank sent.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "link.hpp"
#include "ring_plan.hpp"

namespace rt::net {

// bounds: world + 1 segment boundaries, or empty for even segments (shard_range).
// residual: with Wire::Int8 or Int4 (RingPhases::Both only), n floats that receive this rank's
// rounding error per element (ring_allreduce.cpp); may be null.
uint64_t ring_collective(Link& t, uint64_t seq, RingPhases phases, float* data, size_t n, ReduceOp op, Wire wire,
                         std::span<const size_t> bounds = {}, float* residual = nullptr);
uint64_t chain_broadcast(Link& t, uint64_t seq, float* data, size_t n, int root, Wire wire);
// Every rank's part; part_bytes[q] is rank q's size, known to every rank before the call.
uint64_t ring_gather_parts(Link& t, uint64_t seq, CollectiveKind kind, std::string_view mine,
                           std::span<const size_t> part_bytes, std::vector<std::string>& parts);
uint64_t chain_broadcast_bytes(Link& t, uint64_t seq, void* record, size_t bytes, int root);

}  // namespace rt::net
