// The rows of the README's troubleshooting table that no other test triggers, each with its
// exact message (see readme_messages.hpp). The other rows are checked where their situation
// is set up anyway:
//   config mismatch          train_distributed/mismatched_flags_are_named_on_every_rank
//   lost rank                train_distributed/killed_rank_..., silent_rank_...
//   --resume of another model  train_bad_input/checkpoint_of_another_config_is_refused_and_kept
//   --data not a directory   train_bad_input/missing_data_dir
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "../net/spawn.hpp"
#include "readme_messages.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "train_fixture.hpp"

namespace fs = std::filesystem;
namespace readme = traintest::readme;
using nettest::Proc;
using traintest::run_dir;

namespace {

Proc run(const std::vector<std::string>& argv, const std::string& tag, double deadline_s = 120) {
  Proc p = nettest::spawn(argv, tag);
  nettest::wait_one(p, deadline_s);
  return p;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// How the port's holder is named: /proc/PID/cmdline with spaces between the arguments, cut
// to 120 characters.
std::string command_line(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

std::string regex_escape(const std::string& s) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(s, special, R"(\$&)");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(troubleshooting)

BOOST_AUTO_TEST_CASE(port_in_use_names_the_process_that_holds_it) {
  BOOST_TEST(readme::has("`" + readme::port_in_use("29500", "10.0.0.1:29500", 0, "pid 1234 (build/ringtrain train ...)") + "`"));
  const int port = nettest::port_base(0);
  const std::string p = std::to_string(port);
  // The holder: rank 0 of a job whose rank 1 never comes; it binds its port and waits.
  const auto holder_argv = traintest::train_argv({"--out", run_dir("holder"), "--rank", "0", "--peers",
                                                  nettest::loopback_peers(2, port), "--connect-timeout", "120"});
  Proc holder = nettest::spawn(holder_argv, "holder");
  const bool bound = nettest::wait_until(
      [&] {
        std::string ss;
        return nettest::run_shell("ss -Hltn 'sport = :" + p + "'", &ss) == 0 && contains(ss, ":" + p + " ");
      },
      60);
  BOOST_REQUIRE_MESSAGE(bound, "the holder never bound port " << p << ": " << holder.err());
  // A second job's rank 0 on the same port.
  Proc intruder = run(traintest::train_argv({"--out", run_dir("intruder"), "--rank", "0", "--peers",
                                             "127.0.0.1:" + p + ",127.0.0.1:" + std::to_string(port + 1), "--connect-timeout", "5"}),
                      "intruder");
  ::kill(holder.pid, SIGKILL);
  nettest::wait_one(holder, 10);
  const std::string want = readme::port_in_use(p, "127.0.0.1:" + p, 0,
                                               "pid " + std::to_string(holder.pid) + " (" + command_line(holder_argv) + ")");
  BOOST_TEST(intruder.exit_code == 1, intruder.err());
  BOOST_TEST(contains(intruder.err(), want + "\n"), "want: " << want << "\ngot: " << intruder.err());
}

BOOST_AUTO_TEST_CASE(rank_that_never_joins_is_named_after_the_connect_timeout) {
  BOOST_TEST(readme::has("`" + readme::never_joined(1, "10.0.0.2:29500", "120.0") + "`"));
  const int port = nettest::port_base(1);
  Proc alone = run(traintest::train_argv({"--out", run_dir("alone"), "--rank", "0", "--peers",
                                          nettest::loopback_peers(2, port), "--connect-timeout", "2"}),
                   "alone");
  const std::string want = readme::never_joined(1, "127.0.0.1:" + std::to_string(port + 1), "2.0");
  BOOST_TEST(alone.exit_code == 1, alone.err());
  BOOST_TEST(contains(alone.err(), want + "\n"), "want: " << want << "\ngot: " << alone.err());
}

// A checkpoint whose weights were damaged on disk: eval and sample refuse it (exit 2, one
// line naming the file), and --resume skips it for the newest one that verifies.
BOOST_AUTO_TEST_CASE(corrupt_checkpoint_is_refused_by_eval_and_sample_and_skipped_by_resume) {
  const std::string corrupt_row = readme::corrupt_file("...", "model.safetensors");
  BOOST_TEST(readme::has("`" + corrupt_row + "` | `--resume` already skips it and uses an older one; `eval`/`sample` refuse it"));
  const std::vector<std::string> run_flags = {"--out", run_dir("corrupt"), "--steps", "4", "--save-every", "2", "--eval-every", "0"};
  Proc first = run(traintest::train_argv(run_flags), "corrupt-train", 300);
  BOOST_REQUIRE_MESSAGE(first.exit_code == 0, first.err());
  const std::string older = run_dir("corrupt") + "/rank0/step_000002", newest = run_dir("corrupt") + "/rank0/step_000004";
  {  // flip one byte in the middle of the weights; the size stays right
    const std::string weights = newest + "/model.safetensors";
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(fs::file_size(weights) / 2));
    const char c = char(f.peek());
    f.seekp(std::streamoff(fs::file_size(weights) / 2));
    f.put(char(c ^ 0x5a));
  }
  const std::string want = readme::corrupt_file(newest, "model.safetensors");
  const std::string bin = nettest::ringtrain_path();
  const std::vector<std::vector<std::string>> refusing = {
      {bin, "eval", "--checkpoint", newest, "--data", traintest::prepared_data(), "--json", "--threads", "1"},
      {bin, "sample", "--checkpoint", newest, "--prompt", "the kernel", "--tokens", "4", "--threads", "1"}};
  for (const auto& argv : refusing) {
    Proc p = run(argv, argv[1]);
    BOOST_TEST_INFO(argv[1] << ": " << p.err());
    BOOST_TEST(p.exit_code == 2);
    BOOST_TEST(traintest::count_lines(p.err()) == 1);
    BOOST_TEST(contains(p.err(), want + "\n"));
    BOOST_TEST(p.out().empty());
  }
  std::vector<std::string> resume = run_flags;
  resume.push_back("--resume");
  Proc again = run(traintest::train_argv(resume), "corrupt-resume", 300);
  BOOST_REQUIRE_MESSAGE(again.exit_code == 0, again.err());
  BOOST_TEST(contains(again.err(), "skipping " + want + "\n"), again.err());
  BOOST_TEST(contains(again.err(), "resumed from " + older + " (step 2)"), again.err());
  BOOST_CHECK_NO_THROW(rt::train::verify_checkpoint(newest));  // step 4 written again, whole
}

// Checked before training starts; the numbers depend on the machine, the words do not.
BOOST_AUTO_TEST_CASE(device_batch_too_large_for_memory_suggests_one_that_fits) {
  BOOST_TEST(readme::has("`" + readme::too_little_memory("64", "1024", "38.2", "21.2", "35") + "`"));
  Proc p = run(traintest::train_argv({"--out", run_dir("huge"), "--device-batch", "200000"}), "huge");
  BOOST_TEST(p.exit_code == 2, p.err());
  BOOST_TEST(traintest::count_lines(p.err()) == 1, p.err());
  std::string pattern = regex_escape(readme::too_little_memory("200000", "32", "@GB@", "@GB@", "@N@"));
  pattern = std::regex_replace(pattern, std::regex("@GB@"), "[0-9]+\\.[0-9]");
  pattern = std::regex_replace(pattern, std::regex("@N@"), "([0-9]+)");
  std::smatch m;
  const std::string err = p.err();
  BOOST_REQUIRE_MESSAGE(std::regex_search(err, m, std::regex(pattern + "\n")), "want: " << pattern << "\ngot: " << err);
  const long fits = std::stol(m[1].str());
  BOOST_TEST(fits >= 1);
  BOOST_TEST(fits < 200000);
  BOOST_TEST(!fs::exists(run_dir("huge")));
}

BOOST_AUTO_TEST_SUITE_END()
