// model.safetensors and every safetensors file ringtrain reads (src/io/safetensors.cpp).
#include "fuzz_input.hpp"
#include "ringtrain/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzzing::refused_or_parsed([&] {
    const auto f = rt::io::SafetensorsFile::parse(fuzzing::text(data, size), "fuzz.safetensors");
    for (const auto& name : f.names()) (void)f.get(name);
  });
  return 0;
}
