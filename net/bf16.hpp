// bfloat16 on the wire: the top 16 bits of a float32, rounded to nearest even. Decoding is
// exact, so a value rounded once stays identical however often it is re-sent.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rt::net {

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

void encode_bf16(const float* src, uint16_t* dst, size_t n);
// `src` of these three is received bytes, at any alignment: ZeroMQ hands out a frame's
// payload wherever it lies in its receive buffer (or, with CURVE, in the decrypted box).
void add_bf16(float* acc, const void* src, size_t n);  // acc += decode(src)
void decode_bf16(const void* src, float* dst, size_t n);
void add_f32(float* acc, const void* src, size_t n);
void round_bf16_inplace(float* data, size_t n);

}  // namespace rt::net
