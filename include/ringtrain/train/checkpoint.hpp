// Checkpoints: one self-contained directory per rank and step,
//   <out>/rank<R>/step_<NNNNNN>/{model.safetensors, state.safetensors, tokenizer.tiktoken, meta.json}
// Every file is written into a temporary directory, fsynced, and the directory is renamed
// into place only when complete: a crash mid-write never leaves something that looks like a
// checkpoint. meta.json lists every file with its size and CRC-32, so corruption (a
// truncated copy, a flipped bit) is detected on load and the checkpoint refused.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/model/params.hpp"

namespace rt::train {

// 2: the run's state in state.safetensors (io/state_file.hpp). 1 had five binary layouts
// in state.bin; --resume refuses those (their weights still load everywhere else).
constexpr int kCheckpointFormatVersion = 2;

uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc = 0);

std::string rank_dir(const std::string& run_dir, int rank);
std::string step_dir_name(int64_t step);

class CheckpointWriter {
 public:
  CheckpointWriter(const std::string& run_dir, int rank, int64_t step);
  ~CheckpointWriter();  // removes the temporary directory unless committed
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes one file made of the given pieces, in order.
  void write_file(const std::string& name, const std::vector<std::pair<const void*, size_t>>& pieces);
  // Writes one file whose bytes `produce` hands to the sink it is given.
  void write_file(const std::string& name, const std::function<void(const std::function<void(const void*, size_t)>&)>& produce);
  // For files written by someone else's writer: where to write `name`, and then record it
  // (size and CRC-32 are read back from disk).
  std::string path(const std::string& name) const;
  void add_written_file(const std::string& name);
  // Adds "files" to meta, writes meta.json, fsyncs and renames into place. Returns the path.
  // Every failure to write, sync or rename is an rt::WriteError.
  // A checkpoint of the same step already there stays until the new one is in place: it is
  // renamed aside, the new one renamed in, then the old one deleted (and renamed back if
  // the new one could not be put in place).
  std::string commit(nlohmann::json meta);

 private:
  std::string final_dir_, tmp_dir_;
  nlohmann::json files_ = nlohmann::json::object();
  bool committed_ = false;
};

// Parameters must be finite to be checkpointed: a NaN or Inf saved as valid would poison
// every resume. Throws rt::RuntimeError naming the step and the first bad tensor.
void require_finite(const model::ParamSet& params, int64_t step);

// At start, before anything is saved or resumed: removes what a killed save left in this
// rank's directory (its temporary directories, copies set aside that are stale) and puts a
// set-aside copy back under its step's name when the step has no other copy. Logs each.
void clean_checkpoint_leftovers(const std::string& run_dir, int rank);

// Reads meta.json and checks every listed file's size and CRC-32. Returns meta.json's content,
// or throws rt::UsageError naming the checkpoint and what is wrong with it (a meta.json that
// does not parse or lacks a field counts as corrupt, like a file that fails its CRC).
nlohmann::json verify_checkpoint(const std::string& step_dir);

// The newest checkpoint of a rank that verifies; older or broken ones are skipped, each with
// a log line saying why. nullopt when there is none. A copy set aside by a commit that was
// interrupted before its new copy was in place counts as that step's checkpoint.
std::optional<std::string> newest_valid_checkpoint(const std::string& run_dir, int rank);

// Steps of the checkpoints present (valid or not) for a rank, ascending.
std::vector<int64_t> checkpoint_steps(const std::string& run_dir, int rank);

// Retention (--keep-checkpoints N): after step `saved` is in place, removes this rank's
// checkpoints older than it except the newest N-1 of them, so that N remain. Checkpoints
// of later steps (an earlier run that went further, or one that --resume skipped as
// broken) are not this run's to judge and are left alone. Each directory is renamed to a
// hidden name before it is deleted, so that a crash mid-delete leaves no half a checkpoint
// under a step's name (the next start removes it). Returns the steps removed; a removal
// that fails is logged and skipped (retention never stops a run).
std::vector<int64_t> prune_checkpoints(const std::string& run_dir, int rank, int64_t saved, int64_t keep);

// Resolves what a user passed as --checkpoint: a step directory, a rank directory, or a run
// directory (then rank 0's newest valid checkpoint). Throws UsageError when there is none.
std::string resolve_checkpoint(const std::string& path);

}  // namespace rt::train
