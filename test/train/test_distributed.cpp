// Distributed training with real rank processes on 127.0.0.1: equivalence with one big
// batch, parameter averaging, stop/status on the job's port, a killed rank, mismatches.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "../net/spawn.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "train_fixture.hpp"

namespace fs = std::filesystem;
using nettest::Proc;

namespace {

std::string run_dir(const std::string& name) { return nettest::scratch_dir() + "/" + name; }

std::vector<std::string> base_args(const std::string& out, std::vector<std::string> more) {
  std::vector<std::string> a = {nettest::ringtrain_path(), "train", "--data", traintest::prepared_data(), "--out", run_dir(out)};
  for (const auto& f : traintest::tiny_model_flags()) a.push_back(f);
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// Starts one process per rank; batches[r] is rank r's --device-batch.
std::vector<Proc> start_ranks(const std::string& out, const std::vector<int>& batches, int port,
                              const std::vector<std::string>& more) {
  const std::string peers = nettest::loopback_peers(int(batches.size()), port);
  std::vector<Proc> procs;
  for (size_t r = 0; r < batches.size(); ++r) {
    std::vector<std::string> m = more;
    // With the job key: the training path runs over encrypted, authenticated connections.
    m.insert(m.end(), {"--rank", std::to_string(r), "--peers", peers, "--device-batch", std::to_string(batches[r]),
                       "--peer-timeout", "5", "--connect-timeout", "60", "--key", nettest::key_file()});
    procs.push_back(nettest::spawn(base_args(out, m), out + "-r" + std::to_string(r)));
  }
  return procs;
}

void require_all_ok(std::vector<Proc>& procs) {
  for (auto& p : procs) BOOST_REQUIRE_MESSAGE(p.exit_code == 0, "exit " << p.exit_code << ": " << p.err());
}

void check_close(const std::vector<double>& a, const std::vector<double>& b, double rel) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::abs(a[i] - b[i]) <= rel * std::abs(a[i]), "step " << i + 1 << ": " << a[i] << " vs " << b[i]);
}

