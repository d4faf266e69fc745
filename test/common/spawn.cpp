#include "spawn.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "ringtrain/net/job_key.hpp"

namespace nettest {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using Clock = std::chrono::steady_clock;
Clock::time_point start_of(pid_t pid);
std::vector<std::pair<pid_t, Clock::time_point>> starts;
Clock::time_point start_of(pid_t pid) {
  for (auto& [p, t] : starts)
    if (p == pid) return t;
  return Clock::now();
}

// A test case that stops at a failed requirement leaves the processes it started running
// (a job of --steps 100000 then trains for hours beside the next suites). At the end of every
// test case, each child still running is killed and reaped.
void kill_leftovers() {
  for (auto& [pid, t] : starts) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != 0) continue;  // reaped already, or not our child
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  starts.clear();
}

struct LeftoverKiller : boost::unit_test::test_observer {
  void test_unit_finish(const boost::unit_test::test_unit& tu, unsigned long) override {
    if (tu.p_type == boost::unit_test::TUT_CASE) kill_leftovers();
  }
};

struct KillLeftoversAfterEachCase {
  LeftoverKiller observer;
  KillLeftoversAfterEachCase() { boost::unit_test::framework::register_observer(observer); }
  ~KillLeftoversAfterEachCase() {
    boost::unit_test::framework::deregister_observer(observer);
    kill_leftovers();
  }
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(KillLeftoversAfterEachCase);

std::string Proc::out() const { return slurp(out_path); }
std::string Proc::err() const { return slurp(err_path); }

std::string driver_path() {
  auto& suite = boost::unit_test::framework::master_test_suite();
  for (int i = 1; i < suite.argc; ++i) {
    std::string a = suite.argv[i];
    if (a.find("net_rank_driver") != std::string::npos) return a;
  }
  const char* env = std::getenv("RINGTRAIN_NET_DRIVER");
  if (env) return env;
  BOOST_FAIL("pass the path of net_rank_driver after '--' (meson test does)");
  return "";
}

std::string ringtrain_path() {
  const char* env = std::getenv("RINGTRAIN_BIN");
  return env ? env : "ringtrain";
}

std::string scratch_dir() {
  static std::string dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("ringtrain-net-test-" + std::to_string(getpid()));
    // A directory of an earlier process with the same pid (pids wrap) must not leak its runs
    // and checkpoints into this one.
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    // Runs and checkpoints take up to a few hundred MB per test process: gone when it exits,
    // unless RINGTRAIN_KEEP_TEST_DIRS=1 keeps them to look at.
    const char* keep = std::getenv("RINGTRAIN_KEEP_TEST_DIRS");
    static const std::filesystem::path* to_remove = new std::filesystem::path(d);  // outlives every static
    if (!keep || std::string(keep) != "1")
      std::atexit([] {
        std::error_code ec;
        std::filesystem::remove_all(*to_remove, ec);
      });
    return d.string();
  }();
  return dir;
}

std::string key_file(const std::string& name) {
  const std::string path = scratch_dir() + "/" + name;
  if (!std::filesystem::exists(path)) rt::net::write_new_job_key(path, false);
  return path;
}

