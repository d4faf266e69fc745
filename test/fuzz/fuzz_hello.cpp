// The handshake: a peer's hello and refusal text (net/hello_wire.cpp), compared with ours.
#include "fuzz_input.hpp"
#include "hello_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in = fuzzing::text(data, size);
  rt::net::Hello mine{"job", 2, 0, "depth=4\nseq_len=256\n", ""};
  if (auto theirs = rt::net::decode_hello(in)) {
    (void)rt::net::compare_hello(mine, *theirs, "10.0.0.2:29500");
    (void)rt::net::compare_hello(rt::net::fingerprint_form(mine), *theirs, "10.0.0.2:29500");
  }
  std::string reason, hello;
  fuzzing::refused_or_parsed([&] { rt::net::decode_refusal(in, reason, hello); });
  return 0;
}
