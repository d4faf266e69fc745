// `ringtrain train` as a user runs it: resume is exact, bad input is refused cleanly.
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

namespace {

using traintest::run_dir;

Proc train(const std::vector<std::string>& extra, const std::string& tag, double deadline_s = 300) {
  Proc p = nettest::spawn(traintest::train_argv(extra), tag);
  nettest::wait_one(p, deadline_s);
  return p;
}


}  // namespace

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

BOOST_AUTO_TEST_SUITE(train_bad_input)

BOOST_AUTO_TEST_CASE(missing_data_dir) {
  std::vector<std::string> argv = {nettest::ringtrain_path(), "train", "--data", run_dir("no-such-dir"), "--out", run_dir("x")};
  Proc p = nettest::spawn(argv, "nodata");
  nettest::wait_one(p, 60);
  BOOST_TEST(p.exit_code == 2);
  BOOST_TEST(traintest::count_lines(p.err()) == 1, p.err());
  // The troubleshooting row (docs/troubleshooting.md), with this run's directory.
  BOOST_TEST(traintest::readme::has("`" + traintest::readme::data_not_a_directory("data/kdoc") + "`"));
  BOOST_TEST(p.err().find(traintest::readme::data_not_a_directory(run_dir("no-such-dir")) + "\n") != std::string::npos, p.err());
  BOOST_TEST(!fs::exists(run_dir("x")));
}

BOOST_AUTO_TEST_CASE(truncated_shard) {
  const std::string bad = run_dir("truncated-data");
  fs::create_directories(bad);
  for (const auto& e : fs::directory_iterator(traintest::prepared_data()))
    fs::copy_file(e.path(), fs::path(bad) / e.path().filename(), fs::copy_options::overwrite_existing);
  fs::resize_file(fs::path(bad) / "train.bin", fs::file_size(fs::path(bad) / "train.bin") - 5);
  std::vector<std::string> argv = {nettest::ringtrain_path(), "train", "--data", bad, "--out", run_dir("y")};
  Proc p = nettest::spawn(argv, "truncated");
  nettest::wait_one(p, 60);
  BOOST_TEST(p.exit_code == 2);
  BOOST_TEST(traintest::count_lines(p.err()) == 1, p.err());
  BOOST_TEST(p.err().find("train.bin") != std::string::npos, p.err());
}

BOOST_AUTO_TEST_CASE(checkpoint_of_another_config_is_refused_and_kept) {
  Proc p = train({"--steps", "2", "--out", run_dir("cfg"), "--eval-every", "0"}, "cfg");
  BOOST_REQUIRE_MESSAGE(p.exit_code == 0, p.err());
  const std::string before = traintest::tree_fingerprint(run_dir("cfg"));
  std::vector<std::string> more = {"--steps", "4", "--out", run_dir("cfg"), "--resume", "--depth", "3"};
  Proc q = train(more, "cfg-resume");
  BOOST_TEST(q.exit_code == 2);
  BOOST_TEST(traintest::count_lines(q.err()) == 1, q.err());
  // The troubleshooting row (docs/troubleshooting.md) names the checkpoint; the line goes on with both configs.
  BOOST_TEST(traintest::readme::has("`" + traintest::readme::other_model("runs/d4/rank0/step_000050") + "...)`"));
  BOOST_TEST(q.err().find(traintest::readme::other_model(run_dir("cfg") + "/rank0/step_000002")) != std::string::npos, q.err());
  BOOST_TEST(q.err().find("); use the flags of that run or another --out\n") != std::string::npos, q.err());
  BOOST_TEST(traintest::tree_fingerprint(run_dir("cfg")) == before);
}

// --long-docs crop trains (nanochat's packing) and its checkpoint resumes only as crop: the
// loader's saved pieces would name other tokens.
BOOST_AUTO_TEST_CASE(crop_packing_resumes_only_as_crop) {
  Proc p = train({"--steps", "2", "--out", run_dir("crop"), "--eval-every", "0", "--long-docs", "crop"}, "crop");
  BOOST_REQUIRE_MESSAGE(p.exit_code == 0, p.err());
  BOOST_TEST(p.err().find("packing: --long-docs crop") != std::string::npos, p.err());
  const std::string before = traintest::tree_fingerprint(run_dir("crop"));
  Proc q = train({"--steps", "4", "--out", run_dir("crop"), "--resume", "--eval-every", "0", "--long-docs", "pieces"}, "crop-resume");
  BOOST_TEST(q.exit_code == 2);
  BOOST_TEST(traintest::count_lines(q.err()) == 1, q.err());
  BOOST_TEST(q.err().find("resume with the same data, seed, T, --long-docs and ranks") != std::string::npos, q.err());
  BOOST_TEST(traintest::tree_fingerprint(run_dir("crop")) == before);
}

BOOST_AUTO_TEST_CASE(bad_flags) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--sync", "sometimes"}, "--sync"},
      {{"--steps", "5", "--stop-after", "5"}, "--stop-after"},
      {{"--wire", "fp8"}, "--wire"},
      {{"--wire", "int8", "--sync", "grad"}, "--wire int8 applies to --sync avg and --sync diloco"},
      {{"--wire", "int4", "--sync", "grad"}, "--wire int4 applies to --sync avg and --sync diloco"},
      {{"--sync", "avg", "--sync-every", "4", "--sync-overlap", "--overlap-steps", "5"}, "--overlap-steps"},
      {{"--device-batch", "many"}, "--device-batch 'many' is neither a number of rows nor auto"},
      {{"--device-batch", "auto"}, "--device-batch auto splits --total-batch"},
      {{"--device-batch", "auto", "--total-batch", "100"}, "--device-batch auto splits --total-batch"},
      {{"--rank", "2", "--peers", "127.0.0.1:1,127.0.0.1:2"}, "--rank"},
      {{"--window-pattern", "SXL"}, "window"},
      {{"--depth", "2", "--head-dim", "33"}, "head_dim"},
      {{"--warmdown-ratio", "1.5"}, "--warmdown-ratio"},
      {{"--matrix-lr", "-1"}, "--matrix-lr"},
      {{"--steps", "soon"}, "--steps 'soon' is neither a number of steps nor auto"},
      {{"--total-batch", "auto", "--target-param-data-ratio", "0"}, "--total-batch auto"},
      {{"--aspect-ratio", "0"}, "--aspect-ratio"},
      {{"--long-docs", "trim"}, "--long-docs trim is not a packing; use pieces"},
      {{"--no-such-flag"}, "no-such-flag"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> more = c.args;
    more.push_back("--out");
    more.push_back(run_dir("bad"));
    Proc p = train(more, "badflag");
    BOOST_TEST(p.exit_code == 2, c.says << ": exit " << p.exit_code);
    BOOST_TEST(traintest::count_lines(p.err()) == 1, p.err());
    BOOST_TEST(p.err().find(c.says) != std::string::npos, c.says << " not in: " << p.err());
  }
  BOOST_TEST(!fs::exists(run_dir("bad")));
}

BOOST_AUTO_TEST_SUITE_END()
