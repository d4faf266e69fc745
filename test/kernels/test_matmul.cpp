// gemm against a double-precision triple loop, over transposes, strides, alpha/beta and batch.
#include <boost/test/unit_test.hpp>

#include <omp.h>

#include <cmath>
#include <thread>
#include <random>
#include <vector>

#include "ringtrain/kernels/matmul.hpp"

using rt::kernels::gemm_batched;

namespace {

void reference(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
               const std::vector<float>& A, int64_t lda, int64_t sa, const std::vector<float>& B,
               int64_t ldb, int64_t sb, float beta, std::vector<double>& C, int64_t ldc,
               int64_t sc) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          double a = ta ? A[b * sa + k * lda + i] : A[b * sa + i * lda + k];
          double bb = tb ? B[b * sb + j * ldb + k] : B[b * sb + k * ldb + j];
          acc += a * bb;
        }
        double& c = C[b * sc + i * ldc + j];
        c = alpha * acc + beta * c;
      }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(matmul)

BOOST_AUTO_TEST_CASE(gemm_matches_double_reference) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> U(-1, 1);
  struct Case { int64_t batch, M, N, K; bool ta, tb; float alpha, beta; int pad; };
  const Case cases[] = {{1, 3, 5, 7, false, false, 1, 0, 0},  {1, 17, 9, 33, true, false, 1, 1, 2},
                        {1, 64, 48, 16, false, true, 0.5f, 0, 1}, {1, 5, 70, 3, true, true, 2, -1, 3},
                        {4, 13, 11, 9, false, true, 1, 1, 1},     {3, 8, 8, 130, true, false, 0.25f, 0.5f, 0}};
  for (const auto& c : cases) {
    int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K;
    int64_t br = c.tb ? c.N : c.K, bc = c.tb ? c.K : c.N;
    int64_t lda = ac + c.pad, ldb = bc + c.pad, ldc = c.N + c.pad;
    int64_t sa = ar * lda + c.pad, sb = br * ldb, sc = c.M * ldc + 5;
    std::vector<float> A(c.batch * sa), B(c.batch * sb), C(c.batch * sc);
    for (auto& x : A) x = U(rng);
    for (auto& x : B) x = U(rng);
    for (auto& x : C) x = U(rng);
    std::vector<double> ref(C.begin(), C.end());
    reference(c.batch, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A, lda, sa, B, ldb, sb, c.beta, ref, ldc, sc);
    gemm_batched(c.batch, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, sa, B.data(), ldb, sb,
                 c.beta, C.data(), ldc, sc);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
          size_t at = b * sc + i * ldc + j;
          BOOST_TEST(std::abs(C[at] - ref[at]) <= 1e-4 * (1 + std::abs(ref[at])));
        }
    // Padding between rows/batches must not be written.
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = c.N; j < ldc && i * ldc + j < sc; ++j) {
          size_t at = b * sc + i * ldc + j;
          BOOST_TEST(C[at] == float(ref[at]));
        }
  }
}

BOOST_AUTO_TEST_CASE(linear_backward_accumulates) {
  const int64_t M = 6, in = 5, out = 4;
  std::vector<float> x(M * in), W(out * in), dy(M * out);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) - 3;
  for (size_t i = 0; i < W.size(); ++i) W[i] = float(i % 5) - 2;
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = float(i % 3) - 1;
  std::vector<float> dx(M * in, 1.0f), dW(out * in, 2.0f);
  rt::kernels::linear_backward(dy.data(), x.data(), W.data(), dx.data(), dW.data(), M, in, out, true, true);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < in; ++k) {
      float e = 1.0f;
      for (int64_t o = 0; o < out; ++o) e += dy[i * out + o] * W[o * in + k];
      BOOST_TEST(dx[i * in + k] == e);
    }
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) {
      float e = 2.0f;
      for (int64_t i = 0; i < M; ++i) e += dy[i * out + o] * x[i * in + k];
      BOOST_TEST(dW[o * in + k] == e);
    }
}

// One cached primitive per shape is shared by every thread (the attention kernel calls gemm
// inside OpenMP regions): created on one thread, run on another, and run by several threads
// at once, it must give the serial result bit for bit.
BOOST_AUTO_TEST_CASE(gemm_is_safe_to_share_across_threads) {
  const int64_t M = 96, N = 80, K = 640;
  std::vector<float> A(M * K), B(K * N);
  for (size_t i = 0; i < A.size(); ++i) A[i] = float(int(i * 37 % 101) - 50) / 50.0f;
  for (size_t i = 0; i < B.size(); ++i) B[i] = float(int(i * 53 % 89) - 44) / 44.0f;
  std::vector<float> serial(M * N);
  rt::kernels::gemm(false, false, M, N, K, 0.5f, A.data(), K, B.data(), N, 0.0f, serial.data(), N);

  std::vector<float> other_thread(M * N);
  std::thread([&] {
    rt::kernels::gemm(false, false, M, N, K, 0.5f, A.data(), K, B.data(), N, 0.0f, other_thread.data(), N);
  }).join();
  BOOST_TEST(other_thread == serial);

  const int items = 64;
  std::vector<std::vector<float>> out(items, std::vector<float>(M * N));
#pragma omp parallel for num_threads(2) schedule(dynamic, 1)
  for (int i = 0; i < items; ++i)
    rt::kernels::gemm(false, false, M, N, K, 0.5f, A.data(), K, B.data(), N, 0.0f, out[i].data(), N);
  int differing = 0;
  for (const auto& o : out) differing += o != serial;
  BOOST_TEST(differing == 0);
}

BOOST_AUTO_TEST_SUITE_END()
