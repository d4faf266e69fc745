#include "sync/fragments.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "ringtrain/errors.hpp"
#include "ringtrain/model/layout.hpp"

namespace rt::train {
namespace {

// The units in arena order, as the index of each one's first tensor (and the end).
std::vector<size_t> unit_starts(const std::vector<std::string>& names) {
  std::vector<size_t> starts;
  int64_t last_block = -2;
  bool last_scalar = false;
  for (size_t t = 0; t < names.size(); ++t) {
    const model::ParamClass c = model::classify_param(names[t]);
    const bool scalar = c.group == model::ParamGroup::scalars;
    // A layer's tensors are one unit, and so are the few scalars together.
    const bool same_unit = t > 0 && ((c.block >= 0 && c.block == last_block) || (scalar && last_scalar));
    if (!same_unit) starts.push_back(t);
    last_block = c.block;
    last_scalar = scalar;
  }
  starts.push_back(names.size());
  return starts;
}

std::string too_many(int64_t count, size_t units) {
  return "--sync-fragments " + std::to_string(count) + " is more than this model's " + std::to_string(units) +
         " layers, embeddings and heads (a fragment holds whole ones); use 1 to " + std::to_string(units);
}

}  // namespace

void check_fragment_count(const model::ModelConfig& config, int64_t count) {
  std::vector<std::string> names;
  for (const auto& spec : model::param_specs(config)) names.push_back(spec.name);
  const size_t units = unit_starts(names).size() - 1;
  if (count < 1 || size_t(count) > units) throw UsageError(too_many(count, units));
}

std::vector<Fragment> split_into_fragments(const model::ParamSet& params, int64_t count) {
  const auto& all = params.all();
  std::vector<std::string> names;
  for (const auto& p : all) names.push_back(p.name);
  const std::vector<size_t> starts = unit_starts(names);
  const size_t units = starts.size() - 1;
  if (count < 1 || size_t(count) > units) throw UsageError(too_many(count, units));
  // prefix[u]: values in units [0, u).
  std::vector<int64_t> prefix(units + 1, 0);
  for (size_t u = 0; u < units; ++u) {
    int64_t n = 0;
    for (size_t t = starts[u]; t < starts[u + 1]; ++t) n += all[t].numel;
    prefix[u + 1] = prefix[u] + n;
  }
  // best[f][u]: the smallest largest fragment when units [0, u) make f fragments; cut[f][u]
  // where the last of them starts. Units are few (two per layer at most), so all pairs do.
  const size_t F = size_t(count);
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(F + 1, std::vector<int64_t>(units + 1, kNone));
  std::vector<std::vector<size_t>> cut(F + 1, std::vector<size_t>(units + 1, 0));
  best[0][0] = 0;
  for (size_t f = 1; f <= F; ++f)
    for (size_t u = f; u <= units; ++u)
      for (size_t s = f - 1; s < u; ++s) {
        if (best[f - 1][s] == kNone) continue;
        const int64_t worst = std::max(best[f - 1][s], prefix[u] - prefix[s]);
        if (worst < best[f][u]) best[f][u] = worst, cut[f][u] = s;
      }
  std::vector<Fragment> out(F);
  size_t u = units;
  for (size_t f = F; f >= 1; --f) {
    const size_t s = cut[f][u];
    Fragment& fr = out[f - 1];
    fr.first = starts[s];
    fr.end = starts[u];
    fr.at = all[fr.first].offset;
    fr.size = prefix[u] - prefix[s];
    u = s;
  }
  return out;
}

int64_t fragment_due(int64_t step, int64_t every, int64_t count) {
  const int64_t phase = step % every;
  // Offsets floor(i*H/F) are distinct for F <= H; the fragment whose offset is this phase.
  for (int64_t i = 0; i < count; ++i)
    if (i * every / count == phase) return i;
  return -1;
}

}  // namespace rt::train
