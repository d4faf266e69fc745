// Causal self-attention with a per-layer sliding window, forward and backward.
//
// Blocked and flash-style: queries and keys are processed in tiles with an online softmax,
// so no T x T matrix is ever stored, and tiles that lie wholly outside the causal window
// are skipped, so the cost grows with the window and not with T.
// Query t attends to keys j with  t - window <= j <= t  (window + 1 keys; window >= T-1 is
// full causal attention). Scale 1/sqrt(D). GQA: query head h uses kv head h / (H / KV).
#pragma once
#include <cstdint>
#include <memory>

namespace rt::kernels {

struct AttentionShape {
  int64_t B = 1;       // rows (sequences)
  int64_t T = 1;       // sequence length
  int64_t H = 1;       // query heads
  int64_t KV = 1;      // key/value heads, divides H
  int64_t D = 128;     // head dim
  int64_t window = 0;  // keys t-window..t
};

// Blocking of the kernel. The defaults suit D = 64..128 on AVX-512 cores; tests use small
// values to exercise the tile edges, benchmarks to compare choices.
struct AttentionTiling {
  int64_t q_tile = 64;      // query rows per forward work item
  int64_t k_tile = 64;      // key rows per backward work item
  int64_t max_chunk = 512;  // longest run of keys (forward) or queries (backward) per matmul
};

// Layouts are those the linear layers produce, row-major:
//   q, y, dq, dy: [B, T, H, D];  k, v, dk, dv: [B, T, KV, D];  lse: [B, H, T].
// Construct once per shape (it owns its scratch and any oneDNN primitives) and reuse.
// One instance runs one call at a time (it parallelises internally with OpenMP).
class SlidingWindowAttention {
 public:
  explicit SlidingWindowAttention(const AttentionShape& shape, const AttentionTiling& tiling = {});
  ~SlidingWindowAttention();
  SlidingWindowAttention(const SlidingWindowAttention&) = delete;
  SlidingWindowAttention& operator=(const SlidingWindowAttention&) = delete;

  const AttentionShape& shape() const;

  // y = softmax(q k^T / sqrt(D) + causal window mask) v ; lse = row log-sum-exp of the
  // scaled scores (natural log), kept for backward.
  void forward(const float* q, const float* k, const float* v, float* y, float* lse);

  // Overwrites dq, dk, dv (dk/dv sum over the query heads that share a kv head).
  // Bitwise reproducible, except dq when B*KV does not split evenly over the OpenMP threads
  // (then summed in a varying order: last-bit differences).
  void backward(const float* q, const float* k, const float* v, const float* y,
                const float* lse, const float* dy, float* dq, float* dk, float* dv);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt::kernels
