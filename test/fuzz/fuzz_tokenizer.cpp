// The tokenizer file (tiktoken text: base64 token and rank per line, src/data/tokenizer.cpp).
#include "fuzz_input.hpp"
#include "ringtrain/data/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzzing::as_file(data, size);
  fuzzing::refused_or_parsed([&] {
    const auto t = rt::data::Tokenizer::load(path);
    (void)t.special_id("<|bos|>");
  });
  return 0;
}
