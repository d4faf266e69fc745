// The data preparation pipeline (see prepare.hpp).
#include "ringtrain/data/prepare.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "parallel.hpp"
#include "ringtrain/data/bpe_train.hpp"
#include "ringtrain/data/corpus.hpp"
#include "ringtrain/data/shard.hpp"
#include "ringtrain/data/tokenizer.hpp"
#include "ringtrain/errors.hpp"

namespace fs = std::filesystem;

namespace rt::data {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else out += char(c);
  }
  return out;
}

// Temporary outputs that are removed unless commit() renames them into place.
class StagedOutputs {
 public:
  explicit StagedOutputs(fs::path dir) : dir_(std::move(dir)) {}
  ~StagedOutputs() {
    std::error_code ec;
    for (auto& [tmp, final_name] : files_) fs::remove(tmp, ec);
    if (created_dir_ && !committed_) fs::remove(dir_, ec);  // only removes it if empty
  }
  void create_dir() {
    std::error_code ec;
    if (!fs::exists(dir_, ec)) {
      if (!fs::create_directories(dir_, ec))
        throw RuntimeError("cannot create " + dir_.string() + " (" + ec.message() + ")");
      created_dir_ = true;
    }
  }
  // Path to write `name` to; it becomes dir/name at commit().
  std::string stage(const std::string& name) {
    fs::path tmp = dir_ / ("." + name + ".tmp-" + std::to_string(::getpid()));
    files_.emplace_back(tmp, dir_ / name);
    return tmp.string();
  }
  void commit() {
    for (auto& [tmp, final_name] : files_) {
      std::error_code ec;
      fs::rename(tmp, final_name, ec);
      if (ec) throw RuntimeError("cannot rename " + tmp.string() + " to " + final_name.string() + " (" + ec.message() + ")");
    }
    files_.clear();
    committed_ = true;
  }

 private:
  fs::path dir_;
  std::vector<std::pair<fs::path, fs::path>> files_;
  bool created_dir_ = false, committed_ = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string default_corpus() {
  // linux-doc-6.1, linux-doc-6.12, ...: the highest kernel version wins (compared as numbers).
  auto version = [](const std::string& name) {
    std::vector<long> parts;
    for (size_t i = 0; i < name.size();) {
      if (!std::isdigit(static_cast<unsigned char>(name[i]))) { ++i; continue; }
      size_t j = i;
      while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
      parts.push_back(std::stol(name.substr(i, std::min<size_t>(j - i, 9))));
      i = j;
    }
    return parts;
  };
  std::string best, best_name;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/usr/share/doc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("linux-doc", 0) != 0) continue;
    const fs::path sources = e.path() / "html" / "_sources";
    if (!fs::is_directory(sources, ec)) continue;
    if (best.empty() || version(name) > version(best_name)) best = sources.string(), best_name = name;
  }
  return best;
}

bool is_val_document(uint64_t seed, uint64_t index, double val_fraction) {
  uint64_t h = splitmix64(splitmix64(seed) ^ index);
  return double(h >> 11) * 0x1.0p-53 < val_fraction;
}

