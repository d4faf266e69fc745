// Polar Express iterations on oneDNN matmuls (see polar_express.hpp).
//
// Each iteration is three products on the cached gemm: the Gram matrix A, then
// B = b*A + c*A*A (beta folds b*A into the product), then Y = a*X + X*B (or B*X).
#include "ringtrain/optim/polar_express.hpp"

#include <algorithm>
#include <utility>

#include "ringtrain/kernels/matmul.hpp"

namespace rt::optim {

using rt::kernels::gemm;

void polar_express(float* X, int64_t m, int64_t n, PolarExpressWorkspace& ws) {
  const bool tall = m > n;
  const int64_t s = tall ? n : m;  // side of the Gram matrix
  ws.y.resize(size_t(m * n));
  ws.a.resize(size_t(s * s));
  ws.b.resize(size_t(s * s));
  float* cur = X;
  float* next = ws.y.data();
  float* A = ws.a.data();
  float* B = ws.b.data();
  for (const auto& coeff : kPolarExpressCoeffs) {
    const float a = float(coeff[0]), b = float(coeff[1]), c = float(coeff[2]);
    if (tall)
      gemm(true, false, s, s, m, 1.0f, cur, n, cur, n, 0.0f, A, s);  // X^T X
    else
      gemm(false, true, s, s, n, 1.0f, cur, n, cur, n, 0.0f, A, s);  // X X^T
    std::copy(A, A + s * s, B);
    gemm(false, false, s, s, s, c, A, s, A, s, b, B, s);  // B = c*A*A + b*A
    std::copy(cur, cur + m * n, next);
    if (tall)
      gemm(false, false, m, n, n, 1.0f, cur, n, B, n, a, next, n);  // X*B + a*X
    else
      gemm(false, false, m, n, m, 1.0f, B, m, cur, n, a, next, n);  // B*X + a*X
    std::swap(cur, next);
  }
  if (cur != X) std::copy(cur, cur + m * n, X);
}

}  // namespace rt::optim
