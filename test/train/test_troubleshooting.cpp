// The rows of the troubleshooting table (docs/troubleshooting.md) that no other test triggers, each with its
// exact message (see readme_messages.hpp). The other rows are checked where their situation
// is set up anyway:
//   config mismatch          train_distributed/mismatched_flags_are_named_on_every_rank
//   lost rank                train_distributed/killed_rank_..., silent_rank_...
//   the re-form watchdog     elastic/watchdog_stops_a_ring_that_keeps_breaking
//   --resume of another model  train_bad_input/checkpoint_of_another_config_is_refused_and_kept
//   --data not a directory   train_bad_input/missing_data_dir
//   connection cut (integrity)  net/hostile/a_flipped_byte_breaks_the_connection_and_names_the_peer
//   the job finished without this rank  elastic/rank_restarted_after_the_job_finished_is_told_it_is_done
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "../common/spawn.hpp"
#include "../common/readme_messages.hpp"
#include "../common/train_fixture.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/train/checkpoint.hpp"

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

// True once something listens on TCP `port` (a rank binds its port before it waits for the others).
bool port_bound(int port, double deadline_s) {
  const std::string p = std::to_string(port);
  return nettest::wait_until(
      [&] {
        std::string ss;
        return nettest::run_shell("ss -Hltn 'sport = :" + p + "'", &ss) == 0 && contains(ss, ":" + p + " ");
      },
      deadline_s);
}

