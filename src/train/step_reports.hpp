// What every rank reports at the end of a step, and its exchange: all ranks gather every
// rank's reports (a small typed all-gather), so that rank 0 writes one metrics record per
// step with the global loss and each rank's times, every rank learns whether any rank asked
// to stop (`ringtrain stop`, SIGTERM), and `ringtrain status` can show the whole job.
// Between exchanges (--sync avg/diloco run free for H steps) the reports wait on each rank.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/net/communicator.hpp"
#include "ringtrain/optim/muon_adamw.hpp"
#include "ringtrain/train/log.hpp"
#include "metrics.hpp"

namespace rt::train {

struct StepReport {
  double loss_weighted = 0;  // this rank's share of the global mean loss
  double step_s = 0, comm_s = 0;
  double tokens = 0;         // tokens this rank trained on in the step
  double end_s = 0;          // when the step ended, seconds since this rank's run began
  double bytes_sent = 0;     // payload bytes this rank sent in the step
  int64_t stop = 0;          // 1: this rank was asked to stop
};

// The job's state for `ringtrain status`: written by the training thread, read by the
// communicator's.
class JobStatus {
 public:
  void set(nlohmann::json s);
  // Elastic training: the ring's epoch and each original rank's state ("live", "lost",
  // "joining"), shown as "members" and "epoch".
  void set_membership(int64_t epoch, const std::vector<std::string>& states);
  void set_rank_state(int rank, const std::string& state);
  // Facts `ringtrain watch` shows beside the step: every rank's address (--peers), the
  // newest checkpoint this rank wrote, and the payload bytes it has sent in the whole run.
  void set_addresses(std::vector<std::string> peers);
  void set_checkpoint(int64_t step, const std::string& dir);
  void add_bytes_sent(double bytes);
  std::string text() const;

 private:
  mutable std::mutex mu_;
  nlohmann::json status_ = nlohmann::json::object();
  int64_t epoch_ = 0;
  std::vector<std::string> rank_states_;
  std::vector<std::string> addresses_;
  nlohmann::json checkpoint_;  // null until one is written
  double bytes_sent_total_ = 0;
};

// Fixed facts the records are made of.
struct ReportSetup {
  int rank = 0;
  int64_t steps = 0;      // the schedule's length
  int64_t last_step = 0;  // where this run stops (--stop-after or steps), for the ETA
  int64_t global_tokens = 0;
  int64_t flops_per_token = 0;
  double peak_gflops = 0;
  double run_start_s = 0;  // now_s() when the run started: elapsed_s and synced_s count from it
  std::vector<int> members;  // the original rank of each ring position (empty: 0, 1, ...)
};

class StepReports {
 public:
  // comm is null for a single process; metrics is open on rank 0 only.
  StepReports(net::Communicator* comm, const optim::MuonAdamW& opt, MetricsWriter& metrics, Progress& progress,
              JobStatus& status, const ReportSetup& setup);

  void add(const StepReport& mine) { pending_.push_back(mine); }
  // Exchanges the pending reports of every rank (every rank calls it after the same step),
  // writes their metrics records, the status and the progress line. `step`: steps done.
  // Returns true if any rank asked to stop. Reports from other ranks are checked first.
  bool exchange(int64_t step, double tokens_seen, double val_bpb);
  // Between exchanges: this rank's own progress line. Throws the communicator's failure, if
  // any, so that a lost rank is noticed within a step even without a collective.
  void show_local(int64_t step, double loss, double step_s, double comm_s);

 private:
  net::Communicator* comm_;
  const optim::MuonAdamW& opt_;
  MetricsWriter& metrics_;
  Progress& progress_;
  JobStatus& status_;
  ReportSetup setup_;
  std::vector<StepReport> pending_;
};

}  // namespace rt::train
