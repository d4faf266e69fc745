// Ring collectives on float32 buffers (ring_allreduce.cpp) and the small ones built on the
// same pipeline (collectives.cpp). All run while the caller holds the transport.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "transport.hpp"

namespace rt::net {

enum class RingPhases { ReduceScatter, AllGather, Both };

void ring_collective(Transport& t, uint64_t seq, RingPhases phases, float* data, size_t n, ReduceOp op, Wire wire);
void chain_broadcast(Transport& t, uint64_t seq, float* data, size_t n, int root, Wire wire);
std::vector<std::string> ring_gather_bytes(Transport& t, uint64_t seq, std::string_view mine);

}  // namespace rt::net
