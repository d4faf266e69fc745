// `ringtrain train` given bad input: refused cleanly, one line naming the problem and the
// fix, a non-zero exit, nothing half-written.
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
