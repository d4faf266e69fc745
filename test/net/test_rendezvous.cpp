// The rendezvous believes nothing a check-in claims without checking it. In one process on
// loopback: rank 0 runs a real rendezvous as the coordinator, and the test plays rank 1, a
// member that lies (a modified or broken ringtrain holding the job's key).
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "../common/spawn.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/rendezvous.hpp"

using namespace rt::net;

namespace {

struct LyingRank1 {
  RendezvousOptions coordinator;
  std::string coordinator_address;
  std::unique_ptr<Communicator> port;  // rank 1's port, saying it is in a lobby

  explicit LyingRank1(int first_port, std::string status_answer = "elastic lobby 3") {
    coordinator.rank = 0;
    coordinator.peers = parse_peers(nettest::loopback_peers(2, first_port));
    coordinator.job_id = "rendezvous-test";
    coordinator.timeout_s = 30;
    coordinator.max_step = 100;  // the job's --steps
    coordinator_address = coordinator.peers[0].text();
    CommOptions co;
    co.rank = 0;
    co.peers = {coordinator.peers[1]};
    co.job_id = "rendezvous-test#lobby";
    co.listen_only = true;
    co.service_handler = [status_answer](const std::string&) { return status_answer; };
    port = std::make_unique<Communicator>(std::move(co));
  }
  std::string ask(const std::string& text) { return request(coordinator_address, text, 5); }
  // Asks until the coordinator's lobby answers (it starts on its own thread).
  void wait_for_lobby() {
    for (int i = 0; i < 100; ++i) {
      try {
        if (ask("elastic status").rfind("elastic lobby", 0) == 0) return;
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    BOOST_FAIL("the coordinator's lobby never answered");
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(rendezvous)

// Rank 0 was in the ring of epoch 3 and can be at step 49 or 50. Rank 1 claims the same ring
// at step 0: believed, it would drag the job back to step 0 and make its own weights the
// job's. Epochs and steps no real member can have are refused outright.
BOOST_AUTO_TEST_CASE(checkins_are_bounded_and_a_lone_claim_cannot_drag_the_ring_back) {
  LyingRank1 t(nettest::port_base(0));
  MemberState mine;
  mine.epoch = 3, mine.members = {0, 1}, mine.step = 50, mine.oldest_step = 49;
  auto decided = std::async(std::launch::async, [&] { return rt::net::rendezvous(t.coordinator, mine); });
  t.wait_for_lobby();
  // 2^40 - 1 is the largest epoch after which a ring can still be numbered; 101 > --steps.
  BOOST_TEST(t.ask("elastic checkin 1 1099511627776 5 5 0,1") == "error: malformed checkin");
  BOOST_TEST(t.ask("elastic checkin 1 3 101 101 0,1") == "error: malformed checkin");
  BOOST_TEST(t.ask("elastic checkin 1 3 7 8 0,1") == "error: malformed checkin");  // oldest after newest
  std::string reply;
  for (int i = 0; i < 100 && reply.rfind("elastic go", 0) != 0; ++i) {
    reply = t.ask("elastic checkin 1 3 0 0 0,1");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  BOOST_TEST(reply.rfind("elastic go", 0) == 0u, reply);
  BOOST_REQUIRE(decided.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  const Membership m = decided.get();
  BOOST_TEST(m.epoch == 4);
  BOOST_TEST(m.target_step == 50);  // the coordinator's state goes on, not the claim of step 0
  BOOST_TEST(m.stateful == std::vector<int>{0}, "stateful: " << m.stateful.size());
  BOOST_TEST(m.members == (std::vector<int>{0, 1}));
}

// Rank 1 died and was restarted at once: its new process found no ring running (the others
// had left it, their lobby was not up yet) and tries to start the job afresh ("elastic
// starting"). The re-forming ring must not wait for it: it would wait for the ring in turn,
// and both would time out. The coordinator goes on without it (the new process then finds
// the ring and joins it; train/elastic shows that part).
BOOST_AUTO_TEST_CASE(a_rank_starting_afresh_is_not_waited_for) {
  LyingRank1 t(nettest::port_base(0) + 2, "elastic starting");
  t.coordinator.timeout_s = 15;
  MemberState mine;
  mine.epoch = 3, mine.members = {0, 1}, mine.step = 50, mine.oldest_step = 50;
  const auto t0 = std::chrono::steady_clock::now();
  Membership m;
  BOOST_REQUIRE_NO_THROW(m = rt::net::rendezvous(t.coordinator, mine));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(took < 10, "the rendezvous took " << took << " s");
  BOOST_TEST(m.members == std::vector<int>{0});
  BOOST_TEST(m.target_step == 50);
}

BOOST_AUTO_TEST_SUITE_END()
