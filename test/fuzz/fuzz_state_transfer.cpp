// The state transfer (src/train/run_state.cpp, ring_state.cpp): the bytes a joining or
// re-forming rank takes from the ring's state holder — the counters, the loader's position
// and AdamW's step counts as a state file after its length, then the sync mode's state file
// — read as the trainer reads them. (The parameters and optimizer buffers travel as floats
// of this rank's own sizes, checked finite: the collective chunks' target covers those.)
// What is accepted must lie within the job's bounds and read back the same once re-encoded.
#include <cmath>

#include "fuzz_input.hpp"
#include "ringtrain/io/state_file.hpp"
#include "run_state.hpp"

namespace {
constexpr int64_t kMaxStep = 1000;
constexpr size_t kParams = 64;  // the job's model, as ParamSync::load_state sizes its reads
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rt::train::RunState;
  fuzzing::refused_or_parsed([&] {
    const auto in = RunState::from_bytes(fuzzing::text(data, size), "fuzz state transfer", kMaxStep);
    const RunState& r = in.run;
    if (r.step < 0 || r.step > kMaxStep || !std::isfinite(r.tokens_seen) || r.tokens_seen < 0 || !std::isfinite(r.val_bpb) ||
        r.last_eval_step < -1 || r.last_eval_step > r.step)
      __builtin_trap();
    const auto again = RunState::from_bytes(r.to_bytes(in.adamw_steps), "fuzz state transfer again", kMaxStep);
    if (again.run.step != r.step || again.run.sync_state != r.sync_state || again.adamw_steps != in.adamw_steps ||
        again.run.loader.buffer != r.loader.buffer || again.run.loader.cursor != r.loader.cursor)
      __builtin_trap();
    // The sync state, as Trainer::load_sync_state and ParamSync::load_state read it.
    if (r.sync_state.empty()) return;
    const auto sync = rt::io::StateReader::parse(r.sync_state, "fuzz sync state");
    std::vector<float> v(kParams);
    for (const char* name : {"sync.anchor", "sync.momentum", "sync.error"})
      if (sync.has(name)) sync.floats(name, v);
  });
  return 0;
}
