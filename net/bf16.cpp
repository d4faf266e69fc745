// Element loops of the collectives, kept simple so that the compiler vectorizes them.
#include "bf16.hpp"

namespace rt::net {

void encode_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void add_bf16(float* acc, const uint16_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += bf16_to_f32(src[i]);
}

void decode_bf16(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void round_bf16_inplace(float* data, size_t n) {
  for (size_t i = 0; i < n; ++i) data[i] = round_to_bf16(data[i]);
}

void add_f32(float* acc, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += src[i];
}

}  // namespace rt::net
