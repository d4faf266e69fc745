// Which rows of an optimizer step each rank of a ring trains, so that the tokens per step
// stay fixed whatever the ring's size (elastic training re-splits them over the live ranks).
//
// The step's rows are the next step_rows rows of the one stream every rank packs. They go in
// rounds of sum(B_i) rows (B_i: --device-batch of the ring's i-th rank); in every round rank
// i takes the B_i rows after those of ranks 0..i-1, and the last round is cut at step_rows.
// With the full ring step_rows is a whole number of rounds, which is exactly the layout of
// a fixed ring (N ranks of B see the rows one rank of N*B would). With fewer ranks there are
// more rounds (gradient accumulation), and the last one may give a rank fewer rows or none.
// Every row of the step goes to exactly one rank.
#pragma once
#include <cstdint>
#include <vector>

namespace rt::train {

struct MicroStep {
  int64_t first_row = 0;  // into the step's rows
  int64_t rows = 0;       // at least 1, at most the rank's B
};

// The micro-steps of the ring's rank `index`. Throws rt::UsageError when that rank would get
// no rows at all (step_rows is smaller than the batches of the ranks before it).
std::vector<MicroStep> split_step_rows(const std::vector<int64_t>& batches, int index, int64_t step_rows);

}  // namespace rt::train
