#include "ringtrain/train/param_sync.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "ringtrain/errors.hpp"

namespace rt::train {

ParamSync::ParamSync(net::Communicator& comm, net::Wire wire, model::ParamSet& params, double my_weight,
                     float outer_lr, float outer_momentum)
    : comm_(comm), wire_(wire), params_(params), weight_(my_weight), outer_lr_(outer_lr),
      outer_momentum_(outer_momentum) {}

ParamSync::~ParamSync() {
  if (!in_flight()) return;
  // Only reached when the trainer failed mid-overlap: do not wait for peers that may never
  // come; make the all-reduce throw, then collect the thread.
  comm_.abort("training stopped with a parameter average in flight");
  worker_.join();
}

namespace {

// buf = w * p: this rank's share of the weighted average.
void weighted_copy(const float* p, float w, int64_t n, std::vector<float>& buf) {
  buf.resize(size_t(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = p[i] * w;
}

}  // namespace

void ParamSync::begin() {
  if (!outer() || !anchor_.empty()) return;  // avg needs no anchor; a checkpoint brought one
  anchor_.assign(params_.data(), params_.data() + params_.size());
  momentum_.assign(anchor_.size(), 0.0f);
}

void ParamSync::sync() {
  weighted_copy(params_.data(), float(weight_), params_.size(), buf_);
  comm_.all_reduce(buf_.data(), buf_.size(), net::ReduceOp::Sum, wire_);  // weighted average
  apply(false);
}

void ParamSync::start() {
  if (in_flight()) throw RuntimeError("parameter average started twice (internal error)");
  const int64_t n = params_.size();
  snapshot_.assign(params_.data(), params_.data() + n);
  weighted_copy(snapshot_.data(), float(weight_), n, buf_);
  worker_error_ = nullptr;
  worker_ = std::thread([this] {
    try {
      comm_.all_reduce(buf_.data(), buf_.size(), net::ReduceOp::Sum, wire_);
    } catch (...) {
      worker_error_ = std::current_exception();
    }
  });
}

void ParamSync::finish() {
  if (!in_flight()) return;
  worker_.join();
  if (worker_error_) std::rethrow_exception(std::exchange(worker_error_, nullptr));
  apply(true);
}

void ParamSync::apply(bool overlapped) {
  const int64_t n = params_.size();
  float* p = params_.data();
  if (outer()) {
    if (anchor_.size() != size_t(n)) throw RuntimeError("diloco: no anchor; ParamSync::begin() was not called (internal error)");
    const float lr = outer_lr_, mu = outer_momentum_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float delta = anchor_[size_t(i)] - buf_[size_t(i)];
      const float m = mu * momentum_[size_t(i)] + delta;
      momentum_[size_t(i)] = m;
      const float a = anchor_[size_t(i)] - lr * (delta + mu * m);
      anchor_[size_t(i)] = a;
      buf_[size_t(i)] = a;
    }
  }
  if (!overlapped) {
    std::memcpy(p, buf_.data(), size_t(n) * sizeof(float));
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = buf_[size_t(i)] + (p[i] - snapshot_[size_t(i)]);
}

void ParamSync::save_state(io::StateWriter& out, const std::string& component) const {
  if (anchor_.empty()) return;
  out.floats(component + ".anchor", anchor_);
  out.floats(component + ".momentum", momentum_);
}

void ParamSync::load_state(const io::StateReader& in, const std::string& component) {
  if (!outer()) return;
  std::vector<float> anchor(size_t(params_.size())), momentum(size_t(params_.size()));
  in.floats(component + ".anchor", anchor);
  in.floats(component + ".momentum", momentum);
  anchor_ = std::move(anchor);
  momentum_ = std::move(momentum);
}

}  // namespace rt::train
