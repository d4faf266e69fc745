// What a disk can do to a run, and what the run does about it:
//   - a periodic save that fails (here: a full file system) is logged, costs that checkpoint
//     only, and the next periodic save tries again; the run finishes when space comes back;
//   - the final save that fails makes the run exit 1 with the reason, no half-written
//     checkpoint left behind;
//   - what a killed save left in the rank's directory is cleaned up at the next start.
// The full disk is a small tmpfs, mounted in a mount namespace of this test process only
// (root: CI runs as root; skipped otherwise).
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "../common/skip.hpp"
#include "../common/spawn.hpp"
#include "../common/train_fixture.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "train_ranks.hpp"

namespace fs = std::filesystem;

namespace {

// A tmpfs of `megabytes` at `dir`, visible to this process and its children only.
bool private_tmpfs(const std::string& dir, int megabytes) {
  static bool unshared = false;
  if (!unshared) {
    if (::unshare(CLONE_NEWNS) != 0) {
      BOOST_TEST_MESSAGE("unshare: " << std::strerror(errno));
      return false;
    }
    // So that the tmpfs does not show outside. In a chroot "/" is no mount point and this
    // fails: the tmpfs may then be seen outside while the test runs; it is unmounted after.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      BOOST_TEST_MESSAGE("mount --make-rprivate /: " << std::strerror(errno));
    unshared = true;
  }
  fs::create_directories(dir);
  const std::string opts = "size=" + std::to_string(megabytes) + "m";
  return ::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) == 0;
}

// Fills the file system of `path` to the last byte.
void fill(const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  const std::vector<char> block(1 << 16, 'x');
  while (f.write(block.data(), std::streamsize(block.size()))) {
  }
  // the last partial block: one byte at a time until nothing more goes in
  f.clear();
  for (int i = 0; i < (1 << 16) && f.put('x') && f.flush(); ++i) {
  }
}

std::vector<std::string> leftovers(const std::string& rank_dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(rank_dir)) {
    const std::string n = e.path().filename().string();
    if (n.find(".tmp") != std::string::npos || n.find(".old-") != std::string::npos) out.push_back(n);
  }
  return out;
}

pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

bool root_or_skip() { return testskip::require(::geteuid() == 0, "a tmpfs in a mount namespace needs root (CI runs as root)"); }

}  // namespace

BOOST_AUTO_TEST_SUITE(disk_trouble)

BOOST_AUTO_TEST_CASE(a_failed_periodic_save_is_logged_and_the_next_one_succeeds) {
  if (!root_or_skip()) return;
  const std::string out = traintest::run_dir("fulldisk");
  BOOST_REQUIRE(private_tmpfs(out, 160));  // 20 checkpoints of the tiny model: 70 MB
  const std::string filler = out + "/filler";
  fill(filler);
  auto p = nettest::spawn(traintest::train_argv({"--out", out, "--steps", "60", "--save-every", "3", "--metrics",
                                                 nettest::scratch_dir() + "/fulldisk.jsonl"}),
                          "fulldisk");
  // Space comes back once the first save has failed.
  const bool failed_once = nettest::wait_until(
      [&] { return nettest::contains(p.err() + p.out(), "not saved: "); }, 120);
  fs::remove(filler);
  nettest::wait_one(p, 300);
  const std::string log = p.err() + p.out();
  BOOST_REQUIRE_MESSAGE(failed_once, log);
  BOOST_TEST(p.exit_code == 0, log);
  BOOST_TEST(nettest::contains(log, "checkpoint of step 3 not saved: "), log);
  BOOST_TEST(nettest::contains(log, "No space left on device"), log);
  BOOST_TEST(nettest::contains(log, "training goes on, the next save (step 6) tries again (the newest checkpoint on disk: none yet)"), log);
  // Later saves went through, the final one too, and every checkpoint there is whole.
  const auto steps = rt::train::checkpoint_steps(out, 0);
  BOOST_REQUIRE(!steps.empty());
  BOOST_TEST(steps.back() == 60);
  BOOST_TEST(steps.front() > 3);
  for (int64_t s : steps) BOOST_CHECK_NO_THROW(rt::train::verify_checkpoint(out + "/rank0/" + rt::train::step_dir_name(s)));
  BOOST_TEST(leftovers(out + "/rank0").empty());
  ::umount2(out.c_str(), MNT_DETACH);
}

