// A nanochat-shaped ParamSet built by hand from the spec's parameter table (names, shapes),
// filled with seeded random values, for optimizer tests that need no model code.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ringtrain/model/params.hpp"

namespace optim_test {

struct SmallConfig {
  int64_t n_layer = 2, n_embd = 128, n_head = 2, n_kv_head = 2, head_dim = 64;
  int64_t vocab_size = 512, sequence_len = 64;

  bool has_value_embed(int64_t i) const { return i % 2 == (n_layer - 1) % 2; }
  std::string to_json() const {
    return "{\"n_layer\": " + std::to_string(n_layer) + ", \"n_embd\": " + std::to_string(n_embd) +
           ", \"n_head\": " + std::to_string(n_head) + ", \"n_kv_head\": " +
           std::to_string(n_kv_head) + ", \"head_dim\": " + std::to_string(head_dim) +
           ", \"vocab_size\": " + std::to_string(vocab_size) + ", \"sequence_len\": " +
           std::to_string(sequence_len) + ", \"window_pattern\": \"SSSL\"}";
  }
};

// Declares every tensor of the spec's table for `c` and finalizes the arena.
inline void declare_params(rt::model::ParamSet& ps, const SmallConfig& c) {
  const int64_t C = c.n_embd, V = c.vocab_size, L = c.n_layer;
  const int64_t q = c.n_head * c.head_dim, kv = c.n_kv_head * c.head_dim;
  ps.add("resid_lambdas", {L});
  ps.add("x0_lambdas", {L});
  ps.add("smear_lambda", {1});
  ps.add("backout_lambda", {1});
  ps.add("transformer.wte.weight", {V, C});
  for (int64_t i = 0; i < L; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    ps.add(h + "attn.c_q.weight", {q, C});
    ps.add(h + "attn.c_k.weight", {kv, C});
    ps.add(h + "attn.c_v.weight", {kv, C});
    ps.add(h + "attn.c_proj.weight", {C, q});
    if (c.has_value_embed(i)) ps.add(h + "attn.ve_gate.weight", {c.n_kv_head, 12});
    ps.add(h + "mlp.c_fc.weight", {4 * C, C});
    ps.add(h + "mlp.c_proj.weight", {C, 4 * C});
  }
  ps.add("lm_head.weight", {V, C});
  for (int64_t i = 0; i < L; ++i)
    if (c.has_value_embed(i)) ps.add("value_embeds." + std::to_string(i) + ".weight", {V, kv});
  ps.add("smear_gate.weight", {1, 24});
  ps.finalize();
}

// Random parameters around nanochat-like magnitudes (a few tensors of each sign pattern).
inline void fill_params(rt::model::ParamSet& ps, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N(0.0f, 1.0f);
  for (auto& p : ps.all()) {
    const float scale = p.shape.size() == 1 ? 0.5f : (p.name.find("wte") != std::string::npos ? 0.8f : 0.05f);
    const float mean = p.name == "resid_lambdas" ? 1.0f : 0.0f;
    for (int64_t i = 0; i < p.numel; ++i) p.data[i] = mean + scale * N(rng);
  }
}

// Random gradients with a different scale per tensor, so that no group looks like another.
inline void fill_grads(rt::model::ParamSet& ps, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::uniform_real_distribution<float> S(0.002f, 0.05f);
  for (auto& p : ps.all()) {
    const float scale = S(rng);
    for (int64_t i = 0; i < p.numel; ++i) p.grad[i] = scale * N(rng);
  }
}

}  // namespace optim_test
