// Block-scaled int8 encoding (int8_blocks.hpp). Scales first, then bytes, so that both
// loops run over contiguous arrays.
#include "int8_blocks.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace rt::net {
namespace {

// The largest scale a receiver accepts: 127 * scale must stay finite.
constexpr float kMaxScale = FLT_MAX / 128.0f;

float block_scale(const float* x, size_t n) {
  float amax = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
  return std::min(amax / 127.0f, kMaxScale);
}

int8_t quantize(float x, float inv_scale) {
  if (std::isnan(x)) return 0;
  const float q = std::nearbyint(x * inv_scale);
  return static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
}

// Scale b of an encoded chunk, checked; false when a peer sent something no encoder makes.
bool load_scale(const void* src, size_t b, float& scale) {
  std::memcpy(&scale, static_cast<const char*>(src) + b * sizeof(float), sizeof(float));
  return std::isfinite(scale) && scale >= 0 && scale <= kMaxScale;
}

// Calls f(i, value) for every decoded value; false on invalid input.
template <class F>
bool for_each_decoded(const void* src, size_t n, F&& f) {
  const auto* q = reinterpret_cast<const int8_t*>(static_cast<const char*>(src) + int8_blocks(n) * sizeof(float));
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += kInt8Block) {
    float scale;
    if (!load_scale(src, b, scale)) return false;
    const size_t end = std::min(n, begin + kInt8Block);
    int lowest = 0;  // checked for the whole block first (-128 is out of range), so that both loops vectorise
    for (size_t i = begin; i < end; ++i) lowest = std::min(lowest, int{q[i]});
    if (lowest == -128) return false;
    for (size_t i = begin; i < end; ++i) f(i, static_cast<float>(q[i]) * scale);
  }
  return true;
}

// The scale and bytes of a block of finite values (the common case), in loops the compiler
// vectorises: the largest magnitude, then round-to-nearest-even by adding and subtracting
// 1.5 * 2^23 (exact for |y| <= 127.x, and the same bits as std::nearbyint in the default
// rounding mode). False, with nothing written, when the block holds NaN or infinity.
bool quantize_finite_block(const float* x, size_t n, int8_t* q, float& scale) {
  // The magnitudes' bit patterns order as the magnitudes do, and an integer maximum
  // vectorises where a float one (NaN-aware) does not; infinity and NaN lie above every finite one.
  uint32_t amax_bits = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    amax_bits = std::max(amax_bits, bits & 0x7fffffffu);
  }
  if (amax_bits >= 0x7f800000u) return false;
  float amax;
  std::memcpy(&amax, &amax_bits, sizeof amax);
  scale = std::min(amax / 127.0f, kMaxScale);
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::clamp((x[i] * inv + kRound) - kRound, -127.0f, 127.0f));
  return true;
}

}  // namespace

void encode_int8(const float* src, size_t n, void* dst, float* decoded, float* error) {
  auto* q = reinterpret_cast<int8_t*>(static_cast<char*>(dst) + int8_blocks(n) * sizeof(float));
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += kInt8Block) {
    const size_t end = std::min(n, begin + kInt8Block);
    float scale;
    if (!quantize_finite_block(src + begin, end - begin, q + begin, scale)) {  // NaN or infinity: value by value
      scale = block_scale(src + begin, end - begin);
      const float inv = scale > 0 ? 1.0f / scale : 0.0f;
      for (size_t i = begin; i < end; ++i) q[i] = quantize(src[i], inv);
    }
    std::memcpy(static_cast<char*>(dst) + b * sizeof(float), &scale, sizeof(float));
    for (size_t i = begin; i < end; ++i) {
      const float d = static_cast<float>(q[i]) * scale;
      if (error) error[i] = src[i] - d;
      if (decoded) decoded[i] = d;
    }
  }
}

bool decode_int8(const void* src, size_t n, float* dst) {
  return for_each_decoded(src, n, [dst](size_t i, float v) { dst[i] = v; });
}

bool add_int8(float* acc, const void* src, size_t n) {
  return for_each_decoded(src, n, [acc](size_t i, float v) { acc[i] += v; });
}

}  // namespace rt::net
