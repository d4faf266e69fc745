// Error types shared by every part of ringtrain. The CLI maps them to exit codes:
//   UsageError   -> exit 2 (bad flag, bad config, corrupt or mismatched input file)
//   RuntimeError -> exit 1 (lost peer, I/O failure, anything that went wrong while running)
// Messages are one line that names the problem and, where there is one, the fix.
#pragma once
#include <stdexcept>
#include <string>

namespace rt {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A file could not be written (a full disk, no file descriptor left, a failed fsync). Also
// exit 1; a trainer that gets it from a periodic checkpoint logs it and trains on.
struct WriteError : RuntimeError {
  using RuntimeError::RuntimeError;
};

}  // namespace rt
