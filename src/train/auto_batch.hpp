// --device-batch auto: ranks of unequal speed share the global batch in proportion to
// their speed. Before the first step, every rank times a few forward+backward passes of its
// even share of the batch (probe passes on synthetic tokens: the parameters do not change),
// the ranks exchange their rows per second, and every rank computes the same split.
// The rows still come from the one stream of the job (trainer.cpp, next_rows) and the
// averages are weighted by tokens, so any split trains exactly as one big batch.
#pragma once
#include <cstdint>
#include <vector>

#include "ringtrain/model/gpt.hpp"
#include "ringtrain/net/communicator.hpp"

namespace rt::train {

// `rows` split over the ranks in proportion to `rates` (rows per second), every rank at
// least one row, summing to `rows` exactly (shares rounded down, then the rest to the ranks
// furthest below their share; ties to the lower rank).
// Requires rows >= rates.size() and every rate finite and positive.
std::vector<int64_t> split_rows(int64_t rows, const std::vector<double>& rates);

// Seconds of one forward+backward of B rows of T tokens: the fastest of `reps` after one
// warm-up. Leaves the gradients zeroed and the parameters as they were.
double time_training_pass(model::GPT& model, int64_t B, int64_t T, int reps);

// Every rank's --device-batch for `rows` rows per step over all ranks (comm null: one
// process, which takes them all). A rate from another rank that is not a positive finite
// number stops the job naming that rank (peer_values.hpp).
std::vector<int64_t> auto_device_batches(net::Communicator* comm, model::GPT& model, int64_t rows, int64_t T);

}  // namespace rt::train
