// `ringtrain train --resume` as a user runs it: a resumed run is exactly the run that was not
// stopped.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "../common/spawn.hpp"
#include "../common/readme_messages.hpp"
#include "../common/train_fixture.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace fs = std::filesystem;
using nettest::Proc;
using traintest::run_dir;
using traintest::train;

BOOST_AUTO_TEST_SUITE(train_resume)

BOOST_AUTO_TEST_CASE(twenty_steps_equal_ten_plus_resume_plus_ten) {
  const std::vector<std::string> common = {"--steps", "20", "--device-batch", "2", "--eval-every", "0"};
  auto args = [&](const std::string& out, std::vector<std::string> more) {
    std::vector<std::string> a = common;
    a.push_back("--out");
    a.push_back(run_dir(out));
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  Proc straight = train(args("straight", {}), "straight");
  BOOST_REQUIRE_MESSAGE(straight.exit_code == 0, straight.err());
  Proc first = train(args("split", {"--stop-after", "10"}), "first");
  BOOST_REQUIRE_MESSAGE(first.exit_code == 0, first.err());
  BOOST_TEST(traintest::losses(run_dir("split") + "/metrics.jsonl").size() == 10u);
  BOOST_TEST(fs::exists(run_dir("split") + "/rank0/step_000010/meta.json"));
  Proc second = train(args("split", {"--resume"}), "second");
  BOOST_REQUIRE_MESSAGE(second.exit_code == 0, second.err());
  BOOST_TEST(second.err().find("resumed from") != std::string::npos);

  const auto a = traintest::losses(run_dir("straight") + "/metrics.jsonl");
  const auto b = traintest::losses(run_dir("split") + "/metrics.jsonl");
  BOOST_REQUIRE(a.size() == 20u);
  BOOST_REQUIRE(b.size() == 20u);
  for (size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i], "step " << i + 1 << ": " << a[i] << " vs " << b[i]);
  // The loss falls on this corpus (the model learns).
  BOOST_TEST(a.back() < a.front() - 0.03);  // it learns, even within the 40-step LR warm-up

  // Started again once the job is done (a supervisor's restart, a reboot with the unit
  // enabled): it says so and exits 0 (Restart=on-failure then leaves it), training nothing,
  // instead of waiting for peers that finished and being restarted forever.
  const auto before = run_dir("split") + "/metrics.jsonl";
  Proc third = train(args("split", {"--resume"}), "third");
  BOOST_TEST(third.exit_code == 0, third.err());
  BOOST_TEST(third.err().find("the job is already done: " + run_dir("split") + "/rank0 holds the checkpoint of step 20 of "
                              "--steps 20; nothing to train") != std::string::npos,
             third.err());
  BOOST_TEST(traintest::readme::has("`the job is already done: runs/d8/rank0 holds the checkpoint of step 5000 of --steps "
                                    "5000; nothing to train` (exit 0)"));
  BOOST_TEST(traintest::losses(before).size() == 20u);
}

// SIGTERM at any moment of training (evaluation, a step, two OpenMP threads busy) stops the run
// cleanly: exit 0 and a checkpoint that verifies. glibc's malloc checking is switched on
// for these runs when available, so heap corruption on the way out fails the test too.
BOOST_AUTO_TEST_CASE(sigterm_at_any_moment_checkpoints_and_exits_0) {
#if defined(__SANITIZE_ADDRESS__)
  const bool malloc_check = false;  // the sanitizer pass checks the heap itself (and must load first)
#else
  const bool malloc_check = fs::exists("/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0");
#endif
  if (malloc_check) {
    setenv("LD_PRELOAD", "libc_malloc_debug.so.0", 1);
    setenv("GLIBC_TUNABLES", "glibc.malloc.check=3", 1);
  }
  const double delays_s[] = {0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.8};
  int k = 0;
  for (double delay : delays_s) {
    const std::string out = run_dir("sigterm" + std::to_string(k));
    Proc p = nettest::spawn(traintest::train_argv({"--steps", "100000", "--eval-every", "5", "--threads", "2", "--out", out}),
                            "sigterm" + std::to_string(k++));
    // From the first metrics line on (before it, the handler may not be installed yet and
    // SIGTERM ends the process with nothing to save).
    nettest::wait_until([&] { return fs::exists(out + "/metrics.jsonl"); }, 30);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    kill(p.pid, SIGTERM);
    nettest::wait_one(p, 60);
    BOOST_TEST(p.exit_code == 0, "SIGTERM after " << delay << " s: exit " << p.exit_code << " signal " << p.signal << "\n" << p.err());
    if (p.exit_code != 0) continue;
    BOOST_TEST(p.err().find("stopped on request") != std::string::npos, p.err());
    std::string newest;
    for (const auto& e : fs::directory_iterator(out + "/rank0")) newest = std::max(newest, e.path().string());
    BOOST_REQUIRE(!newest.empty());
    BOOST_CHECK_NO_THROW(rt::train::verify_checkpoint(newest));
  }
  unsetenv("LD_PRELOAD");
  unsetenv("GLIBC_TUNABLES");
}

BOOST_AUTO_TEST_SUITE_END()
