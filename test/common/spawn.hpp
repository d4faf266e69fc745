// Real processes for the tests: start rank drivers (or `ringtrain`) with output captured
// in files, wait for them with a deadline, kill leftovers. Nothing waits forever.
#pragma once
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "ringtrain/net/communicator.hpp"

namespace nettest {

struct Proc {
  pid_t pid = -1;
  std::string out_path, err_path;
  int exit_code = -100;  // -1: killed by a signal, -2: still running at the deadline (then killed)
  int signal = 0;
  double seconds = 0;  // from start until it exited
  std::string out() const;
  std::string err() const;
};

// The rank driver's path (passed after '--' by meson) and $RINGTRAIN_BIN.
std::string driver_path();
std::string ringtrain_path();
// A scratch directory unique to this test process.
std::string scratch_dir();
// A job key file in the scratch directory (made on first use): `ringtrain keygen` output.
std::string key_file(const std::string& name = "job.key");
// The first of 5 loopback ports for `slot` (0..3) of this test process's block of 20. No
// other test process running at the same time holds the block, and nothing listened on its
// ports when it was claimed.
int port_base(int slot);
std::string loopback_peers(int world, int first_port);
// Options of rank `rank` of an in-process job on loopback ports from `first_port`.
rt::net::CommOptions loopback_options(int world, int rank, int first_port);

Proc spawn(const std::vector<std::string>& argv, const std::string& tag);
// Starts `world` rank drivers with the given scenario and extra options.
std::vector<Proc> spawn_ranks(int world, const std::string& peers, const std::string& scenario,
                              const std::vector<std::string>& extra = {}, const std::string& tag = "rank");
// Waits for every process until the deadline (seconds from now); kills the rest (SIGKILL).
void wait_all(std::vector<Proc>& procs, double deadline_s);
void wait_one(Proc& p, double deadline_s);
// Waits up to deadline_s for p to exit: true (exit_code etc. filled in), or false if it is
// still running (it is left running).
bool wait_exit(Proc& p, double deadline_s);
bool alive(pid_t pid);
// Polls `ready` every 50 ms until it returns true (then true) or the deadline passes (false).
bool wait_until(const std::function<bool()>& ready, double deadline_s);
enum class Stream { Out, Err };
// Waits until every process printed `marker` on the stream: the readiness lines that tests
// wait for instead of sleeping. False at the deadline.
bool wait_for_output(const std::vector<Proc>& procs, const std::string& marker, double deadline_s,
                     Stream stream = Stream::Out);
// Runs a shell command, returns its exit code and output (stdout+stderr).
int run_shell(const std::string& cmd, std::string* output = nullptr);
bool contains(const std::string& s, const std::string& part);
// True if a rank's log `err` holds a refused connection from `host` ("127.0.0.1"), or one
// from an address that was gone: a rank reads a stranger's address when its monitor reports
// the accepted connection, and a stranger that resets at once, or fails its handshake
// before that report is read, is gone by then (a race that a loaded machine decides).
bool logs_refusal_from(const std::string& err, const std::string& host);

}  // namespace nettest
