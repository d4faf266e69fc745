// The shape of a nanochat GPT ("dN" configs and anything else the spec allows).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rt::model {

struct ModelConfig {
  int64_t n_layer = 8;
  int64_t n_embd = 512;         // C
  int64_t n_head = 4;           // H
  int64_t n_kv_head = 4;        // KV, divides H (GQA)
  int64_t head_dim = 128;       // D, with n_embd == n_head * head_dim
  int64_t vocab_size = 32768;   // V
  int64_t sequence_len = 1024;  // T
  std::string window_pattern = "SSSL";  // 'S' short, 'L' long; tiled over layers, last layer L

  // nanochat's dN as base_train builds it: n_layer N, n_embd = N * aspect_ratio rounded up to
  // whole heads of head_dim, n_head = n_kv_head = n_embd / head_dim (d8: 512 wide, 4 heads;
  // d5: 320 rounded up to 384, 3 heads).
  static ModelConfig from_depth(int64_t depth, int64_t sequence_len = 1024, int64_t vocab_size = 32768,
                                int64_t aspect_ratio = 64, int64_t head_dim = 128);

  // Throws rt::UsageError naming the bad field and the fix.
  void validate() const;

  // Attention window per layer: L -> T, S -> ceil((T/4)/128)*128.
  std::vector<int64_t> windows() const;
  // Layers with a value embedding: i % 2 == (L-1) % 2.
  bool has_value_embed(int64_t layer) const;
  int64_t n_value_embeds() const;
  // Rotary table length (nanochat precomputes 10*T positions).
  int64_t rotary_len() const { return 10 * sequence_len; }

  // A canonical one-line text form and its hash, compared across ranks and checkpoints.
  std::string to_json() const;
  static ModelConfig from_json(const std::string& json);
};

}  // namespace rt::model
