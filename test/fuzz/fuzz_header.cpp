// The 48-byte header of every message between ranks (net/wire_format.hpp).
#include "fuzz_input.hpp"
#include "wire_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rt::net::Header h;
  if (rt::net::decode_header(data, size, h)) (void)rt::net::collective_name(static_cast<rt::net::CollectiveKind>(h.collective));
  return 0;
}
