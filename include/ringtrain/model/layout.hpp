// Which tensors a config has (nanochat's names and shapes), in which order they sit in
// the parameter arena, how they group for the optimizer and reports, and FLOPs/token.
//
// Arena order is the order in which backward finalises gradients, so that the gradient
// arena fills from the front: lm_head, then the dense matrices of block L-1 .. block 0,
// then the scalars (resid/x0 lambdas, smear, backout), then the sparse embedding tables:
// value_embeds (last layer first) and wte. Dense parameters are a contiguous prefix; the
// tables (updated only on touched rows) are a contiguous suffix.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/model/config.hpp"

namespace rt::model {

// Every parameter is classified once, here, by its nanochat state_dict key: its group (for
// counts and reports) and its optimizer group (nanochat's MuonAdamW).
enum class ParamGroup { wte = 0, value_embeds, lm_head, transformer_matrices, scalars };
constexpr int kNumParamGroups = 5;
const char* group_name(ParamGroup g);
// The embedding tables: updated only on the rows of the tokens a step saw.
inline bool is_embedding_table(ParamGroup g) { return g == ParamGroup::wte || g == ParamGroup::value_embeds; }

// MuonAdamW's groups: the AdamW groups in the spec's table order, then Muon (every matrix
// under transformer.h).
enum class OptimGroup { lm_head = 0, wte, value_embeds, resid_lambdas, x0_lambdas, scalars, muon };
constexpr int kNumAdamWGroups = 6;
const char* optim_group_name(OptimGroup g);

struct ParamClass {
  ParamGroup group;
  OptimGroup optim;
  int64_t block = -1;  // the transformer block of a per-block tensor, else -1
};
// Throws rt::UsageError for a key that is not one of nanochat's.
ParamClass classify_param(const std::string& name);
inline ParamGroup param_group(const std::string& name) { return classify_param(name).group; }

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// Every tensor of the model, in arena order.
std::vector<ParamSpec> param_specs(const ModelConfig& cfg);

struct ParamCounts {
  int64_t total = 0;
  int64_t by_group[kNumParamGroups] = {};
};
ParamCounts count_params(const ModelConfig& cfg);

// 6 * (all linear weights, lm_head, ve_gate and smear_gate included)
//   + sum over layers of 12 * H * D * min(window, T).
int64_t flops_per_token(const ModelConfig& cfg);

// Names of the per-block tensors.
std::string block_prefix(int64_t layer);  // "transformer.h.{i}."
std::string value_embed_name(int64_t layer);  // "value_embeds.{i}.weight"

}  // namespace rt::model
