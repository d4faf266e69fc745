// Elastic training with real rank processes on 127.0.0.1 (--sync grad): a lost rank does not
// stop the others, a restarted one rejoins with the job's state, and every replica ends the
// same, bit for bit.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "../common/skip.hpp"
#include "../common/netns_hosts.hpp"
#include "../common/readme_messages.hpp"
#include "../common/train_fixture.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/rendezvous.hpp"
#include "train_ranks.hpp"

namespace fs = std::filesystem;
using nettest::Proc;
using nlohmann::json;
using namespace traintest;

namespace {

// A schedule far longer than any test runs: each test ends its job with SIGTERM (every rank
// checkpoints the same step and exits 0), so no rank can finish before a restarted one joins.
const std::vector<std::string> kLongRun = {"--steps", "100000", "--eval-every", "0"};
// Bound of each wait on the job (a loaded machine is slow, but nothing waits forever).
constexpr double kWait = 120;
// Bound of the time from a loss to the survivors' next step in these tests: the peer timeout
// and the rendezvous, with room for a loaded machine (the benchmark, tools/bench/bench_elastic.sh,
// checks the real bound of --peer-timeout + 5 s on a quiet one); well below the 60 s after
// which a rendezvous gives up.
constexpr double kLossBound = kPeerTimeout + 35;

// The membership records of the metrics file, in order.
std::vector<json> events(const std::string& metrics) {
  std::vector<json> out;
  for (auto& r : metric_records(metrics))
    if (r.contains("event")) out.push_back(r);
  return out;
}

// Every rank's log, for a wait that failed: the rank that went wrong is often not rank 0.
std::string all_logs(const std::vector<Proc>& ranks) {
  std::string out;
  for (size_t r = 0; r < ranks.size(); ++r) out += "\n--- process " + std::to_string(r) + ":\n" + ranks[r].err();
  return out;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

int64_t last_step(const std::string& metrics) {
  int64_t s = 0;
  for (auto& r : metric_records(metrics))
    if (r.contains("loss")) s = std::max(s, r["step"].get<int64_t>());
  return s;
}

bool wait_for_events(const std::string& metrics, size_t n, double deadline_s) {
  return nettest::wait_until([&] { return fs::exists(metrics) && events(metrics).size() >= n; }, deadline_s);
}

// Waits until the job's metrics show `more` steps after the newest one now.
bool wait_for_progress(const std::string& metrics, int64_t more, double deadline_s) {
  const int64_t from = last_step(metrics);
  return nettest::wait_until([&] { return last_step(metrics) >= from + more; }, deadline_s);
}

void check_event(const json& e, const std::string& kind, int rank, int world) {
  BOOST_TEST(e.value("event", "") == kind, e.dump());
  BOOST_TEST(e.value("rank", -1) == rank, e.dump());
  BOOST_TEST(e.value("world", -1) == world, e.dump());
}

// Every step from 1 to the last has exactly one loss record: none lost, none twice.
void check_every_step_once(const std::string& metrics) {
  std::map<int64_t, int> seen;
  for (auto& r : metric_records(metrics))
    if (r.contains("loss")) ++seen[r["step"].get<int64_t>()];
  const int64_t last = seen.empty() ? 0 : seen.rbegin()->first;
  BOOST_TEST(last > 0);
  BOOST_TEST(seen.size() == size_t(last), "steps 1.." << last << " but " << seen.size() << " records");
  for (auto& [step, n] : seen) BOOST_TEST(n == 1, "step " << step << " recorded " << n << " times");
}

// Stops the job with SIGTERM to `rank_pid`, waits for every process, and checks that all of
// them exited 0 at the same step with bit-identical weights.
int stop_and_check_replicas(std::vector<Proc>& procs, pid_t rank_pid, const std::string& run, int world) {
  ::kill(rank_pid, SIGTERM);
  nettest::wait_all(procs, kWait);
  require_all_ok(procs);
  const int step = newest_step(run, 0);
  BOOST_TEST(step > 0);
  char dir[32];
  std::snprintf(dir, sizeof dir, "step_%06d", step);
  const auto weights0 = rt::io::read_file(run + "/rank0/" + dir + "/model.safetensors");
  for (int r = 1; r < world; ++r) {
    BOOST_TEST(newest_step(run, r) == step, "rank " << r);
    const auto w = rt::io::read_file(run + "/rank" + std::to_string(r) + "/" + dir + "/model.safetensors");
    BOOST_TEST((w == weights0), "rank " << r << "'s weights differ from rank 0's at step " << step);
  }
  return step;
}

// SIGKILL ranks[rank]: the others record its loss (world_after: the size of their ring) and
// go on; while_lost runs then. restart() starts it again, and it joins at a later step.
// Returns the loss and the join records.
std::pair<json, json> lose_and_rejoin(std::vector<Proc>& ranks, size_t rank, int world_after, const std::string& metrics,
                                      const std::function<Proc()>& restart,
                                      const std::function<void(const json& lost)>& while_lost = {}) {
  const size_t before = events(metrics).size();
  ::kill(ranks[rank].pid, SIGKILL);
  BOOST_REQUIRE_MESSAGE(wait_for_events(metrics, before + 1, kWait), all_logs(ranks));
  const json lost = events(metrics)[before];
  check_event(lost, "rank_lost", int(rank), world_after);
  BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 3, kWait), all_logs(ranks));
  if (while_lost) while_lost(lost);
  nettest::wait_one(ranks[rank], 10);
  ranks[rank] = restart();
  BOOST_REQUIRE_MESSAGE(wait_for_events(metrics, before + 2, kWait), all_logs(ranks));
  const json joined = events(metrics)[before + 1];
  check_event(joined, "rank_joined", int(rank), world_after + 1);
  BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 3, kWait), all_logs(ranks));
  return {lost, joined};
}

