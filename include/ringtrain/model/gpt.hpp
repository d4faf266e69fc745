// The nanochat GPT on CPU: parameters in one arena (see layout.hpp for the order),
// activations in one arena sized once by reserve(), forward returning the loss, and a
// backward that adds into the gradient arena and reports each range as it becomes final.
// All work runs on the caller's OpenMP threads (set them with omp_set_num_threads).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ringtrain/model/config.hpp"
#include "ringtrain/model/layout.hpp"
#include "ringtrain/model/params.hpp"

namespace rt::model {

class GPT {
 public:
  // Validates the config (rt::UsageError) and allocates zeroed parameters and gradients.
  explicit GPT(const ModelConfig& cfg);
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const ModelConfig& config() const { return cfg_; }
  ParamSet& params() { return params_; }
  const ParamSet& params() const { return params_; }

  // nanochat's initialisation, deterministic for a seed whatever the thread count.
  void init_weights(uint64_t seed);

  // Allocates the activation arena for up to B*T tokens per forward (T <= rotary_len()).
  // forward() calls it on demand, but call it up front so that steps never allocate.
  void reserve(int64_t B, int64_t T);
  int64_t activation_bytes() const;
  // What reserve(B, T) would allocate, without allocating: for a memory check up front.
  int64_t activation_bytes_for(int64_t B, int64_t T);

  // Mean cross entropy over targets != -1 (0 if there are none). idx/tgt: [B, T].
  // per_token_loss (nullable): [B*T], 0 where the target is ignored.
  // need_backward=false (evaluation) skips the LM-head gradient work.
  float forward(const int32_t* idx, const int32_t* tgt, int64_t B, int64_t T,
                float* per_token_loss = nullptr, bool need_backward = true);

  // Called with [offset, count) of the gradient arena once those gradients are final:
  // lm_head, then each block from the last to the first (and its value_embeds table),
  // then the scalars and wte.
  using GradReady = std::function<void(int64_t offset, int64_t count)>;
  // Adds d(loss_scale * loss)/d(params) into the gradient arena (the caller zeroes it).
  void backward(float loss_scale, const GradReady& on_ready = {});

  // Softcapped logits at the last position of every row, for sampling: out [B, V].
  void forward_last_logits(const int32_t* idx, int64_t B, int64_t T, float* out);

  // Sorted unique token ids of the last forward: the rows of wte and of every
  // value_embeds table that received gradient.
  const std::vector<int32_t>& touched_tokens() const;

 private:
  struct Impl;
  ModelConfig cfg_;
  ParamSet params_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt::model
