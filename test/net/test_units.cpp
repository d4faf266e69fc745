// In-process checks of the pieces that need no network: --peers parsing, shards, bf16
// rounding, handshake comparison messages, the refusal log, job key files.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../common/spawn.hpp"
#include "bf16.hpp"
#include "block_codes.hpp"
#include "hello_wire.hpp"
#include "open_files.hpp"
#include "refusal_log.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/job_key.hpp"

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

// The block codes of --wire int8 and int4, with their levels each side of zero.
struct Code {
  Wire wire;
  float levels;
};
constexpr Code kCodes[] = {{Wire::Int8, 127.0f}, {Wire::Int4, 7.0f}};

BOOST_AUTO_TEST_CASE(block_codes_round_trip_within_half_a_step_per_block) {
  // 201 values: three full blocks and a partial one (odd: int4's last byte holds one
  // value), of very different magnitudes, and a block of zeros.
  std::vector<float> x(201);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.7 * double(i)) * std::pow(10.0, double(i / 64) - 2));
  for (size_t i = 128; i < 192; ++i) x[i] = 0.0f;
  BOOST_TEST(coded_bytes(Wire::Int8, x.size()) == 4 * 4 + 201u);
  BOOST_TEST(coded_bytes(Wire::Int4, x.size()) == 4 * 4 + 101u);
  for (const Code code : kCodes) {
    BOOST_TEST_CONTEXT(wire_name(code.wire)) {
      std::string bytes(coded_bytes(code.wire, x.size()), '\0');
      std::vector<float> decoded(x.size()), error(x.size()), again(x.size());
      encode_blocks(code.wire, x.data(), x.size(), bytes.data(), decoded.data(), error.data());
      BOOST_TEST(decode_blocks(code.wire, bytes.data(), x.size(), again.data()));
      for (size_t b = 0; b < x.size(); b += kBlockValues) {
        const size_t end = std::min(x.size(), b + kBlockValues);
        float amax = 0;
        for (size_t i = b; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
        for (size_t i = b; i < end; ++i) {
          BOOST_TEST(again[i] == decoded[i]);                                 // what the sender keeps is what receivers get
          BOOST_TEST(error[i] == x[i] - decoded[i]);                          // the error is exact
          BOOST_TEST(std::fabs(error[i]) <= amax / (2 * code.levels) * 1.0001f);  // half a step of this block's scale
        }
        float levels_used = 0;  // the block's largest value maps to the top level
        for (size_t i = b; i < end; ++i) levels_used = std::max(levels_used, std::fabs(decoded[i]));
        if (amax > 0) BOOST_TEST(levels_used == amax, "block " << b / kBlockValues);
      }
      for (size_t i = 128; i < 192; ++i) BOOST_TEST(again[i] == 0.0f);
      // Decoding into a sum adds the same values (the compiler may fuse the multiply-add,
      // so within one rounding).
      std::vector<float> acc(x.size(), 1.0f);
      BOOST_TEST(add_blocks(code.wire, acc.data(), bytes.data(), x.size()));
      for (size_t i = 0; i < x.size(); ++i)
        BOOST_TEST(std::fabs(acc[i] - (1.0f + decoded[i])) <= 1e-6f * (1.0f + std::fabs(decoded[i])));
    }
  }
}

BOOST_AUTO_TEST_CASE(int4_packs_two_values_a_byte_low_nibble_first) {
  // One block whose largest magnitude is 7: scale 1, so the values are the levels themselves.
  std::vector<float> x = {7, -7, 1, -1, 0, 3};
  std::string bytes(coded_bytes(Wire::Int4, x.size()), '\0');
  encode_blocks(Wire::Int4, x.data(), x.size(), bytes.data(), nullptr, nullptr);
  float scale;
  std::memcpy(&scale, bytes.data(), 4);
  BOOST_TEST(scale == 1.0f);
  const unsigned char* v = reinterpret_cast<const unsigned char*>(bytes.data()) + 4;
  BOOST_TEST(int(v[0]) == 0x97);  // 7 low, -7 (1001) high
  BOOST_TEST(int(v[1]) == 0xf1);  // 1, -1
  BOOST_TEST(int(v[2]) == 0x30);  // 0, 3
}