// val bpb of a checkpoint directory, by `ringtrain eval`.
double eval_bpb(const std::string& checkpoint) {
  std::string out;
  const int rc = nettest::run_shell(nettest::ringtrain_path() + " eval --json --threads 1 --eval-tokens 1024 --checkpoint " +
                                        checkpoint + " --data " + prepared_data() + " 2>/dev/null",
                                    &out);
  BOOST_REQUIRE_MESSAGE(rc == 0, out);
  return json::parse(out).at("val_bpb").get<double>();
}

// Rank r of a job of `world` ranks on namespace hosts (10.99.0.1, 10.99.0.2, ..., port
// 29500 each), with the job key, --device-batch 2, --peer-timeout 5 and --connect-timeout 60,
// its --out run_dir(out), then `flags`.
Proc start_host_rank(const nettest::NetnsHosts& hosts, int world, int r, const std::string& out,
                     std::vector<std::string> flags, const std::string& tag) {
  std::string peers;
  for (int q = 0; q < world; ++q) peers += (q ? ",10.99.0." : "10.99.0.") + std::to_string(q + 1) + ":29500";
  const std::vector<std::string> own = {"--rank", std::to_string(r), "--peers", peers, "--device-batch", "2",
                                        "--peer-timeout", "5", "--connect-timeout", "60", "--key", nettest::key_file()};
  flags.insert(flags.end(), own.begin(), own.end());
  std::string cmd = "exec ip netns exec " + hosts.ns(r);
  for (const auto& a : base_args(out, flags)) cmd += " '" + a + "'";
  return nettest::spawn({"/bin/sh", "-c", cmd}, tag);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(elastic)

// SIGKILL rank 2: ranks 0 and 1 go on without exiting; rank 2, restarted with the same
// command, joins; all three end at the same step with identical weights, and the val bpb is
// that of an uninterrupted run of the same steps within 1%.
BOOST_AUTO_TEST_CASE(killed_rank_is_dropped_then_rejoins) {
  const int port = nettest::port_base(0);
  const std::string run = run_dir("el-kill"), metrics = run + "/metrics.jsonl";
  auto ranks = start_ranks("el-kill", {2, 2, 2}, port, kLongRun);
  BOOST_REQUIRE(wait_for_steps(metrics, 10, kWait));
  // Hostile and stray membership requests on the job port change nothing.
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const auto key = rt::net::load_job_key(nettest::key_file());
  BOOST_TEST(rt::net::request(addr, "elastic join 99", 10, key) == "elastic notcoord");
  BOOST_TEST(rt::net::request(addr, "elastic join 1", 10, key) == "elastic ok");  // a member: ignored
  BOOST_TEST(rt::net::request(addr, "elastic checkin 1 0 5 5 0,1,2", 10, key) == "elastic notcoord");
  // "elastic running EPOCH LINEAGE STEP": the first ring, a random lineage, the steps done.
  const std::string st = rt::net::request(addr, "elastic status", 10, key);
  BOOST_TEST(st.rfind("elastic running 0 ", 0) == 0u, st);
  BOOST_TEST((st.size() > 35 && rt::net::parse_lineage(st.substr(18, 16)).value_or(0) != 0), st);

  ::kill(ranks[2].pid, SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  BOOST_REQUIRE_MESSAGE(wait_for_events(metrics, 1, kWait), all_logs(ranks));
  BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 1, kWait), all_logs(ranks));
  const double took = seconds_since(t0);
  BOOST_TEST(took < kLossBound, "the survivors' next step came " << took << " s after the kill");
  check_event(events(metrics)[0], "rank_lost", 2, 2);
  BOOST_TEST(nettest::alive(ranks[0].pid));
  BOOST_TEST(nettest::alive(ranks[1].pid));
  // `ringtrain status` on rank 1's port shows every rank's state.
  const std::string status = nettest::ringtrain_path() + " status 127.0.0.1:" + std::to_string(port + 1) + " --key " + nettest::key_file();
  std::string out;
  BOOST_TEST(nettest::run_shell(status, &out) == 0, out);
  BOOST_TEST(nettest::contains(out, "  rank 2: lost\n"), out);
  BOOST_TEST(nettest::contains(out, "  rank 1: live, step "), out);
  nettest::wait_one(ranks[2], 10);

  BOOST_REQUIRE(wait_for_progress(metrics, 5, kWait));
  // Join requests for rank 2 while it is gone (a broken process with the key): each one
  // let in costs a re-form, so only the first within a peer timeout is.
  for (int i = 0; i < 4; ++i) {  // one request a step: without the limit, four re-forms
    std::string reply;
    for (int attempt = 0; attempt < 10 && reply.empty(); ++attempt) {
      try {  // a request that meets the port while its ring is swapped for a lobby is lost
        reply = rt::net::request(addr, "elastic join 2", 10, key);
      } catch (const std::exception&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
    }
    BOOST_TEST((reply == "elastic ok" || reply == "elastic wait"), reply);
    BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 1, kWait), all_logs(ranks));
  }
  BOOST_TEST(occurrences(ranks[0].err(), "a rank asks to join") == 1u, ranks[0].err());
  ranks[2] = start_rank("el-kill", {2, 2, 2}, port, kLongRun, 2, "el-kill-r2-again");
  BOOST_REQUIRE_MESSAGE(wait_for_events(metrics, 2, kWait), all_logs(ranks));
  check_event(events(metrics)[1], "rank_joined", 2, 3);
  BOOST_REQUIRE(wait_for_progress(metrics, 5, kWait));
  BOOST_TEST(nettest::contains(ranks[2].err(), "joined the running job at step"), ranks[2].err());
  BOOST_TEST(nettest::run_shell(status, &out) == 0, out);
  BOOST_TEST(nettest::contains(out, "  rank 2: live, step "), out);
  const int step = stop_and_check_replicas(ranks, ranks[0].pid, run, 3);
  BOOST_TEST(events(metrics).size() == 2u);  // no membership change but those two
  check_every_step_once(metrics);

  // The same tokens without interruption: one process of the whole batch (6 rows).
  std::vector<std::string> flags = {"--steps", "100000", "--eval-every", "0", "--stop-after", std::to_string(step),
                                    "--device-batch", "6"};
  Proc one = nettest::spawn(base_args("el-kill-ref", flags), "el-kill-ref");
  nettest::wait_one(one, 300);
  BOOST_REQUIRE_MESSAGE(one.exit_code == 0, one.err());
  char dir[32];
  std::snprintf(dir, sizeof dir, "/rank0/step_%06d", step);
  const double elastic_bpb = eval_bpb(run + dir), ref_bpb = eval_bpb(run_dir("el-kill-ref") + dir);
  BOOST_TEST(std::abs(elastic_bpb - ref_bpb) <= 0.01 * ref_bpb, "val bpb " << elastic_bpb << " vs " << ref_bpb);
}

