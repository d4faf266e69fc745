// Which rank orthogonalises which of Muon's matrices under --sync grad, as nanochat's
// distributed MuonAdamW does it: each matrix's gradient is reduce-scattered to its owner
// only, the owner runs Muon (Polar Express) on it, and the updated matrix is all-gathered.
// Per matrix that sends 2(p-1)/p of its bytes instead of an all-reduce's 2(p-1)/p plus a
// broadcast's (p-1)/p.
//
// The matrices travel one transformer block at a time (a block's gradients are final
// while backward still runs on earlier blocks, so its reduce-scatter overlaps compute).
// Within a block the matrices are dealt out so that every rank's part is about the same
// size (each rank sends all parts but its own, so the smallest part sets the cost), and
// across blocks so that every rank gets about the same Polar Express work. The deal is a
// pure function of the shapes and the world size: every rank computes the same one.
#pragma once
#include <cstddef>
#include <vector>

#include "ringtrain/model/params.hpp"
#include "ringtrain/optim/muon_adamw.hpp"

namespace rt::train {

struct MuonShards {
  // Per rank, the matrices it orthogonalises (indices into MuonAdamW::muon_matrices()).
  std::vector<std::vector<int>> owned;
  // One group per transformer block: its matrices ordered by owner (in arena order within
  // an owner), and world + 1 element offsets into that order where each owner's part
  // starts: the segments of the block's reduce-scatter and all-gather.
  struct Group {
    std::vector<int> matrices;
    std::vector<size_t> bounds;
    size_t elements() const { return bounds.back(); }
  };
  std::vector<Group> groups;
};

MuonShards assign_muon_shards(const std::vector<optim::MuonMatrix>& matrices, const model::ParamSet& params,
                              int world);

}  // namespace rt::train