BOOST_AUTO_TEST_CASE(block_codes_error_feedback_sums_to_the_exact_value) {
  // The same vector sent 50 times, each time with the last error added: the decoded values
  // add up to 50 x the input, off by no more than the last error (half a step), while
  // without feedback the bias of rounding grows with every message.
  const size_t n = 64;
  std::vector<float> x(n), e(n), in(n), decoded(n);
  for (size_t i = 0; i < n; ++i) x[i] = 0.013f * float(i) - 0.3f;
  for (const Code code : kCodes) {
    BOOST_TEST_CONTEXT(wire_name(code.wire)) {
      std::fill(e.begin(), e.end(), 0.0f);
      std::vector<double> sum(n, 0.0), plain(n, 0.0);
      std::string bytes(coded_bytes(code.wire, n), '\0');
      for (int k = 0; k < 50; ++k) {
        for (size_t i = 0; i < n; ++i) in[i] = x[i] + e[i];
        encode_blocks(code.wire, in.data(), n, bytes.data(), decoded.data(), e.data());
        for (size_t i = 0; i < n; ++i) sum[i] += decoded[i];
        encode_blocks(code.wire, x.data(), n, bytes.data(), decoded.data(), nullptr);
        for (size_t i = 0; i < n; ++i) plain[i] += decoded[i];
      }
      double worst = 0, worst_plain = 0;
      for (size_t i = 0; i < n; ++i) {
        worst = std::max(worst, std::fabs(sum[i] - 50.0 * x[i]));
        worst_plain = std::max(worst_plain, std::fabs(plain[i] - 50.0 * x[i]));
      }
      // The block's largest value is about 0.53, plus at most half a step of feedback.
      const double step = 0.53 / (code.levels - 0.5);
      BOOST_TEST(worst <= 0.5 * step * 1.01);
      BOOST_TEST(worst_plain > 5 * step);  // the test can tell feedback from none
    }
  }
}

BOOST_AUTO_TEST_CASE(block_codes_refuse_what_no_encoder_sends) {
  const size_t n = 70;  // two blocks
  for (const Code code : kCodes) {
    BOOST_TEST_CONTEXT(wire_name(code.wire)) {
      std::vector<float> x(n, 0.5f), out(n);
      std::string good(coded_bytes(code.wire, n), '\0');
      encode_blocks(code.wire, x.data(), n, good.data(), nullptr, nullptr);
      BOOST_TEST(decode_blocks(code.wire, good.data(), n, out.data()));
      auto with_scale = [&](size_t block, float scale) {
        std::string b = good;
        std::memcpy(b.data() + block * 4, &scale, 4);
        return b;
      };
      for (float bad : {std::nanf(""), INFINITY, -1.0f, 3e38f}) {
        BOOST_TEST(!decode_blocks(code.wire, with_scale(1, bad).data(), n, out.data()), "scale " << bad);
        BOOST_TEST(!add_blocks(code.wire, out.data(), with_scale(0, bad).data(), n), "scale " << bad);
      }
      // The one value below -L: int8's byte -128, int4's nibble -8 (here value 69, the high
      // nibble of the last byte).
      std::string lowest = good;
      if (code.wire == Wire::Int8) lowest[8 + 69] = char(-128);
      else lowest[8 + 34] = char((lowest[8 + 34] & 0x0f) | 0x80);
      BOOST_TEST(!decode_blocks(code.wire, lowest.data(), n, out.data()));
      // Non-finite inputs never produce an invalid message.
      x[3] = std::nanf("");
      x[66] = INFINITY;
      encode_blocks(code.wire, x.data(), n, good.data(), nullptr, nullptr);
      BOOST_TEST(decode_blocks(code.wire, good.data(), n, out.data()));
    }
  }
}

BOOST_AUTO_TEST_CASE(handshake_names_first_differing_key) {
  Hello a{"job", 2, 0, "--depth=8\n--seq-len=1024\n", ""};
  Hello b{"job", 2, 1, "--depth=4\n--seq-len=1024\n", ""};
  BOOST_TEST(compare_hello(a, a, "x:1") == "");
  std::string m = compare_hello(a, b, "10.0.0.2:29500");
  BOOST_TEST(m == "config mismatch with rank 1 (10.0.0.2:29500): --depth is 8 here and 4 there; start every rank with the same flags");
  Hello c{"other", 2, 1, a.config_text, ""};
  BOOST_TEST(compare_hello(a, c, "h:1").find("job id mismatch") != std::string::npos);
  Hello d{"job", 3, 1, a.config_text, ""};
  BOOST_TEST(compare_hello(a, d, "h:1").find("world size mismatch") != std::string::npos);
  Hello e{"job", 2, 1, "--depth=8\n--seq-len=1024\n--extra=1\n", ""};
  BOOST_TEST(compare_hello(a, e, "h:1").find("--extra is (unset) here and 1 there") != std::string::npos);
  auto round = decode_hello(encode_hello(b));
  BOOST_REQUIRE(round.has_value());
  BOOST_TEST(round->rank == 1);
  BOOST_TEST(round->config_text == b.config_text);
  BOOST_TEST(!decode_hello("GET / HTTP/1.1\r\n").has_value());
  BOOST_TEST(!decode_hello("ringtrain-hello 2\njob=x\nworld=2x\nrank=1\n").has_value());
}

