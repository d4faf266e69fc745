#include "ringtrain/train/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/train/log.hpp"

namespace fs = std::filesystem;

namespace rt::train {
namespace {

// Suffix of a step directory renamed aside while its replacement is put in place.
constexpr char kSetAside[] = ".old-";
// Infix of the directory a checkpoint is written into before it is renamed into place.
constexpr char kInProgress[] = ".tmp-";
// Infix of a step directory renamed away by retention before it is deleted.
constexpr char kBeingRemoved[] = ".del-";

}  // namespace

uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (bytes > 0) {
    uInt n = uInt(std::min<size_t>(bytes, size_t(1) << 30));
    c = ::crc32(c, p, n);
    p += n;
    bytes -= n;
  }
  return uint32_t(c);
}

std::string rank_dir(const std::string& run_dir, int rank) {
  return (fs::path(run_dir) / ("rank" + std::to_string(rank))).string();
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06lld", (long long)step);
  return buf;
}

CheckpointWriter::CheckpointWriter(const std::string& run_dir, int rank, int64_t step) {
  const fs::path parent = rank_dir(run_dir, rank);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw WriteError("cannot create " + parent.string() + ": " + ec.message());
  final_dir_ = (parent / step_dir_name(step)).string();
  std::string tmp_name(1, '.');  // appended, not "." + ...: GCC 12 warns falsely (-Wrestrict) on that
  tmp_name.append(step_dir_name(step)).append(kInProgress).append(std::to_string(::getpid()));
  tmp_dir_ = (parent / tmp_name).string();
  fs::remove_all(tmp_dir_, ec);
  fs::create_directory(tmp_dir_, ec);
  if (ec) throw WriteError("cannot create " + tmp_dir_ + ": " + ec.message());
}

CheckpointWriter::~CheckpointWriter() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(tmp_dir_, ec);
  }
}

void CheckpointWriter::write_file(const std::string& name,
                                  const std::vector<std::pair<const void*, size_t>>& pieces) {
  write_file(name, [&](const io::ByteSink& sink) {
    for (const auto& [data, bytes] : pieces) sink(data, bytes);
  });
}

void CheckpointWriter::write_file(const std::string& name, const std::function<void(const io::ByteSink&)>& produce) {
  uint32_t crc = 0;
  size_t total = 0;
  io::write_file_atomic(path(name), [&](const io::ByteSink& sink) {
    produce([&](const void* data, size_t bytes) {
      sink(data, bytes);
      crc = crc32_of(data, bytes, crc);
      total += bytes;
    });
  });
  files_[name] = {{"bytes", total}, {"crc32", crc}};
}

std::string CheckpointWriter::path(const std::string& name) const {
  return (fs::path(tmp_dir_) / name).string();
}

void CheckpointWriter::add_written_file(const std::string& name) {
  std::string data;
  try {
    data = io::read_file(path(name));
  } catch (const UsageError& e) {  // it was just written: not reading it back is a failed write
    throw WriteError(std::string("cannot read back what was written: ") + e.what());
  }
  files_[name] = {{"bytes", data.size()}, {"crc32", crc32_of(data.data(), data.size())}};
}

std::string CheckpointWriter::commit(nlohmann::json meta) {
  meta["format"] = "ringtrain-checkpoint";
  meta["format_version"] = kCheckpointFormatVersion;
  meta["files"] = files_;
  const std::string text = meta.dump(2) + "\n";
  io::write_file_atomic(path("meta.json"), text.data(), text.size());
  io::fsync_directory(tmp_dir_);
  const std::string parent = fs::path(final_dir_).parent_path().string();
  std::error_code ec;
  if (fs::exists(final_dir_)) {
    // Saving the same step again (e.g. after a resume): the old copy stays valid until the
    // new one is in place.
    const std::string old = final_dir_ + kSetAside + std::to_string(::getpid());
    fs::rename(final_dir_, old, ec);
    if (ec) throw WriteError("cannot replace " + final_dir_ + ": " + ec.message());
    fs::rename(tmp_dir_, final_dir_, ec);
    if (ec) {
      std::error_code back;
      fs::rename(old, final_dir_, back);
      throw WriteError("cannot rename " + tmp_dir_ + " to " + final_dir_ + ": " + ec.message() +
                       (back ? "; the previous copy is in " + old : "; the previous copy is kept"));
    }
    io::fsync_directory(parent);
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp_dir_, final_dir_, ec);
    if (ec) throw WriteError("cannot rename " + tmp_dir_ + " to " + final_dir_ + ": " + ec.message());
  }
  io::fsync_directory(parent);
  committed_ = true;
  return final_dir_;
}

