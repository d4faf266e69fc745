// Causal sliding-window attention, forward and backward, blocked flash-style.
//
// Forward, one work item per (row b, query head h, tile of q_tile queries):
//   the keys this tile can see, [t0 - window, t0 + q_tile), are walked in chunks of at most
//   max_chunk keys. Per chunk: S = scale * Q K^T (oneDNN), masking and an online softmax
//   update in our own loop (running row max m and row sum l, earlier output rescaled by
//   exp(m_old - m_new)), then Y += P V (oneDNN). At the end Y /= l and lse = m + log l.
//   Only the keys inside the window's bounding band are ever touched, so the cost grows
//   with the window, not with T; the masked corners of the band are the only waste.
// Backward, one work item per (row b, kv head, tile of k_tile keys), so each item owns its
//   rows of dk and dv (no races there). For every query head of the GQA group, the queries
//   that can see the tile, [j0, j0 + k_tile + window), are walked in chunks. Per chunk:
//   S recomputed from q, k; P = exp(S - lse) masked; dV += P^T dY; dP = dY V^T;
//   dS = P (dP - delta) with delta = rowsum(dY * Y); dK += scale dS^T Q; and
//   dQ += scale dS K. Other key tiles of the same head add to the same dq rows: when the
//   (row, kv head) pairs split evenly over the threads, each thread takes whole heads and
//   the product accumulates into dq directly; otherwise items are single key tiles and
//   dS K goes to scratch, then into dq under a lock per block of 64 query rows (the add is
//   tiny next to the products). In that second mode the order of the adds varies, so dq can
//   differ from run to run in the last bits; otherwise everything is bitwise reproducible.
// No T x T matrix exists anywhere; per thread the scratch is a few max_chunk x tile panels.
// Matrix products go through rt::kernels::gemm (one cached oneDNN primitive per shape);
// a gemm inside the OpenMP region runs single-threaded, which is what each tile wants.
#include "ringtrain/kernels/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/kernels/fastmath.hpp"
#include "ringtrain/kernels/matmul.hpp"

namespace rt::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kLockRows = 64;  // dq rows guarded by one lock in backward

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Per-thread panels, sized once for the largest chunk.
struct Scratch {
  std::vector<float> scores;   // forward S/P [q_tile x max_chunk]; backward P [max_chunk x k_tile]
  std::vector<float> dscores;  // backward dP, then dS  [max_chunk x k_tile]
  std::vector<float> dq_part;  // backward scale * dS K  [max_chunk x D]
  std::vector<float> row_max, row_sum;  // forward online-softmax state [q_tile]
};

}  // namespace

struct SlidingWindowAttention::Impl {
  Impl(const AttentionShape& shape, const AttentionTiling& tiles) : s(shape), tiling(tiles) {}
  AttentionShape s;
  AttentionTiling tiling;
  float scale = 1.0f;
  std::vector<Scratch> scratch;        // one per OpenMP thread
  std::vector<float> delta;            // backward rowsum(dY * Y)  [B, H, T]
  std::unique_ptr<std::mutex[]> dq_locks;  // [B, H, ceil(T / kLockRows)]

  void ensure_scratch() {
    const size_t threads = static_cast<size_t>(std::max(1, omp_get_max_threads()));
    if (scratch.size() >= threads) return;
    const int64_t ch = tiling.max_chunk;
    scratch.resize(threads);
    for (auto& sc : scratch) {
      sc.scores.resize(ch * std::max(tiling.q_tile, tiling.k_tile));
      sc.dscores.resize(ch * tiling.k_tile);
      sc.dq_part.resize(ch * s.D);
      sc.row_max.resize(tiling.q_tile);
      sc.row_sum.resize(tiling.q_tile);
    }
  }
};

