// Distributed training with real rank processes on 127.0.0.1: equivalence with one big
// batch, parameter averaging, stop/status on the job's port, a killed rank, mismatches.
#include <boost/test/unit_test.hpp>

#include <array>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <fstream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "../common/netns_hosts.hpp"
#include "../common/spawn.hpp"
#include "../common/readme_messages.hpp"
#include "../common/train_fixture.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "train_ranks.hpp"

namespace fs = std::filesystem;
using nettest::Proc;

namespace {

using traintest::run_dir;
using namespace traintest;

void check_close(const std::vector<double>& a, const std::vector<double>& b, double rel) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::abs(a[i] - b[i]) <= rel * std::abs(a[i]), "step " << i + 1 << ": " << a[i] << " vs " << b[i]);
}

const std::vector<std::string> kSteps = {"--steps", "20", "--eval-every", "10"};

// The losses of one process, run `name`, trained over `steps` with `rows` rows per step.
std::vector<double> one_process_losses(const std::string& name, std::vector<std::string> steps, int rows) {
  steps.insert(steps.end(), {"--device-batch", std::to_string(rows)});
  Proc one = nettest::spawn(base_args(name, steps), name);
  nettest::wait_one(one, 300);
  BOOST_REQUIRE_MESSAGE(one.exit_code == 0, one.err());
  return traintest::losses(run_dir(name) + "/metrics.jsonl");
}

// The losses of one process with one batch of 4 rows (128 tokens) per step, over kSteps:
// what every way of splitting that batch must reproduce. Trained once per test process.
const std::vector<double>& one_big_batch_losses() {
  static const std::vector<double> losses = one_process_losses("big", kSteps, 4);
  return losses;
}

