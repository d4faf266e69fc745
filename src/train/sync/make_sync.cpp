#include "modes.hpp"

namespace rt::train {

// B*T / tokens, computed as each mode always did: 1/accum exactly when tokens = accum*B*T.
float SyncContext::full_micro_step_scale(int64_t tokens) const {
  return float(double(options->device_batch * options->seq_len) / double(tokens));
}

std::unique_ptr<Sync> make_sync(const SyncContext& ctx) {
  if (!ctx.comm || ctx.comm->world() == 1) return make_single_process_sync(ctx);
  switch (ctx.options->sync) {
    case SyncMode::Grad: return make_gradient_sync(ctx);
    case SyncMode::Avg:
    case SyncMode::Diloco: return ctx.options->sync_overlap ? make_overlapped_average_sync(ctx) : make_average_sync(ctx);
  }
  return make_single_process_sync(ctx);
}

}  // namespace rt::train