SlidingWindowAttention::SlidingWindowAttention(const AttentionShape& shape,
                                               const AttentionTiling& tiling)
    : impl_(new Impl(shape, tiling)) {
  const auto& s = shape;
  if (s.B <= 0 || s.T <= 0 || s.H <= 0 || s.KV <= 0 || s.D <= 0 || s.window < 0)
    throw UsageError("attention: bad shape B=" + std::to_string(s.B) + " T=" +
                     std::to_string(s.T) + " H=" + std::to_string(s.H) + " KV=" +
                     std::to_string(s.KV) + " D=" + std::to_string(s.D) + " window=" +
                     std::to_string(s.window) + "; sizes must be positive and window >= 0");
  if (s.H % s.KV != 0)
    throw UsageError("attention: n_head " + std::to_string(s.H) +
                     " is not a multiple of n_kv_head " + std::to_string(s.KV) +
                     "; choose n_kv_head dividing n_head");
  if (tiling.q_tile <= 0 || tiling.k_tile <= 0 ||
      tiling.max_chunk < std::max(tiling.q_tile, tiling.k_tile))
    throw UsageError("attention: bad tiling q_tile=" + std::to_string(tiling.q_tile) +
                     " k_tile=" + std::to_string(tiling.k_tile) + " max_chunk=" +
                     std::to_string(tiling.max_chunk) +
                     "; tiles must be positive and max_chunk >= both tiles");
  impl_->scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  impl_->delta.resize(s.B * s.H * s.T);
  impl_->dq_locks.reset(new std::mutex[s.B * s.H * ceil_div(s.T, kLockRows)]);
}

SlidingWindowAttention::~SlidingWindowAttention() = default;

const AttentionShape& SlidingWindowAttention::shape() const { return impl_->s; }

void SlidingWindowAttention::forward(const float* q, const float* k, const float* v, float* y,
                                     float* lse) {
  Impl& im = *impl_;
  im.ensure_scratch();
  const int64_t B = im.s.B, T = im.s.T, H = im.s.H, KV = im.s.KV, D = im.s.D;
  const int64_t W = std::min(im.s.window, T), group = H / KV;  // window >= T: full causal
  const int64_t ldq = H * D, ldk = KV * D;  // row strides of the [B,T,heads,D] layouts
  const int64_t tile = im.tiling.q_tile, chunk = im.tiling.max_chunk;
  const int64_t n_tiles = ceil_div(T, tile);
  const float scale = im.scale;

  // The work for one tile of queries of one (row, head); independent of all others.
  auto query_tile = [&](int64_t b, int64_t h, int64_t qt) {
    const int64_t kvh = h / group;
    const int64_t t0 = qt * tile, nq = std::min(tile, T - t0);
    const float* qp = q + (b * T + t0) * ldq + h * D;
    const float* kb = k + b * T * ldk + kvh * D;
    const float* vb = v + b * T * ldk + kvh * D;
    float* yp = y + (b * T + t0) * ldq + h * D;
    Scratch& sc = im.scratch[omp_get_thread_num()];
    float* m = sc.row_max.data();
    float* l = sc.row_sum.data();
    std::fill(m, m + nq, kNegInf);
    std::fill(l, l + nq, 0.0f);

    const int64_t lo = std::max<int64_t>(0, t0 - W), hi = t0 + nq;  // keys [lo, hi)
    for (int64_t c0 = lo; c0 < hi; c0 += chunk) {
      const int64_t nk = std::min(chunk, hi - c0);
      float* S = sc.scores.data();  // [nq, nk]
      gemm(false, true, nq, nk, D, scale, qp, ldq, kb + c0 * ldk, ldk, 0.0f, S, nk);
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t t = t0 + i;
        float* row = S + i * nk;
        // Keys t - W .. t are visible; everything else in the row is masked to P = 0.
        const int64_t a = std::clamp<int64_t>(t - W - c0, 0, nk);
        const int64_t e = std::clamp<int64_t>(t + 1 - c0, 0, nk);
        std::fill(row, row + a, 0.0f);
        std::fill(row + std::max(a, e), row + nk, 0.0f);
        if (a >= e) continue;  // nothing visible in this chunk: m, l and y unchanged
        float mc = kNegInf;
#pragma omp simd reduction(max : mc)
        for (int64_t j = a; j < e; ++j) mc = row[j] > mc ? row[j] : mc;  // std::max won't vectorise
        const float m_new = std::max(m[i], mc);
        const float corr = m[i] == kNegInf ? 0.0f : exp_nonpositive(m[i] - m_new);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = a; j < e; ++j) {
          const float p = exp_nonpositive(row[j] - m_new);
          row[j] = p;
          sum += p;
        }
        l[i] = l[i] * corr + sum;
        m[i] = m_new;
        if (c0 != lo && corr != 1.0f) {
          float* yr = yp + i * ldq;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) yr[d] *= corr;
        }
      }
      gemm(false, false, nq, D, nk, 1.0f, S, nk, vb + c0 * ldk, ldk, c0 == lo ? 0.0f : 1.0f, yp,
           ldq);
    }
    for (int64_t i = 0; i < nq; ++i) {
      const float inv = 1.0f / l[i];  // l >= 1: the row max itself contributes exp(0)
      float* yr = yp + i * ldq;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) yr[d] *= inv;
      lse[(b * H + h) * T + t0 + i] = m[i] + std::log(l[i]);
    }
  };

  // Every (row, head) costs the same. When they split evenly over the threads, a thread
  // takes whole heads, so the keys and values that neighbouring query tiles share stay in
  // its cache; otherwise (few heads, many threads) the items are single query tiles.
  // Within a head the late tiles (most keys under full causal attention) go first.
  const int64_t heads = B * H, threads = std::max(1, omp_get_max_threads());
  if (heads % threads == 0 || heads >= 4 * threads) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < heads; ++bh)
      for (int64_t qt = n_tiles - 1; qt >= 0; --qt) query_tile(bh / H, bh % H, qt);
  } else {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_tiles * heads; ++item)
      query_tile(item / n_tiles / H, item / n_tiles % H, n_tiles - 1 - item % n_tiles);
  }
}