// A rank restarted while the others re-form: its probe met them between their old ring and
// their lobby and found no job (a test hook makes its first probe miss), so it tries to start
// the job afresh. The re-forming ring does not wait for it (it answers "elastic starting"),
// the ring it forms refuses the fresh start, and the process joins that ring instead of
// exiting.
BOOST_AUTO_TEST_CASE(rank_restarted_during_a_reform_joins_instead_of_starting_afresh) {
  const int port = nettest::port_base(0) + 9;
  const std::string run = run_dir("el-race"), metrics = run + "/metrics.jsonl";
  auto ranks = start_ranks("el-race", {2, 2, 2}, port, kLongRun);
  BOOST_REQUIRE_MESSAGE(wait_for_steps(metrics, 5, kWait), all_logs(ranks));
  ::kill(ranks[2].pid, SIGKILL);
  BOOST_REQUIRE_MESSAGE(wait_for_events(metrics, 1, kWait), all_logs(ranks));
  check_event(events(metrics)[0], "rank_lost", 2, 2);
  nettest::wait_one(ranks[2], 10);
  setenv("RINGTRAIN_TEST_MISS_RUNNING_JOB", "1", 1);
  ranks[2] = start_rank("el-race", {2, 2, 2}, port, kLongRun, 2, "el-race-r2-again");
  unsetenv("RINGTRAIN_TEST_MISS_RUNNING_JOB");
  BOOST_REQUIRE_MESSAGE(wait_for_events(metrics, 2, kWait), all_logs(ranks));
  check_event(events(metrics)[1], "rank_joined", 2, 3);
  BOOST_TEST(nettest::contains(ranks[2].err(), "a ring formed without this rank while it started afresh; it joins that ring"),
             ranks[2].err());
  // The refusal's advice to fix the --peers lists is for a misconfigured start, not this race.
  BOOST_TEST(!nettest::contains(ranks[2].err(), "same --peers"), ranks[2].err());
  BOOST_TEST(nettest::contains(ranks[2].err(), "joined the running job at step"), ranks[2].err());
  BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 3, kWait), all_logs(ranks));
  stop_and_check_replicas(ranks, ranks[0].pid, run, 3);
  check_every_step_once(metrics);
}

// Three loopback ranks, 3 steps on, whose rank 2 stays `seconds` in its old ring after a
// join was decided (the test hook RINGTRAIN_TEST_LINGER_BEFORE_LEAVING).
std::vector<Proc> start_with_rank2_lingering(const std::string& name, int port, int seconds) {
  setenv("RINGTRAIN_TEST_LINGER_BEFORE_LEAVING", ("2:" + std::to_string(seconds)).c_str(), 1);
  auto ranks = start_ranks(name, {2, 2, 2}, port, kLongRun);
  unsetenv("RINGTRAIN_TEST_LINGER_BEFORE_LEAVING");
  BOOST_REQUIRE_MESSAGE(wait_for_steps(run_dir(name) + "/metrics.jsonl", 3, kWait), all_logs(ranks));
  return ranks;
}

// A join request let in by a rank after its ring decided to re-form for a join, but before
// that rank left the ring, is about the old ring: the re-form takes the joining rank in, and
// the new ring must not re-form again for it. (It did: the kept request re-formed the new
// ring at its first step, once in CI while a stop was on its way, and the ranks parted.) A
// test hook keeps rank 2 in the old ring 7 s, more than the --peer-timeout within which a
// rank lets the same joiner in once, while the joiner asks every running rank each second.
BOOST_AUTO_TEST_CASE(join_request_that_reaches_the_old_ring_does_not_reform_the_new_one) {
  const int port = nettest::port_base(2);
  const std::string run = run_dir("el-late-join"), metrics = run + "/metrics.jsonl";
  auto ranks = start_with_rank2_lingering("el-late-join", port, 7);
  lose_and_rejoin(ranks, 1, 2, metrics, [&] { return start_rank("el-late-join", {2, 2, 2}, port, kLongRun, 1, "el-late-join-r1-again"); });
  // Every step is an exchange (--sync grad): a kept request re-forms at the next one.
  BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 5, kWait), all_logs(ranks));
  const int step = stop_and_check_replicas(ranks, ranks[0].pid, run, 3);
  for (size_t r : {0, 2}) {
    const std::string err = ranks[r].err();
    BOOST_TEST(occurrences(err, "a rank asks to join; the ring re-forms") == 1, "rank " << r << ":" << all_logs(ranks));
    BOOST_TEST(nettest::contains(err, "ring of epoch 2 "), "rank " << r << ": " << err);
    BOOST_TEST(!nettest::contains(err, "ring of epoch 3 "), "rank " << r << ":" << all_logs(ranks));
  }
  BOOST_TEST(events(metrics).size() == 2u);  // the loss and the join, nothing more
  BOOST_TEST(step > 0);
  check_every_step_once(metrics);
}

