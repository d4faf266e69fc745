// Shard files: a fixed header, document offsets, uint16 tokens (format in shard.hpp).
#include "ringtrain/data/shard.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ringtrain/errors.hpp"

namespace rt::data {

namespace {

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
constexpr uint64_t kFnvBasis = 14695981039346656037ull;

template <class T>
void put(unsigned char* dst, T v) {
  std::memcpy(dst, &v, sizeof v);  // the project targets little-endian x86-64 only
}
template <class T>
T get(const unsigned char* src) {
  T v;
  std::memcpy(&v, src, sizeof v);
  return v;
}

// The 64-byte header of shard.hpp, for write_shard and ShardWriter alike.
void fill_header(unsigned char* header, uint64_t vocab, uint64_t num_docs, uint64_t num_tokens, uint64_t checksum) {
  std::memset(header, 0, kShardHeaderBytes);
  std::memcpy(header, kShardMagic, 8);
  put<uint32_t>(header + 8, kShardVersion);
  put<uint32_t>(header + 12, 2);
  put<uint64_t>(header + 16, vocab);
  put<uint64_t>(header + 24, num_docs);
  put<uint64_t>(header + 32, num_tokens);
  put<uint64_t>(header + 40, checksum);
}

uint64_t checksum(const Shard& s) {
  uint64_t h = fnv1a(s.doc_start.data(), s.doc_start.size() * 8, kFnvBasis);
  return fnv1a(s.tokens.data(), s.tokens.size() * 2, h);
}

}  // namespace

void write_shard(const std::string& path, const Shard& shard) {
  unsigned char header[kShardHeaderBytes];
  fill_header(header, shard.vocab_size, shard.num_docs(), shard.tokens.size(), checksum(shard));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw RuntimeError("cannot write " + path + "; check the directory is writable");
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  f.write(reinterpret_cast<const char*>(shard.doc_start.data()), shard.doc_start.size() * 8);
  f.write(reinterpret_cast<const char*>(shard.tokens.data()), shard.tokens.size() * 2);
  f.flush();
  if (!f) throw RuntimeError("write to " + path + " failed; check free disk space");
}

ShardWriter::ShardWriter(std::string path, std::string scratch, uint32_t vocab_size)
    : path_(std::move(path)), scratch_(std::move(scratch)), vocab_(vocab_size), tokens_(scratch_, std::ios::binary | std::ios::trunc) {
  if (!tokens_) throw RuntimeError("cannot write " + scratch_ + "; check the directory is writable");
}

ShardWriter::~ShardWriter() {
  std::error_code ec;
  std::filesystem::remove(scratch_, ec);
}

void ShardWriter::add_document(const uint32_t* ids, size_t n) {
  buffer_.resize(n);
  for (size_t i = 0; i < n; ++i) buffer_[i] = uint16_t(ids[i]);
  tokens_.write(reinterpret_cast<const char*>(buffer_.data()), std::streamsize(n * 2));
  doc_start_.push_back(doc_start_.back() + n);
}

void ShardWriter::finish() {
  tokens_.close();
  if (!tokens_) throw RuntimeError("write to " + scratch_ + " failed; check free disk space");
  // The checksum covers the offsets, then the tokens: one read of the tokens for it, one to copy.
  std::vector<char> block(1 << 20);
  uint64_t h = fnv1a(doc_start_.data(), doc_start_.size() * 8, kFnvBasis);
  {
    std::ifstream in(scratch_, std::ios::binary);
    while (in.read(block.data(), std::streamsize(block.size())) || in.gcount() > 0) h = fnv1a(block.data(), size_t(in.gcount()), h);
  }
  unsigned char header[kShardHeaderBytes];
  fill_header(header, vocab_, num_docs(), num_tokens(), h);
  std::ofstream f(path_, std::ios::binary | std::ios::trunc);
  if (!f) throw RuntimeError("cannot write " + path_ + "; check the directory is writable");
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  f.write(reinterpret_cast<const char*>(doc_start_.data()), std::streamsize(doc_start_.size() * 8));
  std::ifstream in(scratch_, std::ios::binary);
  while (in.read(block.data(), std::streamsize(block.size())) || in.gcount() > 0) f.write(block.data(), in.gcount());
  f.flush();
  if (!f) throw RuntimeError("write to " + path_ + " failed; check free disk space");
}

Shard read_shard(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) throw UsageError("cannot read shard " + path + "; run 'ringtrain data prepare' to create it");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError("cannot open shard " + path + "; check its permissions");
  auto bad = [&](const std::string& why) {
    return UsageError("shard " + path + " is corrupt (" + why + "); run 'ringtrain data prepare' again");
  };
  unsigned char header[kShardHeaderBytes];
  if (size < kShardHeaderBytes || !f.read(reinterpret_cast<char*>(header), sizeof header))
    throw bad("shorter than its 64-byte header");
  if (std::memcmp(header, kShardMagic, 8) != 0) throw bad("bad magic, not a ringtrain shard");
  if (get<uint32_t>(header + 8) != kShardVersion)
    throw bad("format version " + std::to_string(get<uint32_t>(header + 8)) + ", this build reads " +
              std::to_string(kShardVersion));
  if (get<uint32_t>(header + 12) != 2) throw bad("tokens are not 2 bytes");
  Shard s;
  uint64_t vocab = get<uint64_t>(header + 16), ndocs = get<uint64_t>(header + 24),
           ntok = get<uint64_t>(header + 32), sum = get<uint64_t>(header + 40);
  if (vocab < 256 + 9 || vocab > 65536) throw bad("vocab_size " + std::to_string(vocab));
  if (ndocs > size / 8 || ntok > size / 2 ||
      kShardHeaderBytes + 8 * (ndocs + 1) + 2 * ntok != size)
    throw bad("file is " + std::to_string(size) + " bytes, the header promises " +
              std::to_string(kShardHeaderBytes + 8 * (ndocs + 1) + 2 * ntok) + "; truncated?");
  s.vocab_size = uint32_t(vocab);
  s.doc_start.resize(ndocs + 1);
  s.tokens.resize(ntok);
  f.read(reinterpret_cast<char*>(s.doc_start.data()), s.doc_start.size() * 8);
  f.read(reinterpret_cast<char*>(s.tokens.data()), s.tokens.size() * 2);
  if (!f) throw bad("read failed");
  if (checksum(s) != sum) throw bad("checksum mismatch");
  if (s.doc_start.front() != 0 || s.doc_start.back() != ntok) throw bad("document offsets do not span the tokens");
  const uint16_t bos = uint16_t(vocab - 9);
  for (size_t d = 0; d < ndocs; ++d) {
    if (s.doc_start[d + 1] <= s.doc_start[d]) throw bad("empty or unordered document " + std::to_string(d));
    if (s.tokens[s.doc_start[d]] != bos) throw bad("document " + std::to_string(d) + " does not start with <|bos|>");
  }
  for (uint16_t t : s.tokens)
    if (t >= vocab) throw bad("token id " + std::to_string(t) + " >= vocab_size");
  return s;
}

void write_token_bytes(const std::string& path, const std::vector<int32_t>& lengths) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw RuntimeError("cannot write " + path + "; check the directory is writable");
  f.write(reinterpret_cast<const char*>(lengths.data()), lengths.size() * 4);
  f.flush();
  if (!f) throw RuntimeError("write to " + path + " failed; check free disk space");
}

std::vector<int32_t> read_token_bytes(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) throw UsageError("cannot read " + path + "; run 'ringtrain data prepare' to create it");
  if (size % 4 != 0 || size / 4 < 256 + 9 || size / 4 > 65536)
    throw UsageError(path + " is " + std::to_string(size) + " bytes, not 4 x vocab_size; run 'ringtrain data prepare' again");
  std::vector<int32_t> out(size / 4);
  std::ifstream f(path, std::ios::binary);
  if (!f.read(reinterpret_cast<char*>(out.data()), size))
    throw UsageError("cannot read " + path + "; check its permissions");
  for (int32_t v : out)
    if (v < 0) throw UsageError(path + " holds a negative byte length; run 'ringtrain data prepare' again");
  return out;
}

}  // namespace rt::data
