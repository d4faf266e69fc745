// The parquet reader against files written by a real writer (parquet-wasm, i.e. arrow-rs:
// test/data/parquet/make_fixtures.mjs): snappy, zstd, gzip and uncompressed pages, data pages
// v1 and v2, dictionary and plain encodings, several row groups and pages, nulls, a required
// column beside another column. And damaged files: refused with one line, never a crash.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data_fixtures.hpp"
#include "ringtrain/data/corpus.hpp"
#include "ringtrain/data/parquet.hpp"
#include "ringtrain/data/prepare.hpp"
#include "ringtrain/errors.hpp"

using rt::data::parse_parquet_text;
using rt::data::read_parquet_text;

namespace {

std::string fixture_dir() {
  const char* root = std::getenv("RINGTRAIN_SOURCE_ROOT");
  BOOST_TEST_REQUIRE(root != nullptr, "RINGTRAIN_SOURCE_ROOT is not set; run through meson test");
  return std::string(root) + "/test/data/parquet/";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

const char* const kFiles[] = {"snappy_v1_dictionary", "zstd_v2_dictionary", "uncompressed_v1_plain_pages", "gzip_v2_plain",
                              "zstd_v1_required"};

}  // namespace

BOOST_AUTO_TEST_SUITE(parquet)

BOOST_AUTO_TEST_CASE(reads_what_a_real_writer_wrote) {
  const auto expected = nlohmann::json::parse(slurp(fixture_dir() + "expected.json"));
  for (const char* name : kFiles) {
    std::vector<std::string> got;
    const auto stats = read_parquet_text(fixture_dir() + name + ".parquet", "text", [&](std::string_view v) { got.emplace_back(v); });
    std::vector<std::string> want;
    uint64_t nulls = 0;
    for (const auto& v : expected[name]) {
      if (v.is_null()) ++nulls;
      else want.push_back(v.get<std::string>());
    }
    BOOST_TEST_MESSAGE(name << ": " << stats.rows << " rows, " << stats.nulls << " nulls, " << stats.row_groups << " row groups, "
                            << stats.pages << " pages");
    BOOST_TEST(got.size() == want.size(), name);
    BOOST_TEST((got == want), name);
    BOOST_TEST(stats.nulls == nulls, name);
    BOOST_TEST(stats.rows == expected[name].size(), name);
    BOOST_TEST(stats.row_groups >= 2u, name);  // every file has several
  }
  // Pages: the plain file's 2 KiB page limit gives many pages per row group.
  const auto plain = read_parquet_text(fixture_dir() + "uncompressed_v1_plain_pages.parquet", "text", [](std::string_view) {});
  BOOST_TEST(plain.pages > 4 * plain.row_groups);
}

BOOST_AUTO_TEST_CASE(wrong_column_or_type_is_named) {
  const std::string f = fixture_dir() + "zstd_v2_dictionary.parquet";
  BOOST_CHECK_EXCEPTION(read_parquet_text(f, "body", [](std::string_view) {}), rt::UsageError, [](const rt::UsageError& e) {
    return std::string(e.what()).find("has no column 'body' (its columns: id, text)") != std::string::npos;
  });
  BOOST_CHECK_EXCEPTION(read_parquet_text(f, "id", [](std::string_view) {}), rt::UsageError, [](const rt::UsageError& e) {
    return std::string(e.what()).find("is not a string column") != std::string::npos;
  });
}

// Every truncation and many single-byte changes of every file: an rt::UsageError or a
// successful read, nothing else (the fuzz target goes further; this runs in every pass).
BOOST_AUTO_TEST_CASE(damaged_files_are_refused_not_crashed_on) {
  for (const char* name : kFiles) {
    const std::string good = slurp(fixture_dir() + name + ".parquet");
    size_t refused = 0, tried = 0;
    auto attempt = [&](const std::string& bytes) {
      ++tried;
      try {
        uint64_t total = 0;
        parse_parquet_text(bytes, name, "text", [&](std::string_view v) { total += v.size(); });
      } catch (const rt::UsageError& e) {
        ++refused;
        BOOST_REQUIRE(std::string(e.what()).find('\n') == std::string::npos);
      }
    };
    for (size_t cut = 0; cut < good.size(); cut += 1 + good.size() / 300) attempt(good.substr(0, cut));
    for (size_t i = 0; i < good.size(); i += 1 + good.size() / 400) {
      for (uint8_t x : {0x01, 0x80, 0xff}) {
        std::string bad = good;
        bad[i] = char(uint8_t(bad[i]) ^ x);
        attempt(bad);
      }
    }
    BOOST_TEST_MESSAGE(name << ": " << refused << " of " << tried << " damaged copies refused");
    BOOST_TEST(refused > tried / 10);
  }
}

// As `data prepare` input: every non-empty row a document, nanochat's last shard (in sorted
// order) the val split.
BOOST_AUTO_TEST_CASE(shards_as_a_corpus) {
  const auto files = rt::data::list_input_files({fixture_dir()});
  BOOST_TEST(files.size() == 5u);  // the .parquet files (expected.json and the script are not inputs)
  BOOST_TEST(files.back().find("zstd_v2_dictionary.parquet") != std::string::npos);
  const auto expected = nlohmann::json::parse(slurp(fixture_dir() + "expected.json"));
  uint64_t all = 0, last = 0;
  for (const char* name : kFiles)
    for (const auto& v : expected[name])
      if (!v.is_null() && !v.get<std::string>().empty()) ++all, last += std::string(name) == "zstd_v2_dictionary";
  BOOST_TEST(rt::data::read_corpus(files).docs.size() == all);
  rt::data::PrepareOptions opt;
  opt.inputs = {fixture_dir()};
  opt.out_dir = rt::data::testing::temp_path("parquet_prepared");
  opt.vocab = 300, opt.quiet = true;
  const auto res = rt::data::prepare_data(opt);
  BOOST_TEST(res.val_docs == last);
  BOOST_TEST(res.train_docs == all - last);
  std::filesystem::remove_all(opt.out_dir);
}

BOOST_AUTO_TEST_SUITE_END()
