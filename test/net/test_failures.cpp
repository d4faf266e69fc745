// Lost peers and signals, each with real processes.
#include <signal.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>

#include "../common/spawn.hpp"
#include "ringtrain/net/communicator.hpp"

using namespace nettest;

BOOST_AUTO_TEST_SUITE(failures)

// SIGKILL one rank in the middle of large all-reduces: the others exit 1 within the peer
// timeout, naming it, and no process is left behind.
BOOST_AUTO_TEST_CASE(sigkill_mid_allreduce_is_reported_by_every_other_rank) {
  const int world = 3, base = port_base(0);
  const double peer_timeout = 3;
  auto procs = spawn_ranks(world, loopback_peers(world, base), "loop",
                           {"--peer-timeout", std::to_string(peer_timeout), "--big-floats", "4000000"}, "kill");
  BOOST_REQUIRE(wait_for_output(procs, "looping", 60));
  kill(procs[1].pid, SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  wait_all(procs, peer_timeout + 30);  // reap them all; the time limit is checked below
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  BOOST_TEST(took < peer_timeout + 5, "the others took " << took << " s to give up");
  BOOST_TEST(procs[1].signal == SIGKILL);
  for (int r : {0, 2}) {
    std::string err = procs[r].err();
    BOOST_TEST_INFO("rank " << r << ": " << err);
    BOOST_TEST(procs[r].exit_code == 1);
    BOOST_TEST(contains(err, "rank 1 (127.0.0.1:" + std::to_string(base + 1) + ")"));
  }
  for (auto& p : procs) BOOST_TEST(!alive(p.pid));
}

// SIGINT to `ringtrain bench allreduce`: that rank closes cleanly and exits 1 saying so; its
// peer exits 1 naming it.
BOOST_AUTO_TEST_CASE(sigint_closes_cleanly_and_peers_are_told) {
  std::string peers = loopback_peers(2, port_base(1));
  const double peer_timeout = 5;
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r)
    procs.push_back(spawn({ringtrain_path(), "bench", "allreduce", "--rank", std::to_string(r), "--peers", peers, "--sizes",
                           "16M", "--iters", "100000", "--peer-timeout", std::to_string(peer_timeout)},
                          "sigint"));
  // Both ranks say when the ring is up (their signal handling is in place by then).
  BOOST_REQUIRE(wait_for_output(procs, "ring of 2 ranks is up", 60, Stream::Err));
  kill(procs[0].pid, SIGINT);
  const auto interrupted_at = std::chrono::steady_clock::now();
  wait_all(procs, peer_timeout + 30);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - interrupted_at).count();
  BOOST_TEST(took < peer_timeout + 5, "the ranks took " << took << " s to exit");
  BOOST_TEST_INFO(procs[0].err() << " | " << procs[1].err());
  BOOST_TEST(procs[0].exit_code == 1);
  BOOST_TEST(contains(procs[0].err(), "interrupted by SIGINT"));
  BOOST_TEST(procs[1].exit_code == 1);
  BOOST_TEST(contains(procs[1].err(), "rank 0 (127.0.0.1:" + std::to_string(port_base(1)) + ")"));
}

BOOST_AUTO_TEST_SUITE_END()
