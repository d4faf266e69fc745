// The job's replies as `ringtrain watch` reads them (src/watch/job_reply.cpp): the first
// byte picks status or history, the rest is the reply.
#include "fuzz_input.hpp"
#include "ringtrain/watch/job_reply.hpp"
#include "ringtrain/watch/prometheus.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string in = fuzzing::text(data + 1, size - 1);
  fuzzing::refused_or_parsed([&] {
    if (data[0] & 1) {
      (void)rt::watch::checked_history(in, data[0] >> 1);
    } else {
      const auto status = rt::watch::checked_status(in);
      (void)rt::watch::prometheus_text(status, true, 0);
    }
  });
  return 0;
}
