// Byte-level BPE training: count the unique pre-tokenized chunks of a corpus, then merge
// the most frequent adjacent pair again and again (ties go to the smaller pair, comparing
// (left id, right id)). Merge m creates token id 256 + m.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ringtrain/data/pretokenize.hpp"

namespace rt::data {

using TokenPair = std::pair<uint32_t, uint32_t>;

// Unique chunks with their number of occurrences, sorted by chunk bytes (deterministic).
struct ChunkCounts {
  std::vector<std::string> chunks;
  std::vector<uint64_t> counts;
};

// Splits every document with the regex on `threads` threads and counts each unique chunk.
// Stops adding documents once max_bytes of text have been read (0 = no limit).
ChunkCounts count_chunks(const Pretokenizer& pre, const std::vector<std::string_view>& docs,
                         int threads, uint64_t max_bytes = 0);

// Learns up to num_merges merges. Returns fewer when no pair occurs any more (a corpus
// too small for the vocabulary). on_progress(merges_done) is called every 1000 merges.
std::vector<TokenPair> train_bpe(const ChunkCounts& corpus, size_t num_merges,
                                 const std::function<void(size_t)>& on_progress = {});

}  // namespace rt::data