// The same batch as two ranks of 2 rows with --sync grad and float32 on the wire.
const std::vector<double>& two_rank_losses() {
  static const std::vector<double> losses = [] {
    auto two = start_ranks("two", {2, 2}, nettest::port_base(0), kSteps);
    nettest::wait_all(two, 300);
    require_all_ok(two);
    return traintest::losses(run_dir("two") + "/metrics.jsonl");
  }();
  return losses;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(train_distributed)

BOOST_AUTO_TEST_CASE(grad_sync_equals_one_big_batch) {
  const auto& ref = one_big_batch_losses();

  check_close(ref, two_rank_losses(), 1e-5);

  // Three uneven ranks (batches 1, 2, 1): token-weighted, still one batch of 4 rows.
  auto three = start_ranks("three", {1, 2, 1}, nettest::port_base(1), kSteps);
  nettest::wait_all(three, 300);
  require_all_ok(three);
  check_close(ref, traintest::losses(run_dir("three") + "/metrics.jsonl"), 1e-5);
  // Every rank logs with its prefix and ends at the same val bpb.
  BOOST_TEST(three[2].err().find("[rank 2/3]") != std::string::npos);
}

// Two sites of two ranks each, listed alternately in --peers (a, b, a, b): with --sites the
// ring keeps each site's ranks together (0 2 | 1 3), so that it crosses between the sites
// twice instead of four times. The same batch of 4 rows as one process: only the order in
// which the ring sums changes, and every rank ends with the same bits (the check at each
// evaluation); a rank whose --sites differs is refused at the handshake, naming the flag.
BOOST_AUTO_TEST_CASE(sites_keep_each_sites_ranks_together_on_the_ring) {
  std::vector<std::string> flags = kSteps;
  flags.insert(flags.end(), {"--sites", "home,office,home,office"});
  auto four = start_ranks("sites", {1, 1, 1, 1}, nettest::port_base(1), flags);
  nettest::wait_all(four, 300);
  require_all_ok(four);
  check_close(one_big_batch_losses(), traintest::losses(run_dir("sites") + "/metrics.jsonl"), 1e-5);
  for (auto& p : four)
    BOOST_TEST(p.err().find("ring order by --sites: 0 2 (home) -> 1 3 (office)") != std::string::npos, p.err());
  // One rank with another --sites: every rank names the flag.
  std::vector<nettest::Proc> odd;
  for (size_t r = 0; r < 2; ++r) {
    std::vector<std::string> m = {"--steps", "2", "--eval-every", "0", "--sites", r == 0 ? "home,office" : "home,home"};
    odd.push_back(traintest::start_rank("sites-odd", {1, 1}, nettest::port_base(2), m, r, "sites-odd-r" + std::to_string(r)));
  }
  nettest::wait_all(odd, 120);
  for (auto& p : odd) {
    BOOST_TEST(p.exit_code != 0);
    BOOST_TEST(p.err().find("--sites") != std::string::npos, p.err());
  }
}

// The same order on hosts at two real sites (network namespaces: hosts 0 and 1 on site a's
// switch, 2 and 3 on site b's, the switches joined by one link), listed a, b, a, b: the
// bytes through that link's two ends, counted by the kernel, with --sites and without. The
// gradient's ring passes (most of the bytes) cross it twice per step with --sites and four
// times without, so the first job must move about half the bytes of the second.
BOOST_AUTO_TEST_CASE(sites_cross_the_link_between_them_twice_not_four_times) {
  if (nettest::namespaces_unavailable()) return;
  nettest::NetnsHosts hosts(4, "st", "--wan-rate 1gbit --wan-netem 'delay 1ms' --firewall 29500-29510", "sites");
  const std::vector<int> host_of_rank = {0, 2, 1, 3};  // sites a, b, a, b
  std::string peers;
  for (int h : host_of_rank) peers += (peers.empty() ? "10.99.0." : ",10.99.0.") + std::to_string(h + 1) + ":29500";
  auto bytes_between_sites = [&] {
    uint64_t sum = 0;
    for (char site : {'a', 'b'}) {
      std::string out;
      BOOST_REQUIRE(nettest::run_shell("ip -n " + hosts.site_ns(site) + " -s -j link show wan0", &out) == 0);
      sum += nlohmann::json::parse(out).at(0).at("stats64").at("tx").at("bytes").get<uint64_t>();
    }
    return sum;
  };
  auto job_bytes = [&](const std::string& name, const std::vector<std::string>& more) {
    const uint64_t before = bytes_between_sites();
    std::vector<Proc> ranks;
    for (size_t r = 0; r < 4; ++r) {
      std::vector<std::string> flags = {"--steps", "8", "--eval-every", "0", "--device-batch", "1", "--rank", std::to_string(r),
                                        "--peers", peers, "--key", nettest::key_file()};
      flags.insert(flags.end(), more.begin(), more.end());
      std::string cmd = "exec ip netns exec " + hosts.ns(host_of_rank[r]);
      for (const auto& a : base_args(name, flags)) cmd += " '" + a + "'";
      ranks.push_back(nettest::spawn({"/bin/sh", "-c", cmd}, name + "-r" + std::to_string(r)));
    }
    nettest::wait_all(ranks, 300);
    require_all_ok(ranks);
    return double(bytes_between_sites() - before);
  };
  const double with_sites = job_bytes("sites-netns", {"--sites", "a,b,a,b"});
  const double without = job_bytes("sites-netns-off", {});
  BOOST_TEST_MESSAGE("bytes between the sites: " << with_sites << " with --sites, " << without << " without");
  BOOST_TEST(with_sites < 0.6 * without, with_sites << " bytes crossed with --sites, " << without << " without");
  BOOST_TEST(with_sites > 0.4 * without, "fewer crossings than a ring over two sites can have");
}

// --streams: each ring link carries its data over 3 TCP connections, messages in turn; with
// 4 KiB chunks the gradients of a step are hundreds of messages, which arrive on the three
// connections in any interleaving and must be read back in order: three uneven ranks, with
// the job key (a CURVE handshake per connection), still train exactly as one big batch. A
// rank with another --streams is refused, naming the flag.
BOOST_AUTO_TEST_CASE(three_streams_per_link_keep_the_data_in_order) {
  std::vector<std::string> flags = kSteps;
  flags.insert(flags.end(), {"--streams", "3", "--chunk-bytes", "4096", "--key", nettest::key_file()});
  auto three = start_ranks("streams", {1, 2, 1}, nettest::port_base(1), flags);
  nettest::wait_all(three, 300);
  require_all_ok(three);
  check_close(one_big_batch_losses(), traintest::losses(run_dir("streams") + "/metrics.jsonl"), 1e-5);
  std::vector<nettest::Proc> odd;
  for (size_t r = 0; r < 2; ++r) {
    const std::vector<std::string> m = {"--steps", "2", "--eval-every", "0", "--streams", r == 0 ? "2" : "1"};
    odd.push_back(traintest::start_rank("streams-odd", {1, 1}, nettest::port_base(2), m, r, "streams-odd-r" + std::to_string(r)));
  }
  nettest::wait_all(odd, 120);
  for (auto& p : odd) {
    BOOST_TEST(p.exit_code != 0);
    BOOST_TEST(p.err().find("--streams") != std::string::npos, p.err());
  }
}

const std::vector<std::string> kShortSteps = {"--steps", "10", "--eval-every", "5"};

// One process with a batch of 8 rows (256 tokens) per step over kShortSteps.
const std::vector<double>& eight_row_losses() {
  static const std::vector<double> losses = one_process_losses("big8", kShortSteps, 8);
  return losses;
}

// Eight ranks of one row each (the ring at N = 8: seven hops each way, segments of uneven
// size) against one process with all eight rows.
BOOST_AUTO_TEST_CASE(eight_ranks_equal_one_rank_with_eight_times_the_batch) {
  BOOST_REQUIRE_EQUAL(eight_row_losses().size(), 10u);
  auto eight = start_ranks("eight", std::vector<int>(8, 1), nettest::port_base(0), kShortSteps);
  nettest::wait_all(eight, 600);
  require_all_ok(eight);
  check_close(eight_row_losses(), traintest::losses(run_dir("eight") + "/metrics.jsonl"), 1e-5);
  BOOST_TEST(eight[7].err().find("[rank 7/8]") != std::string::npos);
}

// --device-batch auto: the 8 rows of a step split by measured speed. Rank 1 reports 9 times
// its measured rate (a test hook), as a much faster host would, so it must get more rows;
// whatever the split, the losses are those of one process with all 8 rows.
BOOST_AUTO_TEST_CASE(auto_device_batch_splits_by_speed_and_equals_one_big_batch) {
  std::vector<std::string> flags = kShortSteps;
  flags.insert(flags.end(), {"--total-batch", "256"});
  setenv("RINGTRAIN_TEST_RATE_SCALE", "1:9", 1);
  auto ranks = start_ranks("auto", {0, 0}, nettest::port_base(1), flags);
  unsetenv("RINGTRAIN_TEST_RATE_SCALE");
  nettest::wait_all(ranks, 300);
  require_all_ok(ranks);
  check_close(eight_row_losses(), traintest::losses(run_dir("auto") + "/metrics.jsonl"), 1e-5);
  const std::string err = ranks[0].err();
  const size_t at = err.find("--device-batch auto: 8 rows per step split by measured speed: ");
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, err);
  int b0 = 0, b1 = 0;
  BOOST_REQUIRE(std::sscanf(err.c_str() + at + 62, "%d (%*d tok/s), %d", &b0, &b1) == 2);
  BOOST_TEST(b0 + b1 == 8);
  BOOST_TEST(b1 > b0, "rank 1 (9x as fast) got " << b1 << " rows, rank 0 " << b0);
  BOOST_TEST(b0 >= 1);
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

// DiLoCo with a real outer step, and overlapped averaging (applied one step later, two, or
// as the next one starts): replicas are identical after the last sync (a per-rank anchor,
// or an overlap that loses the average, breaks this).
BOOST_AUTO_TEST_CASE(diloco_and_overlapped_avg_end_with_identical_replicas) {
  const std::vector<std::string> runs[] = {
      {"--sync", "diloco", "--sync-every", "3", "--outer-lr", "0.7", "--outer-momentum", "0.9"},
      {"--sync", "avg", "--sync-every", "3", "--sync-overlap"},
      // the averages of steps 3, 6 and 9 applied two steps later (two steps of compute to
      // hide behind), the last one (step 12) in place
      {"--sync", "diloco", "--sync-every", "3", "--sync-overlap", "--overlap-steps", "2"},
      // applied at steps 6 and 9 in the pass that starts the next average (finish_and_start)
      {"--sync", "diloco", "--sync-every", "3", "--sync-overlap", "--overlap-steps", "3", "--wire", "int8"}};
  const char* names[] = {"diloco-outer", "avg-overlap", "diloco-overlap-2", "diloco-overlap-3-int8"};
  for (int k = 0; k < 4; ++k) {
    std::vector<std::string> flags = {"--steps", "12", "--eval-every", "0"};
    flags.insert(flags.end(), runs[k].begin(), runs[k].end());
    auto procs = start_ranks(names[k], {1, 3}, nettest::port_base(k == 2 ? 1 : 2 + k % 2), flags);
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
  // The keyless requests were refused and logged.
  BOOST_TEST(nettest::logs_refusal_from(ranks[0].err(), "127.0.0.1"), ranks[0].err());
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
  // --min-ranks 3: one lost rank leaves too few to go on (without it the others would).
  const std::vector<std::string> long_run = {"--steps", "5000", "--eval-every", "0", "--save-every", "2", "--min-ranks", "3"};
  auto ranks = start_ranks("kill", {2, 2, 2}, port, long_run);
  BOOST_REQUIRE(wait_for_steps(run_dir("kill") + "/metrics.jsonl", 4, 120));
  ::kill(ranks[1].pid, SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  nettest::wait_all(ranks, 60);
  const double took = seconds_since(t0);
  BOOST_TEST(took < kPeerTimeout + kMargin, "the others took " << took << " s to stop");
  // The survivors' failure checkpoints are the same step, or one apart: a loss during the
  // all-reduce's last hop finishes the step on the rank that already had every chunk
  // (rank 0 gets its last one from rank 2) and not on the rank still waiting for the
  // dead one's. Seen under the sanitizers: rank 0 at 4, rank 2 at 3. --resume starts from
  // the newest step all of them have.
  const int s0 = newest_step(run_dir("kill"), 0), s2 = newest_step(run_dir("kill"), 2);
  const int lost_at = std::max(s0, s2);
  BOOST_TEST(std::min(s0, s2) >= 3);
  BOOST_TEST(lost_at >= 4);
  BOOST_TEST(std::abs(s0 - s2) <= 1, "rank 0 saved step " << s0 << ", rank 2 step " << s2);
  // The troubleshooting row (docs/troubleshooting.md), as the user sees it: the lost rank, then the checkpoint.
  namespace readme = traintest::readme;
  BOOST_TEST(readme::has("`" + readme::lost_rank_closed(1, "10.0.0.2:29500") + "` (or `nothing heard from it for ...`) then `" +
                         readme::saving_before_exit("N") + "`"));
  const std::string addr = "127.0.0.1:" + std::to_string(port + 1);
  for (int r : {0, 2}) {
    const std::string err = ranks[size_t(r)].err();
    BOOST_TEST(ranks[size_t(r)].exit_code == 1, "rank " << r << ": " << err);
    const bool closed = err.find(readme::lost_rank_closed(1, addr)) != std::string::npos;
    const bool silent = err.find(readme::lost_rank_silent(1, addr)) != std::string::npos;
    BOOST_TEST((closed || silent), "rank " << r << ": " << err);
    const int saved = r == 0 ? s0 : s2;
    BOOST_TEST(err.find(readme::saving_before_exit(std::to_string(saved))) != std::string::npos, "rank " << r << ": " << err);
    BOOST_TEST(!nettest::alive(ranks[size_t(r)].pid));
  }
  // Restarting every rank with --resume continues from the newest step all of them have.
  std::vector<std::string> resume = {"--steps", "5000", "--eval-every", "0", "--save-every", "2", "--resume",
                                     "--stop-after", std::to_string(lost_at + 3), "--min-ranks", "3"};
  auto again = start_ranks("kill", {2, 2, 2}, port, resume);
  nettest::wait_all(again, 120);
  require_all_ok(again);
  BOOST_TEST(again[0].err().find("resumed from") != std::string::npos, again[0].err());
  BOOST_TEST(newest_step(run_dir("kill"), 1) == lost_at + 3);
}

BOOST_AUTO_TEST_CASE(silent_rank_is_declared_lost_after_the_peer_timeout) {
  // SIGSTOP: the process and its connections stay, but it says nothing (a hung host).
  const int port = nettest::port_base(2) + 4;
  auto ranks = start_ranks("silent", {2, 2}, port, {"--steps", "5000", "--eval-every", "0", "--min-ranks", "2"});
  BOOST_REQUIRE(wait_for_steps(run_dir("silent") + "/metrics.jsonl", 2, 120));
  ::kill(ranks[1].pid, SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  nettest::wait_one(ranks[0], 60);
  const double took = seconds_since(t0);
  ::kill(ranks[1].pid, SIGKILL);
  nettest::wait_one(ranks[1], 10);
  const std::string err = ranks[0].err();
  BOOST_TEST(ranks[0].exit_code == 1, err);
  BOOST_TEST(took < kPeerTimeout + kMargin, "rank 0 took " << took << " s to stop");
  // "nothing heard from it for S s": S is the peer timeout (checked every 100 ms or so).
  const std::string said = traintest::readme::lost_rank_silent(1, "127.0.0.1:" + std::to_string(port + 1));
  const size_t at = err.find(said);
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, err);
  const double silence = std::stod(err.substr(at + said.size()));
  BOOST_TEST(silence >= kPeerTimeout, err);
  BOOST_TEST(silence < kPeerTimeout + kMargin, err);
  const int saved = newest_step(run_dir("silent"), 0);
  BOOST_TEST(saved >= 2);
  BOOST_TEST(err.find(traintest::readme::saving_before_exit(std::to_string(saved))) != std::string::npos, err);
}

BOOST_AUTO_TEST_CASE(mismatched_flags_are_named_on_every_rank) {
  namespace readme = traintest::readme;
  BOOST_TEST(readme::has("`" + readme::config_mismatch(1, "10.0.0.2:29500", "--steps", "10", "20") + "`"));
  // --steps shapes the schedule; --peer-timeout and --chunk-bytes decide when a rank counts
  // as lost and how the ring cuts its bytes: ranks must agree on them too.
  const std::vector<std::array<std::string, 3>> cases = {
      {"--steps", "10", "20"}, {"--peer-timeout", "20", "25"}, {"--chunk-bytes", "65536", "131072"}};
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& [flag, v0, v1] = cases[c];
    const int port = nettest::port_base(2) + 2;  // the previous case's ranks have exited
    const std::string peers = nettest::loopback_peers(2, port);
    std::vector<Proc> ranks;
    for (int r = 0; r < 2; ++r) {
      auto a = base_args("mismatch", {"--rank", std::to_string(r), "--peers", peers, flag, r == 0 ? v0 : v1,
                                      "--connect-timeout", "30", "--key", nettest::key_file()});
      ranks.push_back(nettest::spawn(a, "mismatch" + std::to_string(r)));
    }
    nettest::wait_all(ranks, 60);
    // Each rank names the other, the flag and both values, from its own side.
    const std::string here[] = {v0, v1};
    for (int r = 0; r < 2; ++r) {
      const int other = 1 - r;
      const std::string want = readme::config_mismatch(other, "127.0.0.1:" + std::to_string(port + other), flag,
                                                       here[r], here[other]);
      BOOST_TEST(ranks[size_t(r)].exit_code == 2, ranks[size_t(r)].err());
      BOOST_TEST(ranks[size_t(r)].err().find(want + "\n") != std::string::npos, "want: " << want << "\ngot: " << ranks[size_t(r)].err());
    }
  }
}

// --total-batch: gradient accumulation over micro-steps trains exactly like one big batch,
// on one process (2 micro-steps of 2 rows, 4 of 1) and across ranks (2 ranks, 2 micro-steps
// of 1 row each).
BOOST_AUTO_TEST_CASE(total_batch_accumulation_equals_one_big_batch) {
  const auto& ref = one_big_batch_losses();  // 4 rows of 32 tokens per step
  for (const char* rows : {"2", "1"}) {
    const std::string name = std::string("accum-b") + rows;
    std::vector<std::string> flags = kSteps;
    flags.insert(flags.end(), {"--device-batch", rows, "--total-batch", "128"});
    Proc p = nettest::spawn(base_args(name, flags), name);
    nettest::wait_one(p, 300);
    BOOST_REQUIRE_MESSAGE(p.exit_code == 0, p.err());
    const std::string micro = std::string(rows) == "2" ? "2 micro-steps of 2 x 32" : "4 micro-steps of 1 x 32";
    BOOST_TEST(p.err().find("batch 128 tokens/step (" + micro + " here)") != std::string::npos, p.err());
    check_close(ref, traintest::losses(run_dir(name) + "/metrics.jsonl"), 1e-5);
  }
  std::vector<std::string> flags = kSteps;
  flags.insert(flags.end(), {"--total-batch", "128"});
  auto two = start_ranks("accum-two", {1, 1}, nettest::port_base(3), flags);
  nettest::wait_all(two, 300);
  require_all_ok(two);
  BOOST_TEST(two[1].err().find("batch 128 tokens/step (2 micro-steps of 1 x 32 here)") != std::string::npos, two[1].err());
  check_close(ref, traintest::losses(run_dir("accum-two") + "/metrics.jsonl"), 1e-5);
}

// --wire bf16 while training: gradients (grad) or parameters (avg) travel rounded to bf16,
// yet every rank receives the same bits, so the replicas stay identical; and the loss
// stays close to float32's. With grad, the losses also differ from the same two ranks with
// float32 on the wire (so bf16 was really used).
BOOST_AUTO_TEST_CASE(bf16_wire_keeps_replicas_identical_and_loss_close_to_f32) {
  const auto& ref = one_big_batch_losses();
  const auto& f32 = two_rank_losses();
  const std::vector<std::string> modes[] = {{"--sync", "grad"}, {"--sync", "avg", "--sync-every", "4"}};
  const char* names[] = {"bf16-grad", "bf16-avg"};
  for (int k = 0; k < 2; ++k) {
    std::vector<std::string> flags = kSteps;
    flags.insert(flags.end(), {"--wire", "bf16"});
    flags.insert(flags.end(), modes[k].begin(), modes[k].end());
    auto ranks = start_ranks(names[k], {2, 2}, nettest::port_base(2 + k), flags);
    nettest::wait_all(ranks, 300);
    require_all_ok(ranks);
    const auto got = traintest::losses(run_dir(names[k]) + "/metrics.jsonl");
    BOOST_REQUIRE_EQUAL(got.size(), ref.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]) / std::abs(ref[i]));
    BOOST_TEST_MESSAGE(names[k] << ": largest relative loss difference to f32 " << worst);
    if (k == 0) {
      BOOST_TEST(got != f32, names[k] << ": the same losses as with f32 on the wire, to the bit; was bf16 used?");
      BOOST_TEST(worst < 1e-2, names[k] << ": loss differs from f32 by " << worst);
    } else {
      BOOST_TEST(worst < 5e-2, names[k] << ": loss differs from one big batch by " << worst);
    }
    const auto m0 = rt::io::read_file(run_dir(names[k]) + "/rank0/step_000020/model.safetensors");
    const auto m1 = rt::io::read_file(run_dir(names[k]) + "/rank1/step_000020/model.safetensors");
    BOOST_TEST((m0 == m1), names[k] << ": replicas differ at the end");
  }
}

