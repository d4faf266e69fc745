// `ringtrain data prepare`: flags to rt::data::PrepareOptions; the work is in src/data.
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/prepare.hpp"
#include "ringtrain/interop/nanochat.hpp"
#include "scratch_dir.hpp"
#include "ringtrain/errors.hpp"

namespace rt::cli {

namespace {
const char* const kExample =
    "example:\n  ringtrain data prepare --input /usr/share/doc/linux-doc-6.1/html/_sources --out data/kdoc --vocab 32768 --threads 2\n"
    "  (Debian 13: linux-doc-6.12; with no --input, the newest /usr/share/doc/linux-doc*/html/_sources)\n";
// The same, for the shared flag helper (which prints "example:" itself).
const char* const kPrepareExample =
    "ringtrain data prepare --input /usr/share/doc/linux-doc-6.1/html/_sources --out data/kdoc --vocab 32768 --threads 2\n"
    "  (Debian 13: linux-doc-6.12; with no --input, the newest /usr/share/doc/linux-doc*/html/_sources)";
}  // namespace

int cmd_data(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "prepare") != 0) {
    if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
      std::printf("usage: ringtrain data prepare --input PATH... --out DIR [--vocab V] ...\n\n%s", kExample);
      return 0;
    }
    throw UsageError("data needs a subcommand: 'ringtrain data prepare --input PATH... --out DIR'");
  }
  std::string name = std::string(argv[0]) + " prepare";
  cxxopts::Options options(name, "Train the BPE tokenizer (or reuse one) and tokenize text into train/val shards.");
  options.add_options()
      ("input", "text files, directories (*.txt, *.rst, *.md, *.jsonl, recursively) or .jsonl files; "
                "default: the kernel documentation of the installed linux-doc (Debian 12: linux-doc-6.1, Debian 13: linux-doc-6.12)",
       cxxopts::value<std::vector<std::string>>())
      ("out", "output directory", cxxopts::value<std::string>())
      ("vocab", "vocabulary size (256 bytes + merges + 9 special tokens), <= 65536",
       cxxopts::value<uint32_t>()->default_value("32768"))
      ("tokenizer", "reuse this tokenizer instead of training one: a .tiktoken file, or nanochat's tokenizer.pkl (read with python3)",
       cxxopts::value<std::string>())
      ("val-fraction", "share of documents for the val split", cxxopts::value<double>()->default_value("0.02"))
      ("max-chars", "bytes of train text used to train the tokenizer (0 = all)",
       cxxopts::value<uint64_t>()->default_value("0"))
      ("threads", "threads for regex splitting and encoding", cxxopts::value<int>()->default_value("1"))
      ("buffer-mb", "MB of text read and encoded at once: memory stays about 2-3x this, whatever the corpus's size",
       cxxopts::value<uint64_t>()->default_value("256"))
      ("seed", "seed of the train/val assignment", cxxopts::value<uint64_t>()->default_value("1"))
      ("long-docs", "how train packs a document longer than a row, unless its --long-docs says otherwise: pieces (each packs like a document) or crop (nanochat's: the rest is dropped)",
       cxxopts::value<std::string>()->default_value("pieces"))
      ("quiet", "no progress on stderr");
  // cxxopts takes one value per --input; accept "--input a b c" by gathering the words
  // that follow --input up to the next flag.
  std::vector<std::string> args = {name};
  std::vector<std::string> inputs;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--input") {
      while (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) inputs.push_back(argv[++i]);
      continue;
    }
    if (a.rfind("--input=", 0) == 0) {
      inputs.push_back(a.substr(8));
      continue;
    }
    args.push_back(a);
  }
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cxxopts::ParseResult r;
  if (!parse(options, int(cargv.size()), cargv.data(), r, kPrepareExample)) return 0;
  data::PrepareOptions opt;
  opt.inputs = inputs;
  if (!r.count("out")) throw UsageError("ringtrain data prepare needs --out DIR; run 'ringtrain data prepare --help'");
  opt.out_dir = r["out"].as<std::string>();
  opt.vocab = r["vocab"].as<uint32_t>();
  if (r.count("tokenizer")) {
    opt.tokenizer = r["tokenizer"].as<std::string>();
    if (r.count("vocab")) throw UsageError("--vocab and --tokenizer exclude each other: the tokenizer file fixes the vocabulary");
  }
  opt.val_fraction = r["val-fraction"].as<double>();
  opt.max_chars = r["max-chars"].as<uint64_t>();
  opt.threads = r["threads"].as<int>();
  const uint64_t buffer_mb = r["buffer-mb"].as<uint64_t>();
  if (buffer_mb < 1 || buffer_mb > (1u << 20)) throw UsageError("--buffer-mb must be from 1 to 1048576 (MB of text encoded at once)");
  opt.buffer_bytes = buffer_mb << 20;
  opt.seed = r["seed"].as<uint64_t>();
  opt.crop_long_docs = data::parse_long_docs(r["long-docs"].as<std::string>());
  opt.quiet = r.count("quiet") > 0;
  // nanochat's tokenizer.pkl: read (by python3, nothing in it run) into a .tiktoken file first.
  std::optional<ScratchDir> scratch;
  if (interop::is_tokenizer_pkl(opt.tokenizer)) {
    scratch.emplace(opt.out_dir, "prepare");
    opt.tokenizer_label = opt.tokenizer;
    opt.tokenizer = interop::tiktoken_file(opt.tokenizer_label, scratch->path());
  }
  auto res = data::prepare_data(opt);
  std::printf("{\"vocab_size\": %u, \"train_docs\": %llu, \"val_docs\": %llu, \"train_tokens\": %llu, "
              "\"val_tokens\": %llu, \"bytes\": %llu, \"tokenizer_s\": %.2f, \"encode_s\": %.2f, \"total_s\": %.2f}\n",
              res.vocab, (unsigned long long)res.train_docs, (unsigned long long)res.val_docs,
              (unsigned long long)res.train_tokens, (unsigned long long)res.val_tokens,
              (unsigned long long)res.bytes, res.train_tokenizer_s, res.encode_s, res.total_s);
  return 0;
}

}  // namespace rt::cli
