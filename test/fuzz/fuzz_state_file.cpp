// state.safetensors: the optimizer, loader and sync state of a checkpoint, and the state a
// running ring sends a joining rank (src/io/state_file.cpp), read as the trainer reads it.
#include "fuzz_input.hpp"
#include "ringtrain/io/state_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzzing::refused_or_parsed([&] {
    const auto s = rt::io::StateReader::parse(fuzzing::text(data, size), "fuzz state");
    std::vector<float> v(16);
    if (s.has("optimizer.adamw.m.0")) s.floats("optimizer.adamw.m.0", v);
    if (s.has("loader.positions")) (void)s.int64s("loader.positions");
    if (s.has_scalars("loader")) {
      (void)s.integer("loader", "step");
      (void)s.count("loader", "epoch");
      (void)s.number("loader", "tokens");
    }
  });
  return 0;
}