namespace {

constexpr int kFirstTestPort = 20000, kBlockPorts = 20, kBlocks = 490;  // 20000-29799, below Linux's ephemeral range

// True when nothing listens on 127.0.0.1:port (a socket in TIME_WAIT does not count: the
// ranks bind with SO_REUSEADDR too).
bool port_is_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// Two test processes that meson runs side by side must never share ports (a clash fails a
// test with "port in use" now and then, on one machine and not another). A block is claimed
// by an flock on a file of its own, held until this process ends (the kernel drops it even
// when the process is killed); a block whose ports are busy with anything else is skipped.
int claimed_port_block() {
  static const int block = [] {
    const auto dir = std::filesystem::temp_directory_path() / "ringtrain-test-ports";
    std::error_code ec;  // shared by every user's test runs: made writable by all once
    std::filesystem::create_directories(dir, ec);
    std::filesystem::permissions(dir, std::filesystem::perms::all, std::filesystem::perm_options::add, ec);
    for (int i = 0; i < kBlocks; ++i) {
      const int b = (int(getpid()) + i) % kBlocks;
      const int fd = open((dir / (std::to_string(b) + ".lock")).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
      if (fd < 0) continue;
      bool free = flock(fd, LOCK_EX | LOCK_NB) == 0;
      for (int p = 0; free && p < kBlockPorts; ++p) free = port_is_free(kFirstTestPort + b * kBlockPorts + p);
      if (free) return b;  // fd stays open: the claim lasts as long as this process
      close(fd);
    }
    throw std::runtime_error("no free block of test ports in 20000-29799 (all claimed or in use)");
  }();
  return block;
}

}  // namespace

int port_base(int slot) {
  if (slot < 0 || slot > 3) throw std::logic_error("port_base: slot must be 0..3");
  return kFirstTestPort + claimed_port_block() * kBlockPorts + slot * 5;
}

std::string loopback_peers(int world, int first_port) {
  std::string s;
  for (int r = 0; r < world; ++r) s.append(r ? "," : "").append("127.0.0.1:").append(std::to_string(first_port + r));
  return s;
}

rt::net::CommOptions loopback_options(int world, int rank, int first_port) {
  rt::net::CommOptions o;
  o.rank = rank;
  o.peers = rt::net::parse_peers(loopback_peers(world, first_port));
  o.connect_timeout_s = 30;
  return o;
}

Proc spawn(const std::vector<std::string>& argv, const std::string& tag) {
  static int counter = 0;
  Proc p;
  std::string base = scratch_dir() + "/" + tag + "-" + std::to_string(counter++);
  p.out_path = base + ".out";
  p.err_path = base + ".err";
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::perror("exec");
    _exit(127);
  }
  p.pid = pid;
  starts.emplace_back(pid, Clock::now());
  return p;
}

std::vector<Proc> spawn_ranks(int world, const std::string& peers, const std::string& scenario,
                              const std::vector<std::string>& extra, const std::string& tag) {
  std::vector<Proc> procs;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv{driver_path(), "--rank", std::to_string(r), "--peers", peers, "--scenario", scenario};
    argv.insert(argv.end(), extra.begin(), extra.end());
    procs.push_back(spawn(argv, tag + std::to_string(r)));
  }
  return procs;
}

bool wait_exit(Proc& p, double deadline_s) {
  if (p.exit_code != -100) return true;  // reaped already
  auto deadline = Clock::now() + std::chrono::duration<double>(deadline_s);
  while (true) {
    int status = 0;
    pid_t got = waitpid(p.pid, &status, WNOHANG);
    if (got == p.pid) {
      p.seconds = std::chrono::duration<double>(Clock::now() - start_of(p.pid)).count();
      if (WIFEXITED(status)) p.exit_code = WEXITSTATUS(status);
      else p.exit_code = -1, p.signal = WTERMSIG(status);
      return true;
    }
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void wait_one(Proc& p, double deadline_s) {
  if (wait_exit(p, deadline_s)) return;
  int status = 0;
  kill(p.pid, SIGKILL);
  waitpid(p.pid, &status, 0);
  p.exit_code = -2;
}

void wait_all(std::vector<Proc>& procs, double deadline_s) {
  auto deadline = Clock::now() + std::chrono::duration<double>(deadline_s);
  for (auto& p : procs) wait_one(p, std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count()));
}

bool alive(pid_t pid) { return kill(pid, 0) == 0; }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool logs_refusal_from(const std::string& err, const std::string& host) {
  return contains(err, "refused a connection from " + host + ":") ||
         contains(err, "refused a connection from an address that was gone before it could be read");
}

bool wait_until(const std::function<bool()>& ready, double deadline_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(deadline_s);
  while (!ready()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

bool wait_for_output(const std::vector<Proc>& procs, const std::string& marker, double deadline_s, Stream stream) {
  return wait_until(
      [&] {
        for (const auto& p : procs)
          if ((stream == Stream::Out ? p.out() : p.err()).find(marker) == std::string::npos) return false;
        return true;
      },
      deadline_s);
}

int run_shell(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* f = popen(full.c_str(), "r");
  if (!f) return -1;
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, got);
  int status = pclose(f);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace nettest
