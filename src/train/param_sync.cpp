#include "ringtrain/train/param_sync.hpp"

#include <algorithm>
#include <cstring>

#include "ringtrain/errors.hpp"

namespace rt::train {

ParamSync::ParamSync(net::Communicator& comm, net::Wire wire, model::ParamSet& params, double my_weight,
                     float outer_lr, float outer_momentum)
    : comm_(comm), wire_(wire), params_(params), weight_(my_weight), outer_lr_(outer_lr),
      outer_momentum_(outer_momentum) {}

void ParamSync::sync() {
  const int64_t n = params_.size();
  float* p = params_.data();
  if (outer() && anchor_.empty()) {
    // The anchor is where every rank stood at the previous sync (the start, the first time).
    // All ranks start from the same initialisation (same seed) or the same checkpoint step.
    anchor_.assign(p, p + n);
    momentum_.assign(size_t(n), 0.0f);
  }
  buf_.resize(size_t(n));
  const float w = float(weight_);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) buf_[size_t(i)] = p[i] * w;
  comm_.all_reduce(buf_.data(), size_t(n), net::ReduceOp::Sum, wire_);  // weighted average
  if (!outer()) {
    std::memcpy(p, buf_.data(), size_t(n) * sizeof(float));
    return;
  }
  const float lr = outer_lr_, mu = outer_momentum_;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float delta = anchor_[size_t(i)] - buf_[size_t(i)];
    const float m = mu * momentum_[size_t(i)] + delta;
    momentum_[size_t(i)] = m;
    const float a = anchor_[size_t(i)] - lr * (delta + mu * m);
    anchor_[size_t(i)] = a;
    p[i] = a;
  }
}

std::string ParamSync::save_state() const {
  std::string out;
  const uint64_t n = anchor_.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(reinterpret_cast<const char*>(anchor_.data()), n * sizeof(float));
  out.append(reinterpret_cast<const char*>(momentum_.data()), n * sizeof(float));
  return out;
}

void ParamSync::load_state(const std::string& bytes) {
  uint64_t n = 0;
  if (bytes.size() < sizeof n) throw UsageError("checkpoint: parameter-sync state is truncated");
  std::memcpy(&n, bytes.data(), sizeof n);
  if (n == 0) {
    anchor_.clear();
    momentum_.clear();
    return;
  }
  if (n != uint64_t(params_.size()) || bytes.size() != sizeof n + 2 * n * sizeof(float))
    throw UsageError("checkpoint: parameter-sync state does not match this model; resume with the same flags");
  anchor_.resize(n);
  momentum_.resize(n);
  std::memcpy(anchor_.data(), bytes.data() + sizeof n, n * sizeof(float));
  std::memcpy(momentum_.data(), bytes.data() + sizeof n + n * sizeof(float), n * sizeof(float));
}

}  // namespace rt::train