// A key file of this test process's, with the given mode.
std::string key_with_mode(const std::string& name, mode_t mode) {
  const std::string path = nettest::key_file(name);
  BOOST_REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
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
  BOOST_REQUIRE_MESSAGE(port_bound(port, 60), "the holder never bound port " << p << ": " << holder.err());
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

// Checked before any socket exists: nothing is sent to the listed addresses.
BOOST_AUTO_TEST_CASE(peers_beyond_loopback_without_a_key_are_refused_before_connecting) {
  BOOST_TEST(readme::has("`" + readme::keyless_beyond_loopback("10.0.0.2:29500") + "..." + readme::keyless_beyond_loopback_fix() + "`"));
  const int port = nettest::port_base(2);
  // Rank 0 is on loopback, rank 1 beyond it (never reached: the check comes first).
  const std::string remote = "10.99.77.2:" + std::to_string(port + 1);
  Proc p = run(traintest::train_argv({"--out", run_dir("keyless"), "--rank", "0", "--peers",
                                      "127.0.0.1:" + std::to_string(port) + "," + remote, "--connect-timeout", "5"}),
               "keyless");
  const std::string err = p.err();
  BOOST_TEST(p.exit_code == 2, err);
  const auto head = err.find(readme::keyless_beyond_loopback(remote));
  BOOST_TEST(head != std::string::npos, "want: " << readme::keyless_beyond_loopback(remote) << "\ngot: " << err);
  BOOST_TEST(contains(err, readme::keyless_beyond_loopback_fix() + "\n"), err);
  BOOST_TEST(p.seconds < 60);  // it did not wait for rank 1
}

BOOST_AUTO_TEST_CASE(key_file_others_can_read_is_refused) {
  BOOST_TEST(readme::has("`" + readme::key_file_too_open("job.key", "644") + "`"));
  const std::string key = key_with_mode("open.key", 0644);
  const int port = nettest::port_base(2);
  Proc p = run(traintest::train_argv({"--out", run_dir("open-key"), "--rank", "0", "--peers", nettest::loopback_peers(2, port),
                                      "--key", key}),
               "open-key");
  const std::string want = readme::key_file_too_open(key, "644");
  BOOST_TEST(p.exit_code == 2, p.err());
  BOOST_TEST(traintest::count_lines(p.err()) == 1, p.err());
  BOOST_TEST(contains(p.err(), want + "\n"), "want: " << want << "\ngot: " << p.err());
  BOOST_TEST(!fs::exists(run_dir("open-key")));
}

// A rank of a job with a key waits for its peer; status and stop without the key, or with
// another one, are refused at once and the rank goes on waiting.
BOOST_AUTO_TEST_CASE(status_and_stop_without_the_jobs_key_are_refused) {
  BOOST_TEST(readme::has("`" + readme::refused_without_key("10.0.0.1:29500") + "` (or `refused this key`)"));
  const int port = nettest::port_base(3);
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Proc rank0 = nettest::spawn(traintest::train_argv({"--out", run_dir("keyed"), "--rank", "0", "--peers",
                                                     nettest::loopback_peers(2, port), "--key",
                                                     key_with_mode("job.key", 0600), "--connect-timeout", "60"}),
                              "keyed");
  BOOST_REQUIRE_MESSAGE(port_bound(port, 60), "rank 0 never bound port " << port << ": " << rank0.err());
  const std::string bin = nettest::ringtrain_path();
  for (const std::string verb : {"status", "stop"}) {
    Proc bare = run({bin, verb, addr}, verb + "-nokey", 30);
    BOOST_TEST_INFO(verb << ": " << bare.err());
    BOOST_TEST(bare.exit_code == 1);
    BOOST_TEST(contains(bare.err(), readme::refused_without_key(addr) + "\n"), "want: " << readme::refused_without_key(addr));
    BOOST_TEST(bare.seconds < 10);
    Proc other = run({bin, verb, addr, "--key", key_with_mode("other.key", 0600)}, verb + "-otherkey", 30);
    BOOST_TEST_INFO(verb << " --key other.key: " << other.err());
    BOOST_TEST(other.exit_code == 1);
    BOOST_TEST(contains(other.err(), readme::refused_this_key(addr)));
    BOOST_TEST(other.seconds < 10);
  }
  BOOST_TEST(nettest::alive(rank0.pid));  // refused clients do not stop the job
  ::kill(rank0.pid, SIGKILL);
  nettest::wait_one(rank0, 10);
}

// Rank 1 started with another key: each rank names the other as never joined, and says
// why: the process at its address failed the security handshake.
BOOST_AUTO_TEST_CASE(rank_with_another_key_never_joins_and_the_handshake_is_named) {
  BOOST_TEST(readme::has("`" + readme::never_joined_within(1, "10.0.0.2:29500", "120.0") + "..." +
                         readme::failed_handshake_with_key() + "...)`"));
  const int port = nettest::port_base(2);
  const std::string peers = nettest::loopback_peers(2, port);
  std::vector<Proc> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(nettest::spawn(
        traintest::train_argv({"--out", run_dir("twokeys"), "--rank", std::to_string(r), "--peers", peers, "--key",
                               key_with_mode(r == 0 ? "job.key" : "other.key", 0600), "--connect-timeout", "3"}),
        "twokeys" + std::to_string(r)));
  nettest::wait_all(ranks, 60);
  for (int r = 0; r < 2; ++r) {
    const int other = 1 - r;
    const std::string addr = "127.0.0.1:" + std::to_string(port + other);
    const std::string want = readme::never_joined(other, addr, "3.0") + readme::failed_handshake_with_key();
    BOOST_TEST_INFO("rank " << r << ": " << ranks[r].err());
    BOOST_TEST(ranks[r].exit_code == 1);
    BOOST_TEST(contains(ranks[r].err(), want), "want: " << want);
  }
}

// A checkpoint of a ringtrain from before state.safetensors: --resume refuses it (exit 2,
// nothing changed), and eval still reads its weights.
BOOST_AUTO_TEST_CASE(resume_refuses_a_checkpoint_in_the_old_state_layout) {
  BOOST_TEST(readme::has("`" + readme::old_state_layout("runs/d4/rank0/step_000050") + "...`"));
  const std::vector<std::string> run_flags = {"--out", run_dir("old-layout"), "--steps", "2", "--save-every", "2",
                                              "--eval-every", "0"};
  Proc first = run(traintest::train_argv(run_flags), "old-layout-train", 300);
  BOOST_REQUIRE_MESSAGE(first.exit_code == 0, first.err());
  const std::string dir = run_dir("old-layout") + "/rank0/step_000002";
  {  // what the old version wrote: state.bin in place of state.safetensors, listed in meta.json
    fs::rename(dir + "/state.safetensors", dir + "/state.bin");
    const std::string state = rt::io::read_file(dir + "/state.bin");
    auto meta = nlohmann::json::parse(rt::io::read_file(dir + "/meta.json"));
    BOOST_REQUIRE(meta["files"].contains("state.safetensors"));
    meta["files"].erase("state.safetensors");
    meta["files"]["state.bin"] = {{"bytes", state.size()}, {"crc32", rt::train::crc32_of(state.data(), state.size())}};
    std::ofstream(dir + "/meta.json", std::ios::trunc) << meta.dump(2) << "\n";
  }
  BOOST_REQUIRE_NO_THROW(rt::train::verify_checkpoint(dir));  // whole: only its layout is old
  const std::string before = traintest::tree_fingerprint(run_dir("old-layout"));
  std::vector<std::string> resume = run_flags;
  resume[3] = "4";  // to train on: with --steps 2 the job is done already
  resume.push_back("--resume");
  Proc again = run(traintest::train_argv(resume), "old-layout-resume", 300);
  const std::string want = readme::old_state_layout(dir) + readme::old_state_layout_fix();
  BOOST_TEST(again.exit_code == 2, again.err());
  BOOST_TEST(traintest::count_lines(again.err()) == 1, again.err());
  BOOST_TEST(contains(again.err(), want + "\n"), "want: " << want << "\ngot: " << again.err());
  BOOST_TEST(traintest::tree_fingerprint(run_dir("old-layout")) == before);
  Proc eval = run({nettest::ringtrain_path(), "eval", "--checkpoint", dir, "--data", traintest::prepared_data(), "--json",
                   "--threads", "1"},
                  "old-layout-eval");
  BOOST_REQUIRE_MESSAGE(eval.exit_code == 0, eval.err());
  const auto bpb = nlohmann::json::parse(eval.out()).at("val_bpb").get<double>();
  BOOST_TEST(bpb > 0.0);
  BOOST_TEST(bpb < 20.0);
}

BOOST_AUTO_TEST_SUITE_END()
