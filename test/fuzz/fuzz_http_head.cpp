// The request head of the watch page's HTTP server (net/http_server.cpp).
#include "fuzz_input.hpp"
#include "ringtrain/net/http_server.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int status = 0;
  if (auto r = rt::net::parse_http_head(fuzzing::text(data, size), status)) {
    if (status != 200) __builtin_trap();
    (void)rt::net::query_value(r->query, "after");
  } else if (status < 400 || status > 505) {
    __builtin_trap();  // a refusal always carries an error status
  }
  return 0;
}