// Waits until the metrics file has at least n step records (or the deadline passes).
bool wait_for_steps(const std::string& metrics, size_t n, double deadline_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
  while (std::chrono::steady_clock::now() < end) {
    if (fs::exists(metrics) && traintest::losses(metrics).size() >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

int newest_step(const std::string& run, int rank) {
  auto steps = rt::train::checkpoint_steps(run, rank);
  return steps.empty() ? -1 : int(steps.back());
}

const std::vector<std::string> kSteps = {"--steps", "20", "--eval-every", "10"};

}  // namespace

BOOST_AUTO_TEST_SUITE(train_distributed)

BOOST_AUTO_TEST_CASE(grad_sync_equals_one_big_batch) {
  Proc one = nettest::spawn(base_args("big", {"--steps", "20", "--eval-every", "10", "--device-batch", "4"}), "big");
  nettest::wait_one(one, 300);
  BOOST_REQUIRE_MESSAGE(one.exit_code == 0, one.err());
  const auto ref = traintest::losses(run_dir("big") + "/metrics.jsonl");

  auto two = start_ranks("two", {2, 2}, nettest::port_base(0), kSteps);
  nettest::wait_all(two, 300);
  require_all_ok(two);
  check_close(ref, traintest::losses(run_dir("two") + "/metrics.jsonl"), 1e-5);

  // Three uneven ranks (batches 1, 2, 1): token-weighted, still one batch of 4 rows.
  auto three = start_ranks("three", {1, 2, 1}, nettest::port_base(1), kSteps);
  nettest::wait_all(three, 300);
  require_all_ok(three);
  check_close(ref, traintest::losses(run_dir("three") + "/metrics.jsonl"), 1e-5);
  // Every rank logs with its prefix and ends at the same val bpb.
  BOOST_TEST(three[2].err().find("[rank 2/3]") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(diloco_with_unit_outer_step_equals_avg) {
  auto avg = start_ranks("avg", {2, 2}, nettest::port_base(2), {"--steps", "12", "--eval-every", "0", "--sync", "avg", "--sync-every", "3"});
  nettest::wait_all(avg, 300);
  require_all_ok(avg);
  auto dl = start_ranks("diloco", {2, 2}, nettest::port_base(3),
                        {"--steps", "12", "--eval-every", "0", "--sync", "diloco", "--sync-every", "3", "--outer-lr", "1",
                         "--outer-momentum", "0"});
  nettest::wait_all(dl, 300);
  require_all_ok(dl);
  const auto a = traintest::losses(run_dir("avg") + "/metrics.jsonl");
  const auto b = traintest::losses(run_dir("diloco") + "/metrics.jsonl");
  BOOST_REQUIRE_EQUAL(a.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i]);
  // After the last sync (step 12) both ranks hold the same parameters.
  const auto m0 = rt::io::read_file(run_dir("avg") + "/rank0/step_000012/model.safetensors");
  const auto m1 = rt::io::read_file(run_dir("avg") + "/rank1/step_000012/model.safetensors");
  BOOST_TEST(m0 == m1);
}

// DiLoCo with a real outer step, and overlapped averaging: replicas are identical after
// the last sync (a per-rank anchor, or an overlap that loses the average, breaks this).
BOOST_AUTO_TEST_CASE(diloco_and_overlapped_avg_end_with_identical_replicas) {
  const std::vector<std::string> runs[] = {
      {"--sync", "diloco", "--sync-every", "3", "--outer-lr", "0.7", "--outer-momentum", "0.9"},
      {"--sync", "avg", "--sync-every", "3", "--sync-overlap"}};
  const char* names[] = {"diloco-outer", "avg-overlap"};
  for (int k = 0; k < 2; ++k) {
    std::vector<std::string> flags = {"--steps", "12", "--eval-every", "0"};
    flags.insert(flags.end(), runs[k].begin(), runs[k].end());
    auto procs = start_ranks(names[k], {1, 3}, nettest::port_base(2 + k), flags);
    nettest::wait_all(procs, 300);
    require_all_ok(procs);
    const auto losses = traintest::losses(run_dir(names[k]) + "/metrics.jsonl");
    BOOST_REQUIRE_EQUAL(losses.size(), 12u);
    for (double l : losses) BOOST_TEST(std::isfinite(l));
    BOOST_TEST(losses.back() < losses.front(), names[k] << " does not learn");
    const auto m0 = rt::io::read_file(run_dir(names[k]) + "/rank0/step_000012/model.safetensors");
    const auto m1 = rt::io::read_file(run_dir(names[k]) + "/rank1/step_000012/model.safetensors");
    BOOST_TEST((m0 == m1), names[k] << ": replicas differ after the last sync");
  }
}

BOOST_AUTO_TEST_CASE(status_and_stop_on_the_job_port_then_resume) {
  const int port = nettest::port_base(0) + 2;
  const std::vector<std::string> long_run = {"--steps", "5000", "--eval-every", "0"};
  auto ranks = start_ranks("stop", {2, 2}, port, long_run);
  BOOST_REQUIRE(wait_for_steps(run_dir("stop") + "/metrics.jsonl", 3, 120));
  std::string out;
  const std::string bin = nettest::ringtrain_path();
  const std::string key = " --key " + nettest::key_file();
  // Without the key the job refuses to answer, and goes on.
  BOOST_TEST(nettest::run_shell(bin + " status 127.0.0.1:" + std::to_string(port) + " --json", &out) == 1, out);
  BOOST_TEST(out.find("the job runs with a key") != std::string::npos, out);
  BOOST_TEST(nettest::run_shell(bin + " stop 127.0.0.1:" + std::to_string(port), &out) == 1, out);
  BOOST_TEST(nettest::run_shell(bin + " status 127.0.0.1:" + std::to_string(port) + " --json" + key, &out) == 0, out);
  auto st = nlohmann::json::parse(out.substr(out.find('{')));
  BOOST_TEST(st["step"].get<int>() >= 3);
  BOOST_TEST(st["steps"].get<int>() == 5000);
  BOOST_TEST(st["ranks"].size() == 2u);
  // Ask rank 1's port: the whole job stops at one step, with a checkpoint on every rank.
  BOOST_TEST(nettest::run_shell(bin + " stop 127.0.0.1:" + std::to_string(port + 1) + key, &out) == 0, out);
  nettest::wait_all(ranks, 120);
  require_all_ok(ranks);
  const int s0 = newest_step(run_dir("stop"), 0), s1 = newest_step(run_dir("stop"), 1);
  BOOST_TEST(s0 >= 3);
  BOOST_TEST(s0 == s1);
  BOOST_TEST(ranks[0].err().find("stop requested") != std::string::npos, ranks[0].err());
  BOOST_TEST(ranks[0].err().find("refused a connection from 127.0.0.1:") != std::string::npos, ranks[0].err());
  // Nothing listens on the port any more.
  BOOST_TEST(nettest::run_shell(bin + " status 127.0.0.1:" + std::to_string(port) + " --timeout 1" + key, &out) == 1, out);

  std::vector<std::string> resume = {"--steps", "5000", "--eval-every", "0", "--resume", "--stop-after", std::to_string(s0 + 2)};
  auto again = start_ranks("stop", {2, 2}, port, resume);
  nettest::wait_all(again, 120);
  require_all_ok(again);
  BOOST_TEST(again[1].err().find("resumed from") != std::string::npos, again[1].err());
  BOOST_TEST(newest_step(run_dir("stop"), 1) == s0 + 2);
  BOOST_TEST(traintest::losses(run_dir("stop") + "/metrics.jsonl").size() == size_t(s0 + 2));
}

BOOST_AUTO_TEST_CASE(sigterm_on_one_rank_stops_the_job_cleanly) {
  const int port = nettest::port_base(3) + 2;
  auto ranks = start_ranks("term", {2, 2}, port, {"--steps", "5000", "--eval-every", "0"});
  BOOST_REQUIRE(wait_for_steps(run_dir("term") + "/metrics.jsonl", 2, 120));
  ::kill(ranks[1].pid, SIGTERM);
  nettest::wait_all(ranks, 120);
  require_all_ok(ranks);
  const int s0 = newest_step(run_dir("term"), 0);
  BOOST_TEST(s0 >= 2);
  BOOST_TEST(s0 == newest_step(run_dir("term"), 1));
}

BOOST_AUTO_TEST_CASE(killed_rank_stops_the_others_with_a_checkpoint) {
  const int port = nettest::port_base(1) + 3;
  const std::vector<std::string> long_run = {"--steps", "5000", "--eval-every", "0", "--save-every", "2"};
  auto ranks = start_ranks("kill", {2, 2, 2}, port, long_run);
  BOOST_REQUIRE(wait_for_steps(run_dir("kill") + "/metrics.jsonl", 4, 120));
  ::kill(ranks[1].pid, SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  nettest::wait_all(ranks, 60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(took < 30.0);
  for (int r : {0, 2}) {
    BOOST_TEST(ranks[size_t(r)].exit_code == 1, "rank " << r << ": " << ranks[size_t(r)].err());
    BOOST_TEST(ranks[size_t(r)].err().find("rank 1 (127.0.0.1:" + std::to_string(port + 1) + ")") != std::string::npos,
               ranks[size_t(r)].err());
    BOOST_TEST(ranks[size_t(r)].err().find("peer lost") != std::string::npos, ranks[size_t(r)].err());
    BOOST_TEST(!nettest::alive(ranks[size_t(r)].pid));
  }
  const int lost_at = newest_step(run_dir("kill"), 0);
  BOOST_TEST(lost_at >= 4);
  BOOST_TEST(newest_step(run_dir("kill"), 2) == lost_at);
  // Restarting every rank with --resume continues from the newest step all of them have.
  std::vector<std::string> resume = {"--steps", "5000", "--eval-every", "0", "--save-every", "2", "--resume",
                                     "--stop-after", std::to_string(lost_at + 3)};
  auto again = start_ranks("kill", {2, 2, 2}, port, resume);
  nettest::wait_all(again, 120);
  require_all_ok(again);
  BOOST_TEST(again[0].err().find("resumed from") != std::string::npos, again[0].err());
  BOOST_TEST(newest_step(run_dir("kill"), 1) == lost_at + 3);
}

BOOST_AUTO_TEST_CASE(silent_rank_is_declared_lost_after_the_peer_timeout) {
  // SIGSTOP: the process and its connections stay, but it says nothing (a hung host).
  const int port = nettest::port_base(2) + 4;
  auto ranks = start_ranks("silent", {2, 2}, port, {"--steps", "5000", "--eval-every", "0"});
  BOOST_REQUIRE(wait_for_steps(run_dir("silent") + "/metrics.jsonl", 2, 120));
  ::kill(ranks[1].pid, SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  nettest::wait_one(ranks[0], 60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(ranks[1].pid, SIGKILL);
  nettest::wait_one(ranks[1], 10);
  BOOST_TEST(ranks[0].exit_code == 1, ranks[0].err());
  BOOST_TEST(took < 30.0);  // --peer-timeout 5 in these tests
  BOOST_TEST(ranks[0].err().find("lost rank 1 (127.0.0.1:" + std::to_string(port + 1) + "): nothing heard from it") !=
                 std::string::npos,
             ranks[0].err());
  BOOST_TEST(newest_step(run_dir("silent"), 0) >= 2);
}

BOOST_AUTO_TEST_CASE(mismatched_flags_are_named_on_every_rank) {
  const int port = nettest::port_base(2) + 2;
  const std::string peers = nettest::loopback_peers(2, port);
  std::vector<Proc> ranks;
  for (int r = 0; r < 2; ++r) {
    auto a = base_args("mismatch", {"--rank", std::to_string(r), "--peers", peers, "--steps", r == 0 ? "10" : "20",
                                    "--connect-timeout", "30", "--key", nettest::key_file()});
    ranks.push_back(nettest::spawn(a, "mismatch" + std::to_string(r)));
  }
  nettest::wait_all(ranks, 60);
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST(ranks[size_t(r)].exit_code == 2, ranks[size_t(r)].err());
    BOOST_TEST(ranks[size_t(r)].err().find(r == 0 ? "--steps is 10 here and 20 there" : "--steps is 20 here and 10 there") !=
                   std::string::npos,
               ranks[size_t(r)].err());
  }
}

BOOST_AUTO_TEST_SUITE_END()
