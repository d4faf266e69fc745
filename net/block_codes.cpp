// Block-scaled integer codes (block_codes.hpp). Scales first, then values, so that the
// loops run over contiguous arrays. Every block goes through one int8_t per value (q), in
// loops the compiler vectorises; int4 packs or unpacks its nibbles on the way.
#include "block_codes.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace rt::net {
namespace {

// The largest scale a receiver accepts: L * scale must stay finite for L <= 127.
constexpr float kMaxScale = FLT_MAX / 128.0f;

float block_scale(const float* x, size_t n, float L) {
  float amax = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
  return std::min(amax / L, kMaxScale);
}

int8_t quantize(float x, float inv_scale, float L) {
  if (std::isnan(x)) return 0;
  const float q = std::nearbyint(x * inv_scale);
  return static_cast<int8_t>(std::clamp(q, -L, L));
}

// The scale and values of a block of finite values (the common case), in loops the
// compiler vectorises: the largest magnitude, then round-to-nearest-even by adding and
// subtracting 1.5 * 2^23 (exact for |y| <= 127.x, and the same bits as std::nearbyint in
// the default rounding mode). False, with nothing written, when the block holds NaN or infinity.
bool quantize_finite_block(const float* x, size_t n, float L, int8_t* q, float& scale) {
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
  scale = std::min(amax / L, kMaxScale);
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::clamp((x[i] * inv + kRound) - kRound, -L, L));
  return true;
}

// The values of block [begin, begin + n) as they travel, from or into q (begin is a
// multiple of kBlockValues, so an int4 block starts on a whole byte).
void store_values(Wire w, const int8_t* q, size_t begin, size_t n, unsigned char* values) {
  if (w == Wire::Int8) {
    std::memcpy(values + begin, q, n);
    return;
  }
  unsigned char* out = values + begin / 2;
  for (size_t k = 0; k < n / 2; ++k) out[k] = static_cast<unsigned char>((q[2 * k] & 0x0f) | (static_cast<unsigned>(q[2 * k + 1]) << 4));
  if (n % 2) out[n / 2] = static_cast<unsigned char>(q[n - 1] & 0x0f);  // the last high nibble stays 0
}

void load_values(Wire w, const unsigned char* values, size_t begin, size_t n, int8_t* q) {
  if (w == Wire::Int8) {
    std::memcpy(q, values + begin, n);
    return;
  }
  const unsigned char* in = values + begin / 2;
  for (size_t i = 0; i < n; ++i) {  // sign-extends each nibble
    const unsigned char nibble = (in[i / 2] >> (4 * (i % 2))) & 0x0f;
    q[i] = static_cast<int8_t>(static_cast<int8_t>(nibble << 4) >> 4);
  }
}

// Scale b of an encoded chunk, checked; false when a peer sent something no encoder makes.
bool load_scale(const void* src, size_t b, float& scale) {
  std::memcpy(&scale, static_cast<const char*>(src) + b * sizeof(float), sizeof(float));
  return std::isfinite(scale) && scale >= 0 && scale <= kMaxScale;
}

// Calls f(i, value) for every decoded value; false on invalid input.
template <class F>
bool for_each_decoded(Wire w, const void* src, size_t n, F&& f) {
  const auto* values = static_cast<const unsigned char*>(src) + coded_blocks(n) * sizeof(float);
  const int lowest_valid = -block_code_levels(w);
  int8_t q[kBlockValues];
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += kBlockValues) {
    float scale;
    if (!load_scale(src, b, scale)) return false;
    const size_t m = std::min(n - begin, kBlockValues);
    load_values(w, values, begin, m, q);
    int lowest = 0;  // checked for the whole block first, so that both loops vectorise
    for (size_t i = 0; i < m; ++i) lowest = std::min(lowest, int{q[i]});
    if (lowest < lowest_valid) return false;
    for (size_t i = 0; i < m; ++i) f(begin + i, static_cast<float>(q[i]) * scale);
  }
  return true;
}

}  // namespace

void encode_blocks(Wire w, const float* src, size_t n, void* dst, float* decoded, float* error) {
  auto* values = static_cast<unsigned char*>(dst) + coded_blocks(n) * sizeof(float);
  const float L = float(block_code_levels(w));
  int8_t q[kBlockValues];
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += kBlockValues) {
    const size_t m = std::min(n - begin, kBlockValues);
    const float* x = src + begin;
    float scale;
    if (!quantize_finite_block(x, m, L, q, scale)) {  // NaN or infinity: value by value
      scale = block_scale(x, m, L);
      const float inv = scale > 0 ? 1.0f / scale : 0.0f;
      for (size_t i = 0; i < m; ++i) q[i] = quantize(x[i], inv, L);
    }
    std::memcpy(static_cast<char*>(dst) + b * sizeof(float), &scale, sizeof(float));
    store_values(w, q, begin, m, values);
    for (size_t i = 0; i < m; ++i) {
      const float d = static_cast<float>(q[i]) * scale;
      if (error) error[begin + i] = x[i] - d;
      if (decoded) decoded[begin + i] = d;
    }
  }
}

bool decode_blocks(Wire w, const void* src, size_t n, float* dst) {
  return for_each_decoded(w, src, n, [dst](size_t i, float v) { dst[i] = v; });
}

bool add_blocks(Wire w, float* acc, const void* src, size_t n) {
  return for_each_decoded(w, src, n, [acc](size_t i, float v) { acc[i] += v; });
}

}  // namespace rt::net