void require_finite(const model::ParamSet& params, int64_t step) {
  for (const auto& p : params.all())
    for (int64_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(p.data[i]))
        throw RuntimeError("parameters hold " + std::string(std::isnan(p.data[i]) ? "NaN" : "Inf") + " at step " +
                           std::to_string(step) + " (first in " + p.name + ", element " + std::to_string(i) +
                           "); no checkpoint of step " + std::to_string(step) +
                           " is written. Resume from the last valid one (--resume) with a lower learning rate");
}

nlohmann::json verify_checkpoint(const std::string& dir) {
  const std::string where = "checkpoint " + dir;
  const fs::path meta_path = fs::path(dir) / "meta.json";
  if (!fs::exists(meta_path))
    throw UsageError(where + " has no meta.json (incomplete or not a checkpoint); use another checkpoint");
  auto corrupt = [&](const std::string& what) {
    return UsageError(where + " is corrupt: " + what + "; delete it or resume from an older one");
  };
  nlohmann::json meta;
  try {
    const auto text = io::read_file(meta_path.string());
    meta = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw corrupt("meta.json does not parse (" + std::string(e.what()) + ")");
  }
  if (!meta.is_object() || !meta.contains("format") || meta["format"] != "ringtrain-checkpoint" ||
      !meta.contains("files"))
    throw UsageError(where + " is not a ringtrain checkpoint (meta.json lacks format/files)");
  // Every field read later must have its type: a meta.json edited or damaged into another
  // shape is refused here, like a file that fails its CRC.
  if (!meta["files"].is_object()) throw corrupt("meta.json's files is not an object");
  if (meta.contains("step") && !meta["step"].is_number_integer()) throw corrupt("meta.json's step is not an integer");
  if (meta.contains("model_config") && !meta["model_config"].is_object())
    throw corrupt("meta.json's model_config is not an object");
  for (const auto& [name, info] : meta["files"].items()) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      throw corrupt("meta.json lists a file named '" + name + "'");
    if (!info.is_object() || !info.contains("bytes") || !info["bytes"].is_number_unsigned() || !info.contains("crc32") ||
        !info["crc32"].is_number_unsigned())
      throw corrupt("meta.json's entry for " + name + " lacks its size or CRC-32");
    const fs::path p = fs::path(dir) / name;
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (ec) throw corrupt(name + " is missing");
    if (size != info["bytes"].get<uint64_t>())
      throw corrupt(name + " has " + std::to_string(size) + " bytes, expected " + std::to_string(info["bytes"].get<uint64_t>()));
    const auto data = io::read_file(p.string());
    if (uint64_t(crc32_of(data.data(), data.size())) != info["crc32"].get<uint64_t>())
      throw corrupt(name + " fails its CRC-32 check");
  }
  return meta;
}