// With --sync grad the replicas must stay bit-identical; ringtrain compares them at every
// evaluation and stops the job when they drift. RINGTRAIN_TEST_PERTURB_RANK (a hook for
// this test only) makes rank 1 change one parameter by one ulp before each check after step 0.
BOOST_AUTO_TEST_CASE(drifted_replicas_stop_the_job) {
  setenv("RINGTRAIN_TEST_PERTURB_RANK", "1", 1);
  auto ranks = start_ranks("drift", {2, 2}, nettest::port_base(1) + 2, {"--steps", "20", "--eval-every", "4"});
  unsetenv("RINGTRAIN_TEST_PERTURB_RANK");
  nettest::wait_all(ranks, 120);
  const std::string want =
      "replicas have drifted at step 4: rank 1's parameters differ from rank 0's; run the same ringtrain commit on "
      "every host (ringtrain --version), then --resume\n";
  for (auto& p : ranks) {
    BOOST_TEST(p.exit_code == 1, p.err());
    BOOST_TEST(p.err().find(want) != std::string::npos, p.err());
  }
  BOOST_TEST(traintest::losses(run_dir("drift") + "/metrics.jsonl").size() == 4u);
}

// A rank whose parameters went NaN (as after a diverged update) is named by itself before
// any of it leaves; it saves the state before that update and the other rank the state
// it has; no checkpoint holds the NaN, and --resume goes on from them.
BOOST_AUTO_TEST_CASE(a_diverged_rank_is_named_and_its_nan_reaches_no_checkpoint) {
  const int port = nettest::port_base(0) + 3;
  const std::vector<std::string> flags = {"--steps", "20", "--eval-every", "0", "--save-every", "2", "--min-ranks", "2"};
  setenv("RINGTRAIN_TEST_POISON", "1:4", 1);  // rank 1's parameters before step 4
  auto ranks = start_ranks("poison", {2, 2}, port, flags);
  unsetenv("RINGTRAIN_TEST_POISON");
  nettest::wait_all(ranks, 120);
  const std::string err0 = ranks[0].err(), err1 = ranks[1].err();
  BOOST_TEST_INFO(err0 << " | " << err1);
  BOOST_TEST(ranks[1].exit_code == 1);
  BOOST_TEST(nettest::contains(err1, "this rank's own values in chunk "));
  BOOST_TEST(nettest::contains(err1, "hold a NaN or an infinity: its gradients or parameters diverged"));
  BOOST_TEST(nettest::contains(err1, "going back to the state of step 2, before the update that made a NaN or an infinity"));
  BOOST_TEST(nettest::contains(err1, traintest::readme::saving_before_exit("2")));
  BOOST_TEST(ranks[0].exit_code == 1);
  BOOST_TEST(nettest::contains(err0, traintest::readme::saving_before_exit("3")));
  BOOST_TEST(!nettest::contains(err0 + err1, "holding a NaN"));  // no NaN ever crossed the wire
  BOOST_TEST(newest_step(run_dir("poison"), 0) == 3);
  BOOST_TEST(newest_step(run_dir("poison"), 1) == 2);
  // Both go on from step 2, the newest step both have: the saved states are whole.
  std::vector<std::string> resume = flags;
  resume.insert(resume.end(), {"--resume", "--stop-after", "6"});
  auto again = start_ranks("poison", {2, 2}, port, resume);
  nettest::wait_all(again, 120);
  require_all_ok(again);
  BOOST_TEST(nettest::contains(again[0].err(), "(step 2)"), again[0].err());
  BOOST_TEST(newest_step(run_dir("poison"), 1) == 6);
}

