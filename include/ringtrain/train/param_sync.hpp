// Parameter averaging across ranks for --sync avg and --sync diloco.
//
// avg (local SGD): every H steps the parameters become the average of all ranks',
// weighted by each rank's tokens per step, so uneven ranks count as one big batch.
// diloco: the same average, then DiLoCo's outer Nesterov step on the change since the last
// sync: delta = anchor - average; m = mu*m + delta; anchor -= lr*(delta + mu*m); every rank
// continues from the new anchor. With lr 1 and mu 0 this is exactly avg.
// Each rank keeps its own optimizer state (as in local SGD and DiLoCo).
#pragma once
#include <string>
#include <vector>

#include "ringtrain/model/params.hpp"
#include "ringtrain/net/communicator.hpp"

namespace rt::train {

class ParamSync {
 public:
  ParamSync(net::Communicator& comm, net::Wire wire, model::ParamSet& params, double my_weight,
            float outer_lr, float outer_momentum);
  // Averages (and takes the outer step). On a communication error the parameters are left
  // as they were before the call, and the error is rethrown.
  void sync();

  std::string save_state() const;
  void load_state(const std::string& bytes);

 private:
  bool outer() const { return !(outer_lr_ == 1.0f && outer_momentum_ == 0.0f); }

  net::Communicator& comm_;
  net::Wire wire_;
  model::ParamSet& params_;
  double weight_;
  float outer_lr_, outer_momentum_;
  std::vector<float> buf_, anchor_, momentum_;
};

}  // namespace rt::train