// A stop (SIGTERM to rank 0) while the ring re-forms to let a rank in: the re-form completes,
// and every rank, the one let in too, stops at the same step with the same weights and exits
// 0. The same hook holds rank 2 in the old ring, so that the signal lands while rank 0 waits
// in the lobby.
BOOST_AUTO_TEST_CASE(stop_during_a_join_reform_stops_every_rank_alike) {
  const int port = nettest::port_base(2);
  const std::string run = run_dir("el-join-stop"), metrics = run + "/metrics.jsonl";
  auto ranks = start_with_rank2_lingering("el-join-stop", port, 4);
  ::kill(ranks[1].pid, SIGKILL);
  BOOST_REQUIRE_MESSAGE(wait_for_events(metrics, 1, kWait), all_logs(ranks));
  BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 3, kWait), all_logs(ranks));
  nettest::wait_one(ranks[1], 10);
  ranks[1] = start_rank("el-join-stop", {2, 2, 2}, port, kLongRun, 1, "el-join-stop-r1-again");
  BOOST_REQUIRE_MESSAGE(nettest::wait_until([&] { return nettest::contains(ranks[0].err(), "a rank asks to join; the ring re-forms"); }, kWait),
                        all_logs(ranks));
  stop_and_check_replicas(ranks, ranks[0].pid, run, 3);
  BOOST_TEST(nettest::contains(ranks[1].err(), "joined the running job at step"), ranks[1].err());
  check_every_step_once(metrics);
}

// The re-form watchdog: rank 2 keeps breaking every ring it is in (a test hook: from step 6
// on, it throws at each step), is let back in each time, and no step completes. After
// --max-reforms 3 such re-forms every rank saves its last good state and exits 1, and the
// message names rank 2. Without the watchdog the job would re-form forever.
BOOST_AUTO_TEST_CASE(watchdog_stops_a_ring_that_keeps_breaking) {
  const int port = nettest::port_base(0) + 6;
  const std::string run = run_dir("el-watchdog"), metrics = run + "/metrics.jsonl";
  const std::vector<std::string> flags = {"--steps", "100000", "--eval-every", "0", "--max-reforms", "3"};
  setenv("RINGTRAIN_TEST_BREAK_RING", "2:5", 1);
  auto ranks = start_ranks("el-watchdog", {2, 2, 2}, port, flags);
  unsetenv("RINGTRAIN_TEST_BREAK_RING");
  nettest::wait_all(ranks, 240);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string err = ranks[r].err();
    BOOST_TEST(ranks[r].exit_code == 1, "rank " << r << ": " << err);
    BOOST_TEST(nettest::contains(err, "without completing a step (--max-reforms 3)"), "rank " << r << ": " << err);
    BOOST_TEST(nettest::contains(err, traintest::readme::saving_before_exit("5")), "rank " << r << ": " << err);
    BOOST_TEST(newest_step(run, int(r)) == 5, "rank " << r);
  }
  for (size_t r : {0, 1})
    BOOST_TEST(nettest::contains(ranks[r].err(), "rank 2 (127.0.0.1:" + std::to_string(port + 2) + ") was in "),
               ranks[r].err());
  BOOST_TEST(last_step(metrics) == 5);
}

// Rank 0 killed: rank 1 takes over the metrics and the progress display, and rank 0 rejoins.
BOOST_AUTO_TEST_CASE(rank0_killed_its_duties_move_and_it_rejoins) {
  const int port = nettest::port_base(1);
  const std::string run = run_dir("el-r0"), metrics = run + "/metrics.jsonl";
  auto ranks = start_ranks("el-r0", {2, 2, 2}, port, kLongRun);
  BOOST_REQUIRE(wait_for_steps(metrics, 5, kWait));
  lose_and_rejoin(
      ranks, 0, 2, metrics, [&] { return start_rank("el-r0", {2, 2, 2}, port, kLongRun, 0, "el-r0-r0-again"); },
      [&](const json& lost) {
        // Rank 1 now draws the progress lines (plain lines here: no terminal).
        const std::string line = "[rank 1/3] step " + std::to_string(lost["step"].get<int64_t>() + 1) + "/100000";
        BOOST_TEST(nettest::contains(ranks[1].err(), line), ranks[1].err());
      });
  stop_and_check_replicas(ranks, ranks[1].pid, run, 3);
  check_every_step_once(metrics);
}

// Two ranks: the survivor goes on alone, then the other rejoins (uneven --device-batch,
// bf16 on the wire).
BOOST_AUTO_TEST_CASE(survivor_goes_on_alone_then_the_other_rejoins) {
  const int port = nettest::port_base(2);
  const std::string run = run_dir("el-two"), metrics = run + "/metrics.jsonl";
  const std::vector<std::string> flags = {"--steps", "100000", "--eval-every", "0", "--wire", "bf16"};
  auto ranks = start_ranks("el-two", {1, 3}, port, flags);
  BOOST_REQUIRE(wait_for_steps(metrics, 5, kWait));
  lose_and_rejoin(ranks, 1, 1, metrics, [&] { return start_rank("el-two", {1, 3}, port, flags, 1, "el-two-r1-again"); });
  stop_and_check_replicas(ranks, ranks[0].pid, run, 2);
  check_every_step_once(metrics);
}

