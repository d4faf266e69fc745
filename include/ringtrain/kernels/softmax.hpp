// Row softmax over the last dimension, forward and backward (sampling, and any op that
// needs normalised scores; attention keeps its own fused online softmax).
#pragma once
#include <cstdint>

namespace rt::kernels {

// y[r, :] = softmax(x[r, :] / temperature). y may alias x.
void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols, float temperature = 1.0f);
// dx = (dy - sum(dy * y)) * y / temperature, from the forward's output y. dx may alias dy.
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                      float temperature = 1.0f);

}  // namespace rt::kernels
