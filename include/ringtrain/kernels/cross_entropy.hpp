// Logit softcap fused with cross entropy, and the chunked language-model head built on it.
//   z = cap * tanh(l / cap);  loss_r = logsumexp(z_r) - z_r[tgt_r]  (tgt -1: ignored, loss 0)
#pragma once
#include <cstdint>

namespace rt::kernels {

constexpr float kSoftcap = 15.0f;

// On rows x V logits, in place. Writes per-row losses (nullable) and returns their sum.
// With want_grad, overwrites the logits with d(grad_scale * sum loss)/d(logits) (0 on
// ignored rows); otherwise leaves the capped logits there.
double softcap_xent_rows(float* logits, int64_t rows, int64_t V, const int32_t* tgt, float cap,
                         float* losses, float grad_scale, bool want_grad);

// The LM head: logits = x W^T over N rows, then softcap cross entropy, `chunk` rows at a
// time so only chunk x V logits exist at once (scratch: chunk * V floats).
// With dx (overwritten) and/or dW (accumulated) non-null, the gradient of
// grad_scale * sum(loss) flows back through the same chunk before the next one.
// Returns the sum of losses over valid rows.
double lm_head_xent(const float* x, const float* W, const int32_t* tgt, int64_t N, int64_t C,
                    int64_t V, float cap, float grad_scale, float* losses, float* dx, float* dW,
                    float* scratch, int64_t chunk);

}  // namespace rt::kernels
