// Token shards: the tokenized documents of one split (train or val) in one file.
//
// Format, version 1, all integers little-endian:
//   offset  size  field
//        0     8  magic "RTSHARD\0"
//        8     4  uint32 version (1)
//       12     4  uint32 bytes per token (2: uint16 ids, so the vocabulary is <= 65536)
//       16     8  uint64 vocab_size
//       24     8  uint64 num_docs
//       32     8  uint64 num_tokens
//       40     8  uint64 checksum: FNV-1a 64 of the doc_start bytes, then the token bytes
//       48    16  reserved, zero
//       64        uint64 doc_start[num_docs + 1]: document d is tokens[doc_start[d],
//                 doc_start[d+1]); doc_start[0] = 0, doc_start[num_docs] = num_tokens
//        ...      uint16 tokens[num_tokens]; every document starts with <|bos|> (V-9)
// The file size must be exactly 64 + 8 (num_docs + 1) + 2 num_tokens.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace rt::data {

constexpr char kShardMagic[8] = {'R', 'T', 'S', 'H', 'A', 'R', 'D', '\0'};
constexpr uint32_t kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 64;

struct Shard {
  uint32_t vocab_size = 0;
  std::vector<uint64_t> doc_start;  // num_docs + 1 entries
  std::vector<uint16_t> tokens;

  size_t num_docs() const { return doc_start.empty() ? 0 : doc_start.size() - 1; }
  size_t doc_length(size_t d) const { return doc_start[d + 1] - doc_start[d]; }
  const uint16_t* doc_tokens(size_t d) const { return tokens.data() + doc_start[d]; }
};

// Writes the shard to path (the caller renames it into place). Throws RuntimeError on I/O.
void write_shard(const std::string& path, const Shard& shard);

// The same file, written as its documents come (data prepare streams its corpus): the tokens
// go to `scratch` as they arrive, only the offsets stay in memory (8 bytes a document);
// finish() writes `path` (header, offsets, then the tokens copied over). The scratch file is
// removed in any case.
class ShardWriter {
 public:
  ShardWriter(std::string path, std::string scratch, uint32_t vocab_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  void add_document(const uint32_t* ids, size_t n);  // each id < vocab_size <= 65536
  uint64_t num_docs() const { return doc_start_.size() - 1; }
  uint64_t num_tokens() const { return doc_start_.back(); }
  void finish();

 private:
  std::string path_, scratch_;
  uint32_t vocab_;
  std::ofstream tokens_;
  std::vector<uint64_t> doc_start_{0};
  std::vector<uint16_t> buffer_;
};
// Reads and checks a shard: magic, version, size, checksum, offsets, BOS at every document
// start and ids < vocab. Throws UsageError naming the file and the problem.
Shard read_shard(const std::string& path);

// token_bytes.bin: int32 little-endian byte length of every token id (0 for specials).
void write_token_bytes(const std::string& path, const std::vector<int32_t>& lengths);
std::vector<int32_t> read_token_bytes(const std::string& path);

}  // namespace rt::data