// SIGSTOP past the peer timeout: the rank is dropped. After SIGCONT it finds that the ring
// went on without it and rejoins, instead of sending into the new ring.
BOOST_AUTO_TEST_CASE(stopped_rank_is_dropped_and_rejoins_after_sigcont) {
  const int port = nettest::port_base(3);
  const std::string run = run_dir("el-stop"), metrics = run + "/metrics.jsonl";
  auto ranks = start_ranks("el-stop", {2, 2, 2}, port, kLongRun);
  BOOST_REQUIRE(wait_for_steps(metrics, 5, kWait));
  ::kill(ranks[2].pid, SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  BOOST_REQUIRE_MESSAGE(wait_for_events(metrics, 1, kWait), all_logs(ranks));
  BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 1, kWait), all_logs(ranks));
  const double took = seconds_since(t0);
  BOOST_TEST_MESSAGE("the survivors' next step came " << took << " s after the stop");
  BOOST_TEST(took >= kPeerTimeout, "dropped after " << took << " s, before the peer timeout");
  BOOST_TEST(took < kLossBound, "the survivors' next step came " << took << " s after the stop");
  // The rendezvous no longer waits a second peer timeout for the silent rank (rank 0's
  // "formed in F s"; 6.4 s from stop to step on an idle machine, 11.0 s before). Printed,
  // not bounded: on a loaded 2-core machine both figures move by seconds.
  const std::string log0 = ranks[0].err();
  if (const auto at = log0.find("; formed in "); at != std::string::npos)
    BOOST_TEST_MESSAGE("the ring of 2 formed in " << std::stod(log0.substr(at + 12)) << " s");
  check_event(events(metrics)[0], "rank_lost", 2, 2);
  BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 3, kWait), all_logs(ranks));
  ::kill(ranks[2].pid, SIGCONT);
  BOOST_REQUIRE_MESSAGE(wait_for_events(metrics, 2, kWait), all_logs(ranks));
  check_event(events(metrics)[1], "rank_joined", 2, 3);
  BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics, 3, kWait), all_logs(ranks));
  BOOST_TEST(nettest::contains(ranks[2].err(), "the ring sends it"), ranks[2].err());
  stop_and_check_replicas(ranks, ranks[0].pid, run, 3);
  check_every_step_once(metrics);
}

// Waits (at most kWait) until ranks 0 and 1 have finished the job and say they are telling
// the missing rank 2 so.
bool ranks_0_and_1_tell_rank_2_the_job_is_done(const std::vector<Proc>& ranks) {
  auto telling = [&](int r) { return nettest::contains(ranks[size_t(r)].err(), "rank(s) 2 missed the end of the job"); };
  const auto t0 = std::chrono::steady_clock::now();
  while (!(telling(0) && telling(1)) && seconds_since(t0) < kWait) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return telling(0) && telling(1);
}

// A rank away when the job reaches its last step: without a word from the others its restart
// would wait for a ring that never runs again, time out, be restarted by its supervisor, and
// so on forever. The finished ranks tell it that the job is done instead (it exits 0 at once,
// saying so), and stop as soon as it has been told rather than waiting out --done-linger.
BOOST_AUTO_TEST_CASE(rank_restarted_after_the_job_finished_is_told_it_is_done) {
  const int port = nettest::port_base(3);
  const std::string run = run_dir("el-done"), metrics = run + "/metrics.jsonl";
  const std::vector<std::string> flags = {"--steps", "24", "--eval-every", "0", "--done-linger", "300"};
  auto ranks = start_ranks("el-done", {2, 2, 2}, port, flags);
  BOOST_REQUIRE_MESSAGE(wait_for_steps(metrics, 4, kWait), all_logs(ranks));
  ::kill(ranks[2].pid, SIGKILL);
  nettest::wait_one(ranks[2], 10);
  BOOST_REQUIRE_MESSAGE(ranks_0_and_1_tell_rank_2_the_job_is_done(ranks), all_logs(ranks));
  BOOST_TEST(last_step(metrics) == 24);
  BOOST_TEST(nettest::alive(ranks[0].pid));
  BOOST_TEST(nettest::alive(ranks[1].pid));

  const auto t1 = std::chrono::steady_clock::now();
  ranks[2] = start_rank("el-done", {2, 2, 2}, port, flags, 2, "el-done-r2-again");
  nettest::wait_one(ranks[2], 60);
  BOOST_TEST(ranks[2].exit_code == 0, ranks[2].err());
  BOOST_TEST(nettest::contains(ranks[2].err(), "the job finished without this rank: ring member "), ranks[2].err());
  BOOST_TEST(nettest::contains(ranks[2].err(), " says the job finished at step 24"), ranks[2].err());
  ranks.pop_back();
  nettest::wait_all(ranks, 60);
  const double took = seconds_since(t1);
  for (int r : {0, 1}) BOOST_TEST(ranks[size_t(r)].exit_code == 0, ranks[size_t(r)].err());
  BOOST_TEST(took < 60, "ranks 0 and 1 exited " << took << " s after rank 2 restarted (--done-linger 300)");
  BOOST_TEST(last_step(metrics) == 24);  // rank 2 trained nothing
  for (int r : {0, 1})
    BOOST_TEST(nettest::contains(ranks[size_t(r)].err(), "every rank that missed the end was told"), ranks[size_t(r)].err());
}

