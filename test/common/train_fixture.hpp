// A tiny prepared data set and helpers to run `ringtrain train` in tests.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "spawn.hpp"

namespace traintest {

// Writes a small synthetic corpus and runs `ringtrain data prepare` on it (once per process).
// Returns the data directory.
const std::string& prepared_data();
// Flags of a tiny model that trains in a second or two.
std::vector<std::string> tiny_model_flags();
// argv of `ringtrain train` on the prepared data with the tiny model's flags, then `extra`.
std::vector<std::string> train_argv(const std::vector<std::string>& extra);
// Runs `ringtrain train` with train_argv(extra) to its end (at most deadline_s).
nettest::Proc train(const std::vector<std::string>& extra, const std::string& tag, double deadline_s = 300);
// A directory for the run called `name`, in this test process's scratch directory.
std::string run_dir(const std::string& name);
// Every record of a metrics file that parses, in order (a line cut by a crash is left out).
std::vector<nlohmann::json> metric_records(const std::string& metrics_path);
// Loss of every step record in a metrics file, in order.
std::vector<double> losses(const std::string& metrics_path);
// Lines in s (its newline characters): an error message must be exactly one.
int count_lines(const std::string& s);
// Every file under dir with its size and CRC-32, one per line (to prove nothing changed).
std::string tree_fingerprint(const std::string& dir);

}  // namespace traintest