// Payload bytes rank 0 sent over the whole run (the bytes_sent of its step records).
double total_bytes_sent(const std::string& metrics) {
  double total = 0;
  std::istringstream lines(rt::io::read_file(metrics));
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("bytes_sent")) total += j["bytes_sent"].get<double>();
  }
  return total;
}

// With avg overlapped the ranks run free between averages and meet first at the report
// exchange; synced_s marks when every rank had ended a step (the records where their
// reports met), elapsed_s when rank 0 did. Rank 1 is held (SIGSTOP) for 2 s right after the
// first evaluation: rank 0 reaches step 8 long before it,
// so step 8's synced_s is at least ~2 s after its elapsed_s, and benchmarks that time a
// window by synced_s do not count that lag twice. Only the steps where the reports met
// (8 and 16) carry it.
BOOST_AUTO_TEST_CASE(synced_s_marks_when_every_rank_had_ended_the_step) {
  auto ranks = start_ranks("synced", {2, 2}, nettest::port_base(3),
                           {"--steps", "16", "--eval-every", "0", "--sync", "avg", "--sync-every", "8", "--sync-overlap"});
  const std::string metrics = run_dir("synced") + "/metrics.jsonl";
  BOOST_REQUIRE(nettest::wait_until([&] {
    std::ifstream in(metrics);
    return std::string(std::istreambuf_iterator<char>(in), {}).find("val_bpb") != std::string::npos;
  }, 120));
  ::kill(ranks[1].pid, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ::kill(ranks[1].pid, SIGCONT);
  nettest::wait_all(ranks, 120);
  require_all_ok(ranks);
  std::istringstream lines(rt::io::read_file(metrics));
  int with_synced = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("elapsed_s")) continue;
    const int64_t step = j["step"].get<int64_t>();
    BOOST_TEST(j.contains("synced_s") == (step % 8 == 0), "step " << step);
    if (!j.contains("synced_s")) continue;
    ++with_synced;
    const double lag = j["synced_s"].get<double>() - j["elapsed_s"].get<double>();
    BOOST_TEST(lag >= 0.0, "step " << step);
    if (step == 8) BOOST_TEST(lag >= 1.5, "rank 0 ended step 8 only " << lag << " s before rank 1");
  }
  BOOST_TEST(with_synced == 2);
}

