// 2, 3 and 4 real rank processes on 127.0.0.1: exact results for every collective and size
// (0, 1, 7, 1000, 1,000,003 and 64 MB of floats), many mixed collectives back to back, bf16
// on the wire within its rounding bound, and `ringtrain bench allreduce` end to end.
#include <boost/test/unit_test.hpp>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/spawn.hpp"

using namespace nettest;

namespace {

void expect_all_ok(std::vector<Proc>& procs, const std::string& marker) {
  for (size_t r = 0; r < procs.size(); ++r) {
    BOOST_TEST_INFO("rank " << r << " stderr: " << procs[r].err());
    BOOST_TEST(procs[r].exit_code == 0);
    BOOST_TEST(procs[r].out().find(marker) != std::string::npos);
  }
}

void run_exact(int world, int slot) {
  auto procs = spawn_ranks(world, loopback_peers(world, port_base(slot)), "exact");
  wait_all(procs, 240);
  expect_all_ok(procs, "exact ok");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(loopback)

BOOST_AUTO_TEST_CASE(exact_two_ranks) { run_exact(2, 0); }
BOOST_AUTO_TEST_CASE(exact_three_ranks) { run_exact(3, 1); }
BOOST_AUTO_TEST_CASE(exact_four_ranks) { run_exact(4, 2); }

BOOST_AUTO_TEST_CASE(bf16_within_rounding_bound) {
  for (int world : {2, 4}) {
    auto procs = spawn_ranks(world, loopback_peers(world, port_base(3)), "bf16");
    wait_all(procs, 120);
    expect_all_ok(procs, "bf16 n=1000003");
  }
}

BOOST_AUTO_TEST_CASE(int8_and_int4_exact_up_to_the_residuals_with_feedback) {
  for (int world : {2, 3}) {
    auto procs = spawn_ranks(world, loopback_peers(world, port_base(3)), "int8");
    wait_all(procs, 180);
    expect_all_ok(procs, "int8 n=1000003");
    expect_all_ok(procs, "int4 n=1000003");
  }
}

BOOST_AUTO_TEST_CASE(ipv6_literals_and_host_names) {
  const int base = port_base(1);
  for (std::string host : {"[::1]", "localhost"}) {
    std::string peers = host + ":" + std::to_string(base) + "," + host + ":" + std::to_string(base + 1);
    auto procs = spawn_ranks(2, peers, "hello");
    wait_all(procs, 60);
    for (auto& p : procs) {
      BOOST_TEST_INFO(host << ": " << p.err());
      BOOST_TEST(p.exit_code == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(bench_allreduce_reports_checked_results) {
  std::string peers = loopback_peers(2, port_base(0));
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r)
    procs.push_back(spawn({ringtrain_path(), "bench", "allreduce", "--rank", std::to_string(r), "--peers", peers,
                           "--json", "--min-bytes", "4K", "--max-bytes", "1M", "--iters", "2", "--wire", "bf16"},
                          "bench"));
  wait_all(procs, 120);
  for (auto& p : procs) {
    BOOST_TEST_INFO("stderr: " << p.err());
    BOOST_TEST(p.exit_code == 0);
  }
  // One JSON line per size, each checked: every size must be present and correct.
  std::vector<size_t> sizes;
  std::istringstream lines(procs[0].out());
  for (std::string line; std::getline(lines, line);) {
    BOOST_TEST_INFO("line: " << line);
    const auto rec = nlohmann::json::parse(line);
    BOOST_TEST(rec.value("correct", false));
    BOOST_TEST(rec.value("busbw_MBps", 0.0) > 0.0);
    sizes.push_back(rec.value("bytes", size_t{0}));
  }
  const std::vector<size_t> want = {4096, 16384, 65536, 262144, 1048576};  // 4K .. 1M, factor 4
  BOOST_TEST(sizes == want, boost::test_tools::per_element());
  BOOST_TEST(procs[1].out().empty());  // only rank 0 reports
}

BOOST_AUTO_TEST_SUITE_END()
