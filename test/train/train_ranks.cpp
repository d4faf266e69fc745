#include "train_ranks.hpp"

#include <boost/test/unit_test.hpp>

#include <filesystem>

#include "../common/train_fixture.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace fs = std::filesystem;

namespace traintest {

std::vector<std::string> base_args(const std::string& out, std::vector<std::string> more) {
  more.insert(more.begin(), {"--out", run_dir(out)});
  return train_argv(more);
}

std::vector<std::string> rank_flags(const std::vector<int>& batches, size_t r, int port, double peer_timeout) {
  // With the job key: the training path runs over encrypted, authenticated connections.
  return {"--rank", std::to_string(r), "--peers", nettest::loopback_peers(int(batches.size()), port), "--device-batch",
          batches[r] ? std::to_string(batches[r]) : "auto", "--peer-timeout", std::to_string(peer_timeout), "--connect-timeout", "60", "--key",
          nettest::key_file()};
}

std::vector<nettest::Proc> start_ranks(const std::string& out, const std::vector<int>& batches, int port,
                                       const std::vector<std::string>& more, double peer_timeout) {
  std::vector<nettest::Proc> procs;
  for (size_t r = 0; r < batches.size(); ++r) {
    std::vector<std::string> m = more;
    const auto flags = rank_flags(batches, r, port, peer_timeout);
    m.insert(m.end(), flags.begin(), flags.end());
    procs.push_back(nettest::spawn(base_args(out, m), out + "-r" + std::to_string(r)));
  }
  return procs;
}

nettest::Proc start_rank(const std::string& out, const std::vector<int>& batches, int port,
                         const std::vector<std::string>& more, size_t r, const std::string& tag) {
  std::vector<std::string> m = more;
  const auto flags = rank_flags(batches, r, port);
  m.insert(m.end(), flags.begin(), flags.end());
  return nettest::spawn(base_args(out, m), tag);
}

void require_all_ok(std::vector<nettest::Proc>& procs) {
  // Every process's outcome and log is told when one went wrong, the ones that exited 0 too:
  // why a rank went wrong is often in another rank's log.
  bool all_ok = true;
  for (const auto& p : procs) all_ok = all_ok && p.exit_code == 0;
  if (all_ok) return;
  std::string ok_logs;
  for (size_t r = 0; r < procs.size(); ++r) {
    const auto& p = procs[r];
    const std::string outcome = "process " + std::to_string(r) + ": exit " + std::to_string(p.exit_code) +
                                (p.exit_code == -1 ? " (signal " + std::to_string(p.signal) + ")" : "") +
                                (p.exit_code == -2 ? " (still running at the deadline)" : "") + ": " + p.err();
    if (p.exit_code == 0) ok_logs += "\n--- " + outcome;
    else BOOST_ERROR(outcome);
  }
  BOOST_FAIL("not every process exited 0 (each failed one is told above; those that exited 0 follow)" << ok_logs);
}

bool wait_for_steps(const std::string& metrics, size_t n, double deadline_s) {
  return nettest::wait_until([&] { return fs::exists(metrics) && losses(metrics).size() >= n; }, deadline_s);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int newest_step(const std::string& run, int rank) {
  auto steps = rt::train::checkpoint_steps(run, rank);
  return steps.empty() ? -1 : int(steps.back());
}

}  // namespace traintest
