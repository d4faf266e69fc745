#include "train_fixture.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "spawn.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace fs = std::filesystem;

namespace traintest {

const std::string& prepared_data() {
  static const std::string dir = [] {
    const fs::path root = fs::path(nettest::scratch_dir()) / "corpus";
    fs::create_directories(root);
    // Sentences from a small Zipf-like vocabulary: enough structure for the loss to fall.
    const std::vector<std::string> words = {"the",    "kernel", "driver", "memory", "page",  "lock",   "a",
                                            "thread", "is",     "of",     "and",    "to",    "device", "in",
                                            "calls",  "returns", "when",  "buffer", "queue", "state"};
    std::mt19937 rng(7);
    std::discrete_distribution<int> pick({20, 9, 7, 6, 6, 5, 10, 5, 8, 8, 8, 7, 4, 6, 3, 3, 3, 3, 2, 2});
    for (int d = 0; d < 120; ++d) {
      std::ofstream f(root / ("doc" + std::to_string(d) + ".txt"));
      const int sentences = 5 + int(rng() % 30);
      for (int s = 0; s < sentences; ++s) {
        const int n = 4 + int(rng() % 8);
        for (int w = 0; w < n; ++w) f << (w ? " " : "") << words[size_t(pick(rng))];
        f << ".\n";
      }
    }
    const std::string out = (fs::path(nettest::scratch_dir()) / "data").string();
    std::string log;
    const int rc = nettest::run_shell(nettest::ringtrain_path() + " data prepare --input " + root.string() +
                                          " --out " + out + " --vocab 320 --val-fraction 0.1",
                                      &log);
    BOOST_REQUIRE_MESSAGE(rc == 0, "data prepare failed: " + log);
    return out;
  }();
  return dir;
}

std::vector<std::string> tiny_model_flags() {
  // --steps and --total-batch as the tests were written for (nanochat's auto batch and
  // horizon would make a tiny model's run long); a test's own values come later and win.
  return {"--depth", "2", "--head-dim", "32", "--seq-len", "32", "--window-pattern", "SL", "--threads", "1",
          "--eval-tokens", "256", "--no-progress", "--steps", "100", "--total-batch", "0"};
}

std::vector<std::string> train_argv(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {nettest::ringtrain_path(), "train", "--data", prepared_data()};
  for (const auto& f : tiny_model_flags()) argv.push_back(f);
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

nettest::Proc train(const std::vector<std::string>& extra, const std::string& tag, double deadline_s) {
  nettest::Proc p = nettest::spawn(train_argv(extra), tag);
  nettest::wait_one(p, deadline_s);
  return p;
}

std::string run_dir(const std::string& name) { return nettest::scratch_dir() + "/" + name; }

std::vector<nlohmann::json> metric_records(const std::string& metrics_path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) {
    auto rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!rec.is_discarded()) out.push_back(std::move(rec));
  }
  return out;
}

std::vector<double> losses(const std::string& metrics_path) {
  std::vector<double> out;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) {
    auto rec = nlohmann::json::parse(line);
    if (rec.contains("loss")) out.push_back(rec["loss"].get<double>());
  }
  return out;
}

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

std::string tree_fingerprint(const std::string& dir) {
  std::vector<std::string> lines;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const auto data = rt::io::read_file(e.path().string());
    lines.push_back(e.path().string() + " " + std::to_string(data.size()) + " " +
                    std::to_string(rt::train::crc32_of(data.data(), data.size())));
  }
  std::sort(lines.begin(), lines.end());
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

}  // namespace traintest
