#include "resume_step.hpp"

#include <filesystem>
#include <optional>

#include "ringtrain/errors.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace fs = std::filesystem;

namespace rt::train {
namespace {

int64_t step_of(const std::string& step_dir) { return std::stoll(fs::path(step_dir).filename().string().substr(5)); }

}  // namespace

std::string agree_resume_checkpoint(net::Communicator* comm, const std::string& out_dir, int rank) {
  std::optional<std::string> dir = newest_valid_checkpoint(out_dir, rank);
  if (comm) {
    int64_t step = dir ? step_of(*dir) : -1;
    // The newest step every rank has; a rank whose own newest is newer falls back to it,
    // if it has a valid checkpoint of that step.
    int64_t common[1] = {step};
    comm->all_reduce_values(common, net::ValueOp::Min);
    if (common[0] < -1) throw RuntimeError("a rank announced checkpoint step " + std::to_string(common[0]) + "; every rank must run the same ringtrain build");
    if (common[0] != step) {
      const fs::path want = fs::path(rank_dir(out_dir, rank)) / step_dir_name(common[0]);
      if (common[0] >= 0 && fs::exists(want)) {
        verify_checkpoint(want.string());
        dir = want.string();
        step = common[0];
      } else {
        step = -1;
      }
    }
    int64_t agreed[2] = {step, -step};  // min and -max in one exchange
    comm->all_reduce_values(agreed, net::ValueOp::Min);
    if (agreed[0] < 0 || agreed[0] != -agreed[1])
      throw UsageError("--resume: the ranks have no checkpoint step in common (this rank: " +
                       (step < 0 ? std::string("none") : std::to_string(step)) +
                       "); copy the checkpoint directories or start without --resume");
  }
  if (!dir) throw UsageError("--resume: no valid checkpoint in " + rank_dir(out_dir, rank) + "; start without --resume");
  return *dir;
}

int64_t finished_step(const std::string& out_dir, int rank, int64_t steps) {
  const std::optional<std::string> dir = newest_valid_checkpoint(out_dir, rank);
  if (!dir) return -1;
  const int64_t step = step_of(*dir);
  return step >= steps ? step : -1;
}

}  // namespace rt::train
