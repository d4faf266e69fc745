// Small shards built in memory for the data tests.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "ringtrain/data/shard.hpp"

namespace rt::data::testing {

constexpr uint32_t kVocab = 300;
constexpr uint16_t kBos = kVocab - 9;

// A shard of `docs` documents with lengths in [min_len, max_len]. Token j of document d is
// a function of (d, j) (never BOS past position 0), so a row shows where it came from.
inline Shard make_shard(size_t docs, size_t min_len, size_t max_len, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> len(min_len, max_len);
  Shard s;
  s.vocab_size = kVocab;
  s.doc_start.push_back(0);
  for (size_t d = 0; d < docs; ++d) {
    size_t n = len(rng);
    s.tokens.push_back(kBos);
    for (size_t j = 1; j < n; ++j) s.tokens.push_back(uint16_t((d * 31 + j) % 256));
    s.doc_start.push_back(s.tokens.size());
  }
  return s;
}

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("rt_test_data_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

}  // namespace rt::data::testing
