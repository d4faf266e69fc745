// The open-file limit of a rank. Every TCP connection to the rank's port takes a file
// descriptor from the moment the kernel hands it over, long before the security handshake
// can tell a rank from a stranger. systemd gives a service a soft limit of 1024: a process
// holding 1,200 unauthenticated connections to the port then left the rank no descriptor for
// its next checkpoint file. So a rank raises its soft limit to the hard one (systemd's
// default hard limit is 524288) before it listens, and says so when little room is left.
#pragma once
#include <cstdint>
#include <string>

namespace rt::net {

struct OpenFileLimit {
  uint64_t before = 0, after = 0;  // the soft limit before and after; RLIM_INFINITY reads as UINT64_MAX
};

// Raises the soft RLIMIT_NOFILE to the hard limit (capped at 1<<20: select-free code does not
// need more, and some libraries size tables by it). Never lowers it. Safe to call often.
OpenFileLimit raise_open_file_limit();

// Below this many descriptors, a flood of connections can still starve the rank: the
// handshake deadline bounds how long each one lives, not how many arrive in that time.
constexpr uint64_t kEnoughOpenFiles = 16384;

// One line for the log when the limit is below kEnoughOpenFiles, else empty.
std::string open_file_limit_warning(const OpenFileLimit& limit);

}  // namespace rt::net
