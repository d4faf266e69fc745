// Pointwise activations of the MLP and the gates.
#pragma once
#include <cmath>
#include <cstdint>

namespace rt::kernels {

inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// a = relu(h)^2
void relu2_forward(const float* h, float* a, int64_t n);
// dh = da * 2 * relu(h). dh may alias da.
void relu2_backward(const float* h, const float* da, float* dh, int64_t n);

}  // namespace rt::kernels
