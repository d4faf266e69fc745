#include "row_split.hpp"

#include <algorithm>
#include <string>

#include "ringtrain/errors.hpp"

namespace rt::train {

std::vector<MicroStep> split_step_rows(const std::vector<int64_t>& batches, int index, int64_t step_rows) {
  if (index < 0 || size_t(index) >= batches.size() || step_rows < 1)
    throw RuntimeError("split_step_rows: rank " + std::to_string(index) + " of " + std::to_string(batches.size()) +
                       " (internal error)");
  int64_t round = 0, before = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    if (int(i) < index) before += batches[i];
    round += batches[i];
  }
  std::vector<MicroStep> out;
  for (int64_t start = 0; start < step_rows; start += round) {
    const int64_t first = start + before;
    const int64_t rows = std::min(batches[size_t(index)], step_rows - first);
    if (rows > 0) out.push_back({first, rows});
  }
  if (out.empty())
    throw UsageError("a step has " + std::to_string(step_rows) + " rows, too few to give rank " + std::to_string(index) +
                     " of this ring any (the ranks before it take " + std::to_string(before) +
                     " per round); use a smaller --device-batch on the ranks or a larger --total-batch");
  return out;
}

}  // namespace rt::train