// --wire int8 and int4 with avg (overlapped) and diloco: the replicas are identical after
// every average (checked at the evaluation of step 6, and the final checkpoints compared),
// the losses stay close to the same run with f32 on the wire, and about a quarter (int8)
// or an eighth (int4) of the bytes go out.
BOOST_AUTO_TEST_CASE(int8_and_int4_wires_keep_replicas_identical_and_losses_close_to_f32) {
  const std::vector<std::string> modes[] = {{"--sync", "avg", "--sync-every", "3", "--sync-overlap"},
                                            {"--sync", "diloco", "--sync-every", "3"}};
  const char* names[] = {"avg", "diloco"};
  const char* wires[] = {"f32", "int8", "int4"};
  const double tolerance[] = {0, 0.01, 0.02}, byte_share[] = {1, 0.3, 0.17};  // of f32's losses, bytes
  for (int k = 0; k < 2; ++k) {
    std::vector<double> losses[3];
    double bytes[3];
    for (int w = 0; w < 3; ++w) {
      const std::string name = std::string("wire-") + names[k] + "-" + wires[w];
      std::vector<std::string> flags = {"--steps", "12", "--eval-every", "6", "--wire", wires[w]};
      flags.insert(flags.end(), modes[k].begin(), modes[k].end());
      auto procs = start_ranks(name, {1, 3}, nettest::port_base(2 + w % 2), flags);
      nettest::wait_all(procs, 300);
      require_all_ok(procs);
      losses[w] = traintest::losses(run_dir(name) + "/metrics.jsonl");
      bytes[w] = total_bytes_sent(run_dir(name) + "/metrics.jsonl");
      if (w == 0) continue;
      const auto m0 = rt::io::read_file(run_dir(name) + "/rank0/step_000012/model.safetensors");
      const auto m1 = rt::io::read_file(run_dir(name) + "/rank1/step_000012/model.safetensors");
      BOOST_TEST((m0 == m1), name << ": replicas differ after the last sync");
      BOOST_REQUIRE_EQUAL(losses[w].size(), 12u);
      check_close(losses[0], losses[w], tolerance[w]);
      BOOST_TEST(bytes[w] < byte_share[w] * bytes[0], name << " sent " << bytes[w] << " bytes against f32's " << bytes[0]);
    }
    BOOST_TEST(losses[2] != losses[1], names[k] << ": int4 and int8 gave the same losses; was int4 used?");
  }
  // The check after an average can fail: a replica one ulp off stops the job at step 6.
  setenv("RINGTRAIN_TEST_PERTURB_RANK", "1", 1);
  auto drift = start_ranks("wire-drift", {2, 2}, nettest::port_base(2),
                           {"--steps", "12", "--eval-every", "6", "--wire", "int8", "--sync", "avg", "--sync-every", "3"});
  unsetenv("RINGTRAIN_TEST_PERTURB_RANK");
  nettest::wait_all(drift, 120);
  for (auto& p : drift) {
    BOOST_TEST(p.exit_code == 1, p.err());
    BOOST_TEST(p.err().find("replicas have drifted at step 6") != std::string::npos, p.err());
  }
}

