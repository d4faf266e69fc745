#include "step_reports.hpp"

#include <algorithm>
#include <cmath>
#include <span>

#include "ringtrain/errors.hpp"
#include "ringtrain/train/log.hpp"
#include "stop_signals.hpp"

using nlohmann::json;

namespace rt::train {

void JobStatus::set(json s) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = std::move(s);
}

void JobStatus::set_membership(int64_t epoch, const std::vector<std::string>& states) {
  std::lock_guard<std::mutex> lock(mu_);
  epoch_ = epoch;
  rank_states_ = states;
}

void JobStatus::set_rank_state(int rank, const std::string& state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank >= 0 && size_t(rank) < rank_states_.size()) rank_states_[size_t(rank)] = state;
}

void JobStatus::set_addresses(std::vector<std::string> peers) {
  std::lock_guard<std::mutex> lock(mu_);
  addresses_ = std::move(peers);
}

void JobStatus::set_checkpoint(int64_t step, const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  checkpoint_ = {{"step", step}, {"dir", dir}};
}

void JobStatus::add_bytes_sent(double bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  bytes_sent_total_ += bytes;
}

std::string JobStatus::text() const {
  std::lock_guard<std::mutex> lock(mu_);
  json s = status_;
  if (!addresses_.empty()) s["addresses"] = addresses_;
  if (!checkpoint_.is_null()) s["last_checkpoint"] = checkpoint_;
  if (bytes_sent_total_ > 0) s["bytes_sent_total"] = bytes_sent_total_;
  if (rank_states_.empty()) return s.dump();
  s["epoch"] = epoch_;
  s["members"] = json::array();
  for (size_t r = 0; r < rank_states_.size(); ++r) s["members"].push_back({{"rank", r}, {"state", rank_states_[r]}});
  return s.dump();
}

StepReports::StepReports(net::Communicator* comm, const optim::MuonAdamW& opt, MetricsWriter& metrics,
                         Progress& progress, JobStatus& status, const ReportSetup& setup)
    : comm_(comm), opt_(opt), metrics_(metrics), progress_(progress), status_(status), setup_(setup) {}

namespace {

// A report from another rank is used only if every field is a value a rank can send.
void check_report(const StepReport& r, size_t rank) {
  const double durations[] = {r.step_s, r.comm_s, r.tokens, r.end_s, r.bytes_sent};
  for (double v : durations)
    if (!std::isfinite(v) || v < 0)
      throw RuntimeError("rank " + std::to_string(rank) + " sent a step report with a negative or non-finite value; " +
                         "every rank must run the same ringtrain build");
  if (r.stop != 0 && r.stop != 1)
    throw RuntimeError("rank " + std::to_string(rank) + " sent a step report with stop = " + std::to_string(r.stop) +
                       "; every rank must run the same ringtrain build");
}

}  // namespace

bool StepReports::exchange(int64_t step_now, double tokens_seen, double val_bpb) {
  const size_t n = pending_.size();
  // [rank][pending step]; every rank has the same number of reports pending (the record
  // size of the all-gather, checked on arrival).
  std::vector<std::vector<StepReport>> ranks;
  if (!comm_) {
    ranks.push_back(std::move(pending_));
  } else {
    const auto all = comm_->all_gather_records(std::span<const StepReport>(pending_));
    for (size_t r = 0; r < size_t(comm_->world()); ++r) {
      ranks.emplace_back(all.begin() + int64_t(r * n), all.begin() + int64_t((r + 1) * n));
      for (const auto& rep : ranks.back()) check_report(rep, r);
    }
  }
  pending_.clear();
  // Every rank has finished step_now by now: from here, the job as a whole is at that step
  // (elapsed_s is this rank's own end of each step; free-running ranks may be seconds apart).
  const double synced_s = now_s() - setup_.run_start_s;
  bool stop = false;
  for (size_t k = 0; k < n; ++k) {
    const int64_t step = step_now - int64_t(n - 1 - k);
    double loss = 0, step_s = 0;
    json per_rank = json::array();
    for (const auto& r : ranks) {
      loss += r[k].loss_weighted;
      step_s = std::max(step_s, r[k].step_s);
      if (r[k].stop) stop = true;
      json entry = {{"step_s", r[k].step_s}, {"comm_s", r[k].comm_s}};
      const size_t position = size_t(per_rank.size());
      if (comm_) entry["bytes_sent"] = r[k].bytes_sent;
      if (comm_ && position < setup_.members.size()) entry["rank"] = setup_.members[position];
      per_rank.push_back(std::move(entry));
    }
    const StepReport& mine = ranks[size_t(comm_ ? setup_.rank : 0)][k];
    const double tok_s = double(setup_.global_tokens) / step_s;
    const double mfu = double(setup_.flops_per_token) * (mine.tokens / mine.step_s) / (setup_.peak_gflops * 1e9);
    json rec = {{"step", step}, {"loss", loss}, {"lr_mult", opt_.schedule(step - 1).lr_multiplier},
                {"tok_per_s", tok_s}, {"step_s", step_s}, {"comm_s", mine.comm_s}, {"mfu", mfu},
                {"tokens", tokens_seen - double(n - 1 - k) * double(setup_.global_tokens)},
                {"elapsed_s", mine.end_s}};
    if (comm_) {
      rec["ranks"] = per_rank;
      rec["bytes_sent"] = mine.bytes_sent;
      if (k + 1 == n) rec["synced_s"] = synced_s;
    }
    metrics_.write(rec);
    status_.add_bytes_sent(mine.bytes_sent);
    if (k + 1 < n) continue;
    status_.set({{"step", step}, {"steps", setup_.steps}, {"loss", loss}, {"tok_per_s", tok_s},
                 {"eta_s", step_s * double(setup_.last_step - step)}, {"val_bpb", val_bpb}, {"ranks", per_rank},
                 {"lr_mult", rec["lr_mult"]}, {"mfu", mfu}, {"tokens", rec["tokens"]}, {"step_s", step_s},
                 {"bytes_sent", mine.bytes_sent}, {"elapsed_s", mine.end_s}});
    char stats[160];
    std::snprintf(stats, sizeof stats, "loss %.4f | %.0f tok/s | mfu %.0f%% | comm %.2fs", loss, tok_s, 100 * mfu,
                  mine.comm_s);
    progress_.update(step, stats);
  }
  return stop;
}

void StepReports::show_local(int64_t step, double loss, double step_s, double comm_s) {
  if (comm_ && !comm_->failure().empty()) {
    if (stop_signals_received() >= 2) throw net::Aborted(comm_->failure());
    throw net::PeerLost(comm_->failure());
  }
  char stats[160];
  std::snprintf(stats, sizeof stats, "loss %.4f (this rank) | %.0f tok/s | comm %.2fs", loss,
                double(setup_.global_tokens) / step_s, comm_s);
  progress_.update(step, stats);
}

}  // namespace rt::train
