// Streaming averaging (--sync-fragments F): the parameters are averaged in F fragments, each
// on its own schedule, so that no step sends the whole model at once (Douillard et al.,
// "Streaming DiLoCo", 2025). A fragment is a run of whole tensors in the arena's order:
// a transformer layer is never split, and an embedding or the head (a tensor of its own,
// about the size of two layers at d8) is one unit, so that the fragments can be of about
// equal size. Fragment i averages at the steps s with s mod H = i*H/F (H: --sync-every).
#pragma once
#include <cstdint>
#include <vector>

#include "ringtrain/model/config.hpp"
#include "ringtrain/model/params.hpp"

namespace rt::train {

// Tensors [first, end) of ParamSet::all(), which are arena values [at, at + size).
struct Fragment {
  size_t first = 0, end = 0;
  int64_t at = 0, size = 0;
};

// Throws rt::UsageError naming --sync-fragments when a model of `config` cannot be split
// into `count` fragments of whole units (a layer, the few scalars, or one other tensor).
void check_fragment_count(const model::ModelConfig& config, int64_t count);

// F contiguous fragments of whole units, the largest as small as it can be. Throws
// rt::UsageError naming --sync-fragments when the model has fewer than F units.
std::vector<Fragment> split_into_fragments(const model::ParamSet& params, int64_t count);

// The fragment that averages after `step` steps (1-based), or -1 when none does.
int64_t fragment_due(int64_t step, int64_t every, int64_t count);

}  // namespace rt::train