// Payload bytes rank 0 sent in each step (the bytes_sent of its step records, in order).
std::vector<double> bytes_per_step(const std::string& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("bytes_sent")) out.push_back(j["bytes_sent"].get<double>());
  }
  return out;
}

// --sync-fragments: the model averaged one fragment at a time (in place with int8, and
// overlapped with int4). Replicas end bit-identical (the last step averages every fragment),
// the runs learn, and the bytes of an H-step period are spread over F steps instead of one:
// no step before the last sends more than 60% of what a whole-model average sends (the
// tiny model's 6 units split into 4 uneven fragments; d8's even split is in the unit test).
BOOST_AUTO_TEST_CASE(streaming_averages_spread_the_bytes_and_end_with_identical_replicas) {
  struct Run {
    const char* name;
    std::vector<std::string> flags;
    int fragments;
  };
  const Run runs[] = {
      {"stream-whole-int8", {"--sync", "diloco", "--sync-every", "4", "--wire", "int8"}, 1},
      {"stream-4-int8", {"--sync", "diloco", "--sync-every", "4", "--wire", "int8", "--sync-fragments", "4"}, 4},
      {"stream-2-int4-overlap",
       {"--sync", "diloco", "--sync-every", "4", "--wire", "int4", "--sync-fragments", "2", "--sync-overlap", "--overlap-steps", "2"},
       2}};
  double whole_sync_bytes = 0;
  for (const Run& run : runs) {
    std::vector<std::string> flags = {"--steps", "13", "--eval-every", "4"};
    flags.insert(flags.end(), run.flags.begin(), run.flags.end());
    auto procs = start_ranks(run.name, {1, 3}, nettest::port_base(2), flags);
    nettest::wait_all(procs, 300);
    require_all_ok(procs);
    const std::string dir = run_dir(run.name);
    const auto losses = traintest::losses(dir + "/metrics.jsonl");
    BOOST_REQUIRE_EQUAL(losses.size(), 13u);
    for (double l : losses) BOOST_TEST(std::isfinite(l));
    BOOST_TEST(losses.back() < losses.front(), run.name << " does not learn");
    const auto m0 = rt::io::read_file(dir + "/rank0/step_000013/model.safetensors");
    const auto m1 = rt::io::read_file(dir + "/rank1/step_000013/model.safetensors");
    // (A whole-model average at step 12 is the last; the ranks end on their own progress.)
    if (run.fragments > 1) BOOST_TEST((m0 == m1), run.name << ": replicas differ at the end");
    const auto bytes = bytes_per_step(dir + "/metrics.jsonl");
    BOOST_REQUIRE_EQUAL(bytes.size(), 13u);
    // Steps 1..12 (the last step, 13, averages every fragment at once).
    int sending = 0;
    double largest = 0, period = 0;
    for (size_t k = 0; k < 12; ++k) {
      sending += bytes[k] > 0;
      largest = std::max(largest, bytes[k]);
      if (k >= 4 && k < 8) period += bytes[k];
    }
    if (run.fragments == 1) {
      whole_sync_bytes = largest;
      BOOST_TEST(sending == 3, run.name << ": " << sending << " steps sent");
      continue;
    }
    // int8 sends one average's worth per period, in F pieces; int4 a little over half of
    // int8's (the same scales per block, half the codes).
    BOOST_TEST(sending == 3 * run.fragments, run.name << ": " << sending << " steps sent");
    const double share = run.fragments == 4 ? 1.0 : 0.55;
    BOOST_TEST(period <= 1.05 * share * whole_sync_bytes, run.name << ": a period sent " << period << " against " << whole_sync_bytes);
    BOOST_TEST(largest <= 0.6 * share * whole_sync_bytes, run.name << ": a step sent " << largest << " of " << whole_sync_bytes);
  }
}

