// Block-scaled integer codes on the wire (--wire int8 and int4): blocks of kBlockValues
// values share one float32 scale (the block's largest magnitude / L), and each value is a
// signed integer q in -L..L, rounded to nearest, decoded as q * scale:
//   int8: L = 127, one byte a value:           1.0625 bytes a value (f32: 4, bf16: 2);
//   int4: L = 7, two values a byte (value 2k in the low nibble of byte k, 2k+1 in the high
//         one, two's complement):              0.5625 bytes a value.
// A chunk of n values is encoded as ceil(n / kBlockValues) scales, then the values.
//
// Encoding reports each value's rounding error (value - decoded), so that the caller can
// carry it into its next message (error feedback). Decoding is q * scale, the same bits on
// every rank. Received blocks are hostile: decoding checks every scale (finite, not
// negative, small enough that L * scale stays finite) and every value (-L..L: -128 and -8,
// which no encoder makes, are refused) first.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ringtrain/net/communicator.hpp"

namespace rt::net {

constexpr size_t kBlockValues = kInt8BlockValues;

constexpr size_t coded_blocks(size_t n) { return (n + kBlockValues - 1) / kBlockValues; }
// Bytes of n values in code w (block_coded(w)).
constexpr size_t coded_bytes(Wire w, size_t n) {
  return coded_blocks(n) * sizeof(float) + (w == Wire::Int4 ? (n + 1) / 2 : n);
}

// dst receives coded_bytes(w, n) bytes. When not null, error[i] = src[i] - decoded[i]
// and decoded[i] is the value every receiver will decode (both may alias src). Values that
// are not finite encode as 0 (NaN) or the block's extreme (infinity).
void encode_blocks(Wire w, const float* src, size_t n, void* dst, float* decoded, float* error);
// dst = decode(src) (src: coded_bytes(w, n) received bytes at any alignment).
// Returns false, leaving dst partly written, when a scale or a value is out of range.
bool decode_blocks(Wire w, const void* src, size_t n, float* dst);
// acc += decode(src); returns false (acc partly updated) on the same invalid input.
bool add_blocks(Wire w, float* acc, const void* src, size_t n);

}  // namespace rt::net
