// The parquet reader (src/data/parquet.cpp, thrift_compact.cpp): nanochat's data shards, from
// whoever made them. Seeded with the files a real writer wrote (test/data/parquet).
#include <string_view>

#include "fuzz_input.hpp"
#include "ringtrain/data/parquet.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  fuzzing::refused_or_parsed([&] {
    size_t total = 0;
    rt::data::parse_parquet_text(file, "fuzz input", "text", [&](std::string_view v) { total += v.size(); });
  });
  return 0;
}
