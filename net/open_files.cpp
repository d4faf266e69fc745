#include "open_files.hpp"

#include <sys/resource.h>

#include <algorithm>

namespace rt::net {

namespace {
uint64_t as_count(rlim_t v) { return v == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(v); }
}  // namespace

OpenFileLimit raise_open_file_limit() {
  OpenFileLimit r;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return r;
  r.before = r.after = as_count(lim.rlim_cur);
  const rlim_t cap = 1u << 20;
  const rlim_t want = lim.rlim_max == RLIM_INFINITY ? cap : std::min<rlim_t>(lim.rlim_max, cap);
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < want) {
    rlimit raised = lim;
    raised.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) r.after = as_count(want);
  }
  return r;
}

std::string open_file_limit_warning(const OpenFileLimit& limit) {
  if (limit.after == 0 || limit.after >= kEnoughOpenFiles) return "";
  return "WARNING: this rank may hold at most " + std::to_string(limit.after) +
         " open files (its hard limit): anyone who reaches its port can use them up with connections it has not "
         "authenticated yet, and then a checkpoint cannot be written; raise the limit (LimitNOFILE=65536 in a systemd "
         "unit, 'ulimit -Hn 65536' as root before starting) and limit new connections per source in the firewall "
         "(README: Training on two (or more) hosts, step 2)";
}

}  // namespace rt::net