// A full disk under the metrics file costs records, not the run: it is said once, training
// and the checkpoints go on, and the file is written again when space comes back.
BOOST_AUTO_TEST_CASE(a_full_disk_under_the_metrics_file_is_said_and_the_run_goes_on) {
  if (!root_or_skip()) return;
  const std::string dir = traintest::run_dir("fullmetrics"), out = traintest::run_dir("fullmetrics-run");
  BOOST_REQUIRE(private_tmpfs(dir, 1));
  const std::string filler = dir + "/filler";
  fill(filler);
  auto p = nettest::spawn(traintest::train_argv({"--out", out, "--steps", "40", "--eval-every", "0", "--metrics",
                                                 dir + "/metrics.jsonl"}),
                          "fullmetrics");
  const bool said = nettest::wait_until([&] { return nettest::contains(p.err(), "cannot write the metrics file"); }, 120);
  fs::remove(filler);
  nettest::wait_one(p, 300);
  const std::string log = p.err() + p.out();
  BOOST_REQUIRE_MESSAGE(said, log);
  BOOST_TEST(p.exit_code == 0, log);
  BOOST_TEST(nettest::contains(log, "(No space left on device); training goes on"), log);
  BOOST_TEST(nettest::contains(log, "is written again"), log);
  // said once per outage, not once per step
  size_t times = 0;
  for (size_t at = 0; (at = log.find("cannot write the metrics file", at)) != std::string::npos; ++at) ++times;
  BOOST_TEST(times == 1u);
  BOOST_TEST(rt::train::checkpoint_steps(out, 0).back() == 40);
  const auto records = traintest::metric_records(dir + "/metrics.jsonl");
  BOOST_REQUIRE(!records.empty());
  BOOST_TEST(records.back()["step"] == 40);
  ::umount2(dir.c_str(), MNT_DETACH);
}

BOOST_AUTO_TEST_CASE(a_failed_final_save_exits_1_and_leaves_no_partial_checkpoint) {
  if (!root_or_skip()) return;
  const std::string out = traintest::run_dir("fullfinal");
  BOOST_REQUIRE(private_tmpfs(out, 16));
  fill(out + "/filler");
  auto p = nettest::spawn(traintest::train_argv({"--out", out, "--steps", "3", "--metrics",
                                                 nettest::scratch_dir() + "/fullfinal.jsonl"}),
                          "fullfinal");
  nettest::wait_one(p, 300);
  const std::string log = p.err() + p.out();
  BOOST_TEST(p.exit_code == 1, log);
  BOOST_TEST(nettest::contains(log, "No space left on device"), log);
  BOOST_TEST(rt::train::checkpoint_steps(out, 0).empty());
  if (fs::exists(out + "/rank0")) BOOST_TEST(leftovers(out + "/rank0").empty());
  ::umount2(out.c_str(), MNT_DETACH);
}

BOOST_AUTO_TEST_CASE(what_a_killed_save_left_is_cleaned_up_at_the_next_start) {
  const std::string out = traintest::run_dir("leftover");
  fs::remove_all(out);
  auto first = nettest::spawn(traintest::train_argv({"--out", out, "--steps", "4", "--save-every", "2"}), "leftover0");
  nettest::wait_one(first, 300);
  BOOST_REQUIRE_MESSAGE(first.exit_code == 0, first.err());
  const std::string rank0 = out + "/rank0";
  // As a SIGKILL at three moments would leave it: a save half-written by a process that is
  // gone, a stale set-aside copy of a step that is in place, and a re-save of step 4 killed
  // between setting the old copy aside and putting the new one in.
  const std::string half = rank0 + "/.step_000006.tmp-" + std::to_string(dead_pid());
  fs::create_directories(half);
  std::ofstream(half + "/model.safetensors.tmp.1") << "partial";
  fs::copy(rank0 + "/step_000002", rank0 + "/step_000002.old-77", fs::copy_options::recursive);
  fs::rename(rank0 + "/step_000004", rank0 + "/step_000004.old-78");

  auto second = nettest::spawn(traintest::train_argv({"--out", out, "--steps", "6", "--resume"}), "leftover1");
  nettest::wait_one(second, 300);
  const std::string log = second.err() + second.out();
  BOOST_TEST(second.exit_code == 0, log);
  BOOST_TEST(nettest::contains(log, "removed " + half + ", a checkpoint whose save never finished"), log);
  BOOST_TEST(nettest::contains(log, "removed " + rank0 + "/step_000002.old-77, an old copy of " + rank0 + "/step_000002"), log);
  BOOST_TEST(nettest::contains(log, "restored " + rank0 + "/step_000004 from " + rank0 + "/step_000004.old-78"), log);
  BOOST_TEST(nettest::contains(log, "resumed from " + rank0 + "/step_000004 (step 4)"), log);
  BOOST_TEST(leftovers(rank0).empty());
  BOOST_TEST((rt::train::checkpoint_steps(out, 0) == std::vector<int64_t>{2, 4, 6}));
}

