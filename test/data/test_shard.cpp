// Shard files: round trip, and corrupt files rejected with a one-line UsageError.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "data_fixtures.hpp"
#include "ringtrain/errors.hpp"

using namespace rt::data;
using namespace rt::data::testing;

namespace {

std::string usage_error_of(const std::string& path) {
  try {
    read_shard(path);
  } catch (const rt::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(shard)

BOOST_AUTO_TEST_CASE(write_then_read_is_identical) {
  Shard s = make_shard(50, 1, 40);
  std::string path = temp_path("ok.bin");
  write_shard(path, s);
  BOOST_TEST(std::filesystem::file_size(path) == kShardHeaderBytes + 8 * 51 + 2 * s.tokens.size());
  Shard back = read_shard(path);
  BOOST_TEST(back.vocab_size == s.vocab_size);
  BOOST_TEST(back.doc_start == s.doc_start, boost::test_tools::per_element());
  BOOST_TEST(back.tokens == s.tokens, boost::test_tools::per_element());
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(truncated_shard_is_rejected) {
  Shard s = make_shard(20, 5, 30);
  std::string path = temp_path("trunc.bin");
  write_shard(path, s);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
  std::string msg = usage_error_of(path);
  BOOST_TEST(msg.find("truncated") != std::string::npos);
  BOOST_TEST(msg.find('\n') == std::string::npos);
  std::filesystem::resize_file(path, 10);  // shorter than the header
  BOOST_TEST(usage_error_of(path).find("header") != std::string::npos);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(bad_magic_and_flipped_bytes_are_rejected) {
  Shard s = make_shard(20, 5, 30);
  std::string path = temp_path("magic.bin");
  write_shard(path, s);
  auto poke = [&](size_t offset, char value) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(offset));
    f.put(value);
  };
  poke(0, 'X');
  BOOST_TEST(usage_error_of(path).find("magic") != std::string::npos);
  write_shard(path, s);
  poke(std::filesystem::file_size(path) - 1, 0x7f);  // a token byte: checksum catches it
  BOOST_TEST(usage_error_of(path).find("checksum") != std::string::npos);
  write_shard(path, s);
  poke(8, 9);  // version
  BOOST_TEST(usage_error_of(path).find("version") != std::string::npos);
  BOOST_CHECK_THROW(read_shard(temp_path("missing.bin")), rt::UsageError);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(token_bytes_round_trip) {
  std::vector<int32_t> lengths(kVocab, 1);
  lengths[kBos] = 0;
  std::string path = temp_path("tb.bin");
  write_token_bytes(path, lengths);
  BOOST_TEST(read_token_bytes(path) == lengths, boost::test_tools::per_element());
  std::filesystem::resize_file(path, 4 * kVocab - 2);
  BOOST_CHECK_THROW(read_token_bytes(path), rt::UsageError);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()
