// Validation loss and bits per byte on a fixed sequence of val rows.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/shard.hpp"
#include "ringtrain/model/gpt.hpp"

namespace rt::train {

struct EvalSums {
  double nats_all = 0;  // sum of per-token losses over all targets
  double tokens = 0;    // targets evaluated
  data::BpbSums bpb;    // over targets with bytes > 0
  double val_loss() const { return tokens > 0 ? nats_all / tokens : 0; }
};

// Evaluates this rank's share (every world-th row) of the first `max_tokens` val tokens, in
// rows of T taken `batch` at a time. Ranks add their sums before computing loss and bpb.
EvalSums evaluate(model::GPT& model, const std::shared_ptr<const data::Shard>& val,
                  const std::vector<int32_t>& token_bytes, uint32_t rank, uint32_t world,
                  int64_t T, int64_t batch, int64_t max_tokens, bool crop_long_docs = false);

}  // namespace rt::train
