// A tiny prepared data set and helpers to run `ringtrain train` in tests.
#pragma once
#include <string>
#include <vector>

namespace traintest {

// Writes a small synthetic corpus and runs `ringtrain data prepare` on it (once per process).
// Returns the data directory.
const std::string& prepared_data();
// Flags of a tiny model that trains in a second or two.
std::vector<std::string> tiny_model_flags();
// Loss of every step record in a metrics file, in order.
std::vector<double> losses(const std::string& metrics_path);
// Every file under dir with its size and CRC-32, one per line (to prove nothing changed).
std::string tree_fingerprint(const std::string& dir);

}  // namespace traintest