PrepareResult prepare_data(const PrepareOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  auto log = [&](const char* fmt, auto... args) {
    if (opt.quiet) return;
    std::fprintf(stderr, "[data %7.1fs] ", seconds_since(t0));
    std::fprintf(stderr, fmt, args...);
    std::fputc('\n', stderr);
  };
  // All checks first: nothing is created before the inputs are known to be usable.
  if (opt.out_dir.empty()) throw UsageError("--out is required: the directory to write the shards to");
  if (fs::exists(opt.out_dir) && !fs::is_directory(opt.out_dir))
    throw UsageError("--out " + opt.out_dir + " exists and is not a directory; pick another path");
  if (opt.tokenizer.empty() && (opt.vocab < 256 + kNumSpecialTokens || opt.vocab > 65536))
    throw UsageError("--vocab " + std::to_string(opt.vocab) + " is out of range; use 265..65536 (tokens are uint16)");
  if (!(opt.val_fraction >= 0 && opt.val_fraction < 1))
    throw UsageError("--val-fraction must be in [0, 1), e.g. 0.02");
  if (opt.threads < 1) throw UsageError("--threads must be >= 1");
  std::vector<std::string> inputs = opt.inputs;
  if (inputs.empty()) {
    const std::string corpus = default_corpus();
    if (corpus.empty())
      throw UsageError("no --input given and no kernel documentation (/usr/share/doc/linux-doc*/html/_sources) "
                       "is installed; run tools/setup.sh (it installs your release's linux-doc) or pass --input PATH");
    inputs.push_back(corpus);
  }
  std::vector<std::string> files = list_input_files(inputs);
  log("reading %zu files", files.size());
  Corpus corpus = read_corpus(files, [&](size_t done, uint64_t bytes) {
    log("read %zu/%zu files, %.1f MB", done, files.size(), bytes / 1e6);
  });
  if (corpus.docs.empty())
    throw UsageError("the corpus is empty: no non-empty documents in --input; add text files");

  // Split train/val by a seeded hash of the document index; keep at least one of each
  // when there are two or more documents. nanochat's shards split as nanochat does: the last
  // shard is val, the others train.
  std::vector<uint8_t> is_val(corpus.docs.size());
  size_t nval = 0;
  const bool nanochat_shards = corpus.parquet_files == files.size() && files.size() >= 2;
  if (nanochat_shards && corpus.last_file_first_doc < corpus.docs.size()) {
    for (size_t d = corpus.last_file_first_doc; d < corpus.docs.size(); ++d) is_val[d] = 1, ++nval;
    log("val: the last shard, %s (%zu documents), as nanochat splits", files.back().c_str(), nval);
  } else {
    for (size_t d = 0; d < corpus.docs.size(); ++d) nval += is_val[d] = is_val_document(opt.seed, d, opt.val_fraction);
    if (opt.val_fraction > 0 && nval == 0 && corpus.docs.size() >= 2) is_val[corpus.docs.size() - 1] = 1, nval = 1;
  }
  if (nval == corpus.docs.size() && nval >= 2) is_val[0] = 0, --nval;
  std::vector<std::string_view> train_docs;
  for (size_t d = 0; d < corpus.docs.size(); ++d)
    if (!is_val[d]) train_docs.push_back(corpus.docs[d]);
  log("%zu documents (%zu train, %zu val), %.1f MB", corpus.docs.size(), train_docs.size(), nval,
      corpus.bytes / 1e6);

  PrepareResult res;
  res.bytes = corpus.bytes;
  auto tok_t0 = std::chrono::steady_clock::now();
  std::optional<Tokenizer> tok;
  if (!opt.tokenizer.empty()) {
    tok.emplace(Tokenizer::load(opt.tokenizer));
    log("loaded tokenizer %s, vocab %u", opt.tokenizer.c_str(), tok->vocab_size());
    if (tok->vocab_size() > 65536)
      throw UsageError("tokenizer " + opt.tokenizer + " has more than 65536 tokens; shards store uint16 ids");
  } else {
    Pretokenizer pre;
    ChunkCounts chunks = count_chunks(pre, train_docs.empty() ? std::vector<std::string_view>{corpus.docs[0]} : train_docs,
                                      opt.threads, opt.max_chars);
    size_t merges_wanted = opt.vocab - 256 - kNumSpecialTokens;
    log("tokenizer: %zu unique chunks, training %zu merges", chunks.chunks.size(), merges_wanted);
    auto merges = train_bpe(chunks, merges_wanted, [&](size_t done) {
      if (done % 4000 == 0) log("tokenizer: %zu/%zu merges", done, merges_wanted);
    });
    if (merges.size() < merges_wanted)
      throw UsageError("the corpus allows only " + std::to_string(merges.size()) + " merges; use --vocab <= " +
                       std::to_string(merges.size() + 256 + kNumSpecialTokens) + " or more text");
    tok.emplace(std::move(merges));
  }
  res.train_tokenizer_s = seconds_since(tok_t0);
  res.vocab = tok->vocab_size();
  log("tokenizer ready in %.1fs", res.train_tokenizer_s);

  // Encode every document (BOS first) in parallel, then lay out the two shards.
  auto enc_t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<uint32_t>> encoded(corpus.docs.size());
  const uint32_t bos = tok->bos_id();
  parallel_slices(size_t(opt.threads), opt.threads, [&](size_t tid, size_t, size_t) {
    for (size_t d = tid; d < corpus.docs.size(); d += opt.threads) {
      encoded[d].push_back(bos);
      tok->encode_append(corpus.docs[d], encoded[d]);
    }
  });
  Shard shards[2];  // train, val
  for (auto& s : shards) s.vocab_size = res.vocab, s.doc_start.push_back(0);
  for (size_t d = 0; d < corpus.docs.size(); ++d) {
    Shard& s = shards[is_val[d]];
    for (uint32_t id : encoded[d]) s.tokens.push_back(uint16_t(id));
    s.doc_start.push_back(s.tokens.size());
    std::vector<uint32_t>().swap(encoded[d]);
  }
  res.encode_s = seconds_since(enc_t0);
  res.train_docs = shards[0].num_docs(), res.val_docs = shards[1].num_docs();
  res.train_tokens = shards[0].tokens.size(), res.val_tokens = shards[1].tokens.size();
  log("encoded %.1f MB into %llu train + %llu val tokens in %.1fs (%.2f bytes/token)", corpus.bytes / 1e6,
      (unsigned long long)res.train_tokens, (unsigned long long)res.val_tokens, res.encode_s,
      double(corpus.bytes) / double(std::max<uint64_t>(1, res.train_tokens + res.val_tokens - corpus.docs.size())));

  StagedOutputs out(opt.out_dir);
  out.create_dir();
  tok->save(out.stage("tokenizer.tiktoken"));
  write_shard(out.stage("train.bin"), shards[0]);
  write_shard(out.stage("val.bin"), shards[1]);
  write_token_bytes(out.stage("token_bytes.bin"), tok->token_byte_lengths());
  res.total_s = seconds_since(t0);
  {
    std::ofstream f(out.stage("meta.json"), std::ios::trunc);
    f << "{\n  \"format\": \"ringtrain-shard\",\n  \"format_version\": " << kShardVersion
      << ",\n  \"vocab_size\": " << res.vocab << ",\n  \"bos_id\": " << bos
      << ",\n  \"special_tokens\": {";
    for (int i = 0; i < kNumSpecialTokens; ++i)
      f << (i ? ", " : "") << '"' << kSpecialTokens[i] << "\": " << bos + i;
    f << "},\n  \"tokenizer\": \"tokenizer.tiktoken\",\n  \"token_bytes\": \"token_bytes.bin\""
      << ",\n  \"tokenizer_source\": \"" << (opt.tokenizer.empty() ? "trained" : json_escape(opt.tokenizer_label.empty() ? opt.tokenizer : opt.tokenizer_label)) << '"'
      << ",\n  \"train\": {\"file\": \"train.bin\", \"documents\": " << res.train_docs << ", \"tokens\": " << res.train_tokens << "}"
      << ",\n  \"val\": {\"file\": \"val.bin\", \"documents\": " << res.val_docs << ", \"tokens\": " << res.val_tokens << "}"
      << ",\n  \"bytes\": " << res.bytes << ",\n  \"val_fraction\": " << opt.val_fraction << ",\n  \"seed\": " << opt.seed
      << ",\n  \"max_chars\": " << opt.max_chars
      << ",\n  \"long_docs\": \"" << (opt.crop_long_docs ? "crop" : "pieces") << '"'
      << ",\n  \"seconds\": {\"tokenizer\": " << res.train_tokenizer_s << ", \"encode\": " << res.encode_s
      << ", \"total\": " << res.total_s << "},\n  \"sources\": [";
    for (size_t i = 0; i < corpus.sources.size(); ++i)
      f << (i ? ",\n    \"" : "\n    \"") << json_escape(corpus.sources[i]) << '"';
    f << "\n  ]\n}\n";
    if (!f) throw RuntimeError("cannot write meta.json in " + opt.out_dir + "; check free disk space");
  }
  out.commit();
  log("wrote %s in %.1fs", opt.out_dir.c_str(), seconds_since(t0));
  return res;
}

}  // namespace rt::data
