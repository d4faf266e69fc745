// PyTorch's lerp formula (start + w*(end-start), evaluated from the nearer end), so that
// momentum buffers round the same way as the reference's lerp_.
#pragma once

namespace rt::optim {

inline float lerp(float start, float end, float weight) {
  return weight < 0.5f ? start + weight * (end - start) : end - (end - start) * (1.0f - weight);
}

}  // namespace rt::optim
