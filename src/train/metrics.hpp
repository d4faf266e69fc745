// The --metrics file: one JSON object per line, flushed after every line so that a plot or
// a `tail -f` sees each step as it happens. Every record also goes to the in-memory history
// that `ringtrain watch` reads (on every rank, with or without a file).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "ringtrain/train/metric_history.hpp"

namespace rt::train {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Opens `path` for appending. With resume_step >= 0, records of steps after it (written by
  // the interrupted run beyond its last checkpoint) are dropped first, so the file reads as
  // one uninterrupted run; an empty history is filled with the records kept.
  void open(const std::string& path, int64_t resume_step);
  ~MetricsWriter();
  bool is_open() const { return f_ != nullptr; }
  // Stops writing (the file stays); open() may be called again.
  void close();
  void write(const nlohmann::json& record);
  MetricHistory& history() { return history_; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  bool write_failed_ = false;
  MetricHistory history_;
};

}  // namespace rt::train
