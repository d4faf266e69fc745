// The nanochat GPT forward and backward (see ../shared spec, "Forward pass").
// Activations of one forward live in one arena; backward walks the blocks in reverse and
// reports every parameter range the moment its gradient is final.
#include "ringtrain/model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "ringtrain/errors.hpp"
#include "ringtrain/kernels/activations.hpp"
#include "ringtrain/kernels/attention.hpp"
#include "ringtrain/kernels/cross_entropy.hpp"
#include "ringtrain/kernels/embedding.hpp"
#include "ringtrain/kernels/matmul.hpp"
#include "ringtrain/kernels/mixing.hpp"
#include "ringtrain/kernels/rmsnorm.hpp"
#include "ringtrain/kernels/rotary.hpp"

namespace rt::model {

namespace k = rt::kernels;

namespace {

constexpr float kQkScale = 1.2f;
// LM-head rows per chunk: chunk x V logits at a time (128 MiB at V = 32768). Larger
// chunks make the dW_lm += dlogits^T x products longer (fewer passes over dW_lm); at d8,
// 1024 rows measured about 14% faster than 256.
constexpr int64_t kHeadChunk = 1024;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// Hands out 64-byte aligned slices of one allocation; a first pass only measures.
struct Carver {
  float* base = nullptr;
  int64_t used = 0;
  float* take(int64_t n) {
    float* p = base ? base + used : nullptr;
    used += (n + 15) / 16 * 16;
    return p;
  }
};

struct Range {
  int64_t offset = 0, count = 0;
};

}  // namespace

struct GPT::Impl {
  struct Layer {
    // parameters and their gradients
    const float *wq, *wk, *wv, *wg = nullptr, *wp, *wfc, *wp2, *ve = nullptr;
    float *gq, *gk, *gv, *gg = nullptr, *gp, *gfc, *gp2, *gve = nullptr;
    Range block, ve_range;
    int64_t window;
    // activations
    float *xr;              // residual stream after this block [N, C]
    float *u1, *rstd1;      // norm before attention
    float *q, *k, *v;       // after rotary + QK norm (q, k) and the value-embedding mix (v)
    float *rstd_q, *rstd_k, *gate;
    float *y, *lse;         // attention output and its row log-sum-exp
    float *u2, *rstd2, *h;  // norm before the MLP, and c_fc output before ReLU^2
  };

  ModelConfig cfg;
  int64_t C, H, KV, D, V, L, HD, KVD;
  std::vector<Layer> layers;
  const float *wte, *wlm, *smear_gate, *resid, *x0l, *smear_lambda, *backout_lambda;
  float *g_wte, *g_lm, *g_smear_gate, *g_resid, *g_x0l, *g_smear_lambda, *g_backout;
  Range lm_range, scalar_range, wte_range;
  k::RotaryTable rope;

  // activation arena
  std::unique_ptr<float, FreeDeleter> arena;
  int64_t arena_floats = 0, cap_tokens = 0;
  float *xe, *rstd0, *smear_sig, *x0, *xf, *rstd_f, *dxf, *dw_lm, *logits;
  // backward scratch
  float *dx, *dx0, *dhead, *du, *dq, *dk, *dv, *dy, *dh, *act;

  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<k::SlidingWindowAttention>> attn;

  // the last forward
  const int32_t* last_idx = nullptr;
  std::vector<int32_t> idx_copy;
  int64_t B = 0, T = 0, N = 0, n_valid = 0;
  bool have_head_grad = false;
  k::TokenGroups groups;

  k::SlidingWindowAttention& attention(int64_t window) {
    auto key = std::make_tuple(B, T, window);
    auto it = attn.find(key);
    if (it != attn.end()) return *it->second;
    if (attn.size() > 64) attn.clear();  // sampling visits many T; keep the cache bounded
    k::AttentionShape s;
    s.B = B; s.T = T; s.H = H; s.KV = KV; s.D = D; s.window = window;
    return *attn.emplace(key, std::make_unique<k::SlidingWindowAttention>(s)).first->second;
  }

