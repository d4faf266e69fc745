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
#include <unordered_map>
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

// Temporary outputs that are removed unless commit() renames them into place, and scratch
// files that are always removed.
class StagedOutputs {
 public:
  explicit StagedOutputs(fs::path dir) : dir_(std::move(dir)) {}
  ~StagedOutputs() {
    std::error_code ec;
    for (auto& [tmp, final_name] : files_) fs::remove(tmp, ec);
    for (auto& tmp : scratch_) fs::remove(tmp, ec);
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
  // Path of a working file beside the outputs (same file system), never an output itself.
  std::string scratch(const std::string& name) {
    fs::path tmp = dir_ / ("." + name + ".scratch-" + std::to_string(::getpid()));
    scratch_.push_back(tmp);
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
  std::vector<fs::path> scratch_;
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
  // The corpus streams through three passes and is never held whole: memory is bounded by
  // --buffer-mb (the text encoded at once), not by the corpus. Pass 0 counts the documents
  // (the split needs the total) and checks every file before anything is created.
  uint64_t num_docs = 0, last_first = 0;  // last_first: the documents before the last file's
  const uint64_t bytes = stream_corpus(files, [&](size_t k, std::string&&) { last_first += k + 1 < files.size(), ++num_docs; },
                                       [&](size_t done, uint64_t b) { log("read %zu/%zu files, %.1f MB", done, files.size(), b / 1e6); });
  if (num_docs == 0) throw UsageError("the corpus is empty: no non-empty documents in --input; add text files");

  // The split, a function of the document's index. nanochat's shards split as nanochat does:
  // the last shard is val, the others train. Otherwise a seeded hash, keeping at least one
  // of each when there are two or more documents.
  const bool nanochat_shards = files.size() >= 2 && last_first < num_docs && std::all_of(files.begin(), files.end(), is_parquet_file);
  uint64_t nval = 0;
  bool force_last_val = false, force_first_train = false;
  if (nanochat_shards) {
    nval = num_docs - last_first;
    log("val: the last shard, %s (%llu documents), as nanochat splits", files.back().c_str(), (unsigned long long)nval);
  } else {
    for (uint64_t d = 0; d < num_docs; ++d) nval += is_val_document(opt.seed, d, opt.val_fraction);
    if (opt.val_fraction > 0 && nval == 0 && num_docs >= 2) force_last_val = true, nval = 1;
  }
  if (nval == num_docs && nval >= 2) force_first_train = true, --nval;
  auto is_val = [&](uint64_t d) {
    if (d == 0 && force_first_train) return false;
    if (nanochat_shards) return d >= last_first;
    return (force_last_val && d + 1 == num_docs) || is_val_document(opt.seed, d, opt.val_fraction);
  };
  log("%llu documents (%llu train, %llu val), %.1f MB", (unsigned long long)num_docs, (unsigned long long)(num_docs - nval),
      (unsigned long long)nval, bytes / 1e6);

  // Documents in batches of at most --buffer-mb of text, in order, each with its index.
  auto for_each_batch = [&](const std::function<bool(uint64_t)>& wanted,
                            const std::function<void(std::vector<std::string>&, std::vector<uint64_t>&)>& on_batch) {
    std::vector<std::string> batch;
    std::vector<uint64_t> index;
    uint64_t held = 0, d = 0;
    stream_corpus(files, [&](size_t, std::string&& text) {
      const uint64_t i = d++;
      if (!wanted(i)) return;
      held += text.size();
      batch.push_back(std::move(text)), index.push_back(i);
      if (held >= opt.buffer_bytes) on_batch(batch, index), batch.clear(), index.clear(), held = 0;
    });
    if (!batch.empty()) on_batch(batch, index);
  };

  PrepareResult res;
  res.bytes = bytes;
  auto tok_t0 = std::chrono::steady_clock::now();
  std::optional<Tokenizer> tok;
  if (!opt.tokenizer.empty()) {
    tok.emplace(Tokenizer::load(opt.tokenizer));
    log("loaded tokenizer %s, vocab %u", opt.tokenizer.c_str(), tok->vocab_size());
    if (tok->vocab_size() > 65536)
      throw UsageError("tokenizer " + opt.tokenizer + " has more than 65536 tokens; shards store uint16 ids");
  } else {
    // Pass 1: the chunk counts of the train documents (the first --max-chars bytes of them),
    // batch by batch; only the unique chunks and their counts are kept.
    Pretokenizer pre;
    std::unordered_map<std::string, uint64_t> counts;
    uint64_t counted = 0;
    const bool no_train = nval == num_docs;  // one document: train the tokenizer on it
    for_each_batch([&](uint64_t d) { return (no_train || !is_val(d)) && (opt.max_chars == 0 || counted < opt.max_chars); },
                   [&](std::vector<std::string>& batch, std::vector<uint64_t>&) {
                     std::vector<std::string_view> views;
                     for (const auto& t : batch) {
                       if (opt.max_chars > 0 && counted >= opt.max_chars) break;
                       views.emplace_back(t), counted += t.size();
                     }
                     ChunkCounts part = count_chunks(pre, views, opt.threads, 0);
                     for (size_t i = 0; i < part.chunks.size(); ++i) counts[std::move(part.chunks[i])] += part.counts[i];
                   });
    ChunkCounts chunks;
    {
      std::vector<std::pair<std::string, uint64_t>> sorted(std::make_move_iterator(counts.begin()), std::make_move_iterator(counts.end()));
      counts.clear();
      std::sort(sorted.begin(), sorted.end());
      for (auto& [chunk, c] : sorted) chunks.chunks.push_back(std::move(chunk)), chunks.counts.push_back(c);
    }
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

  // Pass 2: encode each batch (BOS first) in parallel and append it to the two shards.
  StagedOutputs out(opt.out_dir);
  out.create_dir();
  auto enc_t0 = std::chrono::steady_clock::now();
  const uint32_t bos = tok->bos_id();
  ShardWriter shards[2] = {{out.stage("train.bin"), out.scratch("train.tokens"), res.vocab},
                           {out.stage("val.bin"), out.scratch("val.tokens"), res.vocab}};
  std::vector<std::vector<uint32_t>> encoded;
  for_each_batch([](uint64_t) { return true; }, [&](std::vector<std::string>& batch, std::vector<uint64_t>& index) {
    encoded.assign(batch.size(), {});
    parallel_slices(size_t(opt.threads), opt.threads, [&](size_t tid, size_t, size_t) {
      for (size_t d = tid; d < batch.size(); d += size_t(opt.threads)) {
        encoded[d].push_back(bos);
        tok->encode_append(batch[d], encoded[d]);
      }
    });
    for (size_t d = 0; d < batch.size(); ++d) shards[is_val(index[d])].add_document(encoded[d].data(), encoded[d].size());
  });
  std::vector<std::vector<uint32_t>>().swap(encoded);
  for (auto& s : shards) s.finish();
  res.encode_s = seconds_since(enc_t0);
  res.train_docs = shards[0].num_docs(), res.val_docs = shards[1].num_docs();
  res.train_tokens = shards[0].num_tokens(), res.val_tokens = shards[1].num_tokens();
  log("encoded %.1f MB into %llu train + %llu val tokens in %.1fs (%.2f bytes/token)", bytes / 1e6,
      (unsigned long long)res.train_tokens, (unsigned long long)res.val_tokens, res.encode_s,
      double(bytes) / double(std::max<uint64_t>(1, res.train_tokens + res.val_tokens - num_docs)));

  tok->save(out.stage("tokenizer.tiktoken"));
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
    for (size_t i = 0; i < files.size(); ++i)
      f << (i ? ",\n    \"" : "\n    \"") << json_escape(files[i]) << '"';
    f << "\n  ]\n}\n";
    if (!f) throw RuntimeError("cannot write meta.json in " + opt.out_dir + "; check free disk space");
  }
  out.commit();
  log("wrote %s in %.1fs", opt.out_dir.c_str(), seconds_since(t0));
  return res;
}

}  // namespace rt::data
