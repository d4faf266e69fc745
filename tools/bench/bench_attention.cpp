// Throughput of the sliding-window attention kernel at d8 shapes (B=2, T=1024, H=KV=4,
// D=128; windows 256 and 1024), next to the oneDNN f32 matmul rate measured in the same run
// with the same OpenMP thread count.
//
// Build (after `ninja -C <builddir> kernels/librt_kernels.a`) and run, from the source root:
//   g++ -O3 -std=c++20 -march=native -fopenmp -Iinclude tools/bench/bench_attention.cpp
//       <builddir>/kernels/librt_kernels.a -ldnnl -o /tmp/bench_attention   (one line)
//   OMP_NUM_THREADS=2 /tmp/bench_attention [q_tile k_tile max_chunk [reps]] [--cpu-time]
//
// Reported per window: forward, backward and total time (minimum over reps: the least
// disturbed run on a shared machine); "spec" GFLOP/s counts the spec's useful FLOPs,
// 12 * H * D * min(window, T) per token for forward + backward (so full causal attention
// is credited with T keys per query although it needs T/2 on average); "executed" counts
// the products the kernel really runs (4 D per computed score forward, 10 D backward,
// masked corners of the tiles included); "masked" is the share of computed scores that the
// window masks. --cpu-time divides process CPU time by the thread count instead of wall
// time, which on a loaded machine tells the kernel's own speed.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "ringtrain/kernels/attention.hpp"
#include "ringtrain/kernels/matmul.hpp"

using namespace rt::kernels;

namespace {

bool cpu_time = false;

double now() {
  if (cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec + 1e-9 * ts.tv_nsec) / omp_get_max_threads();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double matmul_peak() {
  const int64_t M = 2048, K = 512, N = 2048;
  std::vector<float> a(M * K, 0.1f), b(N * K, 0.2f), c(M * N);
  linear_forward(a.data(), b.data(), c.data(), M, K, N);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const double t0 = now();
    linear_forward(a.data(), b.data(), c.data(), M, K, N);
    best = std::min(best, now() - t0);
  }
  return 2.0 * M * N * K / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> num;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cpu-time") == 0)
      cpu_time = true;
    else
      num.push_back(std::atol(argv[i]));
  }
  AttentionTiling tiling;
  if (num.size() >= 3) tiling = {num[0], num[1], num[2]};
  const int reps = num.size() >= 4 ? int(num[3]) : 7;
  const int64_t B = 2, T = 1024, H = 4, KV = 4, D = 128;

  const double peak = matmul_peak();
  std::printf("threads %d, %s, tiles %ld/%ld/%ld, oneDNN f32 matmul 2048x512x2048: %.1f GFLOP/s\n",
              omp_get_max_threads(), cpu_time ? "cpu time" : "wall time", long(tiling.q_tile),
              long(tiling.k_tile), long(tiling.max_chunk), peak);

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> U(-1, 1);
  std::vector<float> q(B * T * H * D), k(B * T * KV * D), v(k.size()), dy(q.size());
  std::vector<float> y(q.size()), dq(q.size()), dk(k.size()), dv(k.size()), lse(B * H * T);
  for (auto* x : {&q, &k, &v, &dy})
    for (auto& e : *x) e = U(rng);

  for (const int64_t W : {int64_t(256), int64_t(1024)}) {
    SlidingWindowAttention attn({B, T, H, KV, D, W}, tiling);
    auto fwd = [&] { attn.forward(q.data(), k.data(), v.data(), y.data(), lse.data()); };
    auto bwd = [&] {
      attn.backward(q.data(), k.data(), v.data(), y.data(), lse.data(), dy.data(), dq.data(),
                    dk.data(), dv.data());
    };
    fwd();  // first calls create the oneDNN primitives
    bwd();
    double tf = 1e30, tb = 1e30;
    for (int r = 0; r < reps; ++r) {
      const double t0 = now();
      fwd();
      const double t1 = now();
      bwd();
      tf = std::min(tf, t1 - t0);
      tb = std::min(tb, now() - t1);
    }
    // Scores visible under the window, and scores the kernel computes (tiles x key ranges).
    double visible = 0, computed_f = 0, computed_b = 0;
    for (int64_t t = 0; t < T; ++t) visible += double(std::min(t, W) + 1);
    for (int64_t t0 = 0; t0 < T; t0 += tiling.q_tile) {
      const int64_t nq = std::min(tiling.q_tile, T - t0);
      computed_f += double(nq) * double(t0 + nq - std::max<int64_t>(0, t0 - W));
    }
    for (int64_t j0 = 0; j0 < T; j0 += tiling.k_tile) {
      const int64_t nk = std::min(tiling.k_tile, T - j0);
      computed_b += double(nk) * double(std::min(T, j0 + nk + W) - j0);
    }
    const double heads = double(B * H);
    const double spec = 12.0 * H * D * double(std::min(W, T)) * double(B * T);
    const double exec_f = 4.0 * D * computed_f * heads, exec_b = 10.0 * D * computed_b * heads;
    std::printf(
        "window %4ld: fwd %7.2f ms  bwd %7.2f ms  total %7.2f ms | spec %6.1f GFLOP/s (%3.0f%% of "
        "matmul) | executed %6.1f GFLOP/s (fwd %.1f, bwd %.1f) | masked fwd %.0f%% bwd %.0f%%\n",
        long(W), tf * 1e3, tb * 1e3, (tf + tb) * 1e3, spec / (tf + tb) / 1e9,
        100.0 * spec / (tf + tb) / 1e9 / peak, (exec_f + exec_b) / (tf + tb) / 1e9,
        exec_f / tf / 1e9, exec_b / tb / 1e9, 100.0 * (1 - visible / computed_f),
        100.0 * (1 - visible / computed_b));
  }
  return 0;
}