  void carve(Carver& cv, int64_t Ntok) {
    const int64_t N = Ntok;
    for (auto& l : layers) {
      l.xr = cv.take(N * C);
      l.u1 = cv.take(N * C);
      l.rstd1 = cv.take(N);
      l.q = cv.take(N * HD);
      l.k = cv.take(N * KVD);
      l.v = cv.take(N * KVD);
      l.rstd_q = cv.take(N * H);
      l.rstd_k = cv.take(N * KV);
      l.gate = cv.take(N * KV);
      l.y = cv.take(N * HD);
      l.lse = cv.take(N * H);
      l.u2 = cv.take(N * C);
      l.rstd2 = cv.take(N);
      l.h = cv.take(N * 4 * C);
    }
    xe = cv.take(N * C);
    rstd0 = cv.take(N);
    smear_sig = cv.take(N);
    x0 = cv.take(N * C);
    xf = cv.take(N * C);
    rstd_f = cv.take(N);
    dxf = cv.take(N * C);
    dw_lm = cv.take(V * C);
    logits = cv.take(std::min(N, kHeadChunk) * V);
    dx = cv.take(N * C);
    dx0 = cv.take(N * C);
    dhead = cv.take(N * C);
    du = cv.take(N * C);
    dq = cv.take(N * HD);
    dk = cv.take(N * KVD);
    dv = cv.take(N * KVD);
    dy = cv.take(N * HD);
    dh = cv.take(N * 4 * C);
    act = cv.take(N * 4 * C);
  }

