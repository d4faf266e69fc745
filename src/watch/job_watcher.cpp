#include "ringtrain/watch/job_watcher.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "ringtrain/errors.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/train/log.hpp"
#include "ringtrain/watch/job_reply.hpp"
#include "ringtrain/watch/prometheus.hpp"

using nlohmann::json;

namespace rt::watch {
namespace {

// Pages of history read in one poll at most: a watcher started late catches up over a few
// polls instead of holding the job's service thread for long.
constexpr int kPagesPerPoll = 32;

}  // namespace

JobWatcher::JobWatcher(WatchOptions o) : o_(std::move(o)), current_(o_.address) {}

std::vector<std::string> JobWatcher::candidates() const {
  std::lock_guard lk(mu_);
  std::vector<std::string> out = {current_};
  if (o_.address != current_) out.push_back(o_.address);
  for (const auto& a : addresses_)
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  return out;
}

bool JobWatcher::poll_once() {
  std::string failures;
  for (const auto& address : candidates()) {
    try {
      const json status = checked_status(net::request(address, "status", o_.timeout_s, o_.key));
      read_history(address);
      std::lock_guard lk(mu_);
      if (current_ != address || !reachable_) train::logf("watch: the job answers at %s", address.c_str());
      current_ = address;
      status_ = status;
      if (status.contains("addresses")) addresses_ = status["addresses"].get<std::vector<std::string>>();
      reachable_ = true;
      message_ = "live: the job answers at " + address;
      last_answer_s_ = train::now_s();
      return true;
    } catch (const std::exception& e) {
      if (!failures.empty()) failures += "; ";
      failures += e.what();
      // A wrong key is the same on every rank: asking the others would only repeat it.
      if (std::string(e.what()).find("refused") != std::string::npos) break;
    }
  }
  std::lock_guard lk(mu_);
  const std::string msg = (status_.is_null() ? "cannot reach the job: " : "the job stopped answering: ") + failures +
                          " (retrying every " + std::to_string(int(2 * o_.interval_s + 0.5)) + " s)";
  if (reachable_ || msg != message_) train::logf("watch: %s", msg.c_str());
  reachable_ = false;
  message_ = msg;
  return false;
}

void JobWatcher::read_history(const std::string& address) {
  for (int page = 0; page < kPagesPerPoll; ++page) {
    uint64_t after;
    {
      std::lock_guard lk(mu_);
      after = job_seq_;
    }
    const json h = checked_history(net::request(address, "metrics after " + std::to_string(after), o_.timeout_s, o_.key), after);
    std::lock_guard lk(mu_);
    if (h["id"] != job_history_id_) {
      // Another process (a restart, another rank): its numbers are not ours; read it all.
      job_history_id_ = h["id"];
      job_seq_ = 0;
      history_.clear();
      ++generation_;
      if (after != 0) continue;
    }
    for (const auto& e : h["records"]) history_.add(e["r"]);
    job_seq_ = h["after"].get<uint64_t>();
    if (h.contains("events_total")) events_total_ = h["events_total"].get<uint64_t>();
    if (!h["more"].get<bool>()) return;
  }
}

void JobWatcher::run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    const bool ok = poll_once();
    const auto wait = std::chrono::duration<double>(ok ? o_.interval_s : 2 * o_.interval_s);
    const auto until = std::chrono::steady_clock::now() + wait;
    while (!stop.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

json JobWatcher::state() const {
  std::lock_guard lk(mu_);
  json s = {{"reachable", reachable_},
            {"message", message_.empty() ? "connecting to " + o_.address : message_},
            {"address", current_},
            {"status", status_},
            {"generation", generation_},
            {"last_seq", history_.last_seq()},
            {"stride", history_.stride()},
            {"events_total", events_total_}};
  s["seen_s"] = last_answer_s_ < 0 ? json(nullptr) : json(train::now_s() - last_answer_s_);
  return s;
}

std::string JobWatcher::history_after(uint64_t seq, size_t max_bytes) const {
  // Under mu_, as read_history() clears and refills: the records and their generation agree.
  std::lock_guard lk(mu_);
  return history_.after(seq, max_bytes, "\"generation\":" + std::to_string(generation_));
}

std::string JobWatcher::prometheus() const {
  std::lock_guard lk(mu_);
  return prometheus_text(status_, reachable_, events_total_);
}

std::string JobWatcher::stop_job() {
  std::string address;
  {
    std::lock_guard lk(mu_);
    address = current_;
  }
  return net::request(address, "stop", o_.timeout_s, o_.key);
}

}  // namespace rt::watch
