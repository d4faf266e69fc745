#include "ringtrain/watch/prometheus.hpp"

#include <cmath>
#include <cstdio>

using nlohmann::json;

namespace rt::watch {
namespace {

class Exposition {
 public:
  // One metric family: its HELP and TYPE lines, once.
  void family(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  // A sample; labels are written by us from checked integers and fixed words only.
  void sample(const char* name, double v, const std::string& labels = "") {
    if (!std::isfinite(v)) return;
    char num[64];
    std::snprintf(num, sizeof num, "%.17g", v);
    out_ += std::string(name) + (labels.empty() ? "" : "{" + labels + "}") + " " + num + "\n";
  }
  void gauge(const char* name, const char* help, const json& status, const char* key) {
    if (!status.contains(key) || !status[key].is_number()) return;
    family(name, "gauge", help);
    sample(name, status[key].get<double>());
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string prometheus_text(const json& status, bool reachable, uint64_t membership_changes) {
  Exposition e;
  e.family("ringtrain_up", "gauge", "1 while the job answers the watcher, 0 while it does not.");
  e.sample("ringtrain_up", reachable ? 1 : 0);
  if (!reachable || !status.is_object()) return e.take();
  e.gauge("ringtrain_step", "Steps the job has completed.", status, "step");
  e.gauge("ringtrain_steps_planned", "Steps of the run's schedule (--steps).", status, "steps");
  e.gauge("ringtrain_train_loss", "Training loss of the last step, mean over the ranks.", status, "loss");
  e.gauge("ringtrain_val_bpb", "Validation bits per byte of the last evaluation.", status, "val_bpb");
  e.gauge("ringtrain_tokens_per_second", "Tokens per second of the whole job in the last step.", status, "tok_per_s");
  e.gauge("ringtrain_mfu", "Model FLOPs utilisation of the answering rank in the last step (0..1).", status, "mfu");
  e.gauge("ringtrain_lr_multiplier", "Learning-rate multiplier of the schedule at the last step.", status, "lr_mult");
  e.gauge("ringtrain_eta_seconds", "Estimated seconds until the run ends.", status, "eta_s");
  e.gauge("ringtrain_tokens", "Tokens trained on so far.", status, "tokens");
  e.gauge("ringtrain_epoch", "The ring's epoch (grows with every membership change).", status, "epoch");
  e.gauge("ringtrain_step_bytes_sent", "Payload bytes the answering rank sent in the last step.", status, "bytes_sent");
  if (status.contains("bytes_sent_total")) {
    e.family("ringtrain_bytes_sent_total", "counter", "Payload bytes the answering rank has sent in this run.");
    e.sample("ringtrain_bytes_sent_total", status["bytes_sent_total"].get<double>());
  }
  e.family("ringtrain_membership_changes_total", "counter", "Ranks lost or joined since the job started.");
  e.sample("ringtrain_membership_changes_total", double(membership_changes));
  if (status.contains("last_checkpoint") && status["last_checkpoint"].contains("step")) {
    e.family("ringtrain_last_checkpoint_step", "gauge", "Step of the newest checkpoint the answering rank wrote.");
    e.sample("ringtrain_last_checkpoint_step", status["last_checkpoint"]["step"].get<double>());
  }
  // Live ranks: the members' states where the job is elastic, else every rank that reports.
  size_t live = 0, lost = 0, joining = 0;
  if (status.contains("members")) {
    for (const auto& m : status["members"]) {
      const std::string s = m.value("state", std::string());
      live += s == "live", lost += s == "lost", joining += s == "joining";
    }
  } else if (status.contains("ranks")) {
    live = status["ranks"].size();
  }
  e.family("ringtrain_ranks_live", "gauge", "Ranks training in the current ring.");
  e.sample("ringtrain_ranks_live", double(live));
  e.family("ringtrain_ranks", "gauge", "Ranks of the job by state.");
  e.sample("ringtrain_ranks", double(live), "state=\"live\"");
  e.sample("ringtrain_ranks", double(lost), "state=\"lost\"");
  e.sample("ringtrain_ranks", double(joining), "state=\"joining\"");
  if (status.contains("ranks") && !status["ranks"].empty()) {
    const json& ranks = status["ranks"];
    auto label = [&](size_t i) {
      const json& r = ranks[i];
      return "rank=\"" + std::to_string(r.contains("rank") ? r["rank"].get<int64_t>() : int64_t(i)) + "\"";
    };
    const struct {
      const char* name;
      const char* key;
      const char* help;
    } per_rank[] = {{"ringtrain_rank_step_seconds", "step_s", "Seconds of each rank's last step."},
                    {"ringtrain_rank_comm_seconds", "comm_s", "Seconds of each rank's last step spent waiting on the network."},
                    {"ringtrain_rank_step_bytes_sent", "bytes_sent", "Payload bytes each rank sent in the last step."}};
    for (const auto& m : per_rank) {
      e.family(m.name, "gauge", m.help);
      for (size_t i = 0; i < ranks.size(); ++i)
        if (ranks[i].contains(m.key)) e.sample(m.name, ranks[i][m.key].get<double>(), label(i));
    }
  }
  return e.take();
}

}  // namespace rt::watch
