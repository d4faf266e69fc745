// Rank processes of `ringtrain train` on loopback ports, for the distributed and elastic
// suites: start them, wait for their metrics, find their checkpoints.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "../common/spawn.hpp"

namespace traintest {

// --peer-timeout of these tests: a lost rank must be reported within it plus a small margin.
constexpr double kPeerTimeout = 5, kMargin = 5;

// argv of `ringtrain train --out <run_dir(out)>` on the prepared data, then `more`.
std::vector<std::string> base_args(const std::string& out, std::vector<std::string> more);
// The flags of rank r of a loopback job whose ranks have the given --device-batch.
std::vector<std::string> rank_flags(const std::vector<int>& batches, size_t r, int port, double peer_timeout = kPeerTimeout);
// Starts one process per rank; batches[r] is rank r's --device-batch (0: auto).
std::vector<nettest::Proc> start_ranks(const std::string& out, const std::vector<int>& batches, int port,
                                       const std::vector<std::string>& more, double peer_timeout = kPeerTimeout);
// Starts rank r alone with the flags start_ranks gives it (a restart with the same command).
nettest::Proc start_rank(const std::string& out, const std::vector<int>& batches, int port,
                         const std::vector<std::string>& more, size_t r, const std::string& tag);
void require_all_ok(std::vector<nettest::Proc>& procs);
// Waits until the metrics file has at least n step records (or the deadline passes).
bool wait_for_steps(const std::string& metrics, size_t n, double deadline_s);
double seconds_since(std::chrono::steady_clock::time_point t);
// The newest checkpoint step of a rank of the run directory, or -1.
int newest_step(const std::string& run, int rank);

}  // namespace traintest
