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

void ParamSync::fill_send_buffer(const float* p) {
  const int64_t n = params_.size();
  const float w = float(weight_);
  buf_.resize(size_t(n));
  if (!compressed()) {  // w * p: this rank's share of the weighted average
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) buf_[size_t(i)] = p[i] * w;
    return;
  }
  // int8: this rank's share of the change since the common point, plus the error it left
  // out last time.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) buf_[size_t(i)] = (p[i] - anchor_[size_t(i)]) * w + error_[size_t(i)];
}

// The same bits on every rank: the weighted average, or with int8 its change from the
// common point (apply adds the point back). Network only: it may run on the worker thread.
void ParamSync::all_reduce_buffer() {
  comm_.all_reduce(buf_.data(), buf_.size(), net::ReduceOp::Sum, wire_, compressed() ? error_.data() : nullptr);
}

void ParamSync::begin() {
  if (compressed() && error_.empty()) error_.assign(size_t(params_.size()), 0.0f);
  if ((!outer() && !compressed()) || !anchor_.empty()) return;  // none needed, or a checkpoint brought it
  anchor_.assign(params_.data(), params_.data() + params_.size());
  if (outer()) {
    momentum_.assign(anchor_.size(), 0.0f);
    return;
  }
  // avg with int8: any common point will do, but it must be the same on every rank, and
  // a checkpoint of a step between averages holds different parameters on each.
  comm_.broadcast(anchor_.data(), anchor_.size(), 0);
}

void ParamSync::sync() {
  fill_send_buffer(params_.data());
  all_reduce_buffer();
  apply(false);
}

void ParamSync::start() {
  if (in_flight()) throw RuntimeError("parameter average started twice (internal error)");
  const int64_t n = params_.size();
  snapshot_.assign(params_.data(), params_.data() + n);
  fill_send_buffer(snapshot_.data());
  worker_error_ = nullptr;
  worker_ = std::thread([this] {
    try {
      all_reduce_buffer();
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
  if (compressed()) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) buf_[size_t(i)] += anchor_[size_t(i)];
  }
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
  } else if (compressed()) {
    anchor_ = buf_;  // the next sync sends the change from this average
  }
  if (!overlapped) {
    std::memcpy(p, buf_.data(), size_t(n) * sizeof(float));
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = buf_[size_t(i)] + (p[i] - snapshot_[size_t(i)]);
}

void ParamSync::save_state(io::StateWriter& out, const std::string& component) const {
  if (!anchor_.empty()) out.floats(component + ".anchor", anchor_);
  if (!momentum_.empty()) out.floats(component + ".momentum", momentum_);
  if (!error_.empty()) out.floats(component + ".error", error_);
}

void ParamSync::load_state(const io::StateReader& in, const std::string& component) {
  const size_t n = size_t(params_.size());
  // A checkpoint of another --wire lacks avg's common point or the error feedback: begin()
  // then starts them afresh (the error at zero loses nothing that was ever sent).
  const bool anchor = outer() || (compressed() && in.has(component + ".anchor"));
  std::vector<float> a(anchor ? n : 0), m(outer() ? n : 0), e(compressed() && in.has(component + ".error") ? n : 0);
  if (anchor) in.floats(component + ".anchor", a);
  if (outer()) in.floats(component + ".momentum", m);
  if (!e.empty()) in.floats(component + ".error", e);
  anchor_ = std::move(a);
  momentum_ = std::move(m);
  error_ = std::move(e);
}

}  // namespace rt::train