// --keep-checkpoints 2: a long run's disk holds two checkpoints, the newest, whatever its
// length; a resumed run goes on pruning from where it is.
BOOST_AUTO_TEST_CASE(keep_checkpoints_bounds_what_a_run_leaves_on_disk) {
  const std::string out = traintest::run_dir("keep");
  fs::remove_all(out);
  auto first = nettest::spawn(
      traintest::train_argv({"--out", out, "--steps", "12", "--save-every", "2", "--keep-checkpoints", "2", "--stop-after", "8"}),
      "keep0");
  nettest::wait_one(first, 300);
  BOOST_REQUIRE_MESSAGE(first.exit_code == 0, first.err());
  BOOST_TEST((rt::train::checkpoint_steps(out, 0) == std::vector<int64_t>{6, 8}), first.err());
  BOOST_TEST(nettest::contains(first.err() + first.out(), "removed the checkpoint of step 4 (--keep-checkpoints 2)"));
  auto second = nettest::spawn(
      traintest::train_argv({"--out", out, "--steps", "12", "--save-every", "2", "--keep-checkpoints", "2", "--resume"}), "keep1");
  nettest::wait_one(second, 300);
  BOOST_REQUIRE_MESSAGE(second.exit_code == 0, second.err());
  BOOST_TEST((rt::train::checkpoint_steps(out, 0) == std::vector<int64_t>{10, 12}), second.err());
  BOOST_TEST(leftovers(out + "/rank0").empty());
  rt::train::verify_checkpoint(out + "/rank0/step_000012");
}

