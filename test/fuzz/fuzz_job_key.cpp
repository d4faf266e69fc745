// The job key file (net/job_key.cpp).
#include "fuzz_input.hpp"
#include "ringtrain/net/job_key.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzzing::as_file(data, size);
  fuzzing::refused_or_parsed([&] { (void)rt::net::load_job_key(path); });
  return 0;
}
