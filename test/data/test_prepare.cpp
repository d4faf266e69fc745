// `ringtrain data prepare` as a real process (RINGTRAIN_BIN): outputs on a small corpus,
// and bad input exits 2 with a one-line message and leaves an existing --out untouched.
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "data_fixtures.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/prepare.hpp"
#include "ringtrain/data/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace rt::data;

namespace {

struct Run {
  int code;
  std::string err;
};

// Runs `ringtrain data prepare ARGS`, capturing stderr.
Run run_prepare(const std::string& args) {
  const char* bin = std::getenv("RINGTRAIN_BIN");
  BOOST_TEST_REQUIRE(bin != nullptr, "RINGTRAIN_BIN is not set; run through meson test");
  std::string err_file = testing::temp_path("stderr.txt");
  std::string cmd = std::string(bin) + " data prepare " + args + " --quiet >/dev/null 2>" + err_file;
  int status = std::system(cmd.c_str());
  std::ifstream f(err_file);
  std::stringstream ss;
  ss << f.rdbuf();
  fs::remove(err_file);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A small corpus: text files in a tree, one JSONL file, one file with invalid UTF-8.
fs::path make_corpus(const std::string& name) {
  fs::path dir = testing::temp_path(name);
  fs::remove_all(dir);
  std::string para = "The quick brown fox jumps over the lazy dog. Numbers 1234 and 56.\n";
  for (int i = 0; i < 12; ++i) {
    std::string text;
    for (int k = 0; k <= i; ++k) text += std::to_string(k) + ": " + para;
    write_file(dir / ("sub" + std::to_string(i % 3)) / ("doc" + std::to_string(i) + ".rst.txt"), text);
  }
  write_file(dir / "extra.jsonl", "{\"text\": \"json doc one \\u00e9\"}\n\n{\"id\": 2, \"text\": \"json doc two\"}\n");
  write_file(dir / "bytes.txt", std::string("bad \xff\xfe bytes \xc3 here\n"));
  write_file(dir / "ignored.bin", "not text");
  return dir;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(prepare)

BOOST_AUTO_TEST_CASE(writes_tokenizer_shards_and_token_bytes) {
  fs::path corpus = make_corpus("corpus_ok");
  fs::path out = testing::temp_path("out_ok");
  fs::remove_all(out);
  Run r = run_prepare("--input " + corpus.string() + " --out " + out.string() + " --vocab 320 --val-fraction 0.2 --threads 2");
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  for (auto name : {"tokenizer.tiktoken", "train.bin", "val.bin", "token_bytes.bin", "meta.json"})
    BOOST_TEST(fs::exists(out / name), name);
  Tokenizer tok = Tokenizer::load((out / "tokenizer.tiktoken").string());
  BOOST_TEST(tok.vocab_size() == 320u);
  Shard train = read_shard((out / "train.bin").string()), val = read_shard((out / "val.bin").string());
  BOOST_TEST(train.num_docs() + val.num_docs() == 15u);  // 12 files + 2 JSONL lines + bytes.txt
  BOOST_TEST(val.num_docs() >= 1u);
  auto lengths = read_token_bytes((out / "token_bytes.bin").string());
  BOOST_TEST(lengths == tok.token_byte_lengths(), boost::test_tools::per_element());
  // Every document decodes back to exactly one input document.
  std::set<std::string> inputs;
  for (auto& e : fs::recursive_directory_iterator(corpus))
    if (e.is_regular_file() && e.path().extension() == ".txt") inputs.insert(read_file(e.path()));
  inputs.insert("json doc one \xc3\xa9");
  inputs.insert("json doc two");
  size_t matched = 0;
  for (const Shard* s : {&train, &val}) {
    for (size_t d = 0; d < s->num_docs(); ++d) {
      std::vector<uint32_t> ids(s->doc_tokens(d) + 1, s->doc_tokens(d) + s->doc_length(d));
      matched += inputs.count(tok.decode(ids));
    }
  }
  BOOST_TEST(matched == 15u);
  // Reusing the tokenizer reproduces the same shards.
  fs::path out2 = testing::temp_path("out_reuse");
  fs::remove_all(out2);
  r = run_prepare("--input " + corpus.string() + " --out " + out2.string() + " --tokenizer " +
              (out / "tokenizer.tiktoken").string() + " --val-fraction 0.2");
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  BOOST_TEST((read_file(out / "train.bin") == read_file(out2 / "train.bin")));
  BOOST_TEST((read_file(out / "val.bin") == read_file(out2 / "val.bin")));
  // meta.json says how train packs long documents: pieces unless --long-docs crop.
  BOOST_TEST(read_file(out / "meta.json").find("\"long_docs\": \"pieces\"") != std::string::npos);
  fs::path out_crop = testing::temp_path("out_crop");
  fs::remove_all(out_crop);
  r = run_prepare("--input " + corpus.string() + " --out " + out_crop.string() + " --tokenizer " +
                  (out / "tokenizer.tiktoken").string() + " --val-fraction 0.2 --long-docs crop");
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  BOOST_TEST(read_file(out_crop / "meta.json").find("\"long_docs\": \"crop\"") != std::string::npos);
  BOOST_TEST((read_file(out / "train.bin") == read_file(out_crop / "train.bin")));
  fs::remove_all(out_crop);
  // Training is deterministic whatever the thread count.
  fs::path out3 = testing::temp_path("out_threads");
  fs::remove_all(out3);
  r = run_prepare("--input " + corpus.string() + " --out " + out3.string() + " --vocab 320 --val-fraction 0.2 --threads 1");
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  BOOST_TEST((read_file(out / "tokenizer.tiktoken") == read_file(out3 / "tokenizer.tiktoken")));
  BOOST_TEST((read_file(out / "train.bin") == read_file(out3 / "train.bin")));
  // Running again over an existing output replaces it whole.
  r = run_prepare("--input " + corpus.string() + " --out " + out3.string() + " --vocab 300 --val-fraction 0.2");
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  BOOST_TEST(Tokenizer::load((out3 / "tokenizer.tiktoken").string()).vocab_size() == 300u);
  BOOST_TEST(read_shard((out3 / "train.bin").string()).vocab_size == 300u);
  fs::remove_all(out3);
  // No temporary or working files are left behind: the outputs and nothing else.
  std::set<std::string> names;
  for (auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
  BOOST_TEST((names == std::set<std::string>{"meta.json", "token_bytes.bin", "tokenizer.tiktoken", "train.bin", "val.bin"}));
  fs::remove_all(corpus), fs::remove_all(out), fs::remove_all(out2);
}

// The corpus streams through in batches of --buffer-mb: batches of a few documents give the
// same files, byte for byte, as one batch of everything (the tokenizer's counts too), also
// with --max-chars cutting the tokenizer's text in the middle of a batch.
BOOST_AUTO_TEST_CASE(batches_of_any_size_give_the_same_files) {
  fs::path corpus = make_corpus("corpus_batches");
  for (uint64_t max_chars : {uint64_t(0), uint64_t(3000)}) {
    std::string files[2][4];
    for (int k = 0; k < 2; ++k) {
      rt::data::PrepareOptions opt;
      opt.inputs = {corpus.string()};
      opt.out_dir = testing::temp_path("out_batches" + std::to_string(k));
      fs::remove_all(opt.out_dir);
      opt.vocab = 300, opt.val_fraction = 0.2, opt.max_chars = max_chars, opt.quiet = true, opt.threads = 2;
      opt.buffer_bytes = k == 0 ? (256ull << 20) : 700;  // everything at once; a few documents at a time
      rt::data::prepare_data(opt);
      int i = 0;
      for (auto name : {"tokenizer.tiktoken", "train.bin", "val.bin", "token_bytes.bin"}) files[k][i++] = read_file(fs::path(opt.out_dir) / name);
      fs::remove_all(opt.out_dir);
    }
    for (int i = 0; i < 4; ++i) BOOST_TEST((files[0][i] == files[1][i]), "file " << i << ", max_chars " << max_chars);
  }
  fs::remove_all(corpus);
}

BOOST_AUTO_TEST_CASE(bad_input_exits_2_and_leaves_out_untouched) {
  fs::path out = testing::temp_path("out_keep");
  fs::remove_all(out);
  write_file(out / "train.bin", "precious");
  fs::path empty = testing::temp_path("empty_corpus");
  fs::remove_all(empty);
  write_file(empty / "a.txt", "");
  write_file(empty / "b.jsonl", "\n");
  fs::path bad_json = testing::temp_path("bad_json");
  fs::remove_all(bad_json);
  write_file(bad_json / "x.jsonl", "{\"text\": \"ok\"}\n{\"txt\": 1}\n");
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"--input " + testing::temp_path("no_such_dir"), "does not exist"},
      {"--input " + empty.string(), "empty"},
      {"--input " + bad_json.string(), "x.jsonl:2"},
      {"--input " + empty.string() + " --vocab 70000", "--vocab"},
      {"--input " + empty.string() + " --bogus-flag", "bogus"},
      {"--input " + empty.string() + " --long-docs trim", "--long-docs trim is not a packing"},
  };
  for (auto& c : cases) {
    BOOST_TEST_CONTEXT(c.args) {
      Run r = run_prepare(c.args + " --out " + out.string());
      BOOST_TEST(r.code == 2);
      BOOST_TEST(r.err.find(c.expect) != std::string::npos, r.err);
      BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);  // one line
      BOOST_TEST(read_file(out / "train.bin") == "precious");
      BOOST_TEST(std::distance(fs::directory_iterator(out), fs::directory_iterator()) == 1);
    }
  }
  // A missing --out directory is not created when the input is bad.
  fs::path fresh = testing::temp_path("out_fresh");
  fs::remove_all(fresh);
  BOOST_TEST(run_prepare("--input " + empty.string() + " --out " + fresh.string()).code == 2);
  BOOST_TEST(!fs::exists(fresh));
  fs::remove_all(out), fs::remove_all(empty), fs::remove_all(bad_json);
}

BOOST_AUTO_TEST_SUITE_END()
