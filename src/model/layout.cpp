// Parameter names, shapes, arena order, groups and FLOP counts of a config.
#include "ringtrain/model/layout.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ringtrain/errors.hpp"

namespace rt::model {

const char* group_name(ParamGroup g) {
  switch (g) {
    case ParamGroup::wte: return "wte";
    case ParamGroup::value_embeds: return "value_embeds";
    case ParamGroup::lm_head: return "lm_head";
    case ParamGroup::transformer_matrices: return "transformer_matrices";
    case ParamGroup::scalars: return "scalars";
  }
  return "?";
}

const char* optim_group_name(OptimGroup g) {
  switch (g) {
    case OptimGroup::lm_head: return "lm_head";
    case OptimGroup::wte: return "wte";
    case OptimGroup::value_embeds: return "value_embeds";
    case OptimGroup::resid_lambdas: return "resid_lambdas";
    case OptimGroup::x0_lambdas: return "x0_lambdas";
    case OptimGroup::scalars: return "scalars";
    case OptimGroup::muon: return "muon";
  }
  return "?";
}

ParamClass classify_param(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  if (name == "transformer.wte.weight") return {ParamGroup::wte, OptimGroup::wte};
  if (name == "lm_head.weight") return {ParamGroup::lm_head, OptimGroup::lm_head};
  if (starts("value_embeds.")) return {ParamGroup::value_embeds, OptimGroup::value_embeds};
  if (starts("transformer.h.")) {
    const char* digits = name.c_str() + std::strlen("transformer.h.");
    char* end = nullptr;
    const long long block = std::strtoll(digits, &end, 10);
    if (end == digits || *end != '.' || block < 0)
      throw UsageError("unknown parameter name '" + name + "'; expected transformer.h.<layer>.<tensor>");
    return {ParamGroup::transformer_matrices, OptimGroup::muon, block};
  }
  if (name == "resid_lambdas") return {ParamGroup::scalars, OptimGroup::resid_lambdas};
  if (name == "x0_lambdas") return {ParamGroup::scalars, OptimGroup::x0_lambdas};
  if (name == "smear_gate.weight" || name == "smear_lambda" || name == "backout_lambda")
    return {ParamGroup::scalars, OptimGroup::scalars};
  throw UsageError("unknown parameter name '" + name + "'; expected a nanochat state_dict key");
}

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string block_prefix(int64_t layer) { return "transformer.h." + std::to_string(layer) + "."; }
std::string value_embed_name(int64_t layer) {
  return "value_embeds." + std::to_string(layer) + ".weight";
}

std::vector<ParamSpec> param_specs(const ModelConfig& c) {
  const int64_t C = c.n_embd, V = c.vocab_size, HD = c.n_head * c.head_dim,
                KVD = c.n_kv_head * c.head_dim, L = c.n_layer;
  std::vector<ParamSpec> s;
  s.push_back({"lm_head.weight", {V, C}});
  for (int64_t i = L - 1; i >= 0; --i) {
    const std::string p = block_prefix(i);
    s.push_back({p + "attn.c_q.weight", {HD, C}});
    s.push_back({p + "attn.c_k.weight", {KVD, C}});
    s.push_back({p + "attn.c_v.weight", {KVD, C}});
    if (c.has_value_embed(i)) s.push_back({p + "attn.ve_gate.weight", {c.n_kv_head, 12}});
    s.push_back({p + "attn.c_proj.weight", {C, HD}});
    s.push_back({p + "mlp.c_fc.weight", {4 * C, C}});
    s.push_back({p + "mlp.c_proj.weight", {C, 4 * C}});
  }
  s.push_back({"smear_gate.weight", {1, 24}});
  s.push_back({"resid_lambdas", {L}});
  s.push_back({"x0_lambdas", {L}});
  s.push_back({"smear_lambda", {1}});
  s.push_back({"backout_lambda", {1}});
  for (int64_t i = L - 1; i >= 0; --i)
    if (c.has_value_embed(i)) s.push_back({value_embed_name(i), {V, KVD}});
  s.push_back({"transformer.wte.weight", {V, C}});
  return s;
}

ParamCounts count_params(const ModelConfig& cfg) {
  ParamCounts pc;
  for (const auto& s : param_specs(cfg)) {
    pc.total += s.numel();
    pc.by_group[int(param_group(s.name))] += s.numel();
  }
  return pc;
}

int64_t flops_per_token(const ModelConfig& cfg) {
  int64_t linear = 0;
  for (const auto& s : param_specs(cfg)) {
    const ParamGroup g = param_group(s.name);
    if (g == ParamGroup::lm_head || g == ParamGroup::transformer_matrices ||
        s.name == "smear_gate.weight")
      linear += s.numel();
  }
  int64_t attn = 0;
  for (int64_t w : cfg.windows())
    attn += 12 * cfg.n_head * cfg.head_dim * std::min(w, cfg.sequence_len);
  return 6 * linear + attn;
}

}  // namespace rt::model