  // Embedding, smear and the blocks: leaves the normed final stream in xf.
  void trunk(const int32_t* idx) {
    k::embedding_gather(wte, idx, N, C, xe);
    k::rmsnorm_forward(xe, xe, rstd0, N, C);
    k::smear_forward(xe, smear_gate, *smear_lambda, x0, smear_sig, B, T, C);
    const float* x = x0;
    for (int64_t i = 0; i < L; ++i) {
      Layer& l = layers[i];
      k::lambda_mix_forward(x, x0, resid[i], x0l[i], l.xr, N * C);
      // attention
      k::rmsnorm_forward(l.xr, l.u1, l.rstd1, N, C);
      k::linear_forward(l.u1, l.wq, l.q, N, C, HD);
      k::linear_forward(l.u1, l.wk, l.k, N, C, KVD);
      k::linear_forward(l.u1, l.wv, l.v, N, C, KVD);
      if (l.ve) k::ve_mix_forward(l.v, l.ve, idx, l.u1, C, l.wg, l.gate, N, KV, D);
      k::rotary_forward(l.q, B, T, H, D, rope);
      k::rotary_forward(l.k, B, T, KV, D, rope);
      k::rmsnorm_forward(l.q, l.q, l.rstd_q, N * H, D, kQkScale);
      k::rmsnorm_forward(l.k, l.k, l.rstd_k, N * KV, D, kQkScale);
      attention(l.window).forward(l.q, l.k, l.v, l.y, l.lse);
      k::gemm(false, true, N, C, HD, 1.0f, l.y, HD, l.wp, HD, 1.0f, l.xr, C);  // x += y Wp^T
      // MLP
      k::rmsnorm_forward(l.xr, l.u2, l.rstd2, N, C);
      k::linear_forward(l.u2, l.wfc, l.h, N, C, 4 * C);
      k::relu2_forward(l.h, act, N * 4 * C);
      k::gemm(false, true, N, C, 4 * C, 1.0f, act, 4 * C, l.wp2, 4 * C, 1.0f, l.xr, C);
      x = l.xr;
    }
    const float* xb = layers[L / 2].xr;
    k::backout_forward(x, xb, *backout_lambda, xf, N * C);
    k::rmsnorm_forward(xf, xf, rstd_f, N, C);
  }
};

GPT::GPT(const ModelConfig& cfg) : cfg_(cfg), impl_(new Impl) {
  cfg_.validate();
  for (const auto& s : param_specs(cfg_)) params_.add(s.name, s.shape);
  params_.finalize();
  Impl& m = *impl_;
  m.cfg = cfg_;
  m.C = cfg_.n_embd; m.H = cfg_.n_head; m.KV = cfg_.n_kv_head; m.D = cfg_.head_dim;
  m.V = cfg_.vocab_size; m.L = cfg_.n_layer; m.HD = m.H * m.D; m.KVD = m.KV * m.D;
  m.rope = k::RotaryTable::build(cfg_.rotary_len(), m.D);
  auto P = [&](const std::string& n) -> Param& { return params_.get(n); };
  auto range = [](const Param& first, const Param& last) {
    return Range{first.offset, last.offset + last.numel - first.offset};
  };
  m.wte = P("transformer.wte.weight").data; m.g_wte = P("transformer.wte.weight").grad;
  m.wlm = P("lm_head.weight").data; m.g_lm = P("lm_head.weight").grad;
  m.smear_gate = P("smear_gate.weight").data; m.g_smear_gate = P("smear_gate.weight").grad;
  m.resid = P("resid_lambdas").data; m.g_resid = P("resid_lambdas").grad;
  m.x0l = P("x0_lambdas").data; m.g_x0l = P("x0_lambdas").grad;
  m.smear_lambda = P("smear_lambda").data; m.g_smear_lambda = P("smear_lambda").grad;
  m.backout_lambda = P("backout_lambda").data; m.g_backout = P("backout_lambda").grad;
  m.lm_range = range(P("lm_head.weight"), P("lm_head.weight"));
  m.scalar_range = range(P("smear_gate.weight"), P("backout_lambda"));
  m.wte_range = range(P("transformer.wte.weight"), P("transformer.wte.weight"));
  const auto windows = cfg_.windows();
  m.layers.resize(m.L);
  for (int64_t i = 0; i < m.L; ++i) {
    auto& l = m.layers[i];
    const std::string p = block_prefix(i);
    l.wq = P(p + "attn.c_q.weight").data; l.gq = P(p + "attn.c_q.weight").grad;
    l.wk = P(p + "attn.c_k.weight").data; l.gk = P(p + "attn.c_k.weight").grad;
    l.wv = P(p + "attn.c_v.weight").data; l.gv = P(p + "attn.c_v.weight").grad;
    l.wp = P(p + "attn.c_proj.weight").data; l.gp = P(p + "attn.c_proj.weight").grad;
    l.wfc = P(p + "mlp.c_fc.weight").data; l.gfc = P(p + "mlp.c_fc.weight").grad;
    l.wp2 = P(p + "mlp.c_proj.weight").data; l.gp2 = P(p + "mlp.c_proj.weight").grad;
    l.block = range(P(p + "attn.c_q.weight"), P(p + "mlp.c_proj.weight"));
    if (cfg_.has_value_embed(i)) {
      l.wg = P(p + "attn.ve_gate.weight").data; l.gg = P(p + "attn.ve_gate.weight").grad;
      l.ve = P(value_embed_name(i)).data; l.gve = P(value_embed_name(i)).grad;
      l.ve_range = range(P(value_embed_name(i)), P(value_embed_name(i)));
    }
    l.window = windows[i];
  }
}

GPT::~GPT() = default;

void GPT::reserve(int64_t B, int64_t T) {
  Impl& m = *impl_;
  if (B < 1 || T < 1) throw UsageError("batch " + std::to_string(B) + " x " + std::to_string(T) + " is empty; pass a positive --device-batch and --seq-len");
  if (T > cfg_.rotary_len())
    throw UsageError("sequence of " + std::to_string(T) + " tokens is longer than the rotary table (" +
                     std::to_string(cfg_.rotary_len()) + " = 10 * sequence_len); use a shorter sequence or a larger --seq-len");
  const int64_t N = B * T;
  if (N <= m.cap_tokens) return;
  Carver measure;
  m.carve(measure, N);
  const size_t bytes = size_t(measure.used) * sizeof(float);
  float* p = static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  if (!p) throw RuntimeError("cannot allocate " + std::to_string(bytes >> 20) + " MiB of activations; use a smaller --device-batch");
  m.arena.reset(p);
  m.arena_floats = measure.used;
  m.cap_tokens = N;
  Carver cv{p, 0};
  m.carve(cv, N);
  m.attn.clear();
}

int64_t GPT::activation_bytes() const { return impl_->arena_floats * int64_t(sizeof(float)); }

int64_t GPT::activation_bytes_for(int64_t B, int64_t T) {
  Impl& m = *impl_;
  Carver measure;
  m.carve(measure, B * T);  // measuring nulls the views into the arena...
  if (m.arena) {
    Carver cv{m.arena.get(), 0};
    m.carve(cv, m.cap_tokens);  // ...so lay them out again over the existing arena
  }
  return measure.used * int64_t(sizeof(float));
}

const std::vector<int32_t>& GPT::touched_tokens() const { return impl_->groups.unique_ids; }

namespace {
void check_ids(const int32_t* ids, int64_t n, int64_t V, const char* what, bool allow_ignore) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= V || ids[i] < (allow_ignore ? -1 : 0))
      throw UsageError(std::string(what) + " id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                       " is outside the vocabulary of " + std::to_string(V) + "; use data prepared with this model's tokenizer");
}
}  // namespace

