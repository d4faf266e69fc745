// Placeholder: the sliding-window attention kernel is written in this file.
#include "ringtrain/kernels/attention.hpp"

#include "ringtrain/errors.hpp"

namespace rt::kernels {
struct SlidingWindowAttention::Impl {
  AttentionShape s;
};
SlidingWindowAttention::SlidingWindowAttention(const AttentionShape& shape)
    : impl_(new Impl{shape}) {}
SlidingWindowAttention::~SlidingWindowAttention() = default;
const AttentionShape& SlidingWindowAttention::shape() const { return impl_->s; }
void SlidingWindowAttention::forward(const float*, const float*, const float*, float*, float*) {
  throw RuntimeError("attention: not implemented yet");
}
void SlidingWindowAttention::backward(const float*, const float*, const float*, const float*,
                                      const float*, const float*, float*, float*, float*) {
  throw RuntimeError("attention: not implemented yet");
}
}  // namespace rt::kernels
