// ModelConfig: the dN presets, validation with one-line fixes, windows and JSON form.
#include "ringtrain/model/config.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "ringtrain/errors.hpp"

namespace rt::model {

ModelConfig ModelConfig::from_depth(int64_t depth, int64_t sequence_len, int64_t vocab_size, int64_t aspect_ratio,
                                    int64_t head_dim) {
  if (depth < 1) throw UsageError("--depth " + std::to_string(depth) + " is not positive; pass --depth 1 or more");
  if (aspect_ratio < 1)
    throw UsageError("--aspect-ratio " + std::to_string(aspect_ratio) + " is not positive; pass 1 or more (nanochat: 64)");
  if (head_dim < 1) throw UsageError("--head-dim " + std::to_string(head_dim) + " is not positive; pass an even --head-dim");
  ModelConfig c;
  c.n_layer = depth;
  c.head_dim = head_dim;
  // base_train nudges the width up to whole heads, so that every head is head_dim wide.
  c.n_embd = (depth * aspect_ratio + head_dim - 1) / head_dim * head_dim;
  c.n_head = c.n_embd / c.head_dim;
  c.n_kv_head = c.n_head;
  c.sequence_len = sequence_len;
  c.vocab_size = vocab_size;
  return c;
}

void ModelConfig::validate() const {
  auto s = [](int64_t v) { return std::to_string(v); };
  if (n_layer < 1) throw UsageError("n_layer " + s(n_layer) + " is not positive; pass --depth 1 or more");
  if (head_dim < 2 || head_dim % 2 != 0)
    throw UsageError("head_dim " + s(head_dim) + " must be even and at least 2 (rotary splits it in halves); pass an even --head-dim");
  if (n_embd % head_dim != 0)
    throw UsageError("n_embd " + s(n_embd) + " is not divisible by head_dim " + s(head_dim) +
                     "; make n_embd a whole number of heads or pass another --head-dim");
  if (n_head * head_dim != n_embd)
    throw UsageError("n_head " + s(n_head) + " * head_dim " + s(head_dim) + " != n_embd " + s(n_embd) +
                     "; set n_head = n_embd / head_dim");
  if (n_embd < 24)
    throw UsageError("n_embd " + s(n_embd) + " is below 24, the width the smear gate reads; use a larger model");
  if (n_kv_head < 1 || n_head % n_kv_head != 0)
    throw UsageError("n_kv_head " + s(n_kv_head) + " does not divide n_head " + s(n_head) +
                     "; pass --n-kv-head as a divisor of n_head");
  if (n_kv_head > 64)
    throw UsageError("n_kv_head " + s(n_kv_head) + " is above 64, the most the value-embedding gate supports; use fewer kv heads");
  if (vocab_size < 2 || vocab_size > (int64_t(1) << 31) - 1)
    throw UsageError("vocab_size " + s(vocab_size) + " is out of range 2..2^31-1; use data prepared with a vocabulary in that range");
  if (sequence_len < 1)
    throw UsageError("sequence_len " + s(sequence_len) + " is not positive; pass --seq-len 1 or more");
  if (window_pattern.empty())
    throw UsageError("window pattern is empty; pass --window-pattern made of S and L, e.g. SSSL");
  for (char ch : window_pattern)
    if (ch != 'S' && ch != 'L' && ch != 's' && ch != 'l')
      throw UsageError(std::string("window pattern '") + window_pattern + "' has the unknown letter '" + ch +
                       "'; use only S (short) and L (long), e.g. SSSL");
}

std::vector<int64_t> ModelConfig::windows() const {
  const int64_t T = sequence_len;
  const int64_t short_w = int64_t(std::ceil((double(T) / 4.0) / 128.0)) * 128;
  std::vector<int64_t> w(n_layer);
  for (int64_t i = 0; i < n_layer; ++i) {
    const char ch = window_pattern[i % window_pattern.size()];
    w[i] = (ch == 'L' || ch == 'l') ? T : short_w;
  }
  w.back() = T;  // the last layer always sees the whole context
  return w;
}

bool ModelConfig::has_value_embed(int64_t layer) const { return layer % 2 == (n_layer - 1) % 2; }

int64_t ModelConfig::n_value_embeds() const {
  int64_t n = 0;
  for (int64_t i = 0; i < n_layer; ++i) n += has_value_embed(i);
  return n;
}

std::string ModelConfig::to_json() const {
  // nlohmann's default object keeps keys sorted: a canonical form to compare and hash.
  nlohmann::json j = {{"n_layer", n_layer},     {"n_embd", n_embd},
                      {"n_head", n_head},       {"n_kv_head", n_kv_head},
                      {"head_dim", head_dim},   {"vocab_size", vocab_size},
                      {"sequence_len", sequence_len}, {"window_pattern", window_pattern}};
  return j.dump();
}

ModelConfig ModelConfig::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw UsageError(std::string("model config is not valid JSON (") + e.what() + "); check the file");
  }
  ModelConfig c;
  auto get = [&](const char* key, int64_t& field) {
    if (!j.contains(key)) throw UsageError(std::string("model config lacks \"") + key + "\"; add it");
    if (!j[key].is_number_integer()) throw UsageError(std::string("model config \"") + key + "\" is not an integer; fix it");
    field = j[key].get<int64_t>();
  };
  get("n_layer", c.n_layer);
  get("n_embd", c.n_embd);
  get("n_head", c.n_head);
  get("n_kv_head", c.n_kv_head);
  get("head_dim", c.head_dim);
  get("vocab_size", c.vocab_size);
  get("sequence_len", c.sequence_len);
  if (j.contains("window_pattern")) {
    if (!j["window_pattern"].is_string()) throw UsageError("model config \"window_pattern\" is not a string; fix it");
    c.window_pattern = j["window_pattern"].get<std::string>();
  }
  return c;
}

}  // namespace rt::model