std::vector<int64_t> checkpoint_steps(const std::string& run_dir, int rank) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(rank_dir(run_dir, rank), ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos) {
      try {
        steps.push_back(std::stoll(n.substr(5)));
      } catch (...) {
      }
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<int64_t> prune_checkpoints(const std::string& run_dir, int rank, int64_t saved, int64_t keep) {
  std::vector<int64_t> older;
  for (int64_t step : checkpoint_steps(run_dir, rank))
    if (step < saved) older.push_back(step);
  std::vector<int64_t> removed;
  if (keep < 1 || int64_t(older.size()) <= keep - 1) return removed;
  const fs::path parent = rank_dir(run_dir, rank);
  older.resize(older.size() - size_t(keep - 1));  // the ones beyond the newest keep-1
  for (int64_t step : older) {
    const fs::path dir = parent / step_dir_name(step);
    std::string hidden_name(1, '.');
    hidden_name.append(step_dir_name(step)).append(kBeingRemoved).append(std::to_string(::getpid()));
    std::error_code ec;
    fs::rename(dir, parent / hidden_name, ec);
    if (!ec) fs::remove_all(parent / hidden_name, ec);
    if (ec) {
      logf("could not remove %s (--keep-checkpoints): %s; it stays", dir.string().c_str(), ec.message().c_str());
      continue;
    }
    removed.push_back(step);
  }
  if (!removed.empty()) {
    try {
      io::fsync_directory(parent.string());
    } catch (const WriteError& e) {
      logf("%s (after removing old checkpoints)", e.what());
    }
  }
  return removed;
}

void clean_checkpoint_leftovers(const std::string& run_dir, int rank) {
  const fs::path parent = rank_dir(run_dir, rank);
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(parent, ec)) entries.push_back(e.path());
  for (const fs::path& p : entries) {
    const std::string n = p.filename().string();
    if (const auto at = n.find(kInProgress); n.rfind(".step_", 0) == 0 && at != std::string::npos) {
      // A save interrupted by a crash or SIGKILL. Another live process's save (its pid in the
      // name) is left alone; a pid that is gone, or our own from an earlier boot, is not.
      // The name is whatever is on disk: a pid that does not parse or fit counts as gone.
      long pid = 0;
      const char* digits = n.c_str() + at + std::strlen(kInProgress);
      if (std::from_chars(digits, n.c_str() + n.size(), pid).ec != std::errc()) pid = 0;
      const bool writer_alive = pid > 0 && pid != long(::getpid()) && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
      if (writer_alive) continue;
      fs::remove_all(p, ec);
      logf("removed %s, a checkpoint whose save never finished", p.string().c_str());
    } else if (n.rfind(".step_", 0) == 0 && n.find(kBeingRemoved) != std::string::npos) {
      // Retention was deleting it when the process died: it is no checkpoint any more.
      fs::remove_all(p, ec);
      logf("removed %s, an old checkpoint whose removal (--keep-checkpoints) was interrupted", p.string().c_str());
    } else if (const auto aside = n.find(kSetAside); n.rfind("step_", 0) == 0 && aside != std::string::npos) {
      // A copy set aside by an interrupted re-save: stale if its step is in place again,
      // else it is that step's checkpoint, put back under its name.
      const fs::path step_dir = parent / n.substr(0, aside);
      if (fs::exists(step_dir)) {
        fs::remove_all(p, ec);
        logf("removed %s, an old copy of %s", p.string().c_str(), step_dir.string().c_str());
      } else {
        fs::rename(p, step_dir, ec);
        if (!ec) logf("restored %s from %s (a re-save of that step was interrupted)", step_dir.string().c_str(), p.string().c_str());
      }
    }
  }
}

std::optional<std::string> newest_valid_checkpoint(const std::string& run_dir, int rank) {
  // Candidates, newest first: every step directory, and copies set aside by a commit that
  // was interrupted before the new copy was in place (their step directory is missing).
  std::vector<std::pair<int64_t, std::string>> candidates;
  const fs::path parent = rank_dir(run_dir, rank);
  for (int64_t step : checkpoint_steps(run_dir, rank)) candidates.emplace_back(step, (parent / step_dir_name(step)).string());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string n = e.path().filename().string();
    const auto aside = n.find(kSetAside);
    if (n.rfind("step_", 0) != 0 || aside == std::string::npos || fs::exists(parent / n.substr(0, aside))) continue;
    try {
      candidates.emplace_back(std::stoll(n.substr(5, aside - 5)), e.path().string());
    } catch (...) {
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [step, dir] : candidates) {
    try {
      verify_checkpoint(dir);
      return dir;
    } catch (const UsageError& e) {
      logf("skipping %s", e.what());
    }
  }
  return std::nullopt;
}

std::string resolve_checkpoint(const std::string& path) {
  if (!fs::exists(path)) throw UsageError("checkpoint path " + path + " does not exist");
  if (fs::exists(fs::path(path) / "meta.json")) {
    verify_checkpoint(path);  // an explicitly named checkpoint must be whole
    return path;
  }
  // A rank directory, or a run directory.
  const fs::path p(path);
  std::optional<std::string> found;
  if (p.filename().string().rfind("rank", 0) == 0)
    found = newest_valid_checkpoint(p.parent_path().string(), std::stoi(p.filename().string().substr(4)));
  else
    found = newest_valid_checkpoint(path, 0);
  if (!found) throw UsageError("no valid checkpoint under " + path + "; train with --save-every or let a run finish");
  return *found;
}

}  // namespace rt::train
