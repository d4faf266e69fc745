#include "ringtrain/train/metrics.hpp"

#include <filesystem>
#include <fstream>
#include <vector>

#include "ringtrain/errors.hpp"

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
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace rt::train
