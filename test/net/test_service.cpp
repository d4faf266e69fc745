// Service requests on the job port, with real rank processes.
#include <boost/test/unit_test.hpp>

#include "../common/spawn.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/net/communicator.hpp"

using namespace nettest;

BOOST_AUTO_TEST_SUITE(service)

BOOST_AUTO_TEST_CASE(requests_are_answered_on_the_job_port) {
  const int base = port_base(2);
  auto procs = spawn_ranks(2, loopback_peers(2, base), "serve", {}, "serve");
  BOOST_REQUIRE(wait_for_output(procs, "serving", 30));
  for (int r = 0; r < 2; ++r) {
    std::string addr = "127.0.0.1:" + std::to_string(base + r);
    BOOST_TEST(rt::net::request(addr, "status", 5) == "rank " + std::to_string(r) + " got 'status'");
  }
  for (int r = 0; r < 2; ++r) rt::net::request("127.0.0.1:" + std::to_string(base + r), "quit", 5);
  wait_all(procs, 30);
  for (auto& p : procs) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 0);
  }
}

BOOST_AUTO_TEST_CASE(request_to_nobody_fails_clearly) {
  std::string addr = "127.0.0.1:" + std::to_string(port_base(3));
  try {
    rt::net::request(addr, "status", 0.5);
    BOOST_FAIL("request to a closed port returned");
  } catch (const rt::RuntimeError& e) {
    BOOST_TEST(contains(e.what(), "no answer from " + addr));
  }
}

BOOST_AUTO_TEST_SUITE_END()
