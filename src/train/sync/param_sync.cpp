#include "sync/param_sync.hpp"

#include <algorithm>
#include <utility>

#include "ringtrain/errors.hpp"
#include "ringtrain/train/log.hpp"
#include "sync/replica_check.hpp"

namespace rt::train {

ParamSync::ParamSync(net::Communicator& comm, net::Wire wire, model::ParamSet& params, double my_weight,
                     float outer_lr, float outer_momentum, const std::vector<Fragment>& fragments)
    : comm_(comm), wire_(wire), params_(params), weight_(my_weight), outer_lr_(outer_lr),
      outer_momentum_(outer_momentum) {
  std::vector<Fragment> whole = fragments;
  if (whole.empty()) whole.push_back({0, params_.all().size(), 0, params_.size()});
  // int8: every tensor starts a block of its own on the wire (zeros between), so that a
  // few scalars or a small gate never share a scale with a matrix's values, whose changes
  // are of another size and would round theirs to nothing. Fragments are runs of whole
  // tensors, so each starts a block too.
  const int64_t block = int64_t(net::kInt8BlockValues);
  for (const Fragment& f : whole) {
    Part part;
    part.at = f.at;
    part.size = f.size;
    part.wire_at = wire_size_;
    if (!compressed()) {  // the arena as it is
      part.spans.push_back({f.at, f.at, f.size});
      wire_size_ += f.size;
    } else {
      for (size_t t = f.first; t < f.end; ++t) {
        const model::Param& p = params_.all()[t];
        part.spans.push_back({p.offset, wire_size_, p.numel});
        wire_size_ += (p.numel + block - 1) / block * block;
      }
    }
    part.wire_size = wire_size_ - part.wire_at;
    largest_wire_ = std::max(largest_wire_, part.wire_size);
    largest_ = std::max(largest_, part.size);
    parts_.push_back(std::move(part));
  }
}

// f(arena index, wire index) for every value of a fragment, in parallel.
template <class F>
void ParamSync::for_each_value(const Part& part, F&& f) const {
  for (const Span& s : part.spans) {
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < s.size; ++j) f(s.at + j, s.wire_at + j);
  }
}

ParamSync::~ParamSync() {
  if (!worker_.joinable()) return;
  // Only reached when the trainer failed mid-overlap: do not wait for peers that may never
  // come; make the all-reduce throw, then collect the thread.
  comm_.abort("training stopped with a parameter average in flight");
  worker_.join();
}

// One pass over a fragment's parameters (GBs at d8: every pass costs the compute it shares
// a core with), also copying them to the snapshot when overlapped.
void ParamSync::fill_send_buffer(const Part& part, const float* p, bool overlapped) {
  const float w = float(weight_);
  if (buf_.size() != size_t(largest_wire_)) buf_.assign(size_t(largest_wire_), 0.0f);  // begin() did, unless skipped
  if (overlapped && snapshot_.size() != size_t(largest_)) snapshot_.resize(size_t(largest_));
  float* buf = buf_.data();
  float* snapshot = overlapped ? snapshot_.data() : nullptr;
  const int64_t at = part.at, wire_at = part.wire_at;
  if (!compressed()) {  // w * p: this rank's share of the weighted average
    for_each_value(part, [&](int64_t i, int64_t k) {
      if (snapshot) snapshot[i - at] = p[i];
      buf[k - wire_at] = p[i] * w;
    });
    return;
  }
  // int8: this rank's share of the change since the common point, plus the error it left
  // out last time.
  const float* anchor = anchor_.data();
  const float* error = error_.data();
  for_each_value(part, [&](int64_t i, int64_t k) {
    if (snapshot) snapshot[i - at] = p[i];
    buf[k - wire_at] = (p[i] - anchor[i]) * w + error[k];
  });
}

