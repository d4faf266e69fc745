// Rotary position embedding, half-split layout (x1 = x[:D/2], x2 = x[D/2:]):
//   y1 = x1*cos + x2*sin,  y2 = -x1*sin + x2*cos,  angle = position * base^(-2j/D).
// Positions restart at 0 in every row of T tokens.
#pragma once
#include <cstdint>
#include <vector>

namespace rt::kernels {

struct RotaryTable {
  int64_t len = 0;   // positions covered
  int64_t half = 0;  // D / 2
  std::vector<float> cos, sin;  // [len, half]

  // Angles in float32 like the PyTorch model (inv_freq and position * inv_freq are f32).
  static RotaryTable build(int64_t len, int64_t head_dim, double base = 100000.0);
};

// x: [B*T, heads, D] in place; row r has position r % T. Needs T <= table.len.
void rotary_forward(float* x, int64_t B, int64_t T, int64_t heads, int64_t D,
                    const RotaryTable& table);
// The transpose of the rotation (rotate by -angle), in place on the gradient.
void rotary_backward(float* dx, int64_t B, int64_t T, int64_t heads, int64_t D,
                     const RotaryTable& table);

}  // namespace rt::kernels
