// The training loop of `ringtrain train`, on one process or one rank of several.
//
// One step: device-batch micro-steps (forward, backward, gradient accumulation), then the
// synchronisation of the chosen --sync mode, then the MuonAdamW update, then metrics,
// evaluation and checkpoints on their schedules. A stop request (`ringtrain stop`, SIGTERM
// or SIGINT on any rank) is agreed on by all ranks within a step, so they all checkpoint
// at the same step and exit 0. A lost rank makes the others checkpoint and exit 1.
#pragma once
#include "ringtrain/train/options.hpp"

namespace rt::train {

// Returns the process exit code (0 done or stopped on request, 1 runtime failure);
// throws rt::UsageError for bad input.
int run_training(const TrainOptions& options);

}  // namespace rt::train