// The same bits on every rank: the weighted average, or with int8 its change from the
// common point (apply adds the point back). Network only: it may run on the worker thread.
void ParamSync::all_reduce_buffer(const Part& part, float* residual) {
  comm_.all_reduce(buf_.data(), size_t(part.wire_size), net::ReduceOp::Sum, wire_, compressed() ? residual : nullptr);
}

void ParamSync::begin(bool overlapped) {
  // Every buffer a sync needs, touched now: a first touch of GBs costs seconds of page
  // faults (more in a VM), which would otherwise stall the steps beside the first average.
  if (buf_.size() != size_t(largest_wire_)) buf_.assign(size_t(largest_wire_), 0.0f);  // the gaps stay 0
  if (overlapped && snapshot_.size() != size_t(largest_)) snapshot_.assign(size_t(largest_), 0.0f);
  if (compressed() && error_.empty()) error_.assign(size_t(wire_size_), 0.0f);
  if (compressed() && overlapped) error_in_flight_.assign(size_t(largest_wire_), 0.0f);
  if ((!outer() && !compressed()) || !anchor_.empty()) return;  // none needed, or a checkpoint brought it
  anchor_.assign(params_.data(), params_.data() + params_.size());
  if (outer()) {
    momentum_.assign(anchor_.size(), 0.0f);
    return;
  }
  // avg with int8: any common point will do, but it must be the same on every rank, and
  // a checkpoint of a step between averages holds different parameters on each. A fresh
  // start has the same on every rank: only a 4-byte checksum crosses then, not the model
  // (which takes minutes on a slow link).
  if (first_rank_differing(comm_, anchor_.data(), anchor_.size()) >= 0) comm_.broadcast(anchor_.data(), anchor_.size(), 0);
}

void ParamSync::sync(size_t fragment) {
  const Part& part = parts_.at(fragment);
  fill_send_buffer(part, params_.data(), false);
  all_reduce_buffer(part, compressed() ? error_.data() + part.wire_at : nullptr);
  apply(part, false);
}

void ParamSync::start(size_t fragment) {
  if (in_flight()) throw RuntimeError("parameter average started twice (internal error)");
  fill_send_buffer(parts_.at(fragment), params_.data(), true);
  start_worker(fragment);
}

void ParamSync::start_worker(size_t fragment) {
  worker_error_ = nullptr;
  if (compressed()) error_in_flight_.resize(size_t(largest_wire_));  // begin(true) did, unless skipped
  flying_ = fragment;
  unapplied_ = true;
  worker_ = std::thread([this, &part = parts_[fragment]] {
    try {
      all_reduce_buffer(part, error_in_flight_.data());
    } catch (...) {
      worker_error_ = std::current_exception();
    }
  });
}

void ParamSync::finish_network() {
  if (!worker_.joinable()) return;
  worker_.join();
  if (worker_error_) std::rethrow_exception(std::exchange(worker_error_, nullptr));
  if (compressed()) {
    const Part& part = parts_[flying_];
    if (part.wire_size == wire_size_) error_.swap(error_in_flight_);  // the whole model: no copy
    else std::copy_n(error_in_flight_.data(), size_t(part.wire_size), error_.data() + part.wire_at);
  }
  arrived_ = true;
}

void ParamSync::drop_in_flight() {
  if (unapplied_) logf("the parameter average in flight is dropped (on every survivor alike)");
  if (worker_.joinable()) {
    comm_.abort("the ring is re-forming; the parameter average in flight is dropped");
    worker_.join();
  }
  worker_error_ = nullptr;
  arrived_ = unapplied_ = false;
}

void ParamSync::apply_arrived() {
  if (!arrived_) return;
  arrived_ = unapplied_ = false;
  apply(parts_[flying_], true);
}

void ParamSync::finish() {
  finish_network();
  apply_arrived();
}

void ParamSync::finish_and_start(size_t fragment) {
  finish_network();
  if (!arrived_ || flying_ != fragment) {  // nothing in flight, or another fragment's
    apply_arrived();
    return start(fragment);
  }
  arrived_ = unapplied_ = false;
  apply(parts_[fragment], true, /*refill=*/true);
  start_worker(fragment);
}

