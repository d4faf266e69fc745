// Handshake errors, each with real rank processes.
#include <boost/test/unit_test.hpp>

#include "../common/spawn.hpp"
#include "ringtrain/net/communicator.hpp"

using namespace nettest;

BOOST_AUTO_TEST_SUITE(handshake)

// With a key, each rank names the first differing flag and both values, from its side.
BOOST_AUTO_TEST_CASE(config_mismatch_fails_on_every_rank) {
  std::string peers = loopback_peers(3, port_base(0));
  std::vector<Proc> procs;
  for (int r = 0; r < 3; ++r)
    procs.push_back(spawn({driver_path(), "--rank", std::to_string(r), "--peers", peers, "--scenario", "hello", "--key", key_file(),
                           "--config", r == 1 ? "--depth=4\n--seq-len=1024\n" : "--depth=8\n--seq-len=1024\n"},
                          "mismatch"));
  wait_all(procs, 60);
  for (int r = 0; r < 3; ++r) {
    std::string err = procs[r].err();
    BOOST_TEST_INFO("rank " << r << ": " << err);
    BOOST_TEST(procs[r].exit_code == 2);
    BOOST_TEST(contains(err, "config mismatch with rank"));
    BOOST_TEST(contains(err, r == 1 ? "--depth is 4 here and 8 there" : "--depth is 8 here and 4 there"));
  }
  BOOST_TEST(contains(procs[0].err(), "rank 1 (127.0.0.1:" + std::to_string(port_base(0) + 1) + ")"));
}

// Without a key the ranks compare fingerprints: every rank still stops, saying so.
BOOST_AUTO_TEST_CASE(config_mismatch_without_key_fails_on_every_rank_without_naming_values) {
  std::string peers = loopback_peers(2, port_base(1));
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r)
    procs.push_back(spawn({driver_path(), "--rank", std::to_string(r), "--peers", peers, "--scenario", "hello", "--config",
                           r == 1 ? "--depth=4\n" : "--depth=8\n"},
                          "mismatch-plain"));
  wait_all(procs, 60);
  for (auto& p : procs) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 2);
    BOOST_TEST(contains(p.err(), "job id or config mismatch with rank"));
    BOOST_TEST(!contains(p.err(), "--depth"));
  }
}

BOOST_AUTO_TEST_CASE(job_mismatch_fails_on_both_ranks) {
  std::string peers = loopback_peers(2, port_base(0));
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r)
    procs.push_back(spawn({driver_path(), "--rank", std::to_string(r), "--peers", peers, "--scenario", "hello", "--key", key_file(),
                           "--job", r ? "job-b" : "job-a"},
                          "job"));
  wait_all(procs, 60);
  for (auto& p : procs) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 2);
    BOOST_TEST(contains(p.err(), "job id mismatch"));
  }
}

BOOST_AUTO_TEST_CASE(missing_rank_is_named_after_the_connect_timeout) {
  std::string peers = loopback_peers(3, port_base(1));
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r)  // rank 2 never starts
    procs.push_back(spawn({driver_path(), "--rank", std::to_string(r), "--peers", peers, "--scenario", "hello",
                           "--connect-timeout", "2"},
                          "missing"));
  wait_all(procs, 60);
  for (auto& p : procs) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 1);
    BOOST_TEST(contains(p.err(), "rank 2 (127.0.0.1:" + std::to_string(port_base(1) + 2) + ") never joined within 2.0 s"));
    BOOST_TEST(contains(p.err(), "firewall"));
  }
}

BOOST_AUTO_TEST_CASE(ranks_started_late_and_in_any_order_join) {
  std::string peers = loopback_peers(3, port_base(2));
  std::vector<Proc> procs;
  for (int r : {2, 0}) procs.push_back(spawn({driver_path(), "--rank", std::to_string(r), "--peers", peers, "--scenario", "hello"}, "order"));
  // Rank 1 starts only once ranks 2 and 0 said they are waiting for the others.
  BOOST_REQUIRE(wait_for_output(procs, "waiting for 3 ranks", 30));
  procs.push_back(spawn({driver_path(), "--rank", "1", "--peers", peers, "--scenario", "hello"}, "order"));
  wait_all(procs, 60);
  for (auto& p : procs) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 0);
    BOOST_TEST(contains(p.out(), "joined the ring of 3 ranks"));
  }
}

BOOST_AUTO_TEST_CASE(port_in_use_names_the_holder_and_restart_works) {
  const int base = port_base(3);
  std::string peers = loopback_peers(2, base);
  auto serving = spawn_ranks(2, peers, "serve", {}, "holder");
  BOOST_REQUIRE(wait_for_output(serving, "serving", 30));
  // A second job whose rank 0 wants the same port.
  Proc intruder = spawn({driver_path(), "--rank", "0", "--peers", "127.0.0.1:" + std::to_string(base) + ",127.0.0.1:" +
                                                                  std::to_string(base + 4),
                         "--scenario", "hello", "--connect-timeout", "2"},
                        "intruder");
  wait_one(intruder, 30);
  BOOST_TEST_INFO(intruder.err());
  BOOST_TEST(intruder.exit_code == 1);
  BOOST_TEST(contains(intruder.err(), "port " + std::to_string(base) + " (127.0.0.1:" + std::to_string(base) + ", rank 0) is already in use by pid " +
                                          std::to_string(serving[0].pid)));
  BOOST_TEST(contains(intruder.err(), "net_rank_driver"));
  BOOST_TEST(contains(intruder.err(), "); stop that process or give this rank another port in --peers\n"));
  for (int r = 0; r < 2; ++r) BOOST_TEST(contains(rt::net::request("127.0.0.1:" + std::to_string(base + r), "quit", 5), "got 'quit'"));
  wait_all(serving, 30);
  for (auto& p : serving) BOOST_TEST(p.exit_code == 0);
  // A new job on the same ports right away.
  auto again = spawn_ranks(2, peers, "hello", {}, "restart");
  wait_all(again, 60);
  for (auto& p : again) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 0);
  }
}

BOOST_AUTO_TEST_CASE(bad_peers_and_rank_are_usage_errors) {
  Proc a = spawn({driver_path(), "--rank", "0", "--peers", "127.0.0.1", "--scenario", "hello"}, "bad");
  Proc b = spawn({driver_path(), "--rank", "5", "--peers", loopback_peers(2, port_base(0)), "--scenario", "hello"}, "bad");
  wait_one(a, 30);
  wait_one(b, 30);
  BOOST_TEST(a.exit_code == 2);
  BOOST_TEST(contains(a.err(), "bad peer address '127.0.0.1'"));
  BOOST_TEST(b.exit_code == 2);
  BOOST_TEST(contains(b.err(), "--rank 5 is outside --peers"));
}

BOOST_AUTO_TEST_SUITE_END()
