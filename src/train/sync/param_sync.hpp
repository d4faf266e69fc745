// Parameter averaging across ranks for --sync avg and --sync diloco.
//
// avg (local SGD): every H steps the parameters become the average of all ranks',
// weighted by each rank's tokens per step, so uneven ranks count as one big batch.
// diloco: the same average, then DiLoCo's outer Nesterov step on the change since the last
// sync: delta = anchor - average; m = mu*m + delta; anchor -= lr*(delta + mu*m); every rank
// continues from the new anchor. With lr 1 and mu 0 this is exactly avg.
// Each rank keeps its own optimizer state (as in local SGD and DiLoCo).
//
// With int8 or int4 on the wire (--wire int8 / int4) the ranks send their change since the
// last common point A (diloco's anchor; for avg, the last average), each tensor in blocks
// of its own: x = w * (p - A) + e, where e is the rounding error this rank's part of the
// last all-reduce left out (error feedback, kept in the checkpoint). The all-reduce returns
// the same decoded sum S on every rank and each rank's new e; the average is A + S, so the
// replicas stay bit-identical, and over many syncs the rounding errors cancel instead of
// accumulating. (Below, "int8" stands for both codes.)
//
// Overlap (--sync-overlap): start() takes a snapshot x of the parameters and all-reduces it
// on a thread of its own while the next step computes; finish(), one step later, sets
// p = average(x) + (p - x): the average, plus the local progress made meanwhile (one-step
// delayed averaging). The network time hides behind a step's compute instead of stopping
// it. Between start() and finish() the caller must not use the communicator.
//
// Fragments (--sync-fragments, fragments.hpp): every call above takes the fragment it
// averages; the others are left alone (their anchor, momentum and error feedback too). The
// state stays whole-model (a checkpoint is the same whatever the fragments), the buffers
// that travel are one fragment's. One average is in flight at a time.
#pragma once
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ringtrain/io/state_file.hpp"
#include "ringtrain/model/params.hpp"
#include "ringtrain/net/communicator.hpp"
#include "sync/fragments.hpp"

namespace rt::train {

class ParamSync {
 public:
  // `fragments`: contiguous and covering every parameter (split_into_fragments); one, the
  // whole model, when empty.
  ParamSync(net::Communicator& comm, net::Wire wire, model::ParamSet& params, double my_weight,
            float outer_lr, float outer_momentum, const std::vector<Fragment>& fragments = {});
  ParamSync(const ParamSync&) = delete;
  ParamSync& operator=(const ParamSync&) = delete;
  // Aborts the communicator if an average is still in flight (only on an error path).
  ~ParamSync();

  // Call once the parameters hold the starting point (fresh initialisation, identical on
  // every rank, or a checkpoint): diloco's anchor starts there unless the checkpoint had one.
  // Allocates the buffers of sync(), and with overlapped also start()'s snapshot.
  void begin(bool overlapped);

  // Averages (and takes the outer step). On a communication error the parameters are left
  // as they were before the call, and the error is rethrown.
  void sync(size_t fragment = 0);
  // The same, in the background: start() returns at once; finish() waits for the network,
  // then applies the average to the parameters as they are by then (see above). On a
  // communication error finish() leaves the parameters alone and rethrows.
  void start(size_t fragment = 0);
  void finish();
  // finish() then start(), in one pass over the parameters instead of two (with
  // --overlap-steps equal to --sync-every they fall on the same step): the average applied,
  // and the next one's snapshot and send buffer taken from the result on the way. The same
  // bits as the two calls. finish_network() may come first (see there). Of another
  // fragment than the one in flight, the two calls as they are.
  void finish_and_start(size_t fragment = 0);
  // finish()'s wait for the network alone, so that the caller may use the communicator
  // again; the average is applied by the next finish() or finish_and_start().
  void finish_network();
  // Applies an average finish_network() collected, if any (as finish() would), without
  // touching the network: before a checkpoint on an error path between the two calls.
  void apply_arrived();
  bool in_flight() const { return worker_.joinable() || arrived_; }
  size_t fragments() const { return parts_.size(); }
  // A fragment's arena values: [first, second) of the parameters.
  std::pair<int64_t, int64_t> fragment_range(size_t fragment) const {
    return {parts_.at(fragment).at, parts_.at(fragment).at + parts_.at(fragment).size};
  }
  // The ring broke: the average in flight is never applied (the communicator is aborted,
  // the worker collected); the state stays that of before start().
  void drop_in_flight();

