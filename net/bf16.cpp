// Element loops of the collectives, kept simple so that the compiler vectorizes them.
#include "bf16.hpp"

namespace rt::net {

void encode_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

namespace {
// One element of received bytes; memcpy is the defined way to read a misaligned value, and
// compiles to the same (unaligned) vector loads.
template <class T>
inline T load(const void* src, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(src) + i * sizeof(T), sizeof(T));
  return v;
}
}  // namespace

void add_bf16(float* acc, const void* src, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += bf16_to_f32(load<uint16_t>(src, i));
}

void decode_bf16(const void* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load<uint16_t>(src, i));
}

void round_bf16_inplace(float* data, size_t n) {
  for (size_t i = 0; i < n; ++i) data[i] = round_to_bf16(data[i]);
}

void add_f32(float* acc, const void* src, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += load<float>(src, i);
}

}  // namespace rt::net
