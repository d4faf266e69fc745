// Tokenizer: regex split, exact round trip on arbitrary bytes, merges against a brute-force
// BPE, the special token ids and the tiktoken file round trip.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ringtrain/data/bpe_train.hpp"
#include "ringtrain/data/corpus.hpp"
#include "ringtrain/data/pretokenize.hpp"
#include "ringtrain/data/tokenizer.hpp"
#include "ringtrain/errors.hpp"

using namespace rt::data;

namespace {

std::vector<std::string> split_all(const Pretokenizer& pre, const std::string& text) {
  std::vector<std::string> out;
  pre.split(text, [&](std::string_view c) { out.emplace_back(c); });
  return out;
}

// Random bytes mixing ASCII words, multi-byte characters, digits, whitespace and bytes
// that are not valid UTF-8 (lone continuation bytes, truncated sequences, 0xFF).
std::string random_text(std::mt19937& rng, size_t pieces) {
  const std::vector<std::string> parts = {
      "the", " cat", "'s", "'LL", " 123456", "\n\n", "   ", "\t", "é", "日本語", "😀", "ß",
      "\xff", "\x80", "\xe6\x97", "\xc3", "\xed\xa0\x80", "!!", " --", "\r\n", "x", "42", " ", "Ω"};
  std::string s;
  std::uniform_int_distribution<size_t> pick(0, parts.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < pieces; ++i) s += (i % 7 == 3) ? std::string(1, char(byte(rng))) : parts[pick(rng)];
  return s;
}

// Brute-force BPE: after every merge, recount every pair over every chunk.
std::vector<TokenPair> brute_force_bpe(const ChunkCounts& corpus, size_t num_merges) {
  std::vector<std::vector<uint32_t>> words;
  for (auto& c : corpus.chunks) words.emplace_back(c.begin(), c.end());
  for (auto& w : words)
    for (auto& id : w) id &= 0xff;  // chars may be signed
  std::vector<TokenPair> merges;
  for (size_t m = 0; m < num_merges; ++m) {
    std::map<TokenPair, uint64_t> counts;  // ordered: smaller pair first on ties
    for (size_t w = 0; w < words.size(); ++w)
      for (size_t i = 0; i + 1 < words[w].size(); ++i) counts[{words[w][i], words[w][i + 1]}] += corpus.counts[w];
    if (counts.empty()) break;
    TokenPair best{};
    uint64_t best_count = 0;
    for (auto& [p, c] : counts)
      if (c > best_count) best = p, best_count = c;
    merges.push_back(best);
    uint32_t id = 256 + uint32_t(m);
    for (auto& w : words) {
      std::vector<uint32_t> out;
      for (size_t i = 0; i < w.size();) {
        if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) out.push_back(id), i += 2;
        else out.push_back(w[i++]);
      }
      w = out;
    }
  }
  return merges;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("rt_test_data_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tokenizer)

BOOST_AUTO_TEST_CASE(regex_split_follows_the_spec_pattern) {
  Pretokenizer pre;
  auto chunks = split_all(pre, "Hello world's 12345 don't\n\n  x!!");
  std::vector<std::string> want = {"Hello", " world", "'s", " ", "12", "34", "5", " don", "'t", "\n\n", " ", " x", "!!"};
  BOOST_TEST(chunks == want, boost::test_tools::per_element());
  // Unicode letters are letters (\p{L}); the contraction is case-insensitive.
  auto uni = split_all(pre, "naïve 日本語 I'LL");
  std::vector<std::string> want_uni = {"naïve", " 日本語", " I", "'LL"};
  BOOST_TEST(uni == want_uni, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(split_covers_invalid_utf8_exactly) {
  Pretokenizer pre;
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text = random_text(rng, 40);
    std::string joined;
    for (auto& c : split_all(pre, text)) {
      BOOST_REQUIRE(!c.empty());
      joined += c;
    }
    BOOST_REQUIRE(joined == text);
  }
  // An invalid byte is a chunk of its own.
  auto chunks = split_all(pre, "ab\xff" "cd");
  std::vector<std::string> want = {"ab", "\xff", "cd"};
  BOOST_TEST(chunks == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(merges_equal_brute_force_reference) {
  Pretokenizer pre;
  std::mt19937 rng(11);
  std::vector<std::string> docs = {"the cat sat on the mat, the end. aaaa aaa aa a abab ababab",
                                   "low lower lowest newer wider 1234 12 1 111111 the the then",
                                   random_text(rng, 300), random_text(rng, 300)};
  std::vector<std::string_view> views(docs.begin(), docs.end());
  for (int threads : {1, 2}) {
    ChunkCounts counts = count_chunks(pre, views, threads);
    auto fast = train_bpe(counts, 150);
    auto slow = brute_force_bpe(counts, 150);
    BOOST_TEST_REQUIRE(fast.size() == slow.size());
    BOOST_TEST(fast.size() > 100u);
    for (size_t m = 0; m < fast.size(); ++m) {
      BOOST_TEST_CONTEXT("merge " << m) {
        BOOST_TEST(fast[m].first == slow[m].first);
        BOOST_TEST(fast[m].second == slow[m].second);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(ties_go_to_the_smaller_pair) {
  // "ab" and "cd" occur equally often: (a,b) < (c,d) must come first, then (c,d).
  ChunkCounts corpus{{"ab", "cd"}, {5, 5}};
  auto merges = train_bpe(corpus, 10);
  BOOST_TEST_REQUIRE(merges.size() == 2u);
  BOOST_TEST(merges[0].first == uint32_t('a'));
  BOOST_TEST(merges[1].first == uint32_t('c'));
}

BOOST_AUTO_TEST_CASE(round_trip_is_exact_on_arbitrary_bytes) {
  Pretokenizer pre;
  std::mt19937 rng(3);
  std::vector<std::string> docs;
  for (int i = 0; i < 20; ++i) docs.push_back(random_text(rng, 200));
  std::vector<std::string_view> views(docs.begin(), docs.end());
  Tokenizer tok(train_bpe(count_chunks(pre, views, 1), 200));
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text = trial % 2 ? random_text(rng, 60) : std::string();
    if (trial % 2 == 0)
      for (int i = 0; i < 80; ++i) text += char(byte(rng));  // pure random bytes
    auto ids = tok.encode(text);
    for (auto id : ids) BOOST_REQUIRE(id < tok.bos_id());
    BOOST_REQUIRE(tok.decode(ids) == text);
  }
  // Merged tokens are used: the training text compresses.
  BOOST_TEST(tok.encode(docs[0]).size() < docs[0].size() / 2);
}

BOOST_AUTO_TEST_CASE(special_tokens_take_the_last_ids) {
  Tokenizer tok(std::vector<TokenPair>{{'a', 'b'}, {256, 'c'}});
  BOOST_TEST(tok.vocab_size() == 256u + 2 + 9);
  BOOST_TEST(tok.bos_id() == tok.vocab_size() - 9);
  BOOST_TEST(tok.special_id("<|bos|>") == tok.vocab_size() - 9);
  BOOST_TEST(tok.special_id("<|output_end|>") == tok.vocab_size() - 1);
  BOOST_TEST(tok.special_id("<|assistant_start|>") == tok.vocab_size() - 6);
  BOOST_TEST(tok.token_bytes(tok.bos_id()) == "<|bos|>");
  auto lengths = tok.token_byte_lengths();
  BOOST_TEST(lengths[257] == 3);
  BOOST_TEST(lengths[tok.bos_id()] == 0);
  BOOST_TEST(lengths[tok.vocab_size() - 1] == 0);
  // The text "<|bos|>" is plain text, never the special token.
  auto ids = tok.encode("<|bos|>");
  for (auto id : ids) BOOST_TEST(id < tok.bos_id());
  BOOST_CHECK_THROW(tok.special_id("<|nope|>"), rt::UsageError);
}

BOOST_AUTO_TEST_CASE(tiktoken_file_round_trip) {
  Pretokenizer pre;
  std::mt19937 rng(5);
  std::vector<std::string> docs;
  for (int i = 0; i < 10; ++i) docs.push_back(random_text(rng, 200));
  std::vector<std::string_view> views(docs.begin(), docs.end());
  Tokenizer tok(train_bpe(count_chunks(pre, views, 1), 120));
  std::string path = temp_path("tok.tiktoken");
  tok.save(path);
  {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    BOOST_TEST(line == "AA== 0");  // byte 0, rank 0
  }
  Tokenizer back = Tokenizer::load(path);
  BOOST_TEST(back.vocab_size() == tok.vocab_size());
  BOOST_TEST_REQUIRE(back.merges().size() == tok.merges().size());
  for (size_t m = 0; m < tok.merges().size(); ++m) BOOST_TEST((back.merges()[m] == tok.merges()[m]));
  BOOST_TEST(back.encode(docs[1]) == tok.encode(docs[1]), boost::test_tools::per_element());
  // A corrupt line is a one-line UsageError naming the line.
  {
    std::ofstream f(path, std::ios::app);
    f << "!!notbase64 999\n";
  }
  try {
    Tokenizer::load(path);
    BOOST_FAIL("a corrupt tokenizer file was accepted");
  } catch (const rt::UsageError& e) {
    std::string msg = e.what();
    BOOST_TEST(msg.find("line " + std::to_string(tok.bos_id() + 1)) != std::string::npos);
    BOOST_TEST(msg.find('\n') == std::string::npos);
  }
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(jsonl_text_field_decodes_escapes) {
  BOOST_TEST(jsonl_text_field(R"({"id": [1, {"x": "}"}], "text": "a\nb\u00e9\ud83d\ude00\"", "n": null})") ==
             "a\nb\xc3\xa9\xf0\x9f\x98\x80\"");
  BOOST_CHECK_THROW(jsonl_text_field(R"({"txt": "a"})"), std::invalid_argument);
  BOOST_CHECK_THROW(jsonl_text_field(R"({"text": 3})"), std::invalid_argument);
  BOOST_CHECK_THROW(jsonl_text_field(R"({"text": "a")"), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
