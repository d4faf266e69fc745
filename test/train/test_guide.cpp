// The README's two-host guide, run as written on two network-namespace hosts whose
// firewall drops every inbound connection: the guide's keygen command makes the job key,
// its nftables command opens the range, its two train commands train, its status/stop
// commands watch and stop the job, and --resume continues. Commands are read from README.md (the blocks after the
// <!-- guide:... --> markers) so the test and the guide cannot drift apart.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "../common/skip.hpp"
#include "../common/netns_hosts.hpp"
#include "../common/spawn.hpp"
#include "../common/train_fixture.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace fs = std::filesystem;
using nettest::Proc;

namespace {

// The shell commands of the first ```sh block after `marker`, continuation lines joined,
// each with the "# ..." comment line that preceded it.
std::vector<std::pair<std::string, std::string>> guide_block(const std::string& marker) {
  std::ifstream in(std::string(std::getenv("RINGTRAIN_SOURCE_ROOT")) + "/README.md");
  std::string line, comment, cmd;
  bool found = false, inside = false;
  std::vector<std::pair<std::string, std::string>> out;
  while (std::getline(in, line)) {
    if (!found) {
      found = line.find("<!-- guide:" + marker + " -->") != std::string::npos;
      continue;
    }
    if (!inside) {
      if (line.rfind("```sh", 0) == 0) inside = true;
      continue;
    }
    if (line.rfind("```", 0) == 0) break;
    if (line.rfind("#", 0) == 0) {
      comment = line;
      continue;
    }
    const bool cont = !line.empty() && line.back() == '\\';
    cmd += cont ? line.substr(0, line.size() - 1) : line;
    if (!cont) {
      out.emplace_back(comment, cmd);
      cmd.clear();
    }
  }
  BOOST_REQUIRE_MESSAGE(!out.empty(), "README.md has no sh block after <!-- guide:" << marker << " -->");
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(guide)

BOOST_AUTO_TEST_CASE(two_host_guide_runs_as_written) {
  if (!testskip::require(geteuid() == 0, "network namespaces need root (CI runs as root)")) return;
  nettest::NetnsHosts hosts(2, "g");
  const std::string bin = nettest::ringtrain_path(), data = traintest::prepared_data();
  const std::string run = nettest::scratch_dir() + "/guide-run";
  const std::string key = nettest::scratch_dir() + "/guide.key";
  // Each host: the user's firewall, dropping everything inbound but loopback and replies.
  for (int i = 0; i < 2; ++i) {
    std::string out;
    const std::string fw = "printf '%s\\n' 'table inet filter {' ' chain input {' "
                           "'  type filter hook input priority 0; policy drop;' '  iif lo accept' "
                           "'  ct state established,related accept' ' }' '}' | ip netns exec " + hosts.ns(i) + " nft -f -";
    BOOST_REQUIRE_MESSAGE(nettest::run_shell(fw, &out) == 0, out);
    // The guide's nftables commands (the per-source limits and the port range), as written.
    for (const auto& [comment, cmd] : guide_block("firewall"))
      BOOST_REQUIRE_MESSAGE(nettest::run_shell("ip netns exec " + hosts.ns(i) + " " + cmd, &out) == 0, cmd << ": " << out);
  }
  // The guide's two train commands, with the guide's addresses mapped onto the hosts.
  auto adapt = [&](std::string c) {
    // The guide's commands call the installed `ringtrain` (or build/ringtrain): the one under test.
    if (c.rfind("ringtrain ", 0) == 0) c = bin + c.substr(9);
    else c = replace_all(c, "build/ringtrain", bin);
    c = replace_all(c, "data/kdoc", data);
    c = replace_all(c, "runs/d4", run);
    c = replace_all(c, "job.key", key);
    c = replace_all(c, "10.0.0.1", "10.99.0.1");
    c = replace_all(c, "10.0.0.2", "10.99.0.2");
    return c;
  };
  // The guide's key command, as written (both hosts share this file system: no copy needed).
  const auto key_cmds = guide_block("key");
  BOOST_REQUIRE(key_cmds[0].second.find("keygen") != std::string::npos);
  std::string key_out;
  BOOST_REQUIRE_MESSAGE(nettest::run_shell(adapt(key_cmds[0].second), &key_out) == 0, key_out);
  const auto starts = guide_block("start");
  BOOST_REQUIRE_EQUAL(starts.size(), 2u);
  auto launch = [&](const std::string& extra) {
    std::vector<Proc> ranks;
    for (int i = 0; i < 2; ++i) {
      BOOST_REQUIRE(starts[size_t(i)].first.find(i == 0 ? "10.0.0.1" : "10.0.0.2") != std::string::npos);
      const std::string cmd = "exec ip netns exec " + hosts.ns(i) + " " + adapt(starts[size_t(i)].second) + extra;
      ranks.push_back(nettest::spawn({"/bin/sh", "-c", cmd}, "guide" + std::to_string(i)));
    }
    return ranks;
  };
  auto ranks = launch("");
  // Wait for a few steps, then the guide's status and stop, from host 0.
  const std::string metrics = run + "/metrics.jsonl";
  const bool stepping =
      nettest::wait_until([&] { return fs::exists(metrics) && traintest::losses(metrics).size() >= 3; }, 120);
  BOOST_REQUIRE_MESSAGE(stepping, ranks[0].err() + ranks[1].err());
  const auto control = guide_block("control");
  BOOST_REQUIRE_EQUAL(control.size(), 2u);
  std::string out;
  BOOST_TEST(nettest::run_shell("ip netns exec " + hosts.ns(0) + " " + adapt(control[0].second), &out) == 0, out);
  BOOST_TEST(out.find("rank 1:") != std::string::npos, out);
  BOOST_TEST(nettest::run_shell("ip netns exec " + hosts.ns(0) + " " + adapt(control[1].second), &out) == 0, out);
  nettest::wait_all(ranks, 120);
  for (auto& p : ranks) BOOST_TEST(p.exit_code == 0, p.err());
  const auto s0 = rt::train::checkpoint_steps(run, 0), s1 = rt::train::checkpoint_steps(run, 1);
  BOOST_REQUIRE(!s0.empty() && !s1.empty());
  BOOST_TEST(s0.back() == s1.back());
  // The guide: start every rank again with the same command plus --resume.
  const int64_t stopped = s0.back();
  auto again = launch(" --resume --stop-after " + std::to_string(stopped + 2));
  nettest::wait_all(again, 300);
  for (auto& p : again) BOOST_TEST(p.exit_code == 0, p.err());
  BOOST_TEST(rt::train::checkpoint_steps(run, 1).back() == stopped + 2);
  BOOST_TEST(again[1].err().find("resumed from") != std::string::npos, again[1].err());
}

BOOST_AUTO_TEST_SUITE_END()
