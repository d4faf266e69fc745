// Tokenizer: encode/decode and the tiktoken text format.
#include "ringtrain/data/tokenizer.hpp"

#include <atomic>
#include <fstream>
#include <sstream>

#include "ringtrain/errors.hpp"

namespace rt::data {

const char* const kSpecialTokens[kNumSpecialTokens] = {
    "<|bos|>",          "<|user_start|>",   "<|user_end|>",
    "<|assistant_start|>", "<|assistant_end|>", "<|python_start|>",
    "<|python_end|>",   "<|output_start|>", "<|output_end|>",
};

namespace {

std::atomic<uint64_t> g_next_serial{1};

inline uint64_t key_of(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const std::string& in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kB64[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kB64[(v >> 18) & 63], out += kB64[(v >> 12) & 63], out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kB64[(v >> 18) & 63], out += kB64[(v >> 12) & 63], out += kB64[(v >> 6) & 63], out += '=';
  }
  return out;
}

// Returns false on any character outside the alphabet or bad padding.
bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.size() % 4 != 0 || in.empty()) return false;
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4], pad = 0;
    for (int j = 0; j < 4; ++j) {
      if (in[i + j] == '=' && i + 4 == in.size() && j >= 2) {
        v[j] = 0, ++pad;
      } else {
        if (pad) return false;
        v[j] = val(in[i + j]);
        if (v[j] < 0) return false;
      }
    }
    uint32_t w = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += char(w >> 16);
    if (pad < 2) out += char((w >> 8) & 255);
    if (pad < 1) out += char(w & 255);
  }
  return true;
}

}  // namespace

Tokenizer::Tokenizer(Empty) : serial_(g_next_serial++) {
  for (int b = 0; b < 256; ++b) bytes_.emplace_back(1, char(b));
}

Tokenizer::Tokenizer(std::vector<TokenPair> merges) : Tokenizer(Empty{}) {
  bytes_.reserve(256 + merges.size() + kNumSpecialTokens);
  for (auto [a, b] : merges) add_merge(a, b);
  add_specials();
}

void Tokenizer::add_merge(uint32_t a, uint32_t b) {
  if (a >= bytes_.size() || b >= bytes_.size())
    throw UsageError("merge " + std::to_string(merges_.size()) + " uses a token id that does not exist yet");
  merge_rank_.emplace(key_of(a, b), uint32_t(merges_.size()));
  merges_.emplace_back(a, b);
  bytes_.push_back(bytes_[a] + bytes_[b]);
}

void Tokenizer::add_specials() {
  for (auto* s : kSpecialTokens) bytes_.emplace_back(s);
}

uint32_t Tokenizer::special_id(std::string_view name) const {
  for (int i = 0; i < kNumSpecialTokens; ++i)
    if (name == kSpecialTokens[i]) return bos_id() + i;
  throw UsageError("unknown special token '" + std::string(name) + "'");
}

std::vector<int32_t> Tokenizer::token_byte_lengths() const {
  std::vector<int32_t> out(vocab_size());
  for (uint32_t i = 0; i < vocab_size(); ++i) out[i] = is_special(i) ? 0 : int32_t(bytes_[i].size());
  return out;
}

void Tokenizer::encode_chunk(std::string_view chunk, std::vector<uint32_t>& out) const {
  std::vector<uint32_t> ids(reinterpret_cast<const unsigned char*>(chunk.data()),
                            reinterpret_cast<const unsigned char*>(chunk.data()) + chunk.size());
  // Repeatedly apply the merge with the lowest index present; applying all its
  // occurrences left to right at once equals applying them one by one.
  while (ids.size() >= 2) {
    uint32_t best = UINT32_MAX;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      auto it = merge_rank_.find(key_of(ids[i], ids[i + 1]));
      if (it != merge_rank_.end() && it->second < best) best = it->second;
    }
    if (best == UINT32_MAX) break;
    auto [a, b] = merges_[best];
    size_t o = 0;
    for (size_t i = 0; i < ids.size();) {
      if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
        ids[o++] = 256 + best;
        i += 2;
      } else {
        ids[o++] = ids[i++];
      }
    }
    ids.resize(o);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

void Tokenizer::encode_append(std::string_view text, std::vector<uint32_t>& out) const {
  // Per-thread cache of chunk -> ids. Chunks repeat a lot (words, indentation); the cache
  // is cleared when it grows large so memory stays bounded. Keyed by tokenizer identity.
  struct Cache {
    uint64_t owner = 0;
    std::unordered_map<std::string, std::vector<uint32_t>> map;
  };
  thread_local Cache cache;
  if (cache.owner != serial_) cache.map.clear(), cache.owner = serial_;
  pre_.split(text, [&](std::string_view chunk) {
    if (chunk.size() == 1) {
      out.push_back(uint8_t(chunk[0]));
      return;
    }
    auto it = cache.map.find(std::string(chunk));
    if (it != cache.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    std::vector<uint32_t> ids;
    encode_chunk(chunk, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cache.map.size() >= (1u << 18)) cache.map.clear();
    cache.map.emplace(std::string(chunk), std::move(ids));
  });
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  encode_append(text, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id >= vocab_size())
      throw UsageError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(vocab_size()));
    out += bytes_[id];
  }
  return out;
}

void Tokenizer::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw RuntimeError("cannot write " + path + "; check the directory exists and is writable");
  for (uint32_t id = 0; id < bos_id(); ++id) f << base64_encode(bytes_[id]) << ' ' << id << '\n';
  f.flush();
  if (!f) throw RuntimeError("write to " + path + " failed; check free disk space");
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError("cannot read tokenizer " + path + "; pass an existing .tiktoken file");
  std::vector<std::string> tokens;
  std::string line, decoded;
  size_t lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return UsageError("tokenizer " + path + " line " + std::to_string(lineno) + ": " + why +
                        "; expected 'base64 rank' lines with ranks 0,1,2,...");
    };
    size_t sp = line.find(' ');
    if (sp == std::string::npos) throw bad("no space");
    if (!base64_decode(std::string_view(line).substr(0, sp), decoded)) throw bad("bad base64");
    uint64_t rank = 0;
    try {
      size_t used = 0;
      rank = std::stoull(line.substr(sp + 1), &used);
      if (used != line.size() - sp - 1) throw bad("bad rank");
    } catch (const std::logic_error&) {
      throw bad("bad rank");
    }
    if (rank != tokens.size()) throw bad("rank " + std::to_string(rank) + " out of order");
    if (rank < 256 && (decoded.size() != 1 || uint8_t(decoded[0]) != rank))
      throw bad("ranks 0..255 must be the single bytes in byte order");
    tokens.push_back(decoded);
  }
  if (tokens.size() < 256) throw UsageError("tokenizer " + path + " has fewer than 256 tokens; it is not a byte-level BPE file");
  // Recover each merge: a token's bytes, encoded with the merges before it, must come out
  // as exactly two tokens (the pair it was merged from).
  Tokenizer tok{Empty{}};
  std::vector<uint32_t> ids;
  for (size_t id = 256; id < tokens.size(); ++id) {
    ids.clear();
    tok.encode_chunk(tokens[id], ids);
    if (ids.size() != 2)
      throw UsageError("tokenizer " + path + " line " + std::to_string(id + 1) +
                       ": token is not a merge of two earlier tokens; the file is not a BPE vocabulary");
    tok.add_merge(ids[0], ids[1]);
  }
  tok.add_specials();
  return tok;
}

}  // namespace rt::data