// One pass over a fragment: the average (int8: the common point plus the decoded change),
// diloco's outer step, then the parameters (plus the local progress since the snapshot when
// overlapped); with refill, the next average's snapshot and send buffer from them, as
// fill_send_buffer computes them (each pass over the parameters reads and writes GBs at d8).
void ParamSync::apply(const Part& part, bool overlapped, bool refill) {
  const int64_t n = params_.size();
  const bool int8 = compressed(), outer_step = outer();
  if ((int8 || outer_step) && anchor_.size() != size_t(n))
    throw RuntimeError("parameter average: no anchor; ParamSync::begin() was not called (internal error)");
  if (refill && (!overlapped || snapshot_.size() < size_t(part.size)))
    throw RuntimeError("parameter average: refill without an overlapped average (internal error)");
  float* p = params_.data();
  float* buf = buf_.data();
  float* snapshot = overlapped ? snapshot_.data() : nullptr;
  float* anchor = anchor_.data();
  float* momentum = momentum_.data();
  const float* error = error_.data();
  const float lr = outer_lr_, mu = outer_momentum_, w = float(weight_);
  const int64_t at = part.at, wire_at = part.wire_at;
  for_each_value(part, [&](int64_t i, int64_t k) {
    const float average = int8 ? anchor[i] + buf[k - wire_at] : buf[k - wire_at];
    float next = average;
    if (outer_step) {
      const float delta = anchor[i] - average;
      const float m = mu * momentum[i] + delta;
      momentum[i] = m;
      next = anchor[i] - lr * (delta + mu * m);
      anchor[i] = next;
    } else if (int8) {
      anchor[i] = average;  // the next sync sends the change from this average
    }
    const float now = snapshot ? next + (p[i] - snapshot[i - at]) : next;
    p[i] = now;
    if (refill) {  // fill_send_buffer's arithmetic, on the new anchor
      snapshot[i - at] = now;
      buf[k - wire_at] = int8 ? (now - anchor[i]) * w + error[k] : now * w;
    }
  });
}

void ParamSync::save_state(io::StateWriter& out, const std::string& component) const {
  write_state(out, component, anchor_, momentum_, error_);
}

void ParamSync::keep_state() {
  // assign() keeps the copies' memory from one call to the next: no fresh pages (a GB of page
  // faults cost seconds in a VM, at every step the ring may go back to).
  kept_anchor_.assign(anchor_.begin(), anchor_.end());
  kept_momentum_.assign(momentum_.begin(), momentum_.end());
  kept_error_.assign(error_.begin(), error_.end());
}

void ParamSync::save_kept_state(io::StateWriter& out, const std::string& component) const {
  write_state(out, component, kept_anchor_, kept_momentum_, kept_error_);
}

void ParamSync::write_state(io::StateWriter& out, const std::string& component, const std::vector<float>& anchor,
                            const std::vector<float>& momentum, const std::vector<float>& error) const {
  if (!anchor.empty()) out.floats(component + ".anchor", anchor);
  if (!momentum.empty()) out.floats(component + ".momentum", momentum);
  if (error.empty()) return;
  // In the arena's layout (the wire's gaps hold nothing), as every version has saved it.
  std::vector<float> arena(size_t(params_.size()));
  for (const Part& part : parts_)
    for_each_value(part, [&](int64_t i, int64_t k) { arena[size_t(i)] = error[size_t(k)]; });
  out.floats(component + ".error", std::move(arena));
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
  error_.clear();
  if (e.empty()) return;
  error_.assign(size_t(wire_size_), 0.0f);
  for (const Part& part : parts_)
    for_each_value(part, [&](int64_t i, int64_t k) { error_[size_t(k)] = e[size_t(i)]; });
}

}  // namespace rt::train