void SlidingWindowAttention::backward(const float* q, const float* k, const float* v,
                                      const float* y, const float* lse, const float* dy,
                                      float* dq, float* dk, float* dv) {
  Impl& im = *impl_;
  im.ensure_scratch();
  const int64_t B = im.s.B, T = im.s.T, H = im.s.H, KV = im.s.KV, D = im.s.D;
  const int64_t W = std::min(im.s.window, T), group = H / KV;  // window >= T: full causal
  const int64_t ldq = H * D, ldk = KV * D;
  const int64_t tile = im.tiling.k_tile, chunk = im.tiling.max_chunk;
  const int64_t n_tiles = ceil_div(T, tile);
  const int64_t lock_blocks = ceil_div(T, kLockRows);
  const float scale = im.scale;
  float* delta = im.delta.data();

  // delta[b,h,t] = dY . Y (the softmax backward's row term), and dq = 0 before the adds.
#pragma omp parallel for
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h) {
      const float* yr = y + bt * ldq + h * D;
      const float* gr = dy + bt * ldq + h * D;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t d = 0; d < D; ++d) acc += yr[d] * gr[d];
      delta[(b * H + h) * T + t] = acc;
    }
    std::fill(dq + bt * ldq, dq + (bt + 1) * ldq, 0.0f);
  }

  // The work for one tile of keys of one (row, kv head): everything that depends on these
  // keys. dq_shared says whether other threads may be adding to the same dq rows at the
  // same time; if not, dS K is accumulated straight into dq by the product itself.
  auto key_tile = [&](int64_t b, int64_t kvh, int64_t kt, bool dq_shared) {
    const int64_t j0 = kt * tile, nk = std::min(tile, T - j0);
    const float* kp = k + (b * T + j0) * ldk + kvh * D;
    const float* vp = v + (b * T + j0) * ldk + kvh * D;
    float* dkp = dk + (b * T + j0) * ldk + kvh * D;
    float* dvp = dv + (b * T + j0) * ldk + kvh * D;
    for (int64_t j = 0; j < nk; ++j) {
      std::fill(dkp + j * ldk, dkp + j * ldk + D, 0.0f);
      std::fill(dvp + j * ldk, dvp + j * ldk + D, 0.0f);
    }
    Scratch& sc = im.scratch[omp_get_thread_num()];
    float* P = sc.scores.data();     // [nq, nk]
    float* dS = sc.dscores.data();   // [nq, nk]
    float* dQp = sc.dq_part.data();  // [nq, D]

    // Queries that see some key of this tile: [j0, j0 + nk - 1 + W], clipped to T.
    const int64_t lo = j0, hi = std::min(T, j0 + nk + W);
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const float* lse_h = lse + (b * H + h) * T;
      const float* delta_h = delta + (b * H + h) * T;
      for (int64_t r0 = lo; r0 < hi; r0 += chunk) {
        const int64_t nq = std::min(chunk, hi - r0);
        const float* qp = q + (b * T + r0) * ldq + h * D;
        const float* dyp = dy + (b * T + r0) * ldq + h * D;
        float* dqp = dq + (b * T + r0) * ldq + h * D;
        gemm(false, true, nq, nk, D, scale, qp, ldq, kp, ldk, 0.0f, P, nk);
        gemm(false, true, nq, nk, D, 1.0f, dyp, ldq, vp, ldk, 0.0f, dS, nk);
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t t = r0 + i;
          float* prow = P + i * nk;
          float* drow = dS + i * nk;
          const int64_t a = std::clamp<int64_t>(t - W - j0, 0, nk);
          const int64_t e = std::clamp<int64_t>(t + 1 - j0, 0, nk);
          const float row_lse = lse_h[t], row_delta = delta_h[t];
          std::fill(prow, prow + a, 0.0f);
          std::fill(drow, drow + a, 0.0f);
          std::fill(prow + std::max(a, e), prow + nk, 0.0f);
          std::fill(drow + std::max(a, e), drow + nk, 0.0f);
#pragma omp simd
          for (int64_t j = a; j < e; ++j) {
            const float p = exp_nonpositive(prow[j] - row_lse);
            prow[j] = p;
            drow[j] = p * (drow[j] - row_delta);
          }
        }
        // dV += P^T dY ; dK += scale dS^T Q ; dQ += scale dS K.
        gemm(true, false, nk, D, nq, 1.0f, P, nk, dyp, ldq, 1.0f, dvp, ldk);
        gemm(true, false, nk, D, nq, scale, dS, nk, qp, ldq, 1.0f, dkp, ldk);
        if (!dq_shared) {
          gemm(false, false, nq, D, nk, scale, dS, nk, kp, ldk, 1.0f, dqp, ldq);
          continue;
        }
        gemm(false, false, nq, D, nk, scale, dS, nk, kp, ldk, 0.0f, dQp, D);
        for (int64_t blk = r0 / kLockRows; blk * kLockRows < r0 + nq; ++blk) {
          const int64_t i_begin = std::max(r0, blk * kLockRows) - r0;
          const int64_t i_end = std::min(r0 + nq, (blk + 1) * kLockRows) - r0;
          std::lock_guard<std::mutex> guard(im.dq_locks[(b * H + h) * lock_blocks + blk]);
          for (int64_t i = i_begin; i < i_end; ++i) {
            float* out = dqp + i * ldq;
            const float* part = dQp + i * D;
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) out[d] += part[d];
          }
        }
      }
    }
  };

  // Every (row, kv head) costs the same. When they split evenly over the threads (d8: 8 of
  // them), a thread takes whole kv heads: it then owns their dq rows outright (no locks, and
  // a summation order that does not depend on the thread count). Otherwise (few heads, many
  // threads) the items are single key tiles and dq is shared under locks. Either way,
  // consecutive key tiles of one head run back to back, so the queries they share stay in
  // cache, early tiles (most queries under full causal attention) first.
  const int64_t heads = B * KV, threads = std::max(1, omp_get_max_threads());
  if (heads % threads == 0 || heads >= 4 * threads) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < heads; ++bh)
      for (int64_t kt = 0; kt < n_tiles; ++kt) key_tile(bh / KV, bh % KV, kt, false);
  } else {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_tiles * heads; ++item)
      key_tile(item / n_tiles / KV, item / n_tiles % KV, item % n_tiles, true);
  }
}

}  // namespace rt::kernels