// Without a key the hello carries only a fingerprint: equal settings match, different ones
// are noticed, and neither the job id nor any config key or value is in the text.
BOOST_AUTO_TEST_CASE(fingerprint_hello_reveals_nothing_and_still_compares) {
  Hello a{"secret-job", 2, 0, "--depth=8\n--data-dir=/home/alice/private\n", ""};
  Hello b{"secret-job", 2, 1, "--depth=4\n--data-dir=/home/alice/private\n", ""};
  const std::string text = encode_hello(fingerprint_form(b));
  for (const char* leak : {"secret-job", "depth", "alice", "private", "=4"}) BOOST_TEST(text.find(leak) == std::string::npos, text);
  auto theirs = decode_hello(text);
  BOOST_REQUIRE(theirs.has_value());
  BOOST_TEST(theirs->fingerprint_only());
  BOOST_TEST(compare_hello(fingerprint_form(a), fingerprint_form(Hello{a.job_id, 2, 1, a.config_text, ""}), "h:1") == "");
  const std::string m = compare_hello(fingerprint_form(a), *theirs, "h:1");
  BOOST_TEST(m.find("job id or config mismatch with rank 1 (h:1)") == 0, m);
  BOOST_TEST(compare_hello(a, *theirs, "h:1").find("--key") != std::string::npos);  // keyed vs keyless
  // A refusal carries a generic reason and, only where the caller puts it there, a hello.
  std::string reason, hello;
  decode_refusal(encode_refusal("its settings differ", ""), reason, hello);
  BOOST_TEST(reason == "its settings differ");
  BOOST_TEST(hello.empty());
}

BOOST_AUTO_TEST_CASE(refusal_log_is_bounded_per_address_and_reason) {
  std::vector<std::string> lines;
  RefusalLog log([&](const std::string& l) { lines.push_back(l); }, "connection");
  for (int i = 0; i < 500; ++i) log.refused("10.0.0.9:" + std::to_string(40000 + i), "no key");
  log.refused("10.0.0.7:1", "no key");
  log.refused("10.0.0.9:2", "another key");
  BOOST_REQUIRE_EQUAL(lines.size(), 3u);
  BOOST_TEST(lines[0] == "refused a connection from 10.0.0.9:40000: no key; the job goes on");
  BOOST_TEST(lines[1].find("10.0.0.7:1") != std::string::npos);
  BOOST_TEST(lines[2].find("another key") != std::string::npos);
}

// Key files: 32 bytes, owner-only, or a one-line usage error saying what to do.
BOOST_AUTO_TEST_CASE(job_key_files_are_checked) {
  const std::string dir = nettest::scratch_dir() + "/keys";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/job.key";
  std::filesystem::remove(path);
  write_new_job_key(path, false);
  BOOST_TEST(std::filesystem::file_size(path) == 32u);
  const auto owner_rw = std::filesystem::perms::owner_read | std::filesystem::perms::owner_write;
  BOOST_TEST(((std::filesystem::status(path).permissions() & std::filesystem::perms::all) == owner_rw));
  const JobKey k1 = load_job_key(path), k1again = load_job_key(path);
  BOOST_TEST((k1.public_key == k1again.public_key));  // derived, deterministic
  auto usage_message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const rt::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(usage_message([&] { write_new_job_key(path, false); }).find("already exists") != std::string::npos);
  write_new_job_key(path, true);  // --force
  BOOST_TEST((load_job_key(path).public_key != k1.public_key));
  std::filesystem::permissions(path, std::filesystem::perms::group_read, std::filesystem::perm_options::add);
  BOOST_TEST(usage_message([&] { load_job_key(path); }).find("chmod 600") != std::string::npos);
  const std::string short_key = dir + "/short.key";
  std::filesystem::remove(short_key);
  { std::ofstream(short_key) << "0123456789"; }
  std::filesystem::permissions(short_key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  BOOST_TEST(usage_message([&] { load_job_key(short_key); }).find("has 10 bytes, but a job key is exactly 32") != std::string::npos);
  BOOST_TEST(usage_message([&] { load_job_key(dir + "/missing.key"); }).find("ringtrain keygen") != std::string::npos);
}

// systemd's soft limit of 1024 under a higher hard one: the rank takes the hard limit, and
// warns only when that is still low. In a child process, so the test's own limit is kept.
BOOST_AUTO_TEST_CASE(open_file_limit_is_raised_to_the_hard_one) {
  rlimit lim{};
  BOOST_REQUIRE(getrlimit(RLIMIT_NOFILE, &lim) == 0);
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max <= 1024) return;  // nothing to raise to
  const pid_t child = fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    rlimit low = lim;
    low.rlim_cur = 1024;
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) _exit(3);
    const rt::net::OpenFileLimit r = rt::net::raise_open_file_limit();
    rlimit now{};
    if (getrlimit(RLIMIT_NOFILE, &now) != 0) _exit(4);
    const bool raised = r.before == 1024 && r.after > 1024 && now.rlim_cur == r.after &&
                        (now.rlim_cur == lim.rlim_max || now.rlim_cur == (1u << 20));
    const bool warned = !rt::net::open_file_limit_warning(r).empty();
    _exit(!raised ? 5 : warned != (r.after < rt::net::kEnoughOpenFiles) ? 6 : 0);
  }
  int status = 0;
  BOOST_REQUIRE(waitpid(child, &status, 0) == child);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
  BOOST_TEST(rt::net::open_file_limit_warning({1024, 1024}).find("LimitNOFILE=65536") != std::string::npos);
  BOOST_TEST(rt::net::open_file_limit_warning({1024, 65536}).empty());
}

BOOST_AUTO_TEST_SUITE_END()