  // diloco's anchor and outer momentum, as tensors <component>.anchor and .momentum (avg
  // has none); with int8 also the common point (avg's .anchor) and the error feedback
  // (.error). load_state throws rt::UsageError if they do not fit the parameters.
  void save_state(io::StateWriter& out, const std::string& component) const;
  void load_state(const io::StateReader& in, const std::string& component);
  // A copy of that state, kept cheaply at every step the ring may go back to (elastic
  // training), and written as save_state would only when it goes back there.
  void keep_state();
  void save_kept_state(io::StateWriter& out, const std::string& component) const;

 private:
  bool outer() const { return !(outer_lr_ == 1.0f && outer_momentum_ == 0.0f); }
  bool compressed() const { return net::block_coded(wire_); }
  // Where each tensor's values go on the wire: the arena as it is, or with int8 every
  // tensor from a block boundary on. Indices of the whole model's wire layout, in which
  // every fragment is one range; buf_ holds one fragment's, from its wire_at.
  struct Span {
    int64_t at, wire_at, size;
  };
  struct Part {  // a fragment
    std::vector<Span> spans;
    int64_t at = 0, size = 0;            // its arena values
    int64_t wire_at = 0, wire_size = 0;  // its range of the wire layout
  };
  // buf_ = what this rank sends for fragment part of parameters p (copied to snapshot_
  // when overlapped); then the all-reduce of buf_ (network only, so that it can run on the
  // worker thread).
  void fill_send_buffer(const Part& part, const float* p, bool overlapped);
  // `residual`: where this rank's rounding error goes (int8/int4).
  void all_reduce_buffer(const Part& part, float* residual);
  // f(arena index, wire index) for every value of a fragment, in parallel.
  template <class F>
  void for_each_value(const Part& part, F&& f) const;

  net::Communicator& comm_;
  net::Wire wire_;
  model::ParamSet& params_;
  double weight_;
  float outer_lr_, outer_momentum_;
  // Turns buf_ (the average) into the parameters to continue from, taking the outer step
  // for diloco; adds p - snapshot_ first when the average was overlapped. With refill, also
  // fills buf_ and snapshot_ from the result as start() would.
  void apply(const Part& part, bool overlapped, bool refill = false);
  void write_state(io::StateWriter& out, const std::string& component, const std::vector<float>& anchor,
                   const std::vector<float>& momentum, const std::vector<float>& error) const;
  void start_worker(size_t fragment);

  std::vector<Part> parts_;
  int64_t wire_size_ = 0, largest_wire_ = 0, largest_ = 0;
  size_t flying_ = 0;  // the fragment in flight (or arrived)
  std::vector<float> buf_;  // one fragment's range of the wire layout
  std::vector<float> anchor_, momentum_;
  std::vector<float> kept_anchor_, kept_momentum_, kept_error_;  // keep_state()'s copy
  std::vector<float> error_;     // int8: this rank's rounding error of the last sync (whole wire layout)
  // int8 overlapped: the error of the average in flight, taken as error_ once it arrives, so
  // that error_ stays the state of before start() (a snapshot reads it meanwhile; an average
  // dropped when the ring breaks leaves it as it was). One fragment's, as buf_.
  std::vector<float> error_in_flight_;
  std::vector<float> snapshot_;  // the fragment's parameters start() averaged (overlap only)
  std::thread worker_;
  std::exception_ptr worker_error_;
  bool arrived_ = false;  // the network is done, the average not yet applied
  bool unapplied_ = false;  // an average was started and not yet applied (nor dropped)
};

}  // namespace rt::train
