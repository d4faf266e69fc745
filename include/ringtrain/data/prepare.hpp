// `ringtrain data prepare`: read a corpus, train (or load) the tokenizer, tokenize every
// document with <|bos|> first, and write in the output directory:
//   tokenizer.tiktoken  tiktoken text format (specials implied at ids V-9..V-1)
//   train.bin, val.bin  shards (format in shard.hpp)
//   token_bytes.bin     int32 byte length per token id, 0 for specials (for bits per byte)
//   meta.json           vocab, counts, sources, special tokens, timings, long_docs
// Every file is written under a temporary name and renamed at the end, and all input
// checks run before anything is created: a failure never leaves half-written outputs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rt::data {

// The default corpus when no --input is given: the .rst sources of the kernel
// documentation that the release's linux-doc package installs (Debian 12: linux-doc-6.1,
// Debian 13: linux-doc-6.12; tools/setup.sh installs it), i.e. the newest directory
// /usr/share/doc/linux-doc*/html/_sources. Empty when none is installed.
std::string default_corpus();

struct PrepareOptions {
  std::vector<std::string> inputs;  // empty: default_corpus()
  std::string out_dir;
  uint32_t vocab = 32768;
  std::string tokenizer;       // reuse this .tiktoken file instead of training
  std::string tokenizer_label; // what meta.json names as its source (default: `tokenizer`)
  double val_fraction = 0.02;  // share of documents put in val, chosen by a seeded hash
  uint64_t max_chars = 0;      // bytes of train text used to train the tokenizer (0 = all)
  int threads = 1;
  // --buffer-mb: the text read and encoded at once. Peak memory is about this times (1 + 4 /
  // bytes per token), plus the tokenizer's chunk counts when it is trained, plus 8 bytes a
  // document; the corpus itself only streams through.
  uint64_t buffer_bytes = 256ull << 20;
  uint64_t seed = 1;
  bool quiet = false;          // no progress on stderr
  // --long-docs: how `train` packs a document longer than a row, unless its own --long-docs
  // says otherwise (meta.json "long_docs"): pieces (ours) or crop (nanochat's).
  bool crop_long_docs = false;
};

struct PrepareResult {
  uint32_t vocab = 0;
  uint64_t train_docs = 0, val_docs = 0, train_tokens = 0, val_tokens = 0, bytes = 0;
  double train_tokenizer_s = 0, encode_s = 0, total_s = 0;
};

PrepareResult prepare_data(const PrepareOptions& opt);

// True when document `index` goes to val (a hash of seed and index against the fraction).
bool is_val_document(uint64_t seed, uint64_t index, double val_fraction);

}  // namespace rt::data