// SIGINT asks for a stop at the end of the step; a second one aborts at once. Rank 1 is
// stopped (SIGSTOP), so rank 0's step cannot end: only the abort ends it, long before the
// peer timeout would.
BOOST_AUTO_TEST_CASE(second_sigint_aborts_at_once) {
  const double peer_timeout = 30;
  auto ranks = start_ranks("twice", {2, 2}, nettest::port_base(0) + 4, {"--steps", "5000", "--eval-every", "0"}, peer_timeout);
  const std::string metrics = run_dir("twice") + "/metrics.jsonl";
  BOOST_REQUIRE(wait_for_steps(metrics, 2, 120));
  ::kill(ranks[1].pid, SIGSTOP);
  // Rank 1 may have sent its part of the next step (or two) before it stopped, and rank 0
  // can finish those steps without it: SIGINT must come once rank 0 is stuck waiting, seen
  // as no new step record for 1.5 s (a step of this model takes a few tens of ms).
  size_t seen = traintest::losses(metrics).size();
  auto still_since = std::chrono::steady_clock::now();
  BOOST_REQUIRE(nettest::wait_until([&] {
    const size_t now = traintest::losses(metrics).size();
    if (now != seen) seen = now, still_since = std::chrono::steady_clock::now();
    return seconds_since(still_since) >= 1.5;
  }, 20));
  ::kill(ranks[0].pid, SIGINT);
  BOOST_TEST(!nettest::wait_exit(ranks[0], 1.0), "rank 0 exited on the first SIGINT: " << ranks[0].err());
  ::kill(ranks[0].pid, SIGINT);
  const auto t0 = std::chrono::steady_clock::now();
  const bool exited = nettest::wait_exit(ranks[0], peer_timeout / 2);
  const double took = seconds_since(t0);
  ::kill(ranks[1].pid, SIGKILL);
  nettest::wait_one(ranks[1], 10);
  nettest::wait_one(ranks[0], 10);
  BOOST_REQUIRE_MESSAGE(exited, "rank 0 still ran " << peer_timeout / 2 << " s after the second SIGINT");
  BOOST_TEST(took < 3.0, "rank 0 took " << took << " s to abort");
  const std::string err = ranks[0].err();
  BOOST_TEST(ranks[0].exit_code == 1, "exit " << ranks[0].exit_code << " signal " << ranks[0].signal << ": " << err);
  BOOST_TEST(err.find("ringtrain: error: interrupted twice (SIGINT/SIGTERM)\n") != std::string::npos, err);
  BOOST_TEST(err.find("checkpoint") == std::string::npos, "an abort writes no checkpoint: " << err);
  BOOST_TEST(newest_step(run_dir("twice"), 0) == -1);
}

BOOST_AUTO_TEST_SUITE_END()
