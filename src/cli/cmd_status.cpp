// `ringtrain status HOST:PORT`: the job's state once, or refreshing in place (--watch) for
// a person on ssh.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/train/log.hpp"
#include "ringtrain/watch/job_reply.hpp"

using nlohmann::json;

namespace rt::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_interrupt(int) { g_interrupted = 1; }

std::string number(const json& s, const char* key, const char* format, double scale = 1) {
  if (!s.contains(key) || !s[key].is_number()) return "?";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, scale * s[key].get<double>());
  return buf;
}

// The status as the lines a person reads: the step, then one line per rank.
std::string status_text(const json& s) {
  std::string out = "step " + number(s, "step", "%.0f") + "/" + number(s, "steps", "%.0f") + "  loss " +
                    number(s, "loss", "%.4f") + "  " + number(s, "tok_per_s", "%.0f") + " tok/s  eta " +
                    (s.contains("eta_s") && s["eta_s"].is_number() ? train::format_duration(s["eta_s"].get<double>()) : "?") +
                    "  val bpb " + number(s, "val_bpb", "%.4f") + "\n";
  // "ranks" holds the live ranks in ring order; "members" (elastic training) every rank's state.
  std::vector<std::string> lines;
  if (s.contains("ranks"))
    for (const auto& rr : s["ranks"]) {
      char line[128];
      std::snprintf(line, sizeof line, "step %.2f s, of which %.2f s waiting on the network", rr.value("step_s", 0.0),
                    rr.value("comm_s", 0.0));
      lines.push_back(line);
    }
  if (!s.contains("members")) {
    for (size_t i = 0; i < lines.size(); ++i) out += "  rank " + std::to_string(i) + ": " + lines[i] + "\n";
    return out;
  }
  size_t live = 0;
  for (const auto& m : s["members"]) {
    const std::string state = m.value("state", std::string("?"));
    const auto rank = m.value("rank", int64_t(-1));
    const bool has_line = state == "live" && live < lines.size();
    out += "  rank " + std::to_string(rank) + ": " + state + (has_line ? ", " + lines[live] : "") + "\n";
    if (state == "live") ++live;
  }
  return out;
}

}  // namespace

int cmd_status(int argc, char** argv) {
  cxxopts::Options spec(argv[0], "Ask a running job (any rank's HOST:PORT from --peers) for its state.");
  spec.add_options()("address", "HOST:PORT", cxxopts::value<std::string>())("json", "print the raw JSON")(
      "watch", "refresh in place until Ctrl-C (keeps retrying while the job does not answer)")(
      "interval", "seconds between refreshes with --watch", cxxopts::value<double>()->default_value("2"))(
      "timeout", "seconds to wait for an answer", cxxopts::value<double>()->default_value("5"))(
      "key", kKeyHelp, cxxopts::value<std::string>());
  spec.parse_positional({"address"});
  cxxopts::ParseResult r;
  if (!parse(spec, argc, argv, r, "ringtrain status 10.0.0.1:29500 --key job.key --watch")) return 0;
  const auto addr = need<std::string>(r, "address", argv[0]);
  const double timeout = r["timeout"].as<double>(), interval = r["interval"].as<double>();
  if (!(interval >= 0.2 && interval <= 3600)) throw UsageError("--interval must be from 0.2 to 3600 seconds");
  const auto key = key_flag(r);
  if (!r.count("watch")) {
    const auto reply = net::request(addr, "status", timeout, key);
    if (r.count("json")) {
      std::printf("%s\n", reply.c_str());
      return 0;
    }
    const auto s = json::parse(reply, nullptr, false);
    if (s.is_discarded() || !s.is_object() || !s.contains("step")) {
      std::printf("%s\n", reply.c_str());
      return 0;
    }
    std::printf("%s", status_text(watch::checked_status_object(s)).c_str());
    return 0;
  }
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  const bool tty = isatty(fileno(stdout));
  std::string last_good;
  while (!g_interrupted) {
    std::string body;
    try {
      const auto reply = net::request(addr, "status", timeout, key);
      body = r.count("json") ? reply + "\n" : status_text(watch::checked_status(reply));
      last_good = body;
    } catch (const std::exception& e) {
      body = (last_good.empty() ? std::string() : last_good + "\n") + "no current answer: " + e.what() + "\n(retrying)\n";
    }
    char when[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&now));
    // In place on a terminal (cursor home, clear), one block per refresh into a file or pipe.
    std::printf("%s%s  %s (every %.0f s; Ctrl-C to quit)\n%s", tty ? "\033[H\033[J" : "\n", when, addr.c_str(), interval,
                body.c_str());
    std::fflush(stdout);
    for (double waited = 0; waited < interval && !g_interrupted; waited += 0.1)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

}  // namespace rt::cli
