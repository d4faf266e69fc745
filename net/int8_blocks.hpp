// int8 on the wire: blocks of kInt8Block values share one float32 scale (the block's
// largest magnitude / 127), each value is one signed byte, rounded to nearest. A chunk of
// n values is encoded as ceil(n / kInt8Block) scales, then n bytes: 1.0625 bytes a value,
// against 4 (f32) and 2 (bf16).
//
// Encoding reports each value's rounding error (value - decoded), so that the caller can
// carry it into its next message (error feedback). Decoding is q * scale, the same bits on
// every rank. Received blocks are hostile: decoding checks every scale (finite, not
// negative, small enough that 127 * scale stays finite) and every byte (-127..127) first.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ringtrain/net/communicator.hpp"

namespace rt::net {

constexpr size_t kInt8Block = kInt8BlockValues;

constexpr size_t int8_blocks(size_t n) { return (n + kInt8Block - 1) / kInt8Block; }
constexpr size_t int8_encoded_bytes(size_t n) { return int8_blocks(n) * sizeof(float) + n; }

// dst receives int8_encoded_bytes(n) bytes. When not null, error[i] = src[i] - decoded[i]
// and decoded[i] is the value every receiver will decode (both may alias src). Values that
// are not finite encode as 0 (NaN) or the block's extreme (infinity).
void encode_int8(const float* src, size_t n, void* dst, float* decoded, float* error);
// dst = decode(src) (src: int8_encoded_bytes(n) received bytes at any alignment).
// Returns false, leaving dst partly written, when a scale or a byte is out of range.
bool decode_int8(const void* src, size_t n, float* dst);
// acc += decode(src); returns false (acc partly updated) on the same invalid input.
bool add_int8(float* acc, const void* src, size_t n);

}  // namespace rt::net
