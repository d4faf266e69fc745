// The README's install path, end to end: build the .deb with tools/package-deb.sh, install
// it with apt, check what it installed, train two ranks on 127.0.0.1 from /usr/bin/ringtrain
// started as ringtrain@.service would start them (its EnvironmentFile, WorkingDirectory
// and ExecStart, read from the installed unit), then purge it and check that every file it
// installed is gone.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/spawn.hpp"
#include "../common/train_fixture.hpp"
#include "../common/skip.hpp"
#include "unit_file.hpp"

namespace fs = std::filesystem;
using nettest::run_shell;

namespace {

std::string sh(const std::string& cmd) {
  std::string out;
  const int rc = run_shell(cmd, &out);
  BOOST_REQUIRE_MESSAGE(rc == 0, "'" + cmd + "' exited " + std::to_string(rc) + ":\n" + out);
  return out;
}

std::string last_line(const std::string& s) {
  std::istringstream in(s);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

std::vector<std::string> lines(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// Whatever happens, the machine ends as it started: job files removed, package purged.
struct Cleanup {
  std::vector<std::string> files;
  ~Cleanup() {
    for (const auto& f : files) fs::remove(f);
    run_shell("dpkg-query -W -f='${Status}' ringtrain 2>/dev/null | grep -q installed && dpkg --purge ringtrain");
  }
};

}  // namespace

// The package test changes the system (installs and purges a package), so it needs root and
// dpkg; without them it is reported as skipped, never as passed.
namespace {

std::string why_not_runnable() {
  if (geteuid() != 0) return "installing a package needs root";
  for (const char* tool : {"/usr/bin/dpkg", "/usr/bin/dpkg-deb", "/usr/bin/dpkg-query", "/usr/bin/apt-get"})
    if (access(tool, X_OK) != 0) return std::string(tool) + " is missing (not a Debian system?)";
  // An installed ringtrain package is someone's: the test would replace and then purge it.
  if (std::system("dpkg-query -W -f='${Status}' ringtrain 2>/dev/null | grep -q 'ok installed'") == 0)
    return "a ringtrain package is installed here; remove it (dpkg --purge ringtrain) to run this test";
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(deb)

BOOST_AUTO_TEST_CASE(package_builds_installs_trains_and_purges_cleanly) {
  if (const std::string why = why_not_runnable(); !testskip::require(why.empty(), why)) return;
  const std::string root = std::getenv("RINGTRAIN_SOURCE_ROOT");
  const std::string build_bin = nettest::ringtrain_path();
  // The package's build directory sits beside the test's: build -> build-deb.
  const std::string deb_build = fs::path(build_bin).parent_path().string() + "-deb";

  // 1. Build it (the first run compiles everything: the time goes to the log).
  const auto t0 = std::chrono::steady_clock::now();
  const std::string built = sh("bash " + root + "/tools/package-deb.sh --build-dir " + deb_build + " 2>&1");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST_MESSAGE("tools/package-deb.sh took " << seconds << " s");
  const std::string deb = last_line(built);
  BOOST_REQUIRE_MESSAGE(fs::exists(deb), "package-deb.sh printed no package path:\n" + built);

  // A portable build: the package must run on any x86-64 host.
  const auto options = nlohmann::json::parse(std::ifstream(deb_build + "/meson-info/intro-buildoptions.json"));
  for (const auto& o : options)
    if (o["name"] == "native") BOOST_TEST(o["value"] == false);

  // 2. Its control fields: runtime libraries only, no build dependencies.
  // The Debian version is the release, then (from git) commit time and revision, so that a
  // newer commit's package upgrades an older one: "0.1.0+git20261201000916.c9ac3473c662".
  const std::string packaged = sh(deb_build + "/ringtrain --version");  // "ringtrain X (git R)\n"
  const std::string release = packaged.substr(10, packaged.find(' ', 10) - 10);
  std::string revision = packaged.substr(packaged.find("(git ") + 5);
  revision = revision.substr(0, revision.find(')'));
  std::replace(revision.begin(), revision.end(), '-', '.');
  const std::string deb_version = sh("dpkg-deb -f " + deb + " Version");
  BOOST_TEST(deb_version.rfind(release, 0) == 0u, deb_version);
  const auto literal = [](const std::string& s) { return std::regex_replace(s, std::regex(R"([.+])"), R"(\$&)"); };
  // ... and the Debian release last (+deb12, +deb13), so packages of two releases never mix.
  const std::string os_tag = "+deb" + sh(". /etc/os-release && printf %s \"${VERSION_ID%%.*}\"");
  if (revision != "unknown")
    BOOST_TEST(std::regex_match(deb_version, std::regex(literal(release) + R"(\+git\d{14}\.)" + literal(revision) +
                                                         literal(os_tag) + "\n")),
               deb_version);
  BOOST_TEST(deb_version.find(os_tag + "\n") != std::string::npos, deb_version);
  BOOST_TEST(sh("dpkg-deb -f " + deb + " Package") == "ringtrain\n");
  BOOST_TEST(sh("dpkg-deb -f " + deb + " Architecture") == sh("dpkg --print-architecture"));
  const std::string depends = sh("dpkg-deb -f " + deb + " Depends");
  for (const char* lib : {"libc6", "libstdc++6", "libgomp1", "libzmq5", "libpcre2-8-0", "zlib1g"})
    BOOST_TEST(depends.find(lib) != std::string::npos, "Depends lacks " << lib << ": " << depends);
  // oneDNN's runtime package is named by its soname, which differs by release: it must be the
  // one that provides the library this system's build links (libdnnl2 on 12, libdnnl3.6 on 13).
  const std::string dnnl_package = last_line(sh(
      "dpkg -S \"$(readlink -f \"$(ldd " + build_bin + " | awk '/libdnnl/ {print $3}')\")\" | cut -d: -f1"));
  BOOST_TEST(dnnl_package.rfind("libdnnl", 0) == 0u, dnnl_package);
  BOOST_TEST(depends.find(dnnl_package) != std::string::npos, "Depends lacks " << dnnl_package << ": " << depends);
  BOOST_TEST(depends.find("-dev") == std::string::npos, "Depends names a -dev package: " << depends);
  BOOST_TEST(sh("dpkg-deb -I " + deb + " conffiles") == "/etc/ringtrain/example.conf\n");

  // 3. Install it as the README says.
  const bool etc_existed = fs::exists("/etc/ringtrain");
  Cleanup cleanup;
  sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends " + fs::absolute(deb).string() +
     " 2>&1");
  std::vector<std::string> installed;  // every file (not directory) the package put on the system
  for (const auto& path : lines(sh("dpkg -L ringtrain")))
    if (fs::is_regular_file(fs::symlink_status(path)) || fs::is_symlink(fs::symlink_status(path))) installed.push_back(path);
  std::string unit;
  for (const auto& p : installed)
    if (fs::path(p).filename() == "ringtrain@.service") unit = p;
  for (const char* want : {"/usr/bin/ringtrain", "/usr/share/man/man1/ringtrain.1.gz", "/etc/ringtrain/example.conf"})
    BOOST_TEST((std::find(installed.begin(), installed.end(), want) != installed.end()), want << " not installed");
  BOOST_REQUIRE_MESSAGE(!unit.empty(), "the package has no ringtrain@.service");

  // 4. The installed binary is the one just packaged (same version and revision), it computes
  // what the test build computes, and its man page documents the commands.
  const std::string bin = "/usr/bin/ringtrain";
  BOOST_TEST(sh(bin + " --version") == packaged);
  BOOST_TEST(sh(bin + " info --depth 2 --json") == sh(build_bin + " info --depth 2 --json"));
  const std::string man = sh("gzip -dc /usr/share/man/man1/ringtrain.1.gz");
  for (const char* cmd : {".SS ringtrain train", ".SS ringtrain data", ".SS ringtrain bench allreduce", "\\-\\-peers"})
    BOOST_TEST(man.find(cmd) != std::string::npos, "man page lacks " << cmd);

  // The unit as systemd reads it (offline: CI has no systemd as PID 1), for a job instance.
  if (fs::exists("/usr/bin/systemd-analyze"))
    sh("systemd-analyze verify --man=no ringtrain@pkgtest.service 2>&1");
  else
    BOOST_TEST_MESSAGE("systemd-analyze is missing: the unit's syntax is not verified");

  // 5. Two ranks started the unit's way: one job file per rank under EnvironmentFile's path,
  // the process in WorkingDirectory (the state directory, here under a scratch root instead
  // of /var/lib), argv from ExecStart with $RINGTRAIN_ARGS split into words.
  const auto service = pkgtest::unit_section(unit, "Service");
  for (const char* key : {"EnvironmentFile", "ExecStart", "WorkingDirectory", "StateDirectory", "DynamicUser"})
    BOOST_REQUIRE_MESSAGE(service.count(key), unit + " has no " + key + "=");
  const std::string state_root = nettest::scratch_dir() + "/state";
  const std::string data = traintest::prepared_data();
  const int port = nettest::port_base(2);
  const std::string peers = nettest::loopback_peers(2, port);
  std::string model;
  for (const auto& f : traintest::tiny_model_flags()) model += " " + f;
  std::vector<nettest::Proc> ranks;
  std::vector<std::string> workdirs;
  for (int r = 0; r < 2; ++r) {
    const std::string job = "pkgtest-" + std::to_string(getpid()) + "-r" + std::to_string(r);
    const std::string env_path = pkgtest::expand_specifiers(service.at("EnvironmentFile"), job, state_root);
    fs::create_directories(fs::path(env_path).parent_path());
    cleanup.files.push_back(env_path);
    std::ofstream(env_path) << "# rank " << r << " of the package test's job\n"
                            << "OMP_NUM_THREADS=1\n"
                            << "RINGTRAIN_ARGS=\"train --data " << data << " --out run" << model << " \\\n"
                            << "  --steps 4 --device-batch 2 --total-batch 0 --rank " << r << " --peers " << peers << "\"\n";
    const auto env = pkgtest::environment_file(env_path);
    const std::string workdir = pkgtest::expand_specifiers(service.at("WorkingDirectory"), job, state_root);
    fs::create_directories(workdir);  // systemd creates it from StateDirectory=
    workdirs.push_back(workdir);
    std::vector<std::string> argv = {"/usr/bin/env", "-C", workdir};
    for (const auto& [k, v] : env) argv.push_back(k + "=" + v);
    const auto exec = pkgtest::exec_argv(service.at("ExecStart"), env);
    BOOST_REQUIRE(!exec.empty());
    BOOST_TEST(exec[0] == bin);
    BOOST_TEST(exec.size() > 10u, "ExecStart expanded to too few words: RINGTRAIN_ARGS was not split");
    argv.insert(argv.end(), exec.begin(), exec.end());
    ranks.push_back(nettest::spawn(argv, "unit" + std::to_string(r)));
  }
  nettest::wait_all(ranks, 300);
  for (auto& p : ranks) BOOST_TEST(p.exit_code == 0, p.err());
  BOOST_TEST(ranks[0].err().find("[rank 0/2]") != std::string::npos, ranks[0].err());
  // --out run is relative: the run lands in the unit's working directory.
  BOOST_TEST(traintest::losses(workdirs[0] + "/run/metrics.jsonl").size() == 4u);
  for (int r = 0; r < 2; ++r)
    BOOST_TEST(fs::exists(workdirs[size_t(r)] + "/run/rank" + std::to_string(r) + "/step_000004/meta.json"));

  // 6. Purge: every file the package installed is gone, and so is its /etc/ringtrain.
  for (const auto& f : cleanup.files) fs::remove(f);
  cleanup.files.clear();
  sh("dpkg --purge ringtrain 2>&1");
  BOOST_TEST(run_shell("dpkg-query -W -f='${Status}' ringtrain 2>/dev/null | grep -q 'ok installed'") != 0);
  for (const auto& p : installed) BOOST_TEST(!fs::exists(fs::symlink_status(p)), p << " is left after purge");
  if (!etc_existed) BOOST_TEST(!fs::exists("/etc/ringtrain"), "/etc/ringtrain is left after purge");
}

BOOST_AUTO_TEST_SUITE_END()
