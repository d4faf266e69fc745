// Two simulated hosts (network namespaces on a bridge, tools/netns/hosts.sh) whose
// firewalls drop everything but TCP 29500-29510: the collectives complete (encrypted, with
// the job key), and `ss` shows no listening TCP socket other than the listed ports. Without
// a key, ranks on two hosts refuse to start. Needs root; reported as
// skipped (exit 77) otherwise.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <sstream>

#include "../common/skip.hpp"
#include "../common/netns_hosts.hpp"
#include "../common/spawn.hpp"

using namespace nettest;

BOOST_AUTO_TEST_SUITE(netns)

BOOST_AUTO_TEST_CASE(allreduce_passes_a_firewall_that_opens_only_the_listed_range) {
  if (!testskip::require(geteuid() == 0, "network namespaces need root (CI runs as root)")) return;
  NetnsHosts hosts(2, "n", "--firewall 29500-29510");
  const std::string peers = "10.99.0.1:29500,10.99.0.2:29501";
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r)
    procs.push_back(spawn({"ip", "netns", "exec", hosts.ns(r), driver_path(), "--rank", std::to_string(r), "--peers", peers,
                           "--scenario", "exact_then_serve", "--big-floats", "1000000", "--connect-timeout", "30",
                           "--key", key_file()},
                          "netns"));
  // Wait until both ranks finished the exact checks and are serving.
  const bool serving = wait_for_output(procs, "serving", 120);
  BOOST_TEST_INFO(procs[0].err() << " | " << procs[1].err());
  BOOST_REQUIRE(serving);
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST(procs[r].out().find("exact ok") != std::string::npos);
    // Every listening TCP socket in this host is the job's listed port.
    std::string ss;
    BOOST_REQUIRE(run_shell("ip netns exec " + hosts.ns(r) + " ss -Hltn", &ss) == 0);
    std::istringstream lines(ss);
    std::string line;
    int listeners = 0;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      ++listeners;
      BOOST_TEST_INFO("host " << r << " listens: " << line);
      BOOST_TEST(line.find(" 10.99.0." + std::to_string(r + 1) + ":" + std::to_string(29500 + r) + " ") != std::string::npos);
    }
    BOOST_TEST(listeners == 1);
  }
  for (int r = 0; r < 2; ++r) {
    std::string reply;
    run_shell("ip netns exec " + hosts.ns(r) + " " + driver_path() + " --request 10.99.0." + std::to_string(r + 1) + ":" +
                  std::to_string(29500 + r) + " quit " + key_file(),
              &reply);
    BOOST_TEST(reply.find("got 'quit'") != std::string::npos);
  }
  wait_all(procs, 60);
  for (auto& p : procs) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 0);
  }
}

BOOST_AUTO_TEST_CASE(ranks_on_two_hosts_need_a_key_or_insecure) {
  if (namespaces_unavailable()) return;
  NetnsHosts hosts(2, "k", "--firewall 29500-29510");
  const std::string peers = "10.99.0.1:29500,10.99.0.2:29501";
  auto start = [&](const std::vector<std::string>& extra) {
    std::vector<Proc> procs;
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> argv{"ip", "netns", "exec", hosts.ns(r), driver_path(), "--rank", std::to_string(r), "--peers",
                                    peers, "--scenario", "hello", "--connect-timeout", "30"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      procs.push_back(spawn(argv, "netns-key"));
    }
    wait_all(procs, 60);
    return procs;
  };
  for (auto& p : start({})) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 2);
    BOOST_TEST(p.err().find("ringtrain keygen --out job.key") != std::string::npos);
    BOOST_TEST(p.seconds < 10);
  }
  for (auto& p : start({"--insecure", "1"})) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 0);
    BOOST_TEST(p.err().find("WARNING: --insecure") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()