// A keyed 2-rank job of 120 steps (a checkpoint every 10) on loopback, each rank started
// under `prlimit --nofile=LIMIT`, while tools/bench/conn_flood.py holds `hold` keyless
// connections to rank 0's port and opens 200 more a second for 15 s. Checks that the job
// lost nothing (both exit 0, every checkpoint saved and valid, no "Too many open files")
// and returns the most descriptors rank 0 held meanwhile (sampled).
size_t flood_costs_no_checkpoint(const std::string& name, int port, const std::string& limit, int hold,
                                 const std::function<void(pid_t)>& while_training = {}) {
  const std::string out = traintest::run_dir(name);
  fs::remove_all(out);
  const std::vector<int> batches = {2, 2};
  std::vector<nettest::Proc> ranks;
  for (size_t r = 0; r < 2; ++r) {
    std::vector<std::string> more = {"--steps", "120", "--save-every", "10", "--eval-every", "0", "--no-progress"};
    const auto flags = traintest::rank_flags(batches, r, port);
    more.insert(more.end(), flags.begin(), flags.end());
    std::vector<std::string> argv = {"prlimit", "--nofile=" + limit, "--"};
    const auto train = traintest::base_args(name, more);
    argv.insert(argv.end(), train.begin(), train.end());
    ranks.push_back(nettest::spawn(argv, name + "-r" + std::to_string(r)));
  }
  BOOST_REQUIRE_MESSAGE(traintest::wait_for_steps(out + "/metrics.jsonl", 2, 120), ranks[0].err());
  if (while_training) while_training(ranks[0].pid);  // prlimit execs the rank: the same pid
  const char* python = std::getenv("RINGTRAIN_PYTHON");
  const std::string root = std::getenv("RINGTRAIN_SOURCE_ROOT") ? std::getenv("RINGTRAIN_SOURCE_ROOT") : ".";
  auto flood = nettest::spawn({python ? python : "/usr/bin/python3", root + "/tools/bench/conn_flood.py",
                               "127.0.0.1:" + std::to_string(port), "--hold", std::to_string(hold), "--rate", "200",
                               "--seconds", "15"},
                              name + "-flood");
  size_t most_fds = 0;
  const std::string fd_dir = "/proc/" + std::to_string(ranks[0].pid) + "/fd";
  nettest::wait_until([&] {
    std::error_code ec;
    size_t n = 0;
    for (auto it = fs::directory_iterator(fd_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) ++n;
    most_fds = std::max(most_fds, n);
    return nettest::wait_exit(flood, 0);  // reaped once done
  }, 40);
  BOOST_TEST_MESSAGE(name << ": rank 0 held at most " << most_fds << " descriptors during the flood");
  nettest::wait_all(ranks, 300);
  nettest::wait_one(flood, 30);
  const std::string log0 = ranks[0].err() + ranks[0].out();
  BOOST_TEST_INFO(log0 << "\nflood: " << flood.out() << flood.err());
  BOOST_TEST(ranks[0].exit_code == 0);
  BOOST_TEST(ranks[1].exit_code == 0, ranks[1].err());
  BOOST_TEST(!nettest::contains(log0, "Too many open files"));
  BOOST_TEST(!nettest::contains(log0, "not saved"));
  // The flood was real: thousands of connections were open at once, while the job trained.
  const std::string said = flood.out();
  const auto at = said.find("most open ");
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, said + flood.err());
  BOOST_TEST(std::stoi(said.substr(at + 10)) >= std::min(hold, 2000), said);
  for (int r = 0; r < 2; ++r) {
    const auto steps = rt::train::checkpoint_steps(out, r);
    BOOST_TEST(steps.size() == 12u, "rank " << r << " has " << steps.size() << " checkpoints");
    for (int64_t s : steps) BOOST_CHECK_NO_THROW(rt::train::verify_checkpoint(out + "/rank" + std::to_string(r) + "/" + rt::train::step_dir_name(s)));
  }
  return most_fds;
}

// Descriptors are a disk's cousin: at systemd's soft open-file limit (1024), strangers
// without the key who hold 5,000 connections to rank 0's port and open 200 more a second
// must cost the job no checkpoint. (Before the rank raised its soft limit, 1,200 held
// connections made its next save fail with "Too many open files".)
BOOST_AUTO_TEST_CASE(strangers_flooding_the_port_cost_no_checkpoint) {
  rlimit ours{};
  BOOST_REQUIRE(::getrlimit(RLIMIT_NOFILE, &ours) == 0);
  if (!testskip::require(ours.rlim_max >= 8192, "the hard open-file limit is below 8192: no room for the flood")) return;
  flood_costs_no_checkpoint("flood", nettest::port_base(3), "1024:", 5000, [&](pid_t rank0) {
    // Started at 1024, the rank took the hard limit for itself.
    std::ifstream limits("/proc/" + std::to_string(rank0) + "/limits");
    std::string line, open_files;
    while (std::getline(limits, line))
      if (line.rfind("Max open files", 0) == 0) open_files = line;
    const std::string hard = ours.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(ours.rlim_max);
    BOOST_TEST(nettest::contains(open_files, " " + hard + " "), open_files);
  });
}

// Where the hard limit is 1024 too (the rank cannot raise it), 2,000 held connections would
// take every descriptor: at most half the limit (512) may wait to authenticate at once, the
// rest are shut down as they are accepted, and the checkpoints keep their descriptors.
// Without that bound this fails (a save "not saved: Too many open files").
BOOST_AUTO_TEST_CASE(strangers_cannot_take_the_descriptors_the_checkpoints_need) {
  const size_t most = flood_costs_no_checkpoint("flood-hard", nettest::port_base(3) + 2, "1024:1024", 2000);
  BOOST_TEST(most < 1024u, "rank 0 held " << most << " descriptors");
}

BOOST_AUTO_TEST_SUITE_END()
