// Dense f32 matmul on oneDNN with a cache of primitives keyed by shape and layout.
#include "ringtrain/kernels/matmul.hpp"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "dnnl_compat.hpp"

namespace rt::kernels {
namespace {

using dnnl::memory;
using Dims = memory::dims;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  // A stream per thread: gemm may be called from inside OpenMP regions.
  thread_local dnnl::stream s(engine());
  return s;
}

// Scratchpad memory for the calling thread. Why not the library's own: with its default
// (global, per-thread) scratchpad, oneDNN 2.x requires a primitive to run on the thread
// that created it, yet the attention kernel runs one cached primitive from every OpenMP
// thread. In user mode each execution gets the buffer of the thread that runs it, which
// makes sharing safe. (gemm:jit, chosen on AVX2-only CPUs, books no scratchpad; the brgemm
// kernels chosen on AVX-512 CPUs do.)
void* thread_scratchpad(size_t bytes) {
  thread_local std::vector<std::byte> buf;
  constexpr size_t kAlign = 64;
  if (buf.size() < bytes + kAlign) buf.resize(bytes + kAlign);
  const auto addr = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((kAlign - addr % kAlign) % kAlign);
}

// Everything that changes the primitive. alpha and beta are baked into its attributes.
using Key = std::tuple<int64_t, bool, bool, int64_t, int64_t, int64_t, float, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, float>;

struct Cached {
  dnnl::matmul prim;
  memory::desc a, b, c, scratch;
  dnnl_compat::OutputScale alpha;
};

Cached& lookup(const Key& key) {
  static std::mutex mu;
  static std::map<Key, Cached> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;

  const auto& [batch, ta, tb, M, N, K, alpha, lda, sa, ldb, sb, ldc, sc, beta] = key;
  // A copy, not the binding: clang before 16 cannot capture a structured binding in a lambda.
  const int64_t batch_count = batch;
  const bool batched = batch_count > 1;
  auto md = [&](int64_t rows, int64_t cols, int64_t ld, bool trans, int64_t stride) {
    // Row-major [rows, cols] view; a transposed operand swaps strides instead of copying.
    Dims dims = {rows, cols};
    Dims strides = trans ? Dims{1, ld} : Dims{ld, 1};
    if (batched) {
      dims.insert(dims.begin(), batch_count);
      strides.insert(strides.begin(), stride);
    }
    return memory::desc(dims, memory::data_type::f32, strides);
  };
  Cached c;
  c.a = md(M, K, lda, ta, sa);
  c.b = md(K, N, ldb, tb, sb);
  c.c = md(M, N, ldc, false, sc);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  c.alpha = dnnl_compat::OutputScale(alpha, engine());
  c.alpha.set_on(attr);
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  auto pd = dnnl_compat::make_matmul_pd(engine(), c.a, c.b, c.c, attr);
  c.prim = dnnl::matmul(pd);
  c.scratch = pd.scratchpad_desc();
  return cache.emplace(key, std::move(c)).first->second;
}

void run(const Key& key, const float* A, const float* B, float* C) {
  Cached& c = lookup(key);
  memory a(c.a, engine(), const_cast<float*>(A));
  memory b(c.b, engine(), const_cast<float*>(B));
  memory cm(c.c, engine(), C);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, cm}};
  c.alpha.add_args(args);
  if (const size_t bytes = c.scratch.get_size(); bytes > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(c.scratch, engine(), thread_scratchpad(bytes)));
  c.prim.execute(stream(), args);
  stream().wait();
}

void scale_only(int64_t batch, int64_t M, int64_t N, float beta, float* C, int64_t ldc,
                int64_t sc) {
  // K == 0: the product is empty, C = beta * C.
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < M; ++i) {
      float* row = C + bi * sc + i * ldc;
      for (int64_t j = 0; j < N; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
}

}  // namespace

void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float* A, int64_t lda, int64_t stride_a,
                  const float* B, int64_t ldb, int64_t stride_b,
                  float beta, float* C, int64_t ldc, int64_t stride_c) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  if (K <= 0) return scale_only(batch, M, N, beta, C, ldc, stride_c);
  if (batch == 1) stride_a = stride_b = stride_c = 0;
  run(Key{batch, trans_a, trans_b, M, N, K, alpha, lda, stride_a, ldb, stride_b, ldc, stride_c,
          beta},
      A, B, C);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  gemm_batched(1, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0);
}

void linear_forward(const float* x, const float* W, float* y, int64_t M, int64_t in,
                    int64_t out) {
  gemm(false, true, M, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
}

void linear_backward(const float* dy, const float* x, const float* W, float* dx, float* dW,
                     int64_t M, int64_t in, int64_t out, bool accumulate_dx,
                     bool accumulate_dW) {
  if (dx) gemm(false, false, M, in, out, 1.0f, dy, out, W, in, accumulate_dx ? 1.0f : 0.0f, dx, in);
  if (dW) gemm(true, false, out, in, M, 1.0f, dy, out, x, in, accumulate_dW ? 1.0f : 0.0f, dW, in);
}

double measure_matmul_gflops(int64_t M, int64_t K, int64_t N, int reps) {
  std::vector<float> a(M * K), b(N * K), c(M * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float((i * 104729) % 1000) * 1e-3f - 0.5f;
  for (int i = 0; i < 3; ++i) linear_forward(a.data(), b.data(), c.data(), M, K, N);
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    linear_forward(a.data(), b.data(), c.data(), M, K, N);
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(secs.begin(), secs.begin() + secs.size() / 2, secs.end());
  return 2.0 * double(M) * double(N) * double(K) / secs[secs.size() / 2] / 1e9;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace rt::kernels
