#include "metrics.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/train/log.hpp"

namespace rt::train {

void MetricsWriter::open(const std::string& path, int64_t resume_step) {
  path_ = path;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  if (resume_step >= 0 && std::filesystem::exists(path)) {
    std::vector<std::string> keep;
    const bool fill_history = history_.size() == 0;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      auto rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (rec.is_discarded()) continue;  // a line cut by a crash
      if (!rec.is_object() || rec.value("step", int64_t(0)) > resume_step) continue;
      keep.push_back(line);
      if (fill_history) history_.add(rec);
    }
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      for (const auto& l : keep) out << l << "\n";
      if (!out) throw RuntimeError("cannot write " + tmp);
    }
    std::filesystem::rename(tmp, path);
  }
  f_ = std::fopen(path.c_str(), resume_step >= 0 ? "a" : "w");
  if (!f_) throw RuntimeError("cannot open metrics file " + path + "; check --metrics / --out");
}

void MetricsWriter::close() {
  if (f_) std::fclose(f_);
  f_ = nullptr;
}

MetricsWriter::~MetricsWriter() { close(); }

void MetricsWriter::write(const nlohmann::json& record) {
  history_.add(record);
  if (!f_) return;
  const std::string line = record.dump() + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0;
  // A full disk must not stop the run (checkpoints matter more than curves), but it is said,
  // once per outage: the records stay in memory, where `ringtrain watch` reads them.
  if (!ok && !write_failed_) logf("cannot write the metrics file %s (%s); training goes on, ringtrain watch still has the records",
                                  path_.c_str(), std::strerror(errno));
  if (ok && write_failed_) logf("the metrics file %s is written again (records of the steps between may be missing)", path_.c_str());
  write_failed_ = !ok;
}

}  // namespace rt::train
