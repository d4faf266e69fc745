// Membership requests a running ring answers (`elastic join R`, `elastic checkin ...`,
// net/rendezvous.cpp answer_while_running), from any client holding the key.
#include "fuzz_input.hpp"
#include "ringtrain/net/rendezvous.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in = fuzzing::text(data, size);
  fuzzing::refused_or_parsed([&] {
    (void)rt::net::answer_while_running(in, 3, 4, [](int r) { return r == 0 || r == 1; }, [](int r) {
      if (r < 0 || r >= 4) __builtin_trap();  // a rank outside the job must never be let in
    });
  });
  return 0;
}
