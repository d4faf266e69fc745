// Polar Express: five fixed polynomial iterations that push every singular value of X
// towards 1 (an approximate orthogonalisation, the core of Muon). X must already be scaled
// so that its spectral norm is at most about 1.
#pragma once
#include <cstdint>
#include <vector>

namespace rt::optim {

// The (a, b, c) of each iteration, in order.
inline constexpr double kPolarExpressCoeffs[5][3] = {
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
};

// Scratch memory reused across calls (grows to the largest matrix seen).
struct PolarExpressWorkspace {
  std::vector<float> y, a, b;
};

// In place on X (m x n, row-major). Tall (m > n): A = X^T X, X = aX + X(bA + cA^2);
// otherwise A = X X^T, X = aX + (bA + cA^2)X. The Gram matrix is min(m,n) square.
void polar_express(float* X, int64_t m, int64_t n, PolarExpressWorkspace& ws);

}  // namespace rt::optim
