// With --sync grad every rank applies the same update to the same parameters, so the
// replicas must stay bit-identical; a different compiler or CPU path could make them drift
// silently. The check compares a CRC-32 of every rank's whole parameter arena.
#pragma once
#include <cstdint>

#include "ringtrain/model/params.hpp"
#include "ringtrain/net/communicator.hpp"

namespace rt::train {

// Throws rt::RuntimeError naming the first rank whose parameters differ from rank 0's:
// all of them, or the `size` values from `at` (a fragment just averaged).
void check_replicas(net::Communicator& comm, model::ParamSet& params, int64_t step, int64_t at = 0, int64_t size = -1);

// The first rank whose n floats differ from rank 0's (by their CRC-32), or -1 when all
// agree. Every rank must call it, and every rank gets the same answer.
int first_rank_differing(net::Communicator& comm, const float* data, size_t n);

}  // namespace rt::train
