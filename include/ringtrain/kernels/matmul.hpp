// Dense f32 matrix products on oneDNN.
//
// Every distinct shape/layout gets one oneDNN matmul primitive, created the first time it
// is seen and reused on every later call (oneDNN's examples: create once, execute often).
// Fixed shapes let oneDNN pick its brgemm kernels; nothing here uses runtime dims.
// Matrices are row-major with a leading dimension (row stride, in elements). A transposed
// operand is described by strides, never copied.
#pragma once
#include <cstdint>
#include <string>

namespace rt::kernels {

// C[M,N] = alpha * op(A) * op(B) + beta * C
//   op(A) is A[M,K] (lda >= K), or A^T when trans_a (A stored as [K,M], lda >= M).
//   op(B) is B[K,N] (ldb >= N), or B^T when trans_b (B stored as [N,K], ldb >= K).
// Runs on the OpenMP threads of the caller (single-threaded when called inside a
// parallel region). Thread-safe.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
          float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
          float beta, float* C, int64_t ldc);

// Batched form: `batch` independent products, operand i at A + i*stride_a, etc.
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float* A, int64_t lda, int64_t stride_a,
                  const float* B, int64_t ldb, int64_t stride_b,
                  float beta, float* C, int64_t ldc, int64_t stride_c);

// A linear layer without bias, in nanochat's weight layout W[out,in]:
//   forward:  y[M,out] = x[M,in] W^T
//   backward: dx[M,in] (+)= dy W ;  dW[out,in] (+)= dy^T x
// accumulate=true adds into dx / dW instead of overwriting (for gradient accumulation
// and for tensors that receive gradient from several places). dx may be null.
void linear_forward(const float* x, const float* W, float* y, int64_t M, int64_t in, int64_t out);
void linear_backward(const float* dy, const float* x, const float* W, float* dx, float* dW,
                     int64_t M, int64_t in, int64_t out, bool accumulate_dx, bool accumulate_dW);

// Measures the f32 matmul rate (GFLOP/s) of oneDNN on this machine with the current
// OpenMP thread count: median of `reps` runs of an M x K x N product after warm-up.
// Used as the peak for MFU, always measured in the same run as the thing it divides.
double measure_matmul_gflops(int64_t M = 2048, int64_t K = 512, int64_t N = 2048, int reps = 10);

// The version of the oneDNN library loaded at run time, "3.7.2" (it may differ from the
// headers the build saw): logged at start and in benchmarks, so a mixed job shows its mix.
std::string onednn_version();

}  // namespace rt::kernels
