#include "sync/muon_shards.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "ringtrain/model/layout.hpp"

namespace rt::train {

MuonShards assign_muon_shards(const std::vector<optim::MuonMatrix>& mats, const model::ParamSet& params, int world) {
  const auto& all = params.all();
  // Blocks in order of first appearance (arena order: the last block first).
  std::vector<std::vector<int>> blocks;
  std::map<int64_t, size_t> block_index;
  for (size_t i = 0; i < mats.size(); ++i) {
    const int64_t b = model::classify_param(all[size_t(mats[i].param)].name).block;
    auto [it, fresh] = block_index.emplace(b, blocks.size());
    if (fresh) blocks.emplace_back();
    blocks[it->second].push_back(int(i));
  }
  auto numel = [&](int i) { return size_t(mats[size_t(i)].rows * mats[size_t(i)].cols); };
  // Polar Express costs about rows * cols * min(rows, cols).
  auto work = [&](int i) {
    const auto& m = mats[size_t(i)];
    return double(m.rows) * double(m.cols) * double(std::min(m.rows, m.cols));
  };

  MuonShards s;
  s.owned.assign(size_t(world), {});
  std::vector<double> total_work(size_t(world), 0.0);
  for (const auto& block : blocks) {
    std::vector<int> by_size = block;
    std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) { return numel(a) > numel(b); });
    // Largest first, each to the rank with the smallest part of this block, then the least
    // work overall, then the lowest rank.
    std::vector<size_t> part(size_t(world), 0);
    std::vector<std::vector<int>> mine(static_cast<size_t>(world), std::vector<int>{});
    for (int m : by_size) {
      size_t best = 0;
      for (size_t r = 1; r < size_t(world); ++r)
        if (std::tie(part[r], total_work[r]) < std::tie(part[best], total_work[best])) best = r;
      mine[best].push_back(m);
      part[best] += numel(m);
      total_work[best] += work(m);
    }
    MuonShards::Group g;
    g.bounds.push_back(0);
    for (size_t r = 0; r < size_t(world); ++r) {
      std::sort(mine[r].begin(), mine[r].end());
      g.matrices.insert(g.matrices.end(), mine[r].begin(), mine[r].end());
      s.owned[r].insert(s.owned[r].end(), mine[r].begin(), mine[r].end());
      g.bounds.push_back(g.bounds.back() + part[r]);
    }
    s.groups.push_back(std::move(g));
  }
  for (auto& v : s.owned) std::sort(v.begin(), v.end());
  return s;
}

}  // namespace rt::train
