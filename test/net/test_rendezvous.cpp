// The rendezvous believes nothing a check-in claims without checking it. In one process on
// loopback: rank 0 runs a real rendezvous as the coordinator, and the test plays rank 1, a
// member that lies (a modified or broken ringtrain holding the job's key).
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <future>
#include <map>
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

  explicit LyingRank1(int first_port, std::string status_answer = "elastic lobby 3 00000000000000a1") {
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
  mine.epoch = 3, mine.lineage = 0xa1, mine.members = {0, 1}, mine.step = 50, mine.oldest_step = 49;
  auto decided = std::async(std::launch::async, [&] { return rt::net::rendezvous(t.coordinator, mine); });
  t.wait_for_lobby();
  // 2^40 - 1 is the largest epoch after which a ring can still be numbered; 101 > --steps.
  const std::string L = " 00000000000000a1";
  BOOST_TEST(t.ask("elastic checkin 1 1099511627776 5 5 0,1" + L) == "error: malformed checkin");
  BOOST_TEST(t.ask("elastic checkin 1 3 101 101 0,1" + L) == "error: malformed checkin");
  BOOST_TEST(t.ask("elastic checkin 1 3 7 8 0,1" + L) == "error: malformed checkin");  // oldest after newest
  BOOST_TEST(t.ask("elastic checkin 1 3 0 0 0,1 0000000000000000") == "error: malformed checkin");  // state of no lineage
  BOOST_TEST(t.ask("elastic checkin 1 3 0 0 0,1 80000000000000a1") == "error: malformed checkin");  // 64 bits
  std::string reply;
  for (int i = 0; i < 100 && reply.rfind("elastic go", 0) != 0; ++i) {
    reply = t.ask("elastic checkin 1 3 0 0 0,1" + L);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  BOOST_TEST(reply.rfind("elastic go", 0) == 0u, reply);
  BOOST_REQUIRE(decided.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  const Membership m = decided.get();
  BOOST_TEST(m.epoch == 4);
  BOOST_TEST(m.target_step == 50);  // the coordinator's state goes on, not the claim of step 0
  BOOST_TEST(m.stateful == std::vector<int>{0}, "stateful: " << m.stateful.size());
  BOOST_TEST(m.members == (std::vector<int>{0, 1}));
  BOOST_TEST(m.lineage == 0xa1u);  // every rank of the ring whose state goes on is in the new one
}

// Two ranks trained apart (a partition; each side went on alone with a lineage of its own)
// and meet in one lobby. The lineage with more completed steps goes on, whole: rank 1's
// (step 80) over the coordinator's (step 50, and a newer epoch), and the coordinator,
// though it holds state, is not a holder of the state that goes on (it receives it). With
// equal steps, the lineage of the lowest rank goes on.
BOOST_AUTO_TEST_CASE(two_lineages_meet_and_the_one_with_more_steps_goes_on) {
  for (int64_t their_steps : {80, 50}) {
    BOOST_TEST_CONTEXT("rank 1 at step " << their_steps) {
      LyingRank1 t(nettest::port_base(0) + 4, "elastic lobby 4 00000000000000b2");
      MemberState mine;
      mine.epoch = 5, mine.lineage = 0xa1, mine.members = {0}, mine.step = 50, mine.oldest_step = 50;
      auto decided = std::async(std::launch::async, [&] { return rt::net::rendezvous(t.coordinator, mine); });
      t.wait_for_lobby();
      const std::string checkin = "elastic checkin 1 4 " + std::to_string(their_steps) + " " +
                                  std::to_string(their_steps) + " 1 00000000000000b2";
      std::string reply;
      for (int i = 0; i < 100 && reply.rfind("elastic go", 0) != 0; ++i) {
        reply = t.ask(checkin);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      BOOST_REQUIRE_MESSAGE(decided.wait_for(std::chrono::seconds(20)) == std::future_status::ready, reply);
      const Membership m = decided.get();
      BOOST_TEST(m.members == (std::vector<int>{0, 1}));
      BOOST_TEST(m.epoch == 6);  // above both lineages' epochs: no job id is used twice
      if (their_steps == 80) {
        BOOST_TEST(m.stateful == std::vector<int>{1});
        BOOST_TEST(m.state_epoch == 4);
        BOOST_TEST(m.target_step == 80);
        BOOST_TEST(m.lineage == 0xb2u);  // rank 1's ring ({1}) is whole in the new one
      } else {
        BOOST_TEST(m.stateful == std::vector<int>{0});
        BOOST_TEST(m.target_step == 50);
        BOOST_TEST(m.lineage == 0xa1u);
      }
    }
  }
}

// A running ring asked by another lineage's ring which one yields: the one with more
// completed steps goes on; asked again, it answers the same (the asker may have missed the
// answer); its own lineage, a step beyond the job's or a malformed id are refused.
BOOST_AUTO_TEST_CASE(a_running_ring_decides_once_which_lineage_yields) {
  RunningRing ring;
  ring.epoch = 4, ring.lineage = 0xa1, ring.step = 60, ring.world = 2;
  ring.is_member = [](int r) { return r == 0; };
  ring.wants_to_join = [](int) {};
  std::map<uint64_t, bool> decided;
  ring.this_ring_yields = [&](uint64_t other, int64_t step) {
    auto [it, first] = decided.try_emplace(other, step > 60);
    return it->second;
  };
  BOOST_TEST(*answer_while_running("elastic status", ring, 1000) == "elastic running 4 00000000000000a1 60");
  BOOST_TEST(*answer_while_running("elastic status 1", ring, 1000) == "elastic running 4 00000000000000a1 60");
  BOOST_TEST(*answer_while_running("elastic status 2", ring, 1000) == "elastic notcoord");  // no such rank
  BOOST_TEST(*answer_while_running("elastic merge 00000000000000b2 59", ring, 1000) == "elastic yield");
  BOOST_TEST(*answer_while_running("elastic merge 00000000000000b2 99", ring, 1000) == "elastic yield");  // decided
  BOOST_TEST(*answer_while_running("elastic merge 00000000000000c3 61", ring, 1000) == "elastic stay");
  BOOST_TEST(*answer_while_running("elastic merge 00000000000000a1 61", ring, 1000) == "error: malformed merge");
  BOOST_TEST(*answer_while_running("elastic merge 00000000000000c3 1001", ring, 1000) == "error: malformed merge");
  BOOST_TEST(*answer_while_running("elastic merge 00000000000000C3 61", ring, 1000) == "elastic notcoord");
  BOOST_TEST(*answer_while_running("elastic merge 0000000000000000 61", ring, 1000) == "elastic notcoord");
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
  mine.epoch = 3, mine.lineage = 0xa1, mine.members = {0, 1}, mine.step = 50, mine.oldest_step = 50;
  const auto t0 = std::chrono::steady_clock::now();
  Membership m;
  BOOST_REQUIRE_NO_THROW(m = rt::net::rendezvous(t.coordinator, mine));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(took < 10, "the rendezvous took " << took << " s");
  BOOST_TEST(m.members == std::vector<int>{0});
  BOOST_TEST(m.target_step == 50);
}

// Rank 0 finished the job (step 77) without rank 1: its port tells rank 1's probe, and its
// rendezvous, that the job is done (JobFinished), and stops telling once rank 1 has asked.
// Nobody asking, it stops when its time is up.
BOOST_AUTO_TEST_CASE(a_finished_rank_tells_a_missing_one_that_the_job_is_done) {
  const int first_port = nettest::port_base(0) + 4;
  RendezvousOptions finished, missing;
  finished.rank = 0, missing.rank = 1;
  finished.peers = missing.peers = parse_peers(nettest::loopback_peers(2, first_port));
  finished.job_id = missing.job_id = "done-test";
  missing.timeout_s = 20, missing.probe_timeout_s = 1, missing.max_step = 100;
  auto telling = std::async(std::launch::async, [&] {
    return tell_missing_ranks_the_job_is_done(finished, 2, 0xa1, 77, {1}, 60);
  });
  const auto t0 = std::chrono::steady_clock::now();
  bool told = false;
  for (int i = 0; i < 50 && !told; ++i) {  // the port opens on the other thread
    try {
      job_is_running(missing);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } catch (const JobFinished& e) {
      told = true;
      BOOST_TEST(e.rank == 0);
      BOOST_TEST(e.step == 77);
      BOOST_TEST(std::string(e.what()) == "ring member 0 says the job finished at step 77");
    }
  }
  BOOST_REQUIRE(told);
  BOOST_REQUIRE(telling.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  BOOST_TEST(telling.get());
  BOOST_TEST(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10);

  // The rendezvous of a rank still in the job's ring meets the same answer.
  telling = std::async(std::launch::async, [&] { return tell_missing_ranks_the_job_is_done(finished, 2, 0xa1, 77, {1}, 60); });
  MemberState mine;
  mine.epoch = 2, mine.lineage = 0xa1, mine.members = {0, 1}, mine.step = 40, mine.oldest_step = 40;
  BOOST_CHECK_THROW(rt::net::rendezvous(missing, mine), JobFinished);
  BOOST_REQUIRE(telling.wait_for(std::chrono::seconds(10)) == std::future_status::ready);

  // Nobody asks: the port closes when the time is up.
  const auto t1 = std::chrono::steady_clock::now();
  BOOST_TEST(tell_missing_ranks_the_job_is_done(finished, 2, 0xa1, 77, {1}, 1.5));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  BOOST_TEST((waited >= 1.4 && waited < 5), "waited " << waited << " s");
}

BOOST_AUTO_TEST_SUITE_END()
