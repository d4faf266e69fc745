#include "memory_check.hpp"

#include <cstdio>
#include <string>

#include "ringtrain/errors.hpp"

namespace rt::train {
namespace {

// Bytes of memory the system can still give us (MemAvailable), or -1 if unknown.
int64_t available_memory() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %ld kB", &kb) == 1) break;
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

}  // namespace

void check_memory(model::GPT& model, int64_t device_batch, int64_t seq_len, double sync_bytes) {
  const int64_t avail = available_memory();
  if (avail < 0) return;
  auto need = [&](int64_t b) { return double(model.activation_bytes_for(b, seq_len)) + sync_bytes; };
  const double budget = 0.9 * double(avail);
  if (need(device_batch) <= budget) return;
  int64_t lo = 0, hi = device_batch;  // largest b with need(b) <= budget is in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (need(mid) <= budget ? lo : hi) = mid;
  }
  char msg[512];
  std::snprintf(msg, sizeof msg,
                "--device-batch %lld at --seq-len %lld needs about %.1f GB more memory, but %.1f GB is available; "
                "%s (use --total-batch to keep the tokens per step)",
                (long long)device_batch, (long long)seq_len, need(device_batch) / 1e9, double(avail) / 1e9,
                lo > 0 ? ("the largest device batch that fits is " + std::to_string(lo)).c_str()
                       : "even a device batch of 1 does not fit: use a smaller --seq-len or model");
  throw UsageError(msg);
}

}  // namespace rt::train
