// --resume: which checkpoint every rank continues from. Each rank has its own checkpoint
// directory; a crash can leave them at different steps (a rank died mid-save, or a
// checkpoint is corrupt on one host). All ranks must continue from the same step: the
// newest step every rank has a valid checkpoint of.
#pragma once
#include <string>

#include "ringtrain/net/communicator.hpp"

namespace rt::train {

// The step directory this rank resumes from. comm is null for a single process. Throws
// rt::UsageError when there is no valid checkpoint, or none at a step all ranks have.
std::string agree_resume_checkpoint(net::Communicator* comm, const std::string& out_dir, int rank);

// The step of this rank's newest valid checkpoint when it is at --steps or beyond (the job
// is done), else -1. A rank restarted after the job finished (a supervisor, a reboot with
// the unit enabled) must not wait for peers that will never come again, fail, and be
// restarted forever.
int64_t finished_step(const std::string& out_dir, int rank, int64_t steps);

}  // namespace rt::train
