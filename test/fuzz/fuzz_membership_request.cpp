// Membership requests a running ring answers (`elastic join R`, `elastic merge L S`,
// `elastic checkin ...`, net/rendezvous.cpp answer_while_running), from any client holding the key.
#include "fuzz_input.hpp"
#include "ringtrain/net/rendezvous.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in = fuzzing::text(data, size);
  fuzzing::refused_or_parsed([&] {
    rt::net::RunningRing ring;
    ring.epoch = 3, ring.lineage = 0x1234, ring.step = 50, ring.world = 4;
    ring.is_member = [](int r) { return r == 0 || r == 1; };
    ring.wants_to_join = [](int r) {
      if (r < 0 || r >= 4) __builtin_trap();  // a rank outside the job must never be let in
    };
    ring.this_ring_yields = [](uint64_t lineage, int64_t step) {
      // Never our own lineage, never a step beyond the job's, never a lineage id out of range.
      if (lineage == 0x1234 || lineage == 0 || lineage >> 63 || step < 0 || step > 1000) __builtin_trap();
      return step > 50;
    };
    (void)rt::net::answer_while_running(in, ring, 1000);
  });
  return 0;
}
