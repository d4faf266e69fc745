// In-process checks of the pieces that need no network: --peers parsing, shards, bf16
// rounding, handshake comparison messages.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "bf16.hpp"
#include "handshake.hpp"
#include "ringtrain/net/communicator.hpp"

using namespace rt::net;

BOOST_AUTO_TEST_SUITE(units)

BOOST_AUTO_TEST_CASE(peers_parse_ipv4_ipv6_and_names) {
  auto p = parse_peers("10.0.0.1:29500,[::1]:29501,host-a.example:80");
  BOOST_REQUIRE_EQUAL(p.size(), 3u);
  BOOST_TEST(p[0].host == "10.0.0.1");
  BOOST_TEST(p[0].port == 29500);
  BOOST_TEST(p[1].host == "::1");
  BOOST_TEST(p[1].text() == "[::1]:29501");
  BOOST_TEST(p[1].endpoint() == "tcp://[::1]:29501");
  BOOST_TEST(p[2].host == "host-a.example");
  BOOST_TEST(p[2].port == 80);
}

BOOST_AUTO_TEST_CASE(peers_reject_bad_syntax) {
  for (const char* bad : {"", "10.0.0.1", "10.0.0.1:", ":29500", "a:0", "a:70000", "a:12x", "::1:29500",
                          "[::1]29500", "a:1,,b:2", "a:1,a:1"})
    BOOST_CHECK_THROW(parse_peers(bad), rt::UsageError);
}

BOOST_AUTO_TEST_CASE(shards_cover_the_buffer_in_order) {
  for (size_t n : {0u, 1u, 7u, 1000u, 1000003u})
    for (int world : {1, 2, 3, 4, 7}) {
      size_t next = 0;
      for (int r = 0; r < world; ++r) {
        ShardRange s = shard_range(n, world, r);
        BOOST_TEST(s.begin == next);
        BOOST_TEST(s.size() <= n / world + 1);
        next = s.end;
      }
      BOOST_TEST(next == n);
    }
}

BOOST_AUTO_TEST_CASE(bf16_rounds_to_nearest_even) {
  BOOST_TEST(round_to_bf16(1.0f) == 1.0f);
  BOOST_TEST(round_to_bf16(256.0f) == 256.0f);
  BOOST_TEST(round_to_bf16(257.0f) == 256.0f);  // tie -> even
  BOOST_TEST(round_to_bf16(259.0f) == 260.0f);  // tie -> even
  BOOST_TEST(round_to_bf16(-3.0f) == -3.0f);
  BOOST_TEST(std::isnan(round_to_bf16(std::nanf(""))));
  for (float x : {0.1f, 3.14159f, -1234.5f, 1e-20f, 6e30f}) {
    float y = round_to_bf16(x);
    BOOST_TEST(std::fabs(y - x) <= std::fabs(x) * std::ldexp(1.0f, -8));
    BOOST_TEST(round_to_bf16(y) == y);  // idempotent: re-sending never changes a value
  }
}

BOOST_AUTO_TEST_CASE(handshake_names_first_differing_key) {
  Hello a{"job", 2, 0, "--depth=8\n--seq-len=1024\n"};
  Hello b{"job", 2, 1, "--depth=4\n--seq-len=1024\n"};
  BOOST_TEST(compare_hello(a, a, "x:1") == "");
  std::string m = compare_hello(a, b, "10.0.0.2:29500");
  BOOST_TEST(m == "config mismatch with rank 1 (10.0.0.2:29500): --depth is 8 here and 4 there; start every rank with the same flags");
  Hello c{"other", 2, 1, a.config_text};
  BOOST_TEST(compare_hello(a, c, "h:1").find("job id mismatch") != std::string::npos);
  Hello d{"job", 3, 1, a.config_text};
  BOOST_TEST(compare_hello(a, d, "h:1").find("world size mismatch") != std::string::npos);
  Hello e{"job", 2, 1, "--depth=8\n--seq-len=1024\n--extra=1\n"};
  BOOST_TEST(compare_hello(a, e, "h:1").find("--extra is (unset) here and 1 there") != std::string::npos);
  auto round = decode_hello(encode_hello(b));
  BOOST_REQUIRE(round.has_value());
  BOOST_TEST(round->rank == 1);
  BOOST_TEST(round->config_text == b.config_text);
  BOOST_TEST(!decode_hello("GET / HTTP/1.1\r\n").has_value());
}

BOOST_AUTO_TEST_SUITE_END()
