#include "ringtrain/net/finite_values.hpp"

#include <cstdint>
#include <cstring>

namespace rt::net {

namespace {

// A float is NaN or infinite exactly when its exponent bits are all ones (bfloat16 keeps
// float32's exponent in its top bits).
template <typename Bits, Bits kExponent>
bool exponents_finite(const unsigned char* bytes, size_t n) {
  constexpr size_t kBlock = 256;
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t end = at + kBlock < n ? at + kBlock : n;
    unsigned bad = 0;
    for (size_t i = at; i < end; ++i) {
      Bits u;
      std::memcpy(&u, bytes + i * sizeof(Bits), sizeof(Bits));
      bad |= unsigned((u & kExponent) == kExponent);
    }
    if (bad) return false;
  }
  return true;
}

}  // namespace

bool all_finite(const float* values, size_t n) { return all_finite_f32_bytes(values, n); }

bool all_finite_f32_bytes(const void* bytes, size_t n) {
  return exponents_finite<uint32_t, 0x7f800000u>(static_cast<const unsigned char*>(bytes), n);
}

bool all_finite_bf16_bytes(const void* bytes, size_t n) {
  return exponents_finite<uint16_t, 0x7f80u>(static_cast<const unsigned char*>(bytes), n);
}

}  // namespace rt::net
