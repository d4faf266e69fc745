// Whether a run of float32 values holds a NaN or an infinity. The ring checks every chunk
// it sends from its own values and every sum it makes, so that a diverged rank or a
// modified one is named where the value first appears instead of spreading into every
// replica and, from there, into a checkpoint.
#pragma once
#include <cstddef>

namespace rt::net {

// True when all n values are finite. Branch-free over blocks so the compiler vectorises it:
// the check runs over every byte the ring moves.
bool all_finite(const float* values, size_t n);
// The same over received bytes at any alignment: n float32 values, or n bfloat16 ones.
bool all_finite_f32_bytes(const void* bytes, size_t n);
bool all_finite_bf16_bytes(const void* bytes, size_t n);

}  // namespace rt::net
