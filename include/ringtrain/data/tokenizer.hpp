// The byte-level BPE tokenizer: ids 0..255 are the bytes, id 256+m is merge m, and the 9
// special tokens of the spec take the last ids V-9..V-1 (<|bos|> first).
//
// On disk it is tiktoken's text format: one line "base64(token bytes) id" for each id
// 0..V-10, in id order. The special tokens are not in that file (tiktoken takes them as a
// separate argument); they are always the 9 names of kSpecialTokens at ids V-9..V-1, so
// the file alone defines the whole tokenizer.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ringtrain/data/bpe_train.hpp"
#include "ringtrain/data/pretokenize.hpp"

namespace rt::data {

constexpr int kNumSpecialTokens = 9;
extern const char* const kSpecialTokens[kNumSpecialTokens];

class Tokenizer {
 public:
  // Vocabulary size = 256 + merges.size() + 9.
  explicit Tokenizer(std::vector<TokenPair> merges);

  // Reads a tiktoken text file; throws UsageError (one line: file and line) if malformed.
  static Tokenizer load(const std::string& path);
  // Writes the tiktoken text file (the caller picks the name; see prepare for atomicity).
  void save(const std::string& path) const;

  uint32_t vocab_size() const { return uint32_t(bytes_.size()); }
  uint32_t bos_id() const { return vocab_size() - kNumSpecialTokens; }
  // Id of a special token by name, e.g. "<|bos|>"; throws UsageError if unknown.
  uint32_t special_id(std::string_view name) const;
  bool is_special(uint32_t id) const { return id >= bos_id() && id < vocab_size(); }
  const std::vector<TokenPair>& merges() const { return merges_; }
  // Bytes of one token; a special token's bytes are its name.
  const std::string& token_bytes(uint32_t id) const { return bytes_.at(id); }
  // UTF-8 byte length of each token for bits per byte: 0 for special tokens.
  std::vector<int32_t> token_byte_lengths() const;

  // Plain text to ids (no special tokens are recognised in the text; add BOS yourself).
  // Thread-safe: each thread keeps its own cache of frequent chunks.
  std::vector<uint32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<uint32_t>& out) const;
  // BPE of one pre-tokenized chunk: lowest merge index first, as in training.
  void encode_chunk(std::string_view chunk, std::vector<uint32_t>& out) const;
  std::string decode(const std::vector<uint32_t>& ids) const;

 private:
  struct Empty {};
  explicit Tokenizer(Empty);  // the 256 byte tokens only; load() adds merges one by one
  void add_merge(uint32_t a, uint32_t b);
  void add_specials();

  uint64_t serial_;  // identifies this tokenizer in the per-thread encode cache
  std::vector<TokenPair> merges_;
  std::vector<std::string> bytes_;
  std::unordered_map<uint64_t, uint32_t> merge_rank_;  // (left,right) -> merge index
  Pretokenizer pre_;
};

}  // namespace rt::data