// The same for a rank that is still in the job's last ring when the others finish without it
// (stopped past the peer timeout, woken after the end): its re-form meets the finished ranks'
// answer and it exits 0 instead of waiting in a lobby alone.
BOOST_AUTO_TEST_CASE(rank_woken_after_the_job_finished_is_told_it_is_done) {
  const int port = nettest::port_base(3);
  const std::string run = run_dir("el-done-stop"), metrics = run + "/metrics.jsonl";
  const std::vector<std::string> flags = {"--steps", "24", "--eval-every", "0", "--done-linger", "300"};
  auto ranks = start_ranks("el-done-stop", {2, 2, 2}, port, flags);
  BOOST_REQUIRE_MESSAGE(wait_for_steps(metrics, 4, kWait), all_logs(ranks));
  ::kill(ranks[2].pid, SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  BOOST_REQUIRE_MESSAGE(ranks_0_and_1_tell_rank_2_the_job_is_done(ranks), all_logs(ranks));
  ::kill(ranks[2].pid, SIGCONT);
  nettest::wait_all(ranks, 90);
  for (int r : {0, 1, 2}) BOOST_TEST(ranks[size_t(r)].exit_code == 0, ranks[size_t(r)].err());
  BOOST_TEST(nettest::contains(ranks[2].err(), " says the job finished at step 24"), ranks[2].err());
  for (int r : {0, 1})
    BOOST_TEST(nettest::contains(ranks[size_t(r)].err(), "every rank that missed the end was told"), ranks[size_t(r)].err());
  BOOST_TEST(seconds_since(t0) < 150, "the job took " << seconds_since(t0) << " s to end (--done-linger 300)");
}

// --sync diloco: the ranks run free between averages, so a loss takes the ring back to the
// last average (the anchor and outer momentum go on), and a restarted rank joins at an average.
BOOST_AUTO_TEST_CASE(diloco_rank_is_dropped_then_rejoins_at_an_average) {
  const int port = nettest::port_base(1) + 3;
  const std::string run = run_dir("el-diloco"), metrics = run + "/metrics.jsonl";
  const std::vector<std::string> flags = {"--steps", "100000", "--eval-every", "0", "--sync", "diloco", "--sync-every", "3"};
  auto ranks = start_ranks("el-diloco", {2, 2, 2}, port, flags);
  BOOST_REQUIRE(wait_for_steps(metrics, 6, kWait));
  const auto [lost, joined] = lose_and_rejoin(
      ranks, 1, 2, metrics, [&] { return start_rank("el-diloco", {2, 2, 2}, port, flags, 1, "el-diloco-r1-again"); });
  for (const json& e : {lost, joined})
    BOOST_TEST(e["step"].get<int64_t>() % 3 == 0, "not an average's step: " << e.dump());
  stop_and_check_replicas(ranks, ranks[0].pid, run, 3);
  check_every_step_once(metrics);
}

// Kills rank 1 of 3 namespace hosts at 10 Mbit/s until a kill lands while an overlapped
// average is in flight (round 0 in every run so far), then checks the rejoin, bit-identical
// final replicas and one record per step. `flags`: an overlapped mode with H = 4 and
// --overlap-steps 2, whose averages start and are applied at even steps only.
void lose_a_rank_while_an_average_is_in_flight(const std::string& name, const std::vector<std::string>& flags) {
  if (!testskip::require(geteuid() == 0, "network namespaces need root (CI runs as root)")) return;
  nettest::NetnsHosts hosts(3, "ov", "--rate 10mbit --firewall 29500-29510");
  const std::string run = run_dir(name), metrics = run + "/metrics.jsonl";
  auto start = [&](int r, const std::string& tag) {
    std::vector<std::string> all = {"--steps", "100000", "--eval-every", "0"};
    all.insert(all.end(), flags.begin(), flags.end());
    return start_host_rank(hosts, 3, r, name, all, tag);
  };
  std::vector<Proc> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(start(r, name + "-r" + std::to_string(r)));
  BOOST_REQUIRE_MESSAGE(wait_for_steps(metrics, 3, kWait), all_logs(ranks));
  bool dropped = false;
  for (int round = 0; round < 4 && !dropped; ++round) {
    const auto [lost, joined] = lose_and_rejoin(ranks, 1, 2, metrics, [&] { return start(1, name + "-r1-" + std::to_string(round)); });
    // The ring goes back to a step where an average started or was applied.
    for (const json& e : {lost, joined})
      BOOST_TEST(e["step"].get<int64_t>() % 2 == 0, "not an average's step: " << e.dump());
    dropped = nettest::contains(ranks[0].err(), "average in flight is dropped");
    BOOST_TEST_MESSAGE("round " << round << ": an average was in flight when rank 1 was lost: " << (dropped ? "yes" : "no"));
  }
  BOOST_TEST(dropped, "no kill of 4 landed while an average was in flight");
  stop_and_check_replicas(ranks, ranks[0].pid, run, 3);
  check_every_step_once(metrics);
}

// --sync-overlap, diloco, int8: every survivor drops the average in flight alike and goes
// back to the step it started at; the restarted rank joins at an average.
BOOST_AUTO_TEST_CASE(overlapped_average_in_flight_is_dropped_alike_when_a_rank_is_lost) {
  lose_a_rank_while_an_average_is_in_flight(
      "el-ovl", {"--sync", "diloco", "--sync-every", "4", "--sync-overlap", "--overlap-steps", "2", "--wire", "int8"});
}

// The same with streaming averages (--sync-fragments 2: the halves of the model in turn, one
// always in flight): the fragment in flight is dropped alike, and the stop checkpoint
// averages every fragment, so that the final replicas are bit-identical.
BOOST_AUTO_TEST_CASE(streaming_fragment_in_flight_is_dropped_alike_when_a_rank_is_lost) {
  lose_a_rank_while_an_average_is_in_flight("el-stream", {"--sync", "diloco", "--sync-every", "4", "--sync-fragments", "2",
                                                          "--sync-overlap", "--overlap-steps", "2", "--wire", "int4"});
}

// With one step of overlap (the setting for streaming diloco) a fragment starts at every even
// step and is applied at the odd one after it. Only the starts are points the ring goes back
// to or lets a rank in at (an applied fragment is not one of its own: each point costs a
// snapshot of the model), so every loss and join lands on an even step. On loopback the
// averages are quick and a kill lands anywhere in a step: with the applies as points, each of
// the 6 events below would land on an odd step about half the time.
BOOST_AUTO_TEST_CASE(streaming_with_one_step_of_overlap_goes_back_to_a_fragment_start) {
  const int port = nettest::port_base(1) + 3;
  const std::string run = run_dir("el-stream1"), metrics = run + "/metrics.jsonl";
  const std::vector<std::string> flags = {"--steps",        "100000", "--eval-every",     "0",    "--sync",
                                          "diloco",         "--sync-every", "4",          "--sync-fragments",
                                          "2",              "--sync-overlap", "--overlap-steps", "1", "--wire", "int8"};
  auto ranks = start_ranks("el-stream1", {2, 2, 2}, port, flags);
  BOOST_REQUIRE_MESSAGE(wait_for_steps(metrics, 4, kWait), all_logs(ranks));
  for (int round = 0; round < 3; ++round) {
    const auto [lost, joined] = lose_and_rejoin(ranks, 1, 2, metrics, [&] {
      return start_rank("el-stream1", {2, 2, 2}, port, flags, 1, "el-stream1-r1-" + std::to_string(round));
    });
    for (const json& e : {lost, joined})
      BOOST_TEST(e["step"].get<int64_t>() % 2 == 0, "not a fragment's start: " << e.dump());
  }
  stop_and_check_replicas(ranks, ranks[0].pid, run, 3);
  check_every_step_once(metrics);
}

// On simulated hosts (network namespaces) behind the user's firewall, which lets in only
// TCP 29500-29510: the lobby, the rendezvous and the state all use the one listed port.
BOOST_AUTO_TEST_CASE(firewalled_hosts_lose_and_regain_a_rank) {
  if (!testskip::require(geteuid() == 0, "network namespaces need root (CI runs as root)")) return;
  nettest::NetnsHosts hosts(3, "el", "--firewall 29500-29510");
  const std::string run = run_dir("el-netns"), metrics = run + "/metrics.jsonl";
  auto start = [&](int r, const std::string& tag) {
    return start_host_rank(hosts, 3, r, "el-netns", {"--steps", "100000", "--eval-every", "0"}, tag);
  };
  std::vector<Proc> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(start(r, "el-netns-r" + std::to_string(r)));
  BOOST_REQUIRE_MESSAGE(wait_for_steps(metrics, 5, kWait), all_logs(ranks));
  lose_and_rejoin(ranks, 2, 2, metrics, [&] { return start(2, "el-netns-r2-again"); });
  stop_and_check_replicas(ranks, ranks[0].pid, run, 3);
  check_every_step_once(metrics);
}

// A rank killed again and again: each loss costs the others at most about one peer timeout,
// and the job ends whole.
BOOST_AUTO_TEST_CASE(flapping_rank) {
  const int port = nettest::port_base(0) + 3;
  const std::string run = run_dir("el-flap"), metrics = run + "/metrics.jsonl";
  auto ranks = start_ranks("el-flap", {2, 2, 2}, port, kLongRun);
  BOOST_REQUIRE(wait_for_steps(metrics, 5, kWait));
  for (int round = 0; round < 3; ++round) {
    BOOST_TEST_CONTEXT("round " << round) {
      const auto t0 = std::chrono::steady_clock::now();
      lose_and_rejoin(
          ranks, 1, 2, metrics,
          [&] { return start_rank("el-flap", {2, 2, 2}, port, kLongRun, 1, "el-flap-r1-" + std::to_string(round)); },
          [&](const json&) {
            // The loss and three more steps: at most about one peer timeout for the loss.
            const double took = seconds_since(t0);
            BOOST_TEST(took < kLossBound, "three steps after the kill came " << took << " s after it");
          });
    }
  }
  const auto ev = events(metrics);
  BOOST_REQUIRE_EQUAL(ev.size(), 6u);
  for (size_t i = 0; i < ev.size(); ++i) check_event(ev[i], i % 2 ? "rank_joined" : "rank_lost", 1, i % 2 ? 3 : 2);
  stop_and_check_replicas(ranks, ranks[2].pid, run, 3);
  check_every_step_once(metrics);
}

// Two ranks on firewalled namespace hosts, each with its own --out (as on two machines),
// cut apart by a partition: both go on alone (for two ranks that is the default: a reboot
// must not stop the job), each in a lineage of its own.
struct PartitionedPair {
  nettest::NetnsHosts hosts{2, "pt", "--firewall 29500-29510"};
  std::string name;
  std::vector<Proc> ranks;
  PartitionedPair(const std::string& name, const std::vector<std::string>& flags) : name(name) {
    for (int r = 0; r < 2; ++r) ranks.push_back(start(r, flags, "-r" + std::to_string(r)));
  }
  std::string run(int r) const { return run_dir(name + "-r" + std::to_string(r)); }
  std::string metrics(int r) const { return run(r) + "/metrics.jsonl"; }
  Proc start(int r, const std::vector<std::string>& flags, const std::string& tag) {
    return start_host_rank(hosts, 2, r, name + "-r" + std::to_string(r), flags, name + tag);
  }
  // Host 1's traffic to and from the other host dropped (cut) or let through again.
  void cut(bool on) {
    const std::string ns = "ip netns exec " + hosts.ns(1) + " nft ";
    const int rc = on ? nettest::run_shell("printf '%s' 'table inet cut { chain i { type filter hook input priority -10; policy accept; "
                                           "ip saddr 10.99.0.0/24 drop; }; chain o { type filter hook output priority -10; "
                                           "policy accept; ip daddr 10.99.0.0/24 drop; }; }' | " + ns + "-f -")
                      : nettest::run_shell(ns + "delete table inet cut");
    BOOST_REQUIRE_EQUAL(rc, 0);
  }
  // Both sides record the other's loss, then each trains on alone.
  void split() {
    BOOST_REQUIRE_MESSAGE(wait_for_steps(metrics(0), 5, kWait), all_logs(ranks));
    cut(true);
    for (int r = 0; r < 2; ++r) BOOST_REQUIRE_MESSAGE(wait_for_events(metrics(r), 1, kWait), all_logs(ranks));
    check_event(events(metrics(0))[0], "rank_lost", 1, 1);
    check_event(events(metrics(1))[0], "rank_lost", 0, 1);
    for (int r = 0; r < 2; ++r) BOOST_REQUIRE_MESSAGE(wait_for_progress(metrics(r), 3, kWait), all_logs(ranks));
  }
};

std::string lineage_of(const std::string& checkpoint) {
  return json::parse(rt::io::read_file(checkpoint + "/meta.json")).value("lineage", "");
}

// The network heals: the two rings find each other by themselves, the one with fewer
// completed steps yields (its ranks drop their state since the partition and receive the
// other's), and the job ends as one: identical weights, one lineage, both exit 0.
BOOST_AUTO_TEST_CASE(two_ranks_partitioned_train_apart_then_heal_into_one_lineage) {
  if (!testskip::require(geteuid() == 0, "network namespaces need root (CI runs as root)")) return;
  PartitionedPair job("el-heal", kLongRun);
  job.split();
  job.cut(false);
  const auto healed = std::chrono::steady_clock::now();
  // The side that yields joins the other; the ring's lowest rank (0) writes the metrics and
  // records the loser as joined.
  BOOST_REQUIRE_MESSAGE(wait_for_events(job.metrics(0), 2, kWait), all_logs(job.ranks));
  const std::string yielded = "join the other lineage's ring";
  const int loser = nettest::contains(job.ranks[0].err(), yielded) ? 0 : 1;
  BOOST_TEST(nettest::contains(job.ranks[size_t(loser)].err(), yielded), all_logs(job.ranks));
  BOOST_TEST(!nettest::contains(job.ranks[size_t(1 - loser)].err(), yielded), all_logs(job.ranks));
  check_event(events(job.metrics(0))[1], "rank_joined", loser, 2);
  const int winner = 0;  // the metrics' writer
  BOOST_TEST_MESSAGE("one ring again " << seconds_since(healed) << " s after the heal; rank " << loser << " yielded");
  BOOST_REQUIRE_MESSAGE(wait_for_progress(job.metrics(winner), 3, kWait), all_logs(job.ranks));
  ::kill(job.ranks[0].pid, SIGTERM);
  nettest::wait_all(job.ranks, kWait);
  require_all_ok(job.ranks);
  const int step = newest_step(job.run(0), 0);
  BOOST_REQUIRE_EQUAL(newest_step(job.run(1), 1), step);
  char dir[32];
  std::snprintf(dir, sizeof dir, "step_%06d", step);
  const std::string c0 = job.run(0) + "/rank0/" + dir, c1 = job.run(1) + "/rank1/" + dir;
  BOOST_TEST((rt::io::read_file(c0 + "/model.safetensors") == rt::io::read_file(c1 + "/model.safetensors")),
             "the replicas differ at step " << step);
  BOOST_TEST(lineage_of(c0).size() == 16u);
  BOOST_TEST(lineage_of(c0) == lineage_of(c1));
}

// Both sides stopped while apart (each saved its own steps since the partition, one
// checkpoint a step): resumed together, they refuse, naming the two lineages and what to do,
// instead of training on from checkpoints of the same step number with different weights.
BOOST_AUTO_TEST_CASE(resume_refuses_checkpoints_of_two_lineages) {
  if (!testskip::require(geteuid() == 0, "network namespaces need root (CI runs as root)")) return;
  std::vector<std::string> flags = kLongRun;
  flags.insert(flags.end(), {"--save-every", "1"});
  PartitionedPair job("el-2lin", flags);
  job.split();
  for (auto& p : job.ranks) ::kill(p.pid, SIGTERM);  // apart: each side stops alone
  nettest::wait_all(job.ranks, kWait);
  require_all_ok(job.ranks);
  job.cut(false);
  flags.push_back("--resume");
  std::vector<Proc> again;
  for (int r = 0; r < 2; ++r) again.push_back(job.start(r, flags, "-again" + std::to_string(r)));
  nettest::wait_all(again, kWait);
  for (auto& p : again) {
    BOOST_TEST(p.exit_code == 2, p.err());
    BOOST_TEST(nettest::contains(p.err(), "are of two lineages (this rank's: "), p.err());
    BOOST_TEST(nettest::contains(p.err(), "): the ranks trained apart, each side on its own, during a network partition. Keep "
                                          "one side's work: "),
               p.err());
  }
  // The troubleshooting row, as the user sees it.
  BOOST_TEST(traintest::readme::has("`--resume: the ranks' checkpoints of step 40 are of two lineages (this rank's: "
                                    "5f788861b1e0799b): the ranks trained apart, each side on its own, during a network "
                                    "partition. Keep one side's work: ...`"));
}

BOOST_AUTO_TEST_SUITE_END()
