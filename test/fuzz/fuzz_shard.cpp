// Token shards and token_bytes of a prepared data directory (src/data/shard.cpp).
#include "fuzz_input.hpp"
#include "ringtrain/data/shard.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzzing::as_file(data, size);
  fuzzing::refused_or_parsed([&] { (void)rt::data::read_shard(path); });
  fuzzing::refused_or_parsed([&] { (void)rt::data::read_token_bytes(path); });
  return 0;
}
