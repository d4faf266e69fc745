// The watcher's picture of a running job, kept up to date by polling it over the job's
// port (service requests "status" and "metrics after N", with the job key like every other
// client). It survives what a days-long job goes through: when the rank it asks stops
// answering it asks the others the job listed (their addresses come in the status), it
// reads the whole history again when the job restarted or it moved to another rank, and it
// never stops retrying; what it shows always says whether it is current and why not.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/net/job_key.hpp"
#include "ringtrain/train/metric_history.hpp"

namespace rt::watch {

struct WatchOptions {
  std::string address;  // HOST:PORT of a rank, as given on the command line
  std::optional<net::JobKey> key;
  double timeout_s = 5;   // per request
  double interval_s = 1;  // between polls while the job answers (twice that while it does not)
};

class JobWatcher {
 public:
  explicit JobWatcher(WatchOptions o);
  // Polls until `stop` becomes true.
  void run(const std::atomic<bool>& stop);
  // One poll: the status, then the new history records. True if the job answered.
  bool poll_once();

  // For the page: {"reachable", "message", "address", "status" (the job's, checked), "seen_s"
  // (seconds since the job last answered, or null), "generation" (changes whenever the history
  // was read again from scratch), "last_seq", "events_total", "stride"}.
  nlohmann::json state() const;
  // The watcher's copy of the history after the watcher's own record number, as JSON text
  // (MetricHistory::after's, with "generation").
  std::string history_after(uint64_t seq, size_t max_bytes) const;
  // /metrics in Prometheus' text exposition format.
  std::string prometheus() const;
  // Asks the job to checkpoint and exit (`ringtrain stop`); returns the job's answer.
  std::string stop_job();

 private:
  void read_history(const std::string& address);
  std::vector<std::string> candidates() const;

  WatchOptions o_;
  mutable std::mutex mu_;
  std::string current_;                 // the address that answered last
  std::vector<std::string> addresses_;  // every rank's address, from the job's status
  nlohmann::json status_;               // null until the job answered once
  bool reachable_ = false;
  std::string message_;
  double last_answer_s_ = -1;
  std::string job_history_id_;
  uint64_t job_seq_ = 0;  // the job's number of the last record read
  uint64_t events_total_ = 0;
  int64_t generation_ = 0;
  train::MetricHistory history_;
};

}  // namespace rt::watch
