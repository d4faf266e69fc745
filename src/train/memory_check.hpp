// Before training starts: will the step fit in memory? Parameters, gradients and
// optimizer state exist by then; what the step still needs is the activation arena for the
// device batch and the sync's buffers. Refuse up front, with the largest batch that fits,
// rather than die of OOM in the middle of a run.
#pragma once
#include <cstdint>

#include "ringtrain/model/gpt.hpp"

namespace rt::train {

// Throws rt::UsageError when the need exceeds 90% of MemAvailable; does nothing when the
// system does not say how much is available.
void check_memory(model::GPT& model, int64_t device_batch, int64_t seq_len, double sync_bytes);

}  // namespace rt::train