float GPT::forward(const int32_t* idx, const int32_t* tgt, int64_t B, int64_t T,
                   float* per_token_loss, bool need_backward) {
  Impl& m = *impl_;
  reserve(B, T);
  m.B = B; m.T = T; m.N = B * T;
  check_ids(idx, m.N, m.V, "input token", false);
  check_ids(tgt, m.N, m.V, "target token", true);
  // Keep our own copy of the ids: backward must not depend on the caller's buffer.
  m.idx_copy.assign(idx, idx + m.N);
  m.groups.build(m.idx_copy.data(), m.N);
  m.trunk(m.idx_copy.data());
  m.n_valid = 0;
  for (int64_t i = 0; i < m.N; ++i) m.n_valid += tgt[i] >= 0;
  const float grad_scale = m.n_valid ? 1.0f / float(m.n_valid) : 0.0f;
  m.have_head_grad = need_backward;
  if (need_backward) std::memset(m.dw_lm, 0, sizeof(float) * m.V * m.C);
  const double sum = k::lm_head_xent(m.xf, m.wlm, tgt, m.N, m.C, m.V, k::kSoftcap, grad_scale,
                                     per_token_loss, need_backward ? m.dxf : nullptr,
                                     need_backward ? m.dw_lm : nullptr, m.logits,
                                     std::min(m.N, kHeadChunk));
  return m.n_valid ? float(sum / double(m.n_valid)) : 0.0f;
}

void GPT::backward(float loss_scale, const GradReady& on_ready) {
  Impl& m = *impl_;
  if (!m.have_head_grad)
    throw RuntimeError("backward called without a forward(need_backward=true) before it; run forward first");
  m.have_head_grad = false;
  const int64_t N = m.N, C = m.C, H = m.H, KV = m.KV, D = m.D, HD = m.HD, KVD = m.KVD;
  auto ready = [&](const Range& r) {
    if (on_ready && r.count > 0) on_ready(r.offset, r.count);
  };
  const int32_t* idx = m.idx_copy.data();

  // LM head: its gradient was computed in forward with scale 1/n_valid.
  {
    float* g = m.g_lm;
    const float* t = m.dw_lm;
    const int64_t n = m.V * C;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) g[i] += loss_scale * t[i];
  }
  ready(m.lm_range);
  // Final norm: dhead = d(loss)/d(x_L - lambda * x_backout).
  k::rmsnorm_backward(m.xf, m.rstd_f, m.dxf, m.dhead, N, C);
  {
    float* d = m.dhead;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N * C; ++i) d[i] *= loss_scale;
  }
  std::memcpy(m.dx, m.dhead, sizeof(float) * N * C);  // d/d x_L
  std::memset(m.dx0, 0, sizeof(float) * N * C);

  for (int64_t i = m.L - 1; i >= 0; --i) {
    auto& l = m.layers[i];
    // dx is d/d(output of block i); the backout taps the output of block L/2.
    if (i == m.L / 2) k::backout_backward(m.dhead, l.xr, *m.backout_lambda, m.dx, m.g_backout, N * C);
    // MLP: out = mid + relu2(norm(mid) Wfc^T) Wp2^T
    k::relu2_forward(l.h, m.act, N * 4 * C);
    k::linear_backward(m.dx, m.act, l.wp2, m.dh, l.gp2, N, 4 * C, C, false, true);
    k::relu2_backward(l.h, m.dh, m.dh, N * 4 * C);
    k::linear_backward(m.dh, l.u2, l.wfc, m.du, l.gfc, N, C, 4 * C, false, true);
    k::rmsnorm_backward(l.u2, l.rstd2, m.du, m.dx, N, C, 1.0f, true);
    // Attention: mid = in + attn(norm(in)) Wp^T
    k::linear_backward(m.dx, l.y, l.wp, m.dy, l.gp, N, HD, C, false, true);
    m.attention(l.window).backward(l.q, l.k, l.v, l.y, l.lse, m.dy, m.dq, m.dk, m.dv);
    k::rmsnorm_backward(l.q, l.rstd_q, m.dq, m.dq, N * H, D, kQkScale);
    k::rmsnorm_backward(l.k, l.rstd_k, m.dk, m.dk, N * KV, D, kQkScale);
    k::rotary_backward(m.dq, m.B, m.T, H, D, m.rope);
    k::rotary_backward(m.dk, m.B, m.T, KV, D, m.rope);
    k::linear_backward(m.dq, l.u1, l.wq, m.du, l.gq, N, C, HD, false, true);
    k::linear_backward(m.dk, l.u1, l.wk, m.du, l.gk, N, C, KVD, true, true);
    k::linear_backward(m.dv, l.u1, l.wv, m.du, l.gv, N, C, KVD, true, true);
    if (l.ve)
      k::ve_mix_backward(m.dv, l.ve, idx, m.groups, l.u1, C, l.wg, l.gate, l.gve, l.gg, m.du, N, KV, D);
    k::rmsnorm_backward(l.u1, l.rstd1, m.du, m.dx, N, C, 1.0f, true);
    // in = resid[i] * x_prev + x0_lambda[i] * x0
    const float* x_prev = i > 0 ? m.layers[i - 1].xr : m.x0;
    k::lambda_mix_backward(m.dx, x_prev, m.x0, m.resid[i], m.x0l[i], m.dx, m.dx0, m.g_resid + i,
                           m.g_x0l + i, N * C);
    ready(l.block);
    if (l.ve) ready(l.ve_range);
  }
  // Block 0's input was x0 itself.
  {
    float* d0 = m.dx0;
    const float* d = m.dx;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N * C; ++i) d0[i] += d[i];
  }
  // Smear and the embedding norm, then the table.
  k::smear_backward(m.xe, m.smear_gate, *m.smear_lambda, m.smear_sig, m.dx0, m.dx, m.g_smear_gate,
                    m.g_smear_lambda, m.B, m.T, C);
  k::rmsnorm_backward(m.xe, m.rstd0, m.dx, m.dx, N, C);
  ready(m.scalar_range);
  k::embedding_scatter_add(m.g_wte, m.groups, m.dx, C, C);
  ready(m.wte_range);
}

void GPT::forward_last_logits(const int32_t* idx, int64_t B, int64_t T, float* out) {
  Impl& m = *impl_;
  reserve(B, T);
  m.B = B; m.T = T; m.N = B * T;
  check_ids(idx, m.N, m.V, "input token", false);
  m.idx_copy.assign(idx, idx + m.N);
  m.groups.build(m.idx_copy.data(), m.N);
  m.have_head_grad = false;
  m.trunk(m.idx_copy.data());
  for (int64_t b = 0; b < B; ++b) {
    float* row = out + b * m.V;
    k::linear_forward(m.xf + ((b + 1) * T - 1) * m.C, m.wlm, row, 1, m.C, m.V);
#pragma omp parallel for simd schedule(static)
    for (int64_t j = 0; j < m.V; ++j) row[j] = k::kSoftcap * std::tanh(row[j] / k::kSoftcap);
  }
}

}  // namespace rt::model
